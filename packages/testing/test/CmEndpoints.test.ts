/**
 * The simulated driver's endpoints of librdmacm's verbs API, beyond what the conformance suite
 * checks on every driver: the fault plans of the new calls, a send that waits for its receive, a
 * message longer than its receive, waits that hear their endpoint's end, and the ledger.
 */
import { RdmaError } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Model } from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, type Scope, TestClock } from "effect"
import {
  bytes,
  completions,
  config,
  endpoint,
  errnoOf,
  leading,
  listen,
  nextEvent,
  nextRequest,
  post,
  postOutcome,
  region,
  whole
} from "../src/conformance/cmEndpointSupport.js"

const ADDRESS = SimulatedDriver.DEFAULT_ADDRESS

/** Runs a test in a fresh world, and checks that nothing is left alive afterwards. */
const inWorld = <A, E>(
  effect: Effect.Effect<A, E, Driver.RdmaDriver | SimulatedDriver.SimulationControl | Scope.Scope>
) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** A connected pair of endpoints with a 4 KiB rdma_reg_msgs region each. */
const connected = (port: number, cfg: Driver.Model.CmEpConfig = config) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const listener = yield* listen(ADDRESS, port, cfg)
    const client = yield* endpoint(ADDRESS, port, cfg)
    const connecting = yield* Effect.fork(d.cmConnect(client, undefined, config.timeoutMs))
    const server = yield* nextRequest(listener.handle)
    yield* d.cmAccept(server, undefined, config.timeoutMs)
    yield* Fiber.join(connecting)
    const a = yield* region(client, "msgs", 4096)
    const b = yield* region(server, "msgs", 4096)
    return { client, server, a, b }
  })

describe("simulated cm endpoints", () => {
  it.live("a send waits for the other side's receive (RNR retry infinite), then both complete", () =>
    inWorld(Effect.gen(function*() {
      const { a, b, client, server } = yield* connected(18001)
      a.memory.set(bytes("later"))
      const sent = yield* postOutcome(client, [{ op: "send", id: 1, segments: [whole(a, 0, 5)] }])
      assert.strictEqual(sent.posted, 1)
      assert.deepStrictEqual(yield* Driver.RdmaDriver.pipe(Effect.flatMap((d) => d.cmPollCompletions(client))), [])
      yield* post(server, [{ op: "recv", id: 2, segments: [whole(b)] }])
      const [received] = yield* completions(server, 1)
      assert.deepStrictEqual([received!.status, received!.opcode, received!.byteLength], [0, Model.WcOpcode.RECV, 5])
      assert.strictEqual(new TextDecoder().decode(b.memory.subarray(0, 5)), "later")
      assert.strictEqual((yield* completions(client, 1))[0]!.status, 0)
    })))

  it.live("the send queue runs in order: a write posted after a waiting send lands after it", () =>
    inWorld(Effect.gen(function*() {
      const { a, b, client, server } = yield* connected(18008)
      const target = yield* region(server, "write", 64)
      a.memory.set(bytes("first"), 0)
      a.memory.set(bytes("second"), 100)
      yield* post(client, [
        { op: "send", id: 1, segments: [whole(a, 0, 5)] },
        { op: "write", id: 2, segments: [whole(a, 100, 6)], remoteAddress: target.info.address, rkey: target.info.rkey }
      ])
      assert.strictEqual(target.memory[0], 0, "the write waits behind the send")
      yield* post(server, [{ op: "recv", id: 3, segments: [whole(b)] }])
      assert.deepStrictEqual((yield* completions(client, 2)).map((wc) => [wc.id, wc.status]), [[1, 0], [2, 0]])
      assert.strictEqual(new TextDecoder().decode(target.memory.subarray(0, 6)), "second")
    })))

  it.live("a slot is free once its completion is taken (an unsignalled one's, once a later one's is): ENOMEM until then", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const { a, b, client, server } = yield* connected(18009, { ...config, maxSendWr: 2, maxRecvWr: 1 })
      const target = yield* region(server, "write", 64)
      const write = (id: number, completion?: "onError") => ({
        op: "write" as const,
        id,
        segments: [whole(a, 0, 8)],
        remoteAddress: target.info.address,
        rkey: target.info.rkey,
        ...(completion === undefined ? {} : { completion })
      })
      // An unsignalled write and a signalled one: both slots held until the second's completion is taken.
      const outcome = d.cmPostMany(client, [write(1, "onError"), write(2), write(3)])
      assert.deepStrictEqual([outcome.posted, outcome.error?.errnoName], [2, "ENOMEM"])
      assert.deepStrictEqual(outcome.ready.map((wc) => wc.id), [2])
      assert.strictEqual(d.cmPostMany(client, [write(3)]).posted, 1)
      // A receive's slot: held until its completion is taken, not when its message arrives.
      yield* post(server, [{ op: "recv", id: 4, segments: [whole(b)] }])
      yield* post(client, [{ op: "send", id: 5, segments: [whole(a, 0, 8)] }])
      assert.strictEqual(d.cmPostMany(server, [{ op: "recv", id: 6, segments: [whole(b)] }]).error?.errnoName, "ENOMEM")
      yield* completions(server, 1)
      assert.strictEqual(d.cmPostMany(server, [{ op: "recv", id: 6, segments: [whole(b)] }]).posted, 1)
    })))

  it.live("a region deregistered while its send waits for a receive still serves it (the driver holds it)", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const { b, client, server } = yield* connected(18007)
      const memory = new Uint8Array(64)
      memory.set(bytes("held"))
      const mr = yield* d.cmReg(client, "msgs", memory)
      yield* post(client, [{ op: "send", id: 1, segments: [{ mr, offset: 0, length: 4 }] }])
      yield* d.cmDeregMr(mr)
      yield* post(server, [{ op: "recv", id: 2, segments: [whole(b)] }])
      assert.deepStrictEqual((yield* completions(server, 1)).map((wc) => [wc.status, wc.byteLength]), [[0, 4]])
      assert.strictEqual(new TextDecoder().decode(b.memory.subarray(0, 4)), "held")
      assert.strictEqual((yield* completions(client, 1))[0]!.status, 0)
    })))

  it.live("a message longer than its receive: LOC_LEN_ERR there, REM_INV_REQ_ERR on the sender", () =>
    inWorld(Effect.gen(function*() {
      const { a, b, client, server } = yield* connected(18002)
      yield* post(server, [{ op: "recv", id: 1, segments: [whole(b, 0, 4)] }])
      yield* post(client, [{ op: "send", id: 2, segments: [whole(a, 0, 8)] }])
      assert.strictEqual((yield* completions(server, 1))[0]!.status, RdmaError.WcStatus.LOC_LEN_ERR)
      assert.strictEqual((yield* completions(client, 1))[0]!.status, RdmaError.WcStatus.REM_INV_REQ_ERR)
    })))

  it.live("fault plans: a code fails the call, a completion status fails the request, a lost connection flushes it", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      yield* SimulatedDriver.fail({ operation: "rdma_listen", nth: 1, code: 98 })
      assert.strictEqual(yield* errnoOf(d.cmListen(ADDRESS, 18003, config)), "EADDRINUSE")
      const { a, b, client, server } = yield* connected(18003)
      yield* SimulatedDriver.fail({ operation: "rdma_post_send", nth: 2, code: 12 })
      const refused = yield* postOutcome(client, [
        { op: "send", id: 1, segments: [whole(a, 0, 8)] },
        { op: "send", id: 2, segments: [whole(a, 0, 8)] }
      ])
      assert.deepStrictEqual([refused.posted, refused.error?.errnoName], [1, "ENOMEM"])
      yield* post(server, [{ op: "recv", id: 3, segments: [whole(b)] }])
      yield* completions(client, 1)
      yield* completions(server, 1)
      yield* SimulatedDriver.fail({
        operation: "rdma_post_write",
        nth: 1,
        completionStatus: RdmaError.WcStatus.REM_OP_ERR
      })
      yield* post(client, [{ op: "write", id: 4, segments: [whole(a, 0, 8)], remoteAddress: 0n, rkey: 0 }])
      assert.strictEqual((yield* completions(client, 1))[0]!.status, RdmaError.WcStatus.REM_OP_ERR)
      yield* SimulatedDriver.fail({ operation: "rdma_post_recv", nth: 1, loseConnection: true })
      yield* post(server, [{ op: "recv", id: 5, segments: [whole(b)] }])
      assert.strictEqual((yield* completions(server, 1))[0]!.status, RdmaError.WcStatus.WR_FLUSH_ERR)
      assert.strictEqual(yield* nextEvent(server), "DISCONNECTED")
      assert.strictEqual(yield* nextEvent(client), "DISCONNECTED")
    })))

  it.effect("a connect nobody answers ends with ETIMEDOUT at its bound, on Effect's Clock; a later get-request does not hand it out", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const listener = yield* listen(ADDRESS, 18004)
      const client = yield* endpoint(ADDRESS, 18004)
      const connecting = yield* Effect.fork(errnoOf(d.cmConnect(client, undefined, 200)))
      yield* TestClock.adjust(199)
      assert.isNull(connecting.unsafePoll(), "ended before its bound")
      yield* TestClock.adjust(1)
      assert.strictEqual(yield* Fiber.join(connecting), "ETIMEDOUT")
      // Requests are handed out in order: the next one is a later client's, not the one given up.
      const later = yield* endpoint(ADDRESS, 18004)
      const laterConnecting = yield* Effect.fork(d.cmConnect(later, bytes("later"), 1000))
      const request = yield* nextRequest(listener.handle)
      assert.strictEqual(leading(yield* d.cmPrivateData(request), 5), "later")
      yield* Fiber.interrupt(laterConnecting)
    })))

  it.live("waits on a destroyed endpoint end: cmNextEvent and cmArmCompletions hear ECANCELED", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      const ep = yield* d.cmEpCreate(ADDRESS, 18005, config)
      const event = yield* Effect.fork(d.cmNextEvent(ep))
      const armed = yield* Effect.fork(Effect.async<unknown, unknown>((resume) => {
        const disarm = d.cmArmCompletions(ep, resume)
        return Effect.sync(disarm)
      }))
      yield* Effect.yieldNow()
      yield* d.cmEpDestroy(ep)
      for (const fiber of [event, armed]) {
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.isFailure(exit) && String(exit).includes("ECANCELED"), String(exit))
      }
    })))

  it.live("the ledger names endpoints and listeners, and Driver.live counts them", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* Driver.RdmaDriver
      yield* connected(18006)
      const live = yield* d.live
      assert.deepStrictEqual([live.cmEndpoints, live.cmListeners, live.cmRegions], [2, 1, 2])
      const entries = yield* Effect.flatMap(SimulatedDriver.SimulationControl, (s) => s.live)
      assert.includeMembers(entries.map((e) => e.kind), ["CmEp", "CmListener"])
    })))
})
