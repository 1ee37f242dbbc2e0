// Issue 19, item 4: a cache's close deregistered regions under their users (300 of 300). A user
// checks its region with the driver (rpma_mr_get_descriptor fails on a deregistered one) after
// the close began, just before it lets the region go.
import { LocalMr, Peer, RegistrationCache, Usage } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Logger, Option, Scope, TestClock } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const calls = (operation: "rpma_mr_reg" | "rpma_mr_dereg") =>
  SimulationControl.pipe(Effect.flatMap((s) => s.calls(operation)))
const SimulationControl = SimulatedDriver.SimulationControl

/** Runs `effect` on a fresh simulated driver, then checks that nothing is left; returns what was logged. */
const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) => {
  const logged: Array<string> = []
  const logger = Logger.make(({ message }) => void logged.push(String(message)))
  return Ledger.checked(Effect.scoped(effect)).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
    Effect.provide(SimulatedDriver.layer),
    Effect.map((value) => ({ value, logged }))
  )
}

/**
 * Waits until `closing` is done or waits on the clock (the close's bound): either way the close
 * has begun. The cache's other timers (idle expiry) are an hour away and started by releases,
 * which the tests make only after this.
 */
const closeBegun = (closing: Fiber.Fiber<void>) =>
  Effect.gen(function*() {
    while (Option.isNone(yield* Fiber.poll(closing)) && (yield* TestClock.sleeps()).length === 0) {
      yield* Effect.yieldNow()
    }
  })

/** A user of `memory`'s region, through `use` or a scoped `register`: holds it until `go`, then checks it. */
const user = (
  cache: RegistrationCache.RegistrationCache,
  memory: Uint8Array,
  scoped: boolean,
  holding: Effect.Effect<void>,
  go: Deferred.Deferred<void>
) => {
  const body = (mr: LocalMr.LocalMr<"WRITE_DST">) =>
    Effect.zipRight(holding, Effect.zipRight(Deferred.await(go), Effect.exit(LocalMr.descriptor(mr))))
  return scoped
    ? Effect.scoped(Effect.flatMap(cache.register(memory, Usage.WRITE_DST), body))
    : cache.use(memory, Usage.WRITE_DST, body)
}

describe("RegistrationCache: closing under its users", () => {
  it.effect("an option make cannot use: InvalidOptionsError naming it (an infinite closeTimeout too: closing must end)", () =>
    Effect.gen(function*() {
      yield* inWorld(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const bad: ReadonlyArray<[RegistrationCache.Options, string]> = [
          [{ closeTimeout: "soon" as never }, "closeTimeout is not a duration (soon)"],
          [{ closeTimeout: -1 }, "closeTimeout is not a duration (-1)"],
          [{ closeTimeout: Number.NaN }, "closeTimeout is not a duration (NaN)"],
          [{ closeTimeout: Infinity }, "closeTimeout is infinite"],
          [{ idleTimeToLive: {} as never }, "idleTimeToLive is not a duration"]
        ]
        for (const [options, says] of bad) {
          const error = yield* Effect.flip(RegistrationCache.make(peer, options))
          assert.strictEqual(error._tag, "InvalidOptionsError")
          assert.strictEqual(error.module, "RegistrationCache")
          assert.include(error.message, says)
        }
        yield* RegistrationCache.make(peer, { idleTimeToLive: Infinity, closeTimeout: 0 })
      }))
    }))

  it.effect("300 users hold 100 regions while the cache closes: none sees its region deregistered, each goes after its last user", () =>
    Effect.gen(function*() {
      const { logged } = yield* inWorld(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const cacheScope = yield* Scope.make()
        const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "1 hour", closeTimeout: "1 minute" })
          .pipe(Scope.extend(cacheScope))
        const memories = Array.from({ length: 100 }, () => new Uint8Array(64))
        const users = 300
        let holding = 0
        const allHolding = yield* Deferred.make<void>()
        const hold = Effect.suspend(() => ++holding === users ? Deferred.succeed(allHolding, undefined) : Effect.void)
        const gates = yield* Effect.forEach(Array.from({ length: users }), () => Deferred.make<void>())
        const fibers = yield* Effect.forEach(
          gates,
          (go, i) => Effect.fork(user(cache, memories[i % memories.length]!, i % 2 === 0, hold, go))
        )
        yield* Deferred.await(allHolding)
        assert.strictEqual(yield* calls("rpma_mr_reg"), 100, "3 users share each region")

        const closing = yield* Effect.fork(Scope.close(cacheScope, Exit.void))
        yield* closeBegun(closing)
        const waitedForUsers = Option.isNone(yield* Fiber.poll(closing))
        const deregisteredBeforeAnyRelease = yield* calls("rpma_mr_dereg")

        // One user at a time lets go: the two others of its region still hold it, then the last.
        const failures: Array<string> = []
        for (let i = 0; i < users; i++) {
          yield* Deferred.succeed(gates[i]!, undefined)
          const checked = yield* Fiber.join(fibers[i]!)
          if (Exit.isFailure(checked)) failures.push(`user ${i}`)
          const deregistered = yield* calls("rpma_mr_dereg")
          const expected = i < 200 ? 0 : i - 199
          if (deregistered !== expected) failures.push(`after user ${i}: ${deregistered} deregistered, not ${expected}`)
        }
        yield* Fiber.join(closing)

        assert.deepStrictEqual(
          failures.slice(0, 5),
          [],
          `${failures.filter((f) => !f.includes(":")).length} of ${users} users saw their region deregistered`
        )
        assert.isTrue(waitedForUsers, "the close waits for the users")
        assert.strictEqual(deregisteredBeforeAnyRelease, 0, "nothing deregistered while every region is held")
        assert.strictEqual(yield* calls("rpma_mr_dereg"), 100)
        assert.strictEqual(yield* cache.size, 0)
      }))
      assert.deepStrictEqual(logged, [], "every user was done within the bound: no warning")
    }))

  it.effect("a user still holding its region when closeTimeout passes: the close ends and says so; the region goes when the user is done", () =>
    Effect.gen(function*() {
      const { logged } = yield* inWorld(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const cacheScope = yield* Scope.make()
        const cache = yield* RegistrationCache.make(peer, { closeTimeout: "5 seconds" }).pipe(Scope.extend(cacheScope))
        const [quick, slow] = [new Uint8Array(64), new Uint8Array(64)]
        const [quickGo, slowGo] = [yield* Deferred.make<void>(), yield* Deferred.make<void>()]
        const quickUser = yield* Effect.fork(user(cache, quick, false, Effect.void, quickGo))
        const slowUser = yield* Effect.fork(user(cache, slow, true, Effect.void, slowGo))
        // Both hold their region once both are registered (the bodies then wait on their gates).
        while ((yield* calls("rpma_mr_reg")) < 2) yield* Effect.yieldNow()

        const closing = yield* Effect.fork(Scope.close(cacheScope, Exit.void))
        yield* closeBegun(closing)
        yield* Deferred.succeed(quickGo, undefined)
        assert.isTrue(Exit.isSuccess(yield* Fiber.join(quickUser)))
        assert.strictEqual(yield* calls("rpma_mr_dereg"), 1, "the quick user's region went with it")
        assert.isTrue(Option.isNone(yield* Fiber.poll(closing)), "still waiting for the slow user")

        yield* TestClock.adjust("5 seconds")
        yield* Fiber.join(closing)
        assert.strictEqual(yield* calls("rpma_mr_dereg"), 1, "the held region stays registered past the close")
        yield* Deferred.succeed(slowGo, undefined)
        const checked = yield* Fiber.join(slowUser)
        assert.isTrue(Exit.isSuccess(checked), `the slow user's region after the close: ${checked}`)
        assert.strictEqual(yield* calls("rpma_mr_dereg"), 2, "deregistered when its user was done")
      }))
      assert.strictEqual(logged.length, 1, logged.join("\n"))
      assert.include(logged[0]!, "1 region still in use after 5s")
    }))
})
