/**
 * Conformance cases of librdmacm's verbs API that need two sides, over the raw Driver, each as a
 * server half and a client half (run in one process by the suite, across two hosts by
 * packages/native/test-pair): connect and accept with private data, a rejection, nobody
 * listening, receives posted before accept and before connect, sends and receives (with two
 * segments), inline sends, immediate data, RDMA write and read checked byte for byte, unsignalled
 * requests, a forged or misused remote key, and a disconnect.
 */
import { RdmaError } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import {
  bytes,
  completions,
  config,
  endpoint,
  errnoOf,
  expectCompletion,
  expectErrno,
  join,
  keyFrom,
  keyOf,
  leading,
  listen,
  nextEvent,
  nextRequest,
  post,
  postOutcome,
  region,
  serve,
  whole
} from "./cmEndpointSupport.js"
import type { HalfContext, PairCase } from "./halves.js"
import { check, equal, Lying, NOWHERE, pattern, same, text } from "./support.js"

/** The server half's last step: wait until the client half says it is done (its checks need this side alive). */
const untilDone = (ctx: HalfContext) =>
  Effect.gen(function*() {
    for (;;) if ((yield* ctx.channel.receive()).done) return
  })
const done = (ctx: HalfContext) => ctx.channel.send({ done: true })

/** The server half: a request taken, the client told, and its word that it gave up awaited. */
const requestGivenUp = (ctx: HalfContext) =>
  Effect.gen(function*() {
    const listener = yield* listen(ctx.address, ctx.port)
    yield* ctx.channel.send({ listening: true })
    const ep = yield* nextRequest(listener.handle)
    yield* ctx.channel.send({ requested: true })
    yield* ctx.channel.receive()
    return ep
  })

/**
 * The client half: a connect given up (interrupted) once the server has the request; `whileAlive`
 * runs before the endpoint is destroyed, `afterwards` after.
 */
const giveUp = (ctx: HalfContext, whileAlive: Effect.Effect<unknown, unknown>, afterwards: Effect.Effect<unknown>) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    yield* ctx.channel.receive()
    yield* Effect.scoped(Effect.gen(function*() {
      const ep = yield* endpoint(ctx.serverAddress, ctx.port)
      const connecting = yield* Effect.fork(d.cmConnect(ep, undefined, config.timeoutMs))
      yield* ctx.channel.receive() // the server has the request
      yield* Fiber.interrupt(connecting)
      yield* whileAlive
    }))
    yield* afterwards
    yield* done(ctx)
  })

/**
 * A server that exposes a region made by rdma_reg_write, one made by rdma_reg_read (filled with a
 * pattern) and one made by rdma_reg_msgs (local access only), sends their keys, and when asked
 * sends back what was written to the first.
 */
const exposeRegions = (ctx: HalfContext) =>
  Effect.gen(function*() {
    const { ep } = yield* serve(ctx, () => Effect.void)
    const writable = yield* region(ep, "write", 4096)
    const readable = yield* region(ep, "read", 4096)
    const local = yield* region(ep, "msgs", 4096)
    readable.memory.set(pattern(4096, 3))
    yield* ctx.channel.send({
      writable: keyOf(writable.info),
      readable: keyOf(readable.info),
      local: keyOf(local.info)
    })
    for (;;) {
      const m = yield* ctx.channel.receive()
      if (m.done) return
      // The client asks for what its writes left here.
      yield* ctx.channel.send({ bytes: Array.from(writable.memory.subarray(m.offset, m.offset + m.length)) })
    }
  })

/** The client of {@link exposeRegions}: connected, with the two remote keys. */
const useRegions = (ctx: HalfContext) =>
  Effect.gen(function*() {
    const { ep } = yield* join(ctx, () => Effect.void)
    const m = yield* ctx.channel.receive()
    return { ep, writable: keyFrom(m.writable), readable: keyFrom(m.readable), messages: keyFrom(m.local) }
  })
const peekWritten = (ctx: HalfContext, offset: number, length: number) =>
  Effect.map(
    Effect.zipRight(ctx.channel.send({ offset, length }), ctx.channel.receive()),
    (m) => Uint8Array.from(m.bytes)
  )

/**
 * A remote access the device must refuse: the request completes with REM_ACCESS_ERR (10) and the
 * queue pair is in error, so the next request completes with WR_FLUSH_ERR (5).
 */
const refusedAccess = (
  name: string,
  request: (target: {
    readonly writable: ReturnType<typeof keyFrom>
    readonly readable: ReturnType<typeof keyFrom>
    readonly messages: ReturnType<typeof keyFrom>
    readonly local: { readonly mr: Driver.Model.CmMrHandle; readonly memory: Uint8Array }
  }) => Driver.Model.CmWorkRequest
): PairCase => ({
  name,
  server: exposeRegions,
  client: (ctx) =>
    Effect.gen(function*() {
      const { ep, messages, readable, writable } = yield* useRegions(ctx)
      const local = yield* region(ep, "msgs", 4096)
      yield* post(ep, [request({ writable, readable, messages, local })])
      const [refused] = yield* completions(ep, 1)
      yield* expectCompletion(refused, { id: 1, status: RdmaError.WcStatus.REM_ACCESS_ERR }, "the refused request")
      yield* post(ep, [{ op: "send", id: 2, segments: [whole(local, 0, 8)] }])
      const [flushed] = yield* completions(ep, 1)
      yield* expectCompletion(flushed, { id: 2, status: RdmaError.WcStatus.WR_FLUSH_ERR }, "a send after it")
      yield* done(ctx)
    })
})

/** Request 1: a write of the local region's first `length` bytes to `remoteAddress` with `rkey`. */
const writeOf = (
  local: { readonly mr: Driver.Model.CmMrHandle; readonly memory: Uint8Array },
  remoteAddress: bigint,
  rkey: number,
  length: number
): Driver.Model.CmWorkRequest => ({ op: "write", id: 1, segments: [whole(local, 0, length)], remoteAddress, rkey })

/** Serves the case's client with two 64-byte receives (ids 1 and 2) of a 4 KiB inbox posted before the accept. */
const serveTwoReceives = (ctx: HalfContext) =>
  serve(ctx, (ep) =>
    Effect.gen(function*() {
      const inbox = yield* region(ep, "msgs", 4096)
      yield* post(ep, [
        { op: "recv", id: 1, segments: [whole(inbox, 0, 64)] },
        { op: "recv", id: 2, segments: [whole(inbox, 64, 64)] }
      ])
      return inbox
    }))

/** The client joined, the inline size its device granted (checked: 8 to 4095), and a 4 KiB message region. */
const joinInline = (ctx: HalfContext) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const { ep } = yield* join(ctx, () => Effect.void)
    const granted = (yield* d.cmEpInfo(ep)).maxInlineData
    yield* check(granted >= 8 && granted < 4096, `a granted inline size from 8 to 4095, got ${granted}`)
    const src = yield* region(ep, "msgs", 4096)
    return { ep, granted, src }
  })

export const cmEndpointPairCases: ReadonlyArray<PairCase> = [
  {
    name:
      "cm endpoint: connect and accept with private data both ways (padded to 56 and 196), oversized private data refused, addresses",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const listener = yield* listen(ctx.address, ctx.port)
        yield* equal(listener.port, ctx.port, "the port listened on")
        yield* ctx.channel.send({ listening: true })
        const ep = yield* nextRequest(listener.handle)
        const request = yield* d.cmPrivateData(ep)
        yield* equal(request.byteLength, 56, "a request's private data length")
        yield* equal(leading(request, 5), "hello", "the request's private data")
        // Refused before anything is sent: the request can still be answered.
        yield* expectErrno(d.cmAccept(ep, new Uint8Array(197), config.timeoutMs), "EINVAL", "an accept with 197 bytes")
        yield* expectErrno(d.cmReject(ep, new Uint8Array(149)), "EINVAL", "a reject with 149 bytes")
        const accepted = new Uint8Array(196)
        accepted.set(bytes("welcome"))
        accepted[195] = 0xee
        yield* d.cmAccept(ep, accepted, config.timeoutMs)
        const info = yield* d.cmEpInfo(ep)
        yield* equal(info.localPort, ctx.port, "the accepted endpoint's local port")
        yield* check(info.qpNum > 0 && info.qpNum < 2 ** 24, `a queue pair number of 24 bits, got ${info.qpNum}`)
        yield* ctx.channel.send({ remotePort: info.remotePort })
        yield* equal(yield* nextEvent(ep), "DISCONNECTED", "the server's event once the client disconnects")
        yield* d.cmDisconnect(ep)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        yield* ctx.channel.receive()
        const ep = yield* endpoint(ctx.serverAddress, ctx.port)
        yield* equal(text(yield* d.cmPrivateData(ep)), "", "the private data before any connection event")
        yield* expectErrno(d.cmConnect(ep, new Uint8Array(57), config.timeoutMs), "EINVAL", "a connect with 57 bytes")
        yield* d.cmConnect(ep, bytes("hello"), config.timeoutMs)
        const accepted = yield* d.cmPrivateData(ep)
        yield* equal(accepted.byteLength, 196, "an acceptance's private data length")
        yield* equal(leading(accepted, 7), "welcome", "the acceptance's private data")
        yield* equal(accepted[195], 0xee, "the acceptance's last byte")
        const info = yield* d.cmEpInfo(ep)
        yield* equal(info.remotePort, ctx.port, "the client's remote port")
        yield* equal(info.remoteAddress, ctx.serverAddress, "the client's remote address")
        const m = yield* ctx.channel.receive()
        yield* equal(m.remotePort, info.localPort, "the client's port, as the server sees it")
        yield* expectErrno(d.cmConnect(ep, undefined, config.timeoutMs), "EINVAL", "a second connect")
        yield* d.cmDisconnect(ep)
        yield* d.cmDisconnect(ep) // a second call does nothing
      })
  },
  {
    name: "cm endpoint: a rejected request → ECONNREFUSED with the rejection's private data (padded to 148)",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const listener = yield* listen(ctx.address, ctx.port)
        yield* ctx.channel.send({ listening: true })
        const ep = yield* nextRequest(listener.handle)
        yield* d.cmReject(ep, bytes("busy"))
        yield* expectErrno(d.cmAccept(ep, undefined, config.timeoutMs), "EINVAL", "accepting a rejected request")
        yield* untilDone(ctx)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        yield* ctx.channel.receive()
        const ep = yield* endpoint(ctx.serverAddress, ctx.port)
        yield* expectErrno(d.cmConnect(ep, bytes("hello"), config.timeoutMs), "ECONNREFUSED", "a rejected connect")
        const rejection = yield* d.cmPrivateData(ep)
        yield* equal(rejection.byteLength, 148, "a rejection's private data length")
        yield* equal(leading(rejection, 4), "busy", "the rejection's private data")
        yield* done(ctx)
      })
  },
  {
    name:
      "cm endpoint: a request whose client has gone (its endpoint destroyed) → the accept fails with ECONNABORTED, saying so",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const ep = yield* requestGivenUp(ctx) // and its endpoint destroyed
        const exit = yield* Effect.exit(d.cmAccept(ep, undefined, config.timeoutMs))
        const error = exit._tag === "Failure" && exit.cause._tag === "Fail" ? exit.cause.error : undefined
        yield* equal(error?.errnoName ?? String(exit), "ECONNABORTED", "accepting a gone client's request")
        yield* check(
          /client that asked has gone/.test(error?.message ?? ""),
          `the accept's error says the client has gone: ${String(error?.message)}`
        )
        yield* expectErrno(d.cmReject(ep, undefined), "EINVAL", "rejecting the spent request")
        yield* untilDone(ctx)
      }),
    client: (ctx) => giveUp(ctx, Effect.void, ctx.channel.send({ gone: true }))
  },
  {
    name:
      "cm endpoint: a client that gave up (its connect interrupted) but is alive: the accept waits, and fails with ECONNABORTED once the client is destroyed",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const ep = yield* requestGivenUp(ctx)
        const accepting = yield* Effect.fork(errnoOf(d.cmAccept(ep, undefined, config.timeoutMs)))
        yield* Effect.sleep("200 millis")
        yield* check((yield* Fiber.poll(accepting))._tag === "None", "the accept ended while the client was alive")
        yield* ctx.channel.send({ accepting: true })
        yield* equal(yield* Fiber.join(accepting), "ECONNABORTED", "the accept once the client is destroyed")
        yield* untilDone(ctx)
      }),
    // Destroyed once the server accepts.
    client: (ctx) =>
      giveUp(ctx, Effect.zipRight(ctx.channel.send({ gaveUp: true }), ctx.channel.receive()), Effect.void)
  },
  {
    name: "cm endpoint: nobody listening → EHOSTUNREACH; no route → RdmaCmError within the bound",
    server: () => Effect.void,
    client: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const ep = yield* endpoint(ctx.serverAddress, ctx.port)
        yield* expectErrno(d.cmConnect(ep, undefined, config.timeoutMs), "EHOSTUNREACH", "a connect nobody listens for")
        const nowhere = yield* Effect.exit(
          Effect.scoped(endpoint(NOWHERE, ctx.port, { ...config, timeoutMs: 2000 })).pipe(
            Effect.timeoutFail({
              duration: "20 seconds",
              onTimeout: () => new Error("rdma_create_ep to nowhere did not end")
            })
          )
        )
        yield* check(
          nowhere._tag === "Failure" && nowhere.cause._tag === "Fail" &&
            (nowhere.cause.error as any)._tag === "RdmaCmError",
          `rdma_create_ep to ${NOWHERE}: expected an RdmaCmError, got ${String(nowhere)}`
        )
      })
  },
  {
    name: "cm endpoint: receives posted before accept and before connect; send and recv, with two segments each",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { before: inbox, ep } = yield* serve(ctx, (ep) =>
          Effect.gen(function*() {
            const inbox = yield* region(ep, "msgs", 4096)
            yield* post(ep, [
              { op: "recv", id: 1, segments: [whole(inbox, 0, 64)] },
              // Two segments: 5 bytes, then the rest of the message.
              { op: "recv", id: 2, segments: [whole(inbox, 100, 5), whole(inbox, 200, 64)] }
            ])
            return inbox
          }))
        const [first, second] = yield* completions(ep, 2)
        yield* expectCompletion(
          first,
          { id: 1, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the first receive"
        )
        yield* equal(text(inbox.memory.subarray(0, 4)), "ping", "the first message")
        yield* expectCompletion(
          second,
          { id: 2, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 13 },
          "the second receive"
        )
        yield* equal(
          text(inbox.memory.subarray(100, 105)) + text(inbox.memory.subarray(200, 208)),
          "hello, world!",
          "the second message, scattered"
        )
        // The answer, gathered from two segments, into the receive the client posted before connecting.
        inbox.memory.set(bytes("po"), 1000)
        inbox.memory.set(bytes("ng"), 2000)
        yield* post(ep, [{ op: "send", id: 3, segments: [whole(inbox, 1000, 2), whole(inbox, 2000, 2)] }])
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 3, status: 0, opcode: Model.WcOpcode.SEND },
          "the answer"
        )
        yield* untilDone(ctx)
        yield* d.cmDisconnect(ep)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { before: buffers, ep } = yield* join(ctx, (ep) =>
          Effect.gen(function*() {
            const buffers = yield* region(ep, "msgs", 4096)
            yield* post(ep, [{ op: "recv", id: 10, segments: [whole(buffers, 3000, 64)] }])
            return buffers
          }))
        buffers.memory.set(bytes("ping"), 0)
        buffers.memory.set(bytes("hello, "), 100)
        buffers.memory.set(bytes("world!"), 200)
        yield* post(ep, [
          { op: "send", id: 11, segments: [whole(buffers, 0, 4)] },
          { op: "send", id: 12, segments: [whole(buffers, 100, 7), whole(buffers, 200, 6)] }
        ])
        const got = yield* completions(ep, 3)
        const byId = new Map(got.map((wc) => [wc.id, wc]))
        yield* expectCompletion(byId.get(11), { id: 11, status: 0, opcode: Model.WcOpcode.SEND }, "the first send")
        yield* expectCompletion(
          byId.get(12),
          { id: 12, status: 0, opcode: Model.WcOpcode.SEND },
          "the two-segment send"
        )
        yield* expectCompletion(
          byId.get(10),
          { id: 10, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the answer"
        )
        yield* equal(text(buffers.memory.subarray(3000, 3004)), "pong", "the answer's bytes")
        yield* done(ctx)
      })
  },
  {
    name:
      "cm endpoint: a receive and a send in one post (CmEndpoint.call / reply): the answer lands in the receive posted with the request; " +
      "a send refused after its receive leaves the receive posted (posted 1, EINVAL); a list of sends refused at its second posts the first only",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { before: inbox, ep } = yield* serve(ctx, (ep) =>
          Effect.gen(function*() {
            const inbox = yield* region(ep, "msgs", 4096)
            yield* post(ep, [{ op: "recv", id: 1, segments: [whole(inbox, 0, 64)] }])
            return inbox
          }))
        const [request] = yield* completions(ep, 1)
        yield* expectCompletion(
          request,
          { id: 1, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the request"
        )
        // The reply: the next request's receive and the echo, in one post, the receive first.
        const posted = yield* post(ep, [
          { op: "recv", id: 2, segments: [whole(inbox, 64, 64)] },
          { op: "send", id: 3, segments: [whole(inbox, 0, 4)] }
        ])
        yield* equal(posted, 2, "both halves of the reply posted")
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 3, status: 0, opcode: Model.WcOpcode.SEND },
          "the echo"
        )
        // Told that the client's refused call left a receive posted: a message for it.
        yield* ctx.channel.receive()
        inbox.memory.set(bytes("tail"), 200)
        yield* post(ep, [{ op: "send", id: 4, segments: [whole(inbox, 200, 4)] }])
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 4, status: 0, opcode: Model.WcOpcode.SEND },
          "the message for it"
        )
        // The one message of the client's list refused at its second request, into the reply's receive.
        const [next] = yield* completions(ep, 1)
        yield* expectCompletion(
          next,
          { id: 2, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the list's first send"
        )
        yield* equal(text(inbox.memory.subarray(64, 68)), "next", "its bytes")
        yield* untilDone(ctx)
        yield* d.cmDisconnect(ep)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { before: buffers, ep } = yield* join(ctx, (ep) => region(ep, "msgs", 4096))
        buffers.memory.set(bytes("ping"), 0)
        // The call: the answer's receive, then the request, in one post.
        const posted = yield* post(ep, [
          { op: "recv", id: 10, segments: [whole(buffers, 3000, 64)] },
          { op: "send", id: 11, segments: [whole(buffers, 0, 4)] }
        ])
        yield* equal(posted, 2, "both halves of the call posted")
        const got = yield* completions(ep, 2)
        const byId = new Map(got.map((wc) => [wc.id, wc]))
        yield* expectCompletion(byId.get(11), { id: 11, status: 0, opcode: Model.WcOpcode.SEND }, "the request")
        yield* expectCompletion(
          byId.get(10),
          { id: 10, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the answer"
        )
        yield* equal(text(buffers.memory.subarray(3000, 3004)), "ping", "the answer's bytes")
        // A call whose send the driver refuses (inline above the granted size): its receive was posted.
        const refused = yield* postOutcome(ep, [
          { op: "recv", id: 12, segments: [whole(buffers, 3100, 64)] },
          { op: "send", id: 13, segments: [whole(buffers, 0, 4000)], inline: true }
        ])
        yield* equal(
          `${refused.posted} ${refused.error?.errnoName}`,
          "1 EINVAL",
          "the receive posted, the send refused"
        )
        yield* ctx.channel.send({ refused: true })
        const [late] = yield* completions(ep, 1)
        yield* expectCompletion(
          late,
          { id: 12, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 4 },
          "the receive left posted"
        )
        yield* equal(text(buffers.memory.subarray(3100, 3104)), "tail", "the message it took")
        // A list of sends refused at its second (past its region's end): the first posted, none after
        // (a driver that posts a run of sends in one call keeps this order).
        buffers.memory.set(bytes("next"), 200)
        const partial = yield* postOutcome(ep, [
          { op: "send", id: 14, segments: [whole(buffers, 200, 4)] },
          { op: "send", id: 15, segments: [whole(buffers, 4090, 100)] },
          { op: "send", id: 16, segments: [whole(buffers, 200, 4)] }
        ])
        yield* equal(`${partial.posted} ${partial.error?.errnoName}`, "1 EINVAL", "the list's outcome")
        const [first] = yield* completions(ep, 1)
        yield* expectCompletion(first, { id: 14, status: 0, opcode: Model.WcOpcode.SEND }, "the list's first send")
        yield* done(ctx)
      })
  },
  {
    name:
      "cm endpoint: an inline send takes its bytes when posted; one above the granted inline size is refused (EINVAL)",
    server: (ctx) =>
      Effect.gen(function*() {
        const { before: inbox, ep } = yield* serve(ctx, (ep) =>
          Effect.gen(function*() {
            const inbox = yield* region(ep, "msgs", 4096)
            yield* post(ep, [{ op: "recv", id: 1, segments: [whole(inbox, 0, 128)] }])
            return inbox
          }))
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 1, status: 0, byteLength: 8 },
          "the inline message"
        )
        yield* equal(text(inbox.memory.subarray(0, 8)), "inline!!", "the inline message's bytes")
        yield* untilDone(ctx)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { ep, granted, src } = yield* joinInline(ctx)
        yield* expectErrno(
          post(ep, [{ op: "send", id: 1, inline: true, segments: [whole(src, 0, granted + 1)] }]),
          "EINVAL",
          `an inline send of ${granted + 1} bytes`
        )
        src.memory.set(bytes("inline!!"))
        yield* post(ep, [{ op: "send", id: 2, inline: true, segments: [whole(src, 0, 8)] }])
        src.memory.fill(0, 0, 8) // taken at post time: what arrives is still "inline!!"
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 2, status: 0, opcode: Model.WcOpcode.SEND },
          "the inline send"
        )
        yield* done(ctx)
      })
  },
  {
    name: "cm endpoint: an inline send from plain bytes (a Uint8Array, no region) takes them when posted, alone or " +
      "beside a region; plain bytes are refused (EINVAL) in a receive, in a send not inline, beyond the inline " +
      "size and past their real end",
    server: (ctx) =>
      Effect.gen(function*() {
        const { before: inbox, ep } = yield* serveTwoReceives(ctx)
        const [first, second] = yield* completions(ep, 2)
        yield* expectCompletion(first, { id: 1, status: 0, byteLength: 8 }, "the plain message")
        yield* expectCompletion(second, { id: 2, status: 0, byteLength: 4 }, "plain bytes and a region's")
        yield* equal(text(inbox.memory.subarray(0, 8)), "plain!!!", "the plain message's bytes")
        yield* equal(text(inbox.memory.subarray(64, 68)), "abcd", "the gathered message's bytes")
        yield* untilDone(ctx)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { ep, granted, src } = yield* joinInline(ctx)
        const plain = (b: Uint8Array, length = b.byteLength) => ({ mr: b, offset: 0, length }) as never
        const refused: ReadonlyArray<readonly [string, Driver.Model.CmWorkRequest]> = [
          ["plain bytes to receive into", { op: "recv", id: 9, segments: [plain(new Uint8Array(8))] }],
          ["plain bytes not inline", { op: "send", id: 9, segments: [plain(bytes("12345678"))] }],
          [`${granted + 1} plain bytes inline`, {
            op: "send",
            id: 9,
            inline: true,
            segments: [plain(new Uint8Array(granted + 1))]
          }],
          // A view that says it is 1 GiB and holds 4 bytes: its real length counts.
          ["8 bytes of a 4-byte view that says it is longer", {
            op: "send",
            id: 9,
            inline: true,
            segments: [plain(new Lying(4), 8)]
          }]
        ]
        for (const [what, request] of refused) yield* expectErrno(post(ep, [request]), "EINVAL", what)
        const message = bytes("plain!!!")
        yield* post(ep, [{ op: "send", id: 1, inline: true, segments: [plain(message)] }])
        message.fill(0) // taken at post time: what arrives is still "plain!!!"
        src.memory.set(bytes("cd"))
        yield* post(ep, [{ op: "send", id: 2, inline: true, segments: [plain(bytes("ab")), whole(src, 0, 2)] }])
        const sent = yield* completions(ep, 2)
        yield* expectCompletion(sent[0], { id: 1, status: 0, opcode: Model.WcOpcode.SEND }, "the plain send")
        yield* expectCompletion(sent[1], { id: 2, status: 0, opcode: Model.WcOpcode.SEND }, "the gathered send")
        yield* done(ctx)
      })
  },
  {
    name: "cm endpoint: rdma_conn_param's settings: out of range refused (EINVAL); depths of 1 each way read; a " +
      "server with rnrRetryCount 0 and no receive posted: the client's send fails with RNR_RETRY_EXC_ERR",
    server: (ctx) =>
      Effect.gen(function*() {
        // As rping asks: one read in flight each way. No receive is ever posted, and the client's
        // sends are not to retry on RNR (rnr_retry_count is what the other side's sends retry).
        yield* serve(ctx, (ep) =>
          Effect.gen(function*() {
            const readable = yield* region(ep, "read", 64)
            readable.memory.set(bytes("depth one"))
            yield* ctx.channel.send({ readable: keyOf(readable.info) })
          }), { ...config, responderResources: 1, initiatorDepth: 1, rnrRetryCount: 0 })
        yield* untilDone(ctx)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const bad: ReadonlyArray<Partial<Driver.Model.CmEpConfig>> = [
          { retryCount: 8 },
          { rnrRetryCount: -1 },
          { responderResources: 256 },
          { initiatorDepth: 1.5 }
        ]
        for (const setting of bad) {
          yield* expectErrno(
            endpoint(ctx.serverAddress, ctx.port, { ...config, ...setting }),
            "EINVAL",
            `an endpoint with ${JSON.stringify(setting)}`
          )
        }
        const settings = { ...config, retryCount: 3, responderResources: 1, initiatorDepth: 1 }
        const { ep } = yield* join(ctx, () => Effect.void, settings)
        const readable = keyFrom((yield* ctx.channel.receive()).readable)
        const into = yield* region(ep, "msgs", 64)
        const { address, rkey } = readable
        yield* post(ep, [{ op: "read", id: 1, segments: [whole(into, 0, 9)], remoteAddress: address, rkey }])
        yield* expectCompletion((yield* completions(ep, 1))[0], { id: 1, status: 0 }, "a read at depth 1")
        yield* equal(text(into.memory.subarray(0, 9)), "depth one", "the bytes read")
        yield* post(ep, [{ op: "send", id: 2, segments: [whole(into, 0, 8)] }])
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 2, status: RdmaError.WcStatus.RNR_RETRY_EXC_ERR },
          "a send with no receive there, and the server asking no RNR retries"
        )
        yield* done(ctx)
      })
  },
  {
    name: "cm endpoint: immediate data on a send and on an RDMA write (RECV_RDMA_WITH_IMM with the written length)",
    server: (ctx) =>
      Effect.gen(function*() {
        const { before: inbox, ep } = yield* serveTwoReceives(ctx)
        const target = yield* region(ep, "write", 4096)
        yield* ctx.channel.send({ target: keyOf(target.info) })
        const [sent, written] = yield* completions(ep, 2)
        yield* expectCompletion(
          sent,
          { id: 1, status: 0, opcode: Model.WcOpcode.RECV, byteLength: 3 },
          "the send with imm"
        )
        yield* equal(sent!.flags & Model.WcFlags.WITH_IMM, Model.WcFlags.WITH_IMM, "the send's IBV_WC_WITH_IMM")
        yield* equal(sent!.imm, 0xdeadbeef, "the send's immediate data")
        yield* equal(text(inbox.memory.subarray(0, 3)), "imm", "the send's bytes")
        yield* expectCompletion(
          written,
          { id: 2, status: 0, opcode: Model.WcOpcode.RECV_RDMA_WITH_IMM, byteLength: 7 },
          "the write with imm"
        )
        yield* equal(written!.imm, 42, "the write's immediate data")
        yield* equal(text(target.memory.subarray(500, 507)), "written", "the write's bytes")
        yield* ctx.channel.send({ checked: true })
        yield* untilDone(ctx)
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { ep } = yield* join(ctx, () => Effect.void)
        const target = keyFrom((yield* ctx.channel.receive()).target)
        const src = yield* region(ep, "msgs", 4096)
        src.memory.set(bytes("imm"), 0)
        src.memory.set(bytes("written"), 100)
        yield* post(ep, [
          { op: "send", id: 1, imm: 0xdeadbeef, segments: [whole(src, 0, 3)] },
          {
            op: "write",
            id: 2,
            imm: 42,
            segments: [whole(src, 100, 7)],
            remoteAddress: target.address + 500n,
            rkey: target.rkey
          }
        ])
        const got = yield* completions(ep, 2)
        yield* equal(
          got.map((wc) => `${wc.id}:${wc.status}:${wc.opcode}`).join(" "),
          `1:0:${Model.WcOpcode.SEND} 2:0:${Model.WcOpcode.RDMA_WRITE}`,
          "the client's completions"
        )
        yield* ctx.channel.receive()
        yield* done(ctx)
      })
  },
  {
    name:
      "cm endpoint: RDMA write and read (two segments each) move the bytes; an unsignalled request has no completion on success",
    server: exposeRegions,
    client: (ctx) =>
      Effect.gen(function*() {
        const { ep, readable, writable } = yield* useRegions(ctx)
        const local = yield* region(ep, "msgs", 8192)
        const data = pattern(300, 11)
        local.memory.set(data.subarray(0, 100), 0)
        local.memory.set(data.subarray(100), 1000)
        yield* post(ep, [{
          op: "write",
          id: 1,
          segments: [whole(local, 0, 100), whole(local, 1000, 200)],
          remoteAddress: writable.address + 16n,
          rkey: writable.rkey
        }])
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 1, status: 0, opcode: Model.WcOpcode.RDMA_WRITE },
          "the write"
        )
        yield* check(same(yield* peekWritten(ctx, 16, 300), data), "the written bytes on the server")
        yield* post(ep, [{
          op: "read",
          id: 2,
          segments: [whole(local, 4096, 1000), whole(local, 6000, 96)],
          remoteAddress: readable.address + 3000n,
          rkey: readable.rkey
        }])
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 2, status: 0, opcode: Model.WcOpcode.RDMA_READ },
          "the read"
        )
        const expected = pattern(4096, 3).subarray(3000, 4096)
        yield* check(
          same(local.memory.subarray(4096, 5096), expected.subarray(0, 1000)) &&
            same(local.memory.subarray(6000, 6096), expected.subarray(1000)),
          "the bytes read, scattered over two segments"
        )
        // Unsignalled, then signalled: one completion, the second's.
        local.memory.set(bytes("quiet"), 7000)
        local.memory.set(bytes("loud"), 7100)
        yield* post(ep, [
          {
            op: "write",
            id: 3,
            completion: "onError",
            segments: [whole(local, 7000, 5)],
            remoteAddress: writable.address,
            rkey: writable.rkey
          },
          {
            op: "write",
            id: 4,
            segments: [whole(local, 7100, 4)],
            remoteAddress: writable.address + 5n,
            rkey: writable.rkey
          }
        ])
        const [only] = yield* completions(ep, 1)
        yield* expectCompletion(
          only,
          { id: 4, status: 0 },
          "the only completion of an unsignalled and a signalled write"
        )
        yield* equal(text(yield* peekWritten(ctx, 0, 9)), "quietloud", "both writes' bytes")
        yield* done(ctx)
      })
  },
  refusedAccess(
    "cm endpoint: a write with a forged rkey completes with REM_ACCESS_ERR (10); the queue pair is in error, the next request WR_FLUSH_ERR (5)",
    ({ local, writable }) => writeOf(local, writable.address, (writable.rkey ^ 0x5a5a00) >>> 0, 8)
  ),
  refusedAccess(
    "cm endpoint: a read of a region made by rdma_reg_write (not readable) → REM_ACCESS_ERR (10), then WR_FLUSH_ERR (5)",
    ({ local, writable }) => ({
      op: "read",
      id: 1,
      segments: [whole(local, 0, 8)],
      remoteAddress: writable.address,
      rkey: writable.rkey
    })
  ),
  refusedAccess(
    "cm endpoint: a write to a region made by rdma_reg_msgs (local access only) → REM_ACCESS_ERR (10), then WR_FLUSH_ERR (5)",
    ({ local, messages }) => writeOf(local, messages.address, messages.rkey, 8)
  ),
  refusedAccess(
    "cm endpoint: a write past the remote region's end → REM_ACCESS_ERR (10), then WR_FLUSH_ERR (5)",
    ({ local, writable }) => writeOf(local, writable.address + BigInt(writable.length - 8), writable.rkey, 16)
  ),
  {
    name: "cm endpoint: a disconnect flushes the posted receives (WR_FLUSH_ERR) and both sides get DISCONNECTED",
    server: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { ep } = yield* serve(ctx, (ep) =>
          Effect.gen(function*() {
            const inbox = yield* region(ep, "msgs", 4096)
            yield* post(ep, [{ op: "recv", id: 1, segments: [whole(inbox)] }])
          }))
        yield* equal(yield* nextEvent(ep), "DISCONNECTED", "the server's event when the client disconnects")
        yield* d.cmDisconnect(ep)
        yield* expectCompletion(
          (yield* completions(ep, 1))[0],
          { id: 1, status: RdmaError.WcStatus.WR_FLUSH_ERR },
          "the server's receive"
        )
        yield* ctx.channel.send({ checked: true })
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { ep } = yield* join(ctx, () => Effect.void)
        const inbox = yield* region(ep, "msgs", 4096)
        yield* post(ep, [{ op: "recv", id: 7, segments: [whole(inbox)] }, {
          op: "recv",
          id: 8,
          segments: [whole(inbox)]
        }])
        yield* d.cmDisconnect(ep)
        const flushed = yield* completions(ep, 2)
        yield* equal(
          flushed.map((wc) => `${wc.id}:${wc.status}`).join(" "),
          "7:5 8:5",
          "the client's receives after its disconnect"
        )
        yield* equal(yield* nextEvent(ep), "DISCONNECTED", "the client's own event")
        // Nothing posted after the disconnect: Soft-RoCE (6.1) never flushes a receive on a queue pair in error, so no driver is asked to.
        yield* ctx.channel.receive()
      })
  }
]
