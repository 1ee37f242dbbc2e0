/**
 * Every registration lives at least as long as its scope: finalizers on success, failure, defect
 * and interruption, in reverse order, and a failed release is reported, never retried.
 */
import {
  CmEndpoint,
  CmListener,
  Connection,
  LocalMr,
  Memory,
  Peer,
  RdmaMetrics,
  RemoteMr,
  Usage
} from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, FastCheck as fc, Fiber, Layer, Logger, Metric, Scope } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

/** A simulated driver whose releases are recorded in order. */
const recording = () => {
  const released: Array<string> = []
  const layer = Layer.effect(
    Driver.RdmaDriver,
    Effect.map(Driver.RdmaDriver, (d): Driver.Driver => ({
      ...d,
      mrDereg: (mr) => Effect.ensuring(d.mrDereg(mr), Effect.sync(() => released.push("mr"))),
      peerDelete: (p) => Effect.ensuring(d.peerDelete(p), Effect.sync(() => released.push("peer"))),
      mrRemoteDelete: (r) => Effect.ensuring(d.mrRemoteDelete(r), Effect.sync(() => released.push("remote"))),
      cmDeregMr: (m) => Effect.ensuring(d.cmDeregMr(m), Effect.sync(() => released.push("cm-mr"))),
      cmEpDestroy: (e) => Effect.ensuring(d.cmEpDestroy(e), Effect.sync(() => released.push("cm-ep"))),
      free: (m) => Effect.ensuring(d.free(m), Effect.sync(() => released.push("free")))
    }))
  ).pipe(Layer.provideMerge(SimulatedDriver.layer))
  return { released, layer }
}

/** A program that holds a peer, `regions` regions, a remote region and an rdma_cm endpoint with a region. */
const holdEverything = (regions: number) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const mrs = yield* Effect.forEach(
      Array.from({ length: regions }, (_, i) => i),
      (i) =>
        // A real program does other work between acquisitions: yield, so interruption can land anywhere.
        Effect.zipLeft(
          LocalMr.allocate(peer, 4096 * (1 + (i % 3)), Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)),
          Effect.yieldNow()
        )
    )
    const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(mrs[0]!))
    const ep = yield* CmEndpoint.make(address, 7471)
    yield* CmEndpoint.registerMessages(ep, new Uint8Array(512))
    return { peer, mrs, remote }
  })

const liveCount = Effect.map(Ledger.live, (l) => l.length)

/** The messages logged under `logged`, in order. */
const capturedLogs = () => {
  const logs: Array<string> = []
  const logger = Logger.make(({ message }) => logs.push(String(Array.isArray(message) ? message[0] : message)))
  return { logs, logged: Logger.replace(Logger.defaultLogger, logger) }
}

describe("finalizers", () => {
  it.effect("run on success, regions before their peer and endpoint", () => {
    const { layer, released } = recording()
    return Effect.gen(function*() {
      const held = yield* Effect.scoped(Effect.gen(function*() {
        const held = yield* holdEverything(3)
        assert.strictEqual(yield* liveCount, 1 + 3 + 1 + 1 + 1)
        return held
      }))
      assert.strictEqual(held.mrs.length, 3)
      yield* Ledger.assertEmpty
      assert.deepStrictEqual(released, ["cm-mr", "cm-ep", "remote", "mr", "free", "mr", "free", "mr", "free", "peer"])
    }).pipe(Effect.provide(layer))
  })

  it.effect("run on failure", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Effect.scoped(Effect.zipRight(holdEverything(5), Effect.fail("boom" as const))))
      assert.deepStrictEqual(exit, Exit.fail("boom"))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))

  it.effect("run on a defect", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(Effect.scoped(Effect.zipRight(holdEverything(5), Effect.dieMessage("bug"))))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))

  it.effect("run when an acquisition fails halfway", () =>
    Effect.gen(function*() {
      yield* SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 4, code: -100002 })
      const exit = yield* Effect.exit(Effect.scoped(holdEverything(10)))
      assert.isTrue(Exit.isFailure(exit))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))

  it.live("run on interruption at any point of a program that holds a peer and many regions", () => {
    const heldAtInterruption = new Set<number>()
    return Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(fc.integer({ min: 0, max: 30 }), (yields) =>
          Effect.runPromise(
            Effect.gen(function*() {
              const fiber = yield* Effect.fork(Effect.scoped(Effect.zipRight(holdEverything(20), Effect.never)))
              for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
              heldAtInterruption.add(yield* liveCount)
              yield* Fiber.interrupt(fiber)
              yield* Ledger.assertEmpty
            }).pipe(Effect.provide(SimulatedDriver.layer))
          )),
        { numRuns: 100 }
      )
    ).pipe(Effect.map(() => assert.isAtLeast(heldAtInterruption.size, 8, "interruptions landed at too few points")))
  })

  it.effect("1,000 fibers registering concurrently under one scope", () =>
    Effect.gen(function*() {
      const rkeys = yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const mrs = yield* Effect.forEach(
          Array.from({ length: 1000 }, () => new Uint8Array(128)),
          (memory) => LocalMr.register(peer, memory, Usage.SEND),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(yield* liveCount, 1001)
        return yield* Effect.forEach(mrs, (mr) => Effect.map(LocalMr.describe(mr), (d) => d.rkey))
      }))
      assert.strictEqual(new Set(rkeys).size, 1000)
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))
})

describe("a failing release", () => {
  it.effect("is logged and counted, never retried, and keeps its memory alive", () => {
    const { logged, logs } = capturedLogs()
    const failures = Metric.tagged(RdmaMetrics.releaseFailures, "operation", "rpma_mr_dereg")
    return Effect.gen(function*() {
      const before = (yield* Metric.value(failures)).count
      yield* SimulatedDriver.fail({ operation: "rpma_mr_dereg", nth: 2, code: -100002 })
      const kept = yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const memories = yield* Effect.forEach([1, 2, 3], () => Memory.allocate(4096))
        yield* Effect.forEach(memories, (m) => LocalMr.register(peer, m, Usage.RECV))
        return memories
      }))
      // Released in reverse order: the second dereg is the middle region's, and it failed.
      assert.deepStrictEqual(kept.map((m) => m.byteLength), [0, 4096, 0])
      assert.strictEqual(
        yield* SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_mr_dereg"))),
        3
      )
      assert.strictEqual((yield* Metric.value(failures)).count - before, 1)
      assert.isTrue(
        logs.some((l) => /rpma_mr_dereg failed while releasing a 4096-byte region registered for RECV/.test(l))
      )
      assert.isTrue(logs.some((l) => /kept 4096 bytes alive/.test(l)))
      // librpma freed the handle anyway, so the peer could be deleted and nothing is alive.
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer), Effect.provide(logged))
  })

  it.effect("of a peer is reported and does not stop the other releases", () =>
    Effect.gen(function*() {
      yield* SimulatedDriver.fail({ operation: "rpma_peer_delete", nth: 1, code: -100002 })
      yield* SimulatedDriver.fail({ operation: "rdma_dereg_mr", nth: 1, code: 16 })
      const exit = yield* Effect.exit(Effect.scoped(holdEverything(2)))
      assert.isTrue(Exit.isSuccess(exit))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer), Effect.provide(Logger.remove(Logger.defaultLogger))))

  it.effect("refused because in use (ResourceInUseError): logged, not counted, not quarantined, and not retried", () => {
    const { logged, logs } = capturedLogs()
    const failures = Metric.tagged(RdmaMetrics.releaseFailures, "operation", "rpma_peer_delete")
    return Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const before = (yield* Metric.value(failures)).count
      // A user core does not know of: a region registered on the peer through the raw driver.
      const memory = new Uint8Array(4096)
      const { peer, raw } = yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const raw = yield* d.mrReg(Driver.handleOf(peer), memory, Usage.RECV)
        return { peer, raw }
      }))
      assert.isTrue(
        logs.some((l) => /rpma_peer_delete refused while releasing .*: it is still in use and stays alive/.test(l)),
        logs.join("\n")
      )
      assert.strictEqual((yield* Metric.value(failures)).count - before, 0)
      assert.isFalse(logs.some((l) => /kept .* alive/.test(l)), "nothing quarantined")
      // Still alive and usable: its owner can register on it.
      yield* Effect.scoped(Effect.flatMap(Memory.allocate(4096), (m) => LocalMr.register(peer, m, Usage.RECV)))
      // Core does not retry once the unknown user is gone: the peer stays until its owner deletes it.
      yield* d.mrDereg(raw.handle)
      assert.deepStrictEqual((yield* Ledger.live).map((r) => r.kind), ["Peer"])
      yield* d.peerDelete(Driver.handleOf(peer))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer), Effect.provide(logged))
  })

  it.live("of a region a raw receive holds: refused, logged, not counted, its memory kept while registered, not retried", () => {
    const { logged, logs } = capturedLogs()
    const failures = Metric.tagged(RdmaMetrics.releaseFailures, "operation", "rpma_mr_dereg")
    return Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const before = (yield* Metric.value(failures)).count
      const { inbox, server, serverPeer } = yield* Effect.scoped(Effect.gen(function*() {
        const { server, serverPeer } = yield* Conformance.connectedPair(address, 7631)
        const regionScope = yield* Scope.make()
        const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV).pipe(Scope.extend(regionScope))
        // A receive core does not know of, posted through the raw driver.
        d.postMany(Driver.handleOf(server), [{
          op: "recv",
          id: 1 << 20,
          dst: Driver.handleOf(inbox),
          offset: 0,
          length: 256
        }])
        yield* Scope.close(regionScope, Exit.void)
        assert.isTrue(
          logs.some((l) => /rpma_mr_dereg refused while releasing .*: it is still in use and stays alive/.test(l)),
          logs.join("\n")
        )
        assert.strictEqual((yield* Metric.value(failures)).count - before, 0, "not a release failure")
        // Not quarantined (that is for a failed release): the memory is kept because the registration
        // is still live, and not freed under it.
        assert.isTrue(
          logs.includes("kept 256 bytes alive until the registration over them is released"),
          logs.join("\n")
        )
        assert.isFalse(logs.some((l) => /failed while releasing/.test(l)), logs.join("\n"))
        return { inbox, server, serverPeer }
      }))
      // The connection is deleted, so the receive no longer holds the region; core does not ask
      // again: the region (and so its peer) stays until whoever made the raw user releases it.
      assert.strictEqual(yield* Connection.state(server), "Closed")
      assert.deepStrictEqual((yield* Ledger.live).map((r) => r.kind).sort(), ["MrLocal", "Peer"])
      yield* d.mrDereg(Driver.handleOf(inbox))
      assert.strictEqual(inbox.memory.byteLength, 256, "the memory was not freed under the registration")
      // Its peer's deletion waits for the region core still counts as a user: it never comes.
      assert.deepStrictEqual((yield* Ledger.live).map((r) => r.kind), ["Peer"])
      yield* d.peerDelete(Driver.handleOf(serverPeer))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer), Effect.provide(logged))
  })

  it.effect("memory allocated after its endpoint, under a receive still posted when its scope closes: freed once the endpoint releases the region", () => {
    const { logged, logs } = capturedLogs()
    return Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const listener = yield* CmListener.make(address, 0)
        // The client stays connected until the end: the server's receive is not flushed by it.
        const client = yield* Effect.fork(
          Effect.scoped(Effect.flatMap(CmEndpoint.connect(address, listener.port), () => Effect.never))
        )
        const memory = yield* Effect.scoped(Effect.gen(function*() {
          const request = yield* CmListener.next(listener)
          // Allocated after the endpoint: its finalizer runs before the endpoint's, while the receive holds the region.
          const memory = yield* Memory.allocate(4096)
          const inbox = yield* CmEndpoint.registerMessages(request, memory)
          yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
          yield* CmListener.accept(request)
          return memory
        }))
        assert.isTrue(
          logs.includes("kept 4096 bytes alive until the registration over them is released"),
          logs.join("\n")
        )
        assert.isFalse(logs.some((l) => /failed|refused/.test(l)), logs.join("\n"))
        assert.strictEqual(memory.byteLength, 0, "freed once the endpoint was destroyed and its region deregistered")
        yield* Fiber.interrupt(client)
      }))
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer), Effect.provide(logged))
  })

  it.effect("lists what leaked and where it was acquired", () =>
    Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const ctx = yield* d.getIbvContext(address, "local")
      yield* d.peerNew(ctx).pipe(Effect.withSpan("leaky handler"))
      const error = yield* Effect.flip(Ledger.assertEmpty)
      assert.match(
        error.message,
        /1 resources still alive:\n {2}- Peer #\d+: peer on 192\.168\.77\.1, acquired in leaky handler/
      )
    }).pipe(Effect.provide(SimulatedDriver.layer)))
})
