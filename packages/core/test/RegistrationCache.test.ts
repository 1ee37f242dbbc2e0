import { Memory, Peer, RegistrationCache, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Scope, TestClock } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const registrations = SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_mr_reg")))
const deregistrations = SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_mr_dereg")))

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

describe("RegistrationCache", () => {
  it.effect("is a resource like the others: a TypeId, a guard, pipe, and its operations data-first and data-last", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer)
      assert.isTrue(RegistrationCache.isRegistrationCache(cache))
      assert.isFalse(RegistrationCache.isRegistrationCache({ ...cache }))
      assert.isFalse(RegistrationCache.isRegistrationCache(peer))
      const memory = new Uint8Array(4096)
      const a = yield* RegistrationCache.register(cache, memory, Usage.WRITE_DST)
      const b = yield* cache.pipe(RegistrationCache.register(memory, Usage.WRITE_DST))
      assert.strictEqual(Driver.handleOf(a), Driver.handleOf(b))
      const used = yield* cache.pipe(
        RegistrationCache.use(memory, Usage.WRITE_DST, (mr) => Effect.succeed(Driver.handleOf(mr)))
      )
      assert.strictEqual(used, Driver.handleOf(a))
      assert.strictEqual(yield* RegistrationCache.size(cache), 1)
      assert.strictEqual(yield* registrations, 1)
    })))

  it.effect("anything but a cache: register and use refused as a registration (RPMA_E_INVAL), size dies naming the call; nothing registered", () =>
    inWorld(Effect.gen(function*() {
      const memory = new Uint8Array(4096)
      for (const notACache of [null, undefined, 5, {}]) {
        const cache = notACache as never as RegistrationCache.RegistrationCache
        const refusals: ReadonlyArray<
          Effect.Effect<unknown, { readonly _tag: string; readonly message: string }, Scope.Scope>
        > = [
          RegistrationCache.register(cache, memory, Usage.WRITE_DST),
          RegistrationCache.use(cache, memory, Usage.WRITE_DST, () => Effect.void)
        ]
        for (const refused of refusals) {
          const error = yield* Effect.flip(Effect.scoped(refused))
          assert.strictEqual(error._tag, "RpmaInvalidError")
          assert.include(error.message, "the cache must be a RegistrationCache (RegistrationCache.make)")
        }
        const died = yield* Effect.exit(RegistrationCache.size(cache))
        assert.isTrue(Exit.isFailure(died) && Cause.isDie(died.cause))
        assert.include(
          String(Exit.isFailure(died) && Cause.squash(died.cause)),
          "RegistrationCache.size takes a RegistrationCache"
        )
      }
      assert.strictEqual(yield* registrations, 0)
    })))

  it.effect("a second registration of the same memory and usage is a hit", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer)
      const memory = new Uint8Array(8192)
      const [a, b] = yield* Effect.all([
        cache.register(memory, Usage.WRITE_DST),
        cache.register(memory, Usage.WRITE_DST)
      ])
      assert.strictEqual(Driver.handleOf(a), Driver.handleOf(b))
      assert.strictEqual(yield* registrations, 1)
      const other = yield* cache.register(memory, Usage.READ_SRC)
      assert.notStrictEqual(Driver.handleOf(other), Driver.handleOf(a))
      const slice = yield* cache.register(memory.subarray(0, 4096), Usage.WRITE_DST)
      assert.notStrictEqual(Driver.handleOf(slice), Driver.handleOf(a))
      assert.strictEqual(yield* registrations, 3)
    })))

  it.effect("an unused registration is deregistered after its idle time", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "10 seconds" })
      const memory = new Uint8Array(4096)
      yield* Effect.scoped(cache.register(memory, Usage.SEND))
      yield* Effect.scoped(cache.register(memory, Usage.SEND))
      assert.strictEqual(yield* registrations, 1)
      assert.strictEqual(yield* cache.size, 1)
      yield* TestClock.adjust("11 seconds")
      assert.strictEqual(yield* cache.size, 0)
      assert.strictEqual(yield* deregistrations, 1)
      yield* Effect.scoped(cache.register(memory, Usage.SEND))
      assert.strictEqual(yield* registrations, 2)
    })))

  it.effect("releasing the memory drops its cached registrations first, and a new allocation is never served a stale one", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "1 hour" })
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const memory = yield* Memory.allocate(4096)
        const mr = yield* Effect.scoped(cache.register(memory, Usage.RECV))
        return { memory, mr }
      }))
      // The memory's scope closed: its registration went with it, and it was freed (detached).
      assert.strictEqual(yield* cache.size, 0)
      assert.strictEqual(yield* deregistrations, 1)
      assert.isTrue(Memory.isDetached(first.memory))
      const second = yield* Effect.scoped(Effect.gen(function*() {
        const memory = yield* Memory.allocate(4096)
        return yield* Effect.scoped(cache.register(memory, Usage.RECV))
      }))
      assert.notStrictEqual(Driver.handleOf(second), Driver.handleOf(first.mr))
      assert.strictEqual(yield* registrations, 2)
    })))

  it.effect("closing the cache deregisters everything it holds", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const scope = yield* Scope.make()
      const cache = yield* RegistrationCache.make(peer).pipe(Scope.extend(scope))
      yield* Effect.forEach([1, 2, 3], () => Effect.scoped(cache.register(new Uint8Array(64), Usage.READ_SRC)))
      assert.strictEqual(yield* cache.size, 3)
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* deregistrations, 3)
    })))

  it.effect("a failed registration is not cached", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer)
      yield* SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 1, code: -100002 })
      const memory = new Uint8Array(64)
      const error = yield* Effect.flip(Effect.scoped(cache.register(memory, Usage.READ_SRC)))
      assert.strictEqual(error._tag, "RpmaProviderError")
      const mr = yield* Effect.scoped(cache.register(memory, Usage.READ_SRC))
      assert.strictEqual(mr.size, 64)
    })))

  it.effect("use: a hit without a scope; every use pushes the idle expiry back", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "10 seconds" })
      const memory = new Uint8Array(4096)
      const handles = yield* Effect.all(
        Array.from(
          { length: 4 },
          () => cache.use(memory, Usage.WRITE_DST, (mr) => Effect.succeed(Driver.handleOf(mr)))
        ),
        { concurrency: "unbounded" }
      )
      assert.strictEqual(new Set(handles).size, 1, "concurrent first uses share one registration")
      assert.strictEqual(yield* registrations, 1)
      yield* TestClock.adjust("6 seconds")
      yield* cache.use(memory, Usage.WRITE_DST, () => Effect.void)
      yield* TestClock.adjust("6 seconds")
      assert.strictEqual(yield* cache.size, 1, "used 6 s ago: still cached")
      assert.strictEqual(yield* deregistrations, 0)
      yield* TestClock.adjust("5 seconds")
      assert.strictEqual(yield* cache.size, 0)
      assert.strictEqual(yield* deregistrations, 1)
      // A failure of `f` is `f`'s; the registration stays cached.
      const error = yield* Effect.flip(cache.use(memory, Usage.WRITE_DST, () => Effect.fail("boom" as const)))
      assert.strictEqual(error, "boom")
      assert.strictEqual(yield* cache.size, 1)
    })))

  it.effect("memory released while a use holds its registration: deregistered when the use ends", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "1 hour" })
      const memoryScope = yield* Scope.make()
      const memory = yield* Memory.allocate(4096).pipe(Scope.extend(memoryScope))
      const using = yield* Deferred.make<void>()
      const done = yield* Deferred.make<void>()
      const user = yield* Effect.fork(
        cache.use(memory, Usage.RECV, () => Effect.zipRight(Deferred.succeed(using, undefined), Deferred.await(done)))
      )
      yield* Deferred.await(using)
      yield* Scope.close(memoryScope, Exit.void)
      assert.strictEqual(yield* cache.size, 0, "out of the cache at once")
      assert.strictEqual(yield* deregistrations, 0, "still in use")
      yield* Deferred.succeed(done, undefined)
      yield* Fiber.join(user)
      assert.strictEqual(yield* deregistrations, 1, "deregistered when the use ended")
    })))

  it.effect("a region held past the cache's close: deregistered when its user is done, once; a closed cache serves nothing", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const cacheScope = yield* Scope.make()
      const cache = yield* RegistrationCache.make(peer).pipe(Scope.extend(cacheScope))
      const userScope = yield* Scope.make()
      yield* cache.register(new Uint8Array(64), Usage.READ_SRC).pipe(Scope.extend(userScope))
      const closing = yield* Effect.fork(Scope.close(cacheScope, Exit.void))
      yield* Scope.close(userScope, Exit.void)
      yield* Fiber.join(closing)
      assert.strictEqual(yield* cache.size, 0)
      assert.strictEqual(yield* deregistrations, 1, "deregistered once")
      assert.strictEqual(
        yield* Effect.exit(cache.use(new Uint8Array(64), Usage.READ_SRC, () => Effect.void)).pipe(
          Effect.map(Exit.isInterrupted)
        ),
        true,
        "a closed cache serves nothing"
      )
    })))
})
