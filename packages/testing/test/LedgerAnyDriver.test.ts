/**
 * Ledger.checkedOnAnyDriver reads only the driver's own counts (Driver.live), so it checks the
 * native driver as it checks this one (it.live: the check waits on the real clock): a handle left
 * alive fails the check, one released by another fiber shortly after is waited for, and the
 * effect's own outcome comes through. Under a TestClock (it.effect) that wait still ends: it is on
 * the live clock, as the releases it waits for come from real events.
 */
import { LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Layer } from "effect"

const Live = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))

describe("Ledger.checkedOnAnyDriver", () => {
  it.live("passes when the effect releases what it acquired, and returns its value", () =>
    Effect.gen(function*() {
      const value = yield* Ledger.checkedOnAnyDriver(Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.Peer
        const mr = yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
        return mr.size
      })))
      assert.strictEqual(value, 4096)
    }).pipe(Effect.provide(Live)))

  it.live("fails with HandleLeakError naming the kind that grew, whatever the effect's outcome", () =>
    Effect.gen(function*() {
      const driver = yield* Driver.RdmaDriver
      const peer = yield* Peer.Peer
      const leak = Effect.flatMap(
        driver.allocate(4096),
        (memory) => driver.mrReg(Driver.handleOf(peer), memory, Usage.READ_SRC)
      )
      const error = yield* Effect.flip(Ledger.checkedOnAnyDriver(leak, { within: "50 millis" }))
      assert.strictEqual(error._tag, "HandleLeakError")
      assert.include(error.message, "the simulated driver holds more handles than before")
      assert.include(error.message, "localRegions 0 -> 1")
      // A failing effect that leaks still reports the leak (the check runs on every outcome).
      const failing = Effect.zipRight(leak, Effect.fail("boom" as const))
      const exit = yield* Effect.exit(Ledger.checkedOnAnyDriver(failing, { within: "50 millis" }))
      assert.isTrue(Exit.isFailure(exit) && JSON.stringify(exit.cause).includes("HandleLeakError"))
    }).pipe(Effect.provide(Live)))

  it.live("waits for a release another fiber makes after the effect ends", () =>
    Effect.gen(function*() {
      const driver = yield* Driver.RdmaDriver
      const peer = yield* Peer.Peer
      const registered = yield* Deferred.make<Driver.Model.MrHandle>()
      const release = Deferred.await(registered).pipe(Effect.flatMap((mr) => driver.mrDereg(mr)), Effect.orDie)
      const value = yield* Ledger.checkedOnAnyDriver(
        Effect.gen(function*() {
          const memory = yield* driver.allocate(4096)
          yield* Deferred.succeed(
            registered,
            (yield* driver.mrReg(Driver.handleOf(peer), memory, Usage.READ_SRC)).handle
          )
          yield* Effect.fork(Effect.zipRight(Effect.sleep("20 millis"), release))
          return "done"
        }),
        { within: "10 seconds" }
      )
      assert.strictEqual(value, "done")
      assert.strictEqual((yield* driver.live).localRegions, 0)
    }).pipe(Effect.provide(Live)))

  it.effect("under a TestClock, a release a real event makes later is still waited for, and the wait is bounded", () =>
    Effect.gen(function*() {
      const driver = yield* Driver.RdmaDriver
      const peer = yield* Peer.Peer
      // A timer of the host's, as a native completion callback would be: no TestClock moves it.
      const later = (millis: number) =>
        Effect.async<void>((resume) => {
          const timer = setTimeout(() => resume(Effect.void), millis)
          return Effect.sync(() => clearTimeout(timer))
        })
      const value = yield* Ledger.checkedOnAnyDriver(
        Effect.gen(function*() {
          const memory = yield* driver.allocate(4096)
          const mr = yield* driver.mrReg(Driver.handleOf(peer), memory, Usage.READ_SRC)
          yield* Effect.fork(Effect.zipRight(later(20), Effect.orDie(driver.mrDereg(mr.handle))))
          return "done"
        }),
        { within: "10 seconds" }
      )
      assert.strictEqual(value, "done")
      // Never released: a HandleLeakError once `within` has passed on the live clock, not a hang.
      const leak = Effect.flatMap(
        driver.allocate(4096),
        (memory) => driver.mrReg(Driver.handleOf(peer), memory, Usage.READ_SRC)
      )
      const error = yield* Effect.flip(Ledger.checkedOnAnyDriver(leak, { within: "50 millis" }))
      assert.strictEqual(error._tag, "HandleLeakError")
    }).pipe(Effect.provide(Live)))
})
