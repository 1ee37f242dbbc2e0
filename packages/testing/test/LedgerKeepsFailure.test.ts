/**
 * Ledger.checked and Ledger.checkedOnAnyDriver keep the effect's own outcome when they also find a
 * leak: an effect that fails, dies or is interrupted and leaves something alive ends with its own
 * cause followed by the leak (Cause.sequential), so Cause.pretty shows why it failed and what it
 * left behind, in that order. A leak alone, or a failure alone, comes out as it did.
 */
import { LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Data, Effect, Exit, Layer, Option } from "effect"

class Boom extends Data.TaggedError("Boom")<{ readonly reason: string }> {
  override get message(): string {
    return `boom: ${this.reason}`
  }
}

const Live = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))

/** The cause an effect ends with (it must fail). */
const causeOf = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert.isTrue(Exit.isFailure(exit), "expected a failure")
    return (exit as Exit.Failure<A, E>).cause
  })

const tags = <E>(cause: Cause.Cause<E>): ReadonlyArray<string> =>
  Chunk.toReadonlyArray(Cause.failures(cause)).map((e) => (e as { readonly _tag: string })._tag)

/** Acquires a peer left to the scope around the check: alive when the ledger is read. */
const leakPeer = Effect.asVoid(Peer.make(SimulatedDriver.DEFAULT_ADDRESS))

describe("Ledger.checked", () => {
  it.effect("an effect that fails and leaks: the LeakError first (what flip and catchTag see), then its own error", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checked(Effect.zipRight(leakPeer, Effect.fail(new Boom({ reason: "x" })))))
      assert.deepStrictEqual(tags(cause), ["LeakError", "Boom"])
      assert.strictEqual(Option.getOrThrow(Cause.failureOption(cause))._tag, "LeakError")
      const pretty = Cause.pretty(cause)
      assert.include(pretty, "boom: x")
      assert.include(pretty, "1 resources still alive")
      assert.include(pretty, "Peer #")
      assert.isBelow(pretty.indexOf("resources still alive"), pretty.indexOf("boom: x"))
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))

  it.effect("an effect that dies and leaks keeps its defect beside the LeakError", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checked(Effect.zipRight(leakPeer, Effect.die(new Error("kaput")))))
      assert.deepStrictEqual(tags(cause), ["LeakError"])
      assert.deepStrictEqual(Chunk.toReadonlyArray(Cause.defects(cause)).map((d) => (d as Error).message), ["kaput"])
      const pretty = Cause.pretty(cause)
      assert.include(pretty, "kaput")
      assert.include(pretty, "1 resources still alive")
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))

  it.effect("an effect that is interrupted and leaks keeps its interruption beside the LeakError", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checked(Effect.zipRight(leakPeer, Effect.interrupt)))
      assert.isTrue(Cause.isInterrupted(cause))
      assert.deepStrictEqual(tags(cause), ["LeakError"])
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))

  it.effect("a leak alone is the LeakError alone, a failure alone is the failure alone", () =>
    Effect.gen(function*() {
      const leaked = yield* causeOf(Ledger.checked(leakPeer)).pipe(Effect.scoped)
      assert.deepStrictEqual(tags(leaked), ["LeakError"])
      assert.isTrue(Cause.isFailType(leaked))
      const failed = yield* causeOf(Ledger.checked(Effect.scoped(Effect.zipRight(
        leakPeer,
        Effect.fail(new Boom({ reason: "y" }))
      ))))
      assert.deepStrictEqual(tags(failed), ["Boom"])
      assert.isTrue(Cause.isFailType(failed))
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))
})

describe("Ledger.checkedOnAnyDriver", () => {
  /**
   * Registers a region the checked effect leaves registered; deregistered once the test is over
   * (else the layer's peer could not be deleted).
   */
  const leakRegion = Effect.gen(function*() {
    const driver = yield* Driver.RdmaDriver
    const peer = yield* Peer.Peer
    const memory = yield* driver.allocate(4096)
    const mr = yield* driver.mrReg(Driver.handleOf(peer), memory, Usage.READ_SRC)
    yield* Effect.addFinalizer(() => Effect.orDie(driver.mrDereg(mr.handle)))
  })

  it.live("an effect that fails and leaks: the HandleLeakError first, then its own error", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checkedOnAnyDriver(
        Effect.zipRight(leakRegion, Effect.fail(new Boom({ reason: "z" }))),
        { within: "50 millis" }
      ))
      assert.deepStrictEqual(tags(cause), ["HandleLeakError", "Boom"])
      const pretty = Cause.pretty(cause)
      assert.include(pretty, "boom: z")
      assert.include(pretty, "localRegions 0 -> 1")
      assert.isBelow(pretty.indexOf("localRegions 0 -> 1"), pretty.indexOf("boom: z"))
    }).pipe(Effect.scoped, Effect.provide(Live)))

  it.live("an effect that dies and leaks keeps its defect beside the HandleLeakError", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checkedOnAnyDriver(
        Effect.zipRight(leakRegion, Effect.dieMessage("kaput")),
        { within: "50 millis" }
      ))
      assert.deepStrictEqual(tags(cause), ["HandleLeakError"])
      const pretty = Cause.pretty(cause)
      assert.include(pretty, "kaput")
      assert.include(pretty, "localRegions 0 -> 1")
    }).pipe(Effect.scoped, Effect.provide(Live)))

  it.live("a failure that releases what it acquired is the failure alone", () =>
    Effect.gen(function*() {
      const cause = yield* causeOf(Ledger.checkedOnAnyDriver(Effect.scoped(Effect.gen(function*() {
        yield* LocalMr.allocate(yield* Peer.Peer, 4096, Usage.READ_SRC)
        return yield* Effect.fail(new Boom({ reason: "w" }))
      }))))
      assert.deepStrictEqual(tags(cause), ["Boom"])
      assert.isTrue(Cause.isFailType(cause))
    }).pipe(Effect.provide(Live)))
})
