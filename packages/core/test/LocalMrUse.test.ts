/**
 * LocalMr.use: the scope-free registration, released however its body ends.
 */
import { LocalMr, Peer, RdmaError, RegistrationCache, Tracing, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer } from "effect"

const live = Effect.flatMap(Driver.RdmaDriver, (d) => d.live)

/**
 * The simulated driver with its registration calls recorded: "reg" / "dereg" when their Effect
 * runs, "reg.now" / "dereg.now" when core calls the synchronous form (which declines sizes in
 * `declined`, as the native driver declines its worker's).
 */
const recorded = (calls: Array<string>, declined: ReadonlySet<number> = new Set()) =>
  Layer.effect(
    Driver.RdmaDriver,
    Effect.map(Driver.RdmaDriver, (d): Driver.Driver => ({
      ...d,
      mrReg: Object.assign(
        (p: Driver.Model.PeerHandle, m: Uint8Array, u: number) =>
          Effect.suspend(() => (calls.push("reg"), d.mrReg(p, m, u))),
        {
          now: (p: Driver.Model.PeerHandle, m: Uint8Array, u: number) => {
            calls.push("reg.now")
            return declined.has(m.byteLength) ? undefined : d.mrReg.now!(p, m, u)
          }
        }
      ),
      mrDereg: Object.assign(
        (mr: Driver.Model.MrHandle) => Effect.suspend(() => (calls.push("dereg"), d.mrDereg(mr))),
        {
          now: (mr: Driver.Model.MrHandle) => (calls.push("dereg.now"), d.mrDereg.now!(mr))
        }
      )
    }))
  ).pipe(Layer.provideMerge(SimulatedDriver.layer))

describe("LocalMr.use", () => {
  it.effect("registers for the body only: on success, failure and interruption", () =>
    Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      const memory = new Uint8Array(4096)
      const size = yield* LocalMr.use(peer, memory, Usage.SEND, (mr) =>
        Effect.map(live, (l) => {
          assert.strictEqual(l.localRegions, 1)
          return mr.size
        }))
      assert.strictEqual(size, 4096)
      assert.strictEqual((yield* live).localRegions, 0)
      const failed = yield* Effect.exit(LocalMr.use(peer, memory, Usage.SEND, () => Effect.fail("boom")))
      assert.isTrue(Exit.isFailure(failed))
      assert.strictEqual((yield* live).localRegions, 0)
      const fiber = yield* Effect.fork(LocalMr.use(peer, memory, Usage.SEND, () => Effect.never))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* live).localRegions, 0)
    })).pipe(Effect.provide(SimulatedDriver.layer)))

  it.effect("one synchronous driver call each way when the driver has them; the Effects when it declines or tracing is on", () => {
    const calls: Array<string> = []
    return Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      const use = (size: number) => LocalMr.use(peer, new Uint8Array(size), Usage.SEND, () => Effect.void)
      calls.length = 0
      yield* use(4096)
      yield* Effect.scoped(LocalMr.register(peer, new Uint8Array(4096), Usage.SEND))
      assert.deepStrictEqual(calls, ["reg.now", "dereg.now", "reg.now", "dereg.now"])
      // Declined (a size the driver registers elsewhere): the registration's Effect.
      calls.length = 0
      yield* use(8192)
      assert.deepStrictEqual(calls, ["reg.now", "reg", "dereg.now"])
      // Traced: the instrumented driver's calls, each in its span.
      calls.length = 0
      yield* use(4096).pipe(Tracing.withPerOperation)
      assert.deepStrictEqual(calls, ["reg", "dereg"])
      assert.strictEqual((yield* live).localRegions, 0)
    })).pipe(Effect.provide(recorded(calls, new Set([8192]))))
  })

  it.effect("a wrapper that replaces the calls is never gone around: its Effects run", () => {
    const calls: Array<string> = []
    const wrapped = Layer.effect(
      Driver.RdmaDriver,
      Effect.map(Driver.RdmaDriver, (d): Driver.Driver => ({
        ...d,
        mrReg: (p, m, u) => Effect.suspend(() => (calls.push("wrapped reg"), d.mrReg(p, m, u))),
        mrDereg: (mr) => Effect.ensuring(d.mrDereg(mr), Effect.sync(() => calls.push("wrapped dereg")))
      }))
    ).pipe(Layer.provideMerge(recorded(calls)))
    return Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      calls.length = 0
      yield* LocalMr.use(peer, new Uint8Array(4096), Usage.SEND, () => Effect.void)
      assert.deepStrictEqual(calls, ["wrapped reg", "reg", "dereg", "wrapped dereg"])
    })).pipe(Effect.provide(wrapped))
  })

  it.effect("a synchronous refusal is the registration's tagged error; a synchronous release failure is logged, not retried", () =>
    Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      const simulation = yield* SimulatedDriver.SimulationControl
      yield* simulation.fail({ operation: "rpma_mr_reg", nth: 1, code: RdmaError.RpmaCode.RPMA_E_NOMEM })
      const refused = yield* Effect.flip(LocalMr.use(peer, new Uint8Array(4096), Usage.SEND, () => Effect.void))
      assert.strictEqual(refused._tag, "RpmaNoMemoryError")
      yield* simulation.fail({ operation: "rpma_mr_dereg", nth: 1, code: RdmaError.RpmaCode.RPMA_E_PROVIDER })
      const value = yield* LocalMr.use(peer, new Uint8Array(4096), Usage.SEND, () => Effect.succeed(7))
      assert.strictEqual(value, 7)
      // Gone either way (librpma frees the handle): nothing left registered, nothing retried.
      assert.strictEqual((yield* live).localRegions, 0)
      assert.strictEqual(yield* simulation.calls("rpma_mr_dereg"), 1)
    })).pipe(Effect.provide(SimulatedDriver.layer)))

  it.effect("a use that is no function is refused before anything is registered (LocalMr.use and a cache's)", () =>
    Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      const cache = yield* RegistrationCache.make(peer)
      const simulation = yield* SimulatedDriver.SimulationControl
      for (const value of [42, null, undefined, {}]) {
        const f = value as unknown as () => Effect.Effect<void>
        for (
          const refused of [
            yield* Effect.flip(LocalMr.use(peer, new Uint8Array(4096), Usage.SEND, f)),
            yield* Effect.flip(cache.use(new Uint8Array(4096), Usage.SEND, f)),
            yield* Effect.flip(RegistrationCache.use(cache, new Uint8Array(4096), Usage.SEND, f))
          ]
        ) {
          assert.strictEqual(refused._tag, "RpmaInvalidError")
          assert.include(refused.message, "the use must be a function of the region")
        }
      }
      assert.strictEqual(yield* simulation.calls("rpma_mr_reg"), 0)
      assert.strictEqual((yield* live).localRegions, 0)
    })).pipe(Effect.provide(SimulatedDriver.layer)))
})
