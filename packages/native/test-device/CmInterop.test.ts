// librdmacm's verbs API path (issue 20) against C programs written on that API alone
// (bench/c/cm_server.c, cm_client.c; bench/c/cm_common.h says what each mode does and the remote
// key's 24 bytes), in both directions: messages with receives posted before connect and accept
// (and again with CmEndpoint.call / .reply: the receive and the send in one post),
// a remote read, a remote write, a send and a write with immediate data, and a rejected request,
// checking the bytes that arrive on each side (the C program checks its side and exits 0 only if
// all of them arrived). The C programs are first proved against each other.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/CmInterop.test.ts
import { CmEndpoint, CmListener, RdmaError, RemoteKey } from "@effect-rdma/core"
import { handleOf, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { execFileSync } from "node:child_process"
import { join } from "node:path"
import { beforeAll } from "vitest"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, pattern, type Run, runC, same } from "./cPeer.js"
import { address } from "./support.js"

const modes = ["msg", "read", "write", "imm", "reject"] as const
type Mode = typeof modes[number]

// cm_common.h's constants, mirrored.
const N = 4096
const HELLO = pattern(16, 7)
const REJECTION = pattern(16, 8)
const IMM_SEND = 0x01020304
const IMM_WRITE = 0x05060708
const DONE = new TextEncoder().encode("done")
// enum ibv_wc_opcode, enum ibv_wc_flags.
const IBV_WC_RECV = 128
const IBV_WC_RECV_RDMA_WITH_IMM = 129
const IBV_WC_WITH_IMM = 2
const { ECONNREFUSED } = RdmaError.Errno

const options: CmEndpoint.Options = { timeout: "20 seconds", maxSendWr: 16, maxRecvWr: 16 }

// Built fresh into build/ for every run (runC builds only what is missing: a stale binary would
// test old code).
beforeAll(() => {
  const root = join(import.meta.dirname, "..", "..", "..")
  for (const name of ["cm_server", "cm_client"]) {
    const source = join(root, "bench", "c", `${name}.c`)
    execFileSync("cc", [
      "-O2",
      "-Wall",
      "-o",
      join(import.meta.dirname, "..", "build", name),
      source,
      "-lrdmacm",
      "-libverbs"
    ])
  }
}, 120_000)

/** The C program's exit and its "ok <mode>", which it prints only when every check of its side passed. */
const cPassed = (run: Run, mode: Mode) =>
  Effect.map(awaitExit(run), (code) => {
    assert.strictEqual(code, 0, run.output())
    assert.include(run.output(), `ok ${mode}`)
  })

/** A C program stopped when the test failed before it could end (it may wait for a message forever). */
const killed = (run: Run) => Effect.sync(() => run.child.kill("SIGKILL"))

/**
 * `test`, then every endpoint and listener it made destroyed: counted against the counts before it,
 * so that one test's leak is reported by that test alone.
 */
const leavingNothingAlive = <A, E, R>(test: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const before = yield* driver.live
    yield* test
    const after = yield* driver.live
    assert.strictEqual(after.cmEndpoints - before.cmEndpoints, 0, "endpoints left alive")
    assert.strictEqual(after.cmListeners - before.cmListeners, 0, "listeners left alive")
  })

const received = (memory: Uint8Array, offset: number, completion: { byteLength: number }, seed: number) =>
  completion.byteLength === N && same(memory.subarray(offset, offset + N), pattern(N, seed))

/**
 * The TypeScript listener's side of `mode` with the C client that `start` runs once it listens.
 * `exchange`: the answer (mode msg) goes with CmEndpoint.reply, the next receive posted with it.
 */
const serve = (mode: Mode, start: (port: number) => Run, exchange = false) =>
  Effect.gen(function*() {
    const listener = yield* CmListener.make(address, 0, options)
    const run = start(listener.port)
    yield* Effect.addFinalizer((exit) => Exit.isFailure(exit) ? killed(run) : Effect.void)
    const request = yield* CmListener.next(listener)
    assert.isTrue(same(request.privateData.subarray(0, 16), HELLO), "the request's private data")
    if (mode === "reject") {
      yield* CmListener.reject(request, { privateData: REJECTION })
      return run
    }
    // Two receive slots, posted before the accept (the client sends at once), then the send slot.
    const memory = new Uint8Array(3 * N)
    const messages = yield* CmEndpoint.registerMessages(request, memory)
    const target = mode === "read"
      ? yield* CmEndpoint.registerRead(request, pattern(N, 3))
      : yield* CmEndpoint.registerWrite(request, new Uint8Array(N))
    const receives = [
      yield* CmEndpoint.postRecv(request, { segments: [{ mr: messages, offset: 0, length: N }] }),
      yield* CmEndpoint.postRecv(request, { segments: [{ mr: messages, offset: N, length: N }] })
    ]
    yield* CmListener.accept(request, { privateData: RemoteKey.encode(RemoteKey.make(target)) })
    const first = yield* receives[0]!.completion
    if (mode === "msg") {
      assert.isTrue(received(memory, 0, first, 1), "the client's message")
      memory.set(pattern(N, 2), 2 * N)
      if (exchange) {
        // The next request's receive (unused: the client sends no more) and the answer, in one post.
        const next = yield* CmEndpoint.reply(request, {
          recv: { dst: messages, offset: 0, length: N },
          send: { src: messages, offset: 2 * N, length: N }
        })
        assert.strictEqual(next.operation, "rdma_post_recv")
      } else {
        yield* CmEndpoint.send(request, { src: messages, offset: 2 * N, length: N })
      }
    } else if (mode === "read" || mode === "write") {
      assert.isTrue(same(memory.subarray(0, first.byteLength), DONE), "the client's done")
      if (mode === "write") assert.isTrue(same(target.memory, pattern(N, 4)), "the bytes the client wrote")
    } else {
      assert.strictEqual(first.opcode, IBV_WC_RECV)
      assert.strictEqual(first.flags & IBV_WC_WITH_IMM, IBV_WC_WITH_IMM)
      assert.strictEqual(first.imm, IMM_SEND)
      assert.isTrue(received(memory, 0, first, 5), "the bytes sent with immediate data")
      const second = yield* receives[1]!.completion
      assert.strictEqual(second.opcode, IBV_WC_RECV_RDMA_WITH_IMM)
      assert.strictEqual(second.imm, IMM_WRITE)
      assert.isTrue(same(target.memory, pattern(N, 6)), "the bytes written with immediate data")
    }
    return run
  })

/**
 * The TypeScript client's side of `mode` against a C server listening on `port`. `exchange`: the
 * message and its answer (mode msg) with CmEndpoint.call, no receive posted before the connect.
 */
const connect = (mode: Mode, port: number, exchange = false) =>
  Effect.gen(function*() {
    const ep = yield* CmEndpoint.make(address, port, options)
    // Two receive slots posted before the connect, the send slot, the local side of a read or write.
    const memory = new Uint8Array(4 * N)
    const messages = yield* CmEndpoint.registerMessages(ep, memory)
    const receives = exchange ? [] : [
      yield* CmEndpoint.postRecv(ep, { segments: [{ mr: messages, offset: 0, length: N }] }),
      yield* CmEndpoint.postRecv(ep, { segments: [{ mr: messages, offset: N, length: N }] })
    ]
    const sendDone = Effect.suspend(() => {
      memory.set(DONE, 2 * N)
      return CmEndpoint.send(ep, { src: messages, offset: 2 * N, length: DONE.byteLength })
    })
    if (mode === "reject") {
      const refused = yield* Effect.flip(CmEndpoint.establish(ep, { privateData: HELLO }))
      assert.strictEqual(refused._tag, "RdmaCmError")
      assert.strictEqual(refused.errno, ECONNREFUSED, refused.message)
      const why = yield* Effect.flatMap(RdmaDriver, (driver) => driver.cmPrivateData(handleOf(ep)))
      assert.isTrue(same(why.subarray(0, 16), REJECTION), "the rejection's private data")
      return
    }
    yield* CmEndpoint.establish(ep, { privateData: HELLO })
    const key = yield* RemoteKey.decode(ep.privateData.slice(0, 24))
    assert.strictEqual(key.length, BigInt(N))
    assert.strictEqual(key.access, mode === "read" ? "read" : "write")
    if (mode === "msg") {
      memory.set(pattern(N, 1), 2 * N)
      const answer = exchange
        ? yield* CmEndpoint.call(ep, {
          send: { src: messages, offset: 2 * N, length: N },
          recv: { dst: messages, offset: 0, length: N }
        })
        : yield* Effect.zipRight(
          CmEndpoint.send(ep, { src: messages, offset: 2 * N, length: N }),
          receives[0]!.completion
        )
      assert.isTrue(received(memory, 0, answer, 2), "the server's answer")
    } else if (mode === "read") {
      const src = yield* RemoteKey.require("read")(key)
      yield* CmEndpoint.read(ep, { dst: messages, dstOffset: 3 * N, src, length: N })
      assert.isTrue(same(memory.subarray(3 * N), pattern(N, 3)), "the bytes read")
      yield* sendDone
    } else if (mode === "write") {
      const dst = yield* RemoteKey.require("write")(key)
      memory.set(pattern(N, 4), 3 * N)
      yield* CmEndpoint.write(ep, { src: messages, srcOffset: 3 * N, dst, length: N })
      yield* sendDone
    } else {
      const dst = yield* RemoteKey.require("write")(key)
      memory.set(pattern(N, 5), 2 * N)
      yield* CmEndpoint.send(ep, { src: messages, offset: 2 * N, length: N, imm: IMM_SEND })
      memory.set(pattern(N, 6), 3 * N)
      yield* CmEndpoint.write(ep, { src: messages, srcOffset: 3 * N, dst, length: N, imm: IMM_WRITE })
    }
  })

describe("the C programs against each other", () => {
  modes.forEach((mode, i) => {
    it.live(`cm_client ${mode} against cm_server`, () =>
      Effect.gen(function*() {
        const port = String(19300 + i)
        const server = runC("cm_server", [address, port, mode, String(N)])
        yield* Effect.promise(() => server.ready)
        const client = runC("cm_client", [address, port, mode, String(N)])
        yield* cPassed(client, mode).pipe(Effect.onError(() => killed(server)))
        yield* cPassed(server, mode)
      }))
  })
})

layer(NativeDriver.layer, { excludeTestServices: true })("TypeScript listener, C client (cm_client)", (it) => {
  for (const mode of modes) {
    it.effect(mode, () =>
      leavingNothingAlive(Effect.gen(function*() {
        const run = yield* Effect.scoped(
          serve(mode, (port) => runC("cm_client", [address, String(port), mode, String(N)]))
        )
        yield* cPassed(run, mode)
      })))
  }
  it.effect("msg, answered with CmEndpoint.reply", () =>
    leavingNothingAlive(Effect.gen(function*() {
      const run = yield* Effect.scoped(
        serve("msg", (port) => runC("cm_client", [address, String(port), "msg", String(N)]), true)
      )
      yield* cPassed(run, "msg")
    })))
})

layer(NativeDriver.layer, { excludeTestServices: true })("TypeScript client, C server (cm_server)", (it) => {
  modes.forEach((mode, i) => {
    it.effect(mode, () =>
      leavingNothingAlive(Effect.gen(function*() {
        const port = 19320 + i
        const run = runC("cm_server", [address, String(port), mode, String(N)])
        yield* Effect.promise(() => run.ready)
        yield* Effect.scoped(connect(mode, port)).pipe(Effect.onError(() => killed(run)))
        yield* cPassed(run, mode)
      })))
  })
  it.effect("msg, with CmEndpoint.call", () =>
    leavingNothingAlive(Effect.gen(function*() {
      const port = 19320 + modes.length
      const run = runC("cm_server", [address, String(port), "msg", String(N)])
      yield* Effect.promise(() => run.ready)
      yield* Effect.scoped(connect("msg", port, true)).pipe(Effect.onError(() => killed(run)))
      yield* cPassed(run, "msg")
    })))
})
