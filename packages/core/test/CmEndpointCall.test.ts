/**
 * CmEndpoint.call and .reply on the simulated driver: a request/response round trip with one post
 * a side (the receive and the send together), its checks, its failures and its interruption, every
 * resource accounted for by the leak ledger after each case.
 */
import { CmEndpoint, CmListener, Tracing } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Tracer } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const text = (bytes: Uint8Array, length: number, offset = 0) =>
  new TextDecoder().decode(bytes.subarray(offset, offset + length))
const bytesOf = (s: string) => new TextEncoder().encode(s)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** A bound on a hang, never the thing measured. */
const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(effect, { duration: "30 seconds", onTimeout: () => new Error("no outcome within 30 s") })

/**
 * A connected pair with no receive posted on the client, and one on the server (at offset 0 of its
 * inbox, posted before the accept): the server's first request goes there.
 */
const exchangePair = (options?: CmEndpoint.Options) =>
  Effect.gen(function*() {
    const listener = yield* CmListener.make(address, 0, options)
    const client = yield* CmEndpoint.make(address, listener.port, options)
    const clientInbox = yield* CmEndpoint.registerMessages(client, new Uint8Array(128))
    const clientOutbox = yield* CmEndpoint.registerMessages(client, new Uint8Array(128))
    const connecting = yield* Effect.fork(CmEndpoint.establish(client))
    const server = yield* CmListener.next(listener)
    const serverInbox = yield* CmEndpoint.registerMessages(server, new Uint8Array(128))
    const serverOutbox = yield* CmEndpoint.registerMessages(server, new Uint8Array(128))
    const serverFirst = yield* CmEndpoint.postRecv(server, { segments: [{ mr: serverInbox, offset: 0, length: 64 }] })
    yield* CmListener.accept(server)
    yield* Fiber.join(connecting)
    return { client, clientInbox, clientOutbox, server, serverInbox, serverOutbox, serverFirst }
  })

describe("CmEndpoint.call / reply", () => {
  it.effect("a request and its answer, one post a side: bytes, immediate data, vectored forms; the last reply's receive stays posted", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* exchangePair()
      const words = ["ping", "hello", "vectored"]
      // The server answers each request in upper case from two receive slots in turn.
      const server = yield* Effect.fork(Effect.gen(function*() {
        let posted = p.serverFirst
        for (let round = 0; round < words.length; round++) {
          const request = yield* posted.completion
          const slot = round % 2
          const answer = text(p.serverInbox.memory, request.byteLength, slot * 64).toUpperCase()
          p.serverOutbox.memory.set(bytesOf(answer))
          const recv = { dst: p.serverInbox, offset: (1 - slot) * 64, length: 64 }
          posted = yield* CmEndpoint.reply(p.server, {
            recv,
            send: round < 2
              ? { src: p.serverOutbox, length: answer.length, imm: round }
              : {
                segments: [{ mr: p.serverOutbox, offset: 0, length: 3 }, {
                  mr: p.serverOutbox,
                  offset: 3,
                  length: answer.length - 3
                }],
                imm: 0xfeedface
              }
          })
          assert.strictEqual(posted.operation, "rdma_post_recv")
        }
        return posted
      }))
      for (const [round, word] of words.entries()) {
        p.clientOutbox.memory.set(bytesOf(word))
        const answer = yield* CmEndpoint.call(
          p.client,
          round < 2
            ? { send: { src: p.clientOutbox, length: word.length }, recv: { dst: p.clientInbox } }
            : {
              send: {
                segments: [{ mr: p.clientOutbox, offset: 0, length: 2 }, {
                  mr: p.clientOutbox,
                  offset: 2,
                  length: word.length - 2
                }]
              },
              recv: {
                segments: [{ mr: p.clientInbox, offset: 0, length: 4 }, { mr: p.clientInbox, offset: 4, length: 60 }]
              }
            }
        )
        assert.strictEqual(answer.byteLength, word.length)
        assert.strictEqual(answer.imm, round < 2 ? round : 0xfeedface)
        assert.strictEqual(text(p.clientInbox.memory, word.length), word.toUpperCase())
      }
      const next = yield* Fiber.join(server)
      // The third reply posted a receive into slot 1: the next message lands there.
      p.clientOutbox.memory.set(bytesOf("tail"))
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 4 })
      assert.strictEqual((yield* bounded(next.completion)).byteLength, 4)
      assert.strictEqual(text(p.serverInbox.memory, 4, 64), "tail")
    })))

  it.effect("a request failing its checks posts neither half: tagged errors, and no receive left posted", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* exchangePair({ maxInlineData: 16 })
      const readable = yield* CmEndpoint.registerRead(p.client, new Uint8Array(16))
      const send = { src: p.clientOutbox, length: 4 }
      const recv = { dst: p.clientInbox }
      const kind = yield* Effect.flip(
        CmEndpoint.call(p.client, { send, recv: { dst: readable as unknown as CmEndpoint.MessageRegion } })
      )
      assert.strictEqual(kind._tag, "CmRegionError")
      assert.strictEqual((kind as CmEndpoint.CmRegionError).reason, "Kind")
      const other = yield* Effect.flip(CmEndpoint.call(p.client, { send: { src: p.serverOutbox, length: 4 }, recv }))
      assert.strictEqual(other._tag, "CmRegionError")
      assert.strictEqual((other as CmEndpoint.CmRegionError).reason, "OtherEndpoint")
      const tooLong = yield* Effect.flip(
        CmEndpoint.call(p.client, { send: { src: p.clientOutbox, length: 100, inline: true }, recv })
      )
      assert.strictEqual(tooLong._tag, "OutOfRangeError")
      const outside = yield* Effect.flip(
        CmEndpoint.reply(p.server, {
          send: { src: p.serverOutbox, length: 4 },
          recv: { dst: p.serverInbox, offset: 120, length: 64 }
        })
      )
      assert.strictEqual(outside._tag, "OutOfRangeError")
      const missing = yield* Effect.flip(
        CmEndpoint.reply(p.server, { send: { src: p.serverOutbox, length: 4 } } as unknown as CmEndpoint.ExchangeArgs)
      )
      assert.strictEqual(missing._tag, "RdmaCmError")
      assert.match(missing.message, /name a send and a recv/)
      // Nothing was posted: the server's first receive takes the next real message, and a receive
      // the client posts now takes the answer (a receive left by a refused call would take it).
      p.clientOutbox.memory.set(bytesOf("real"))
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 4 })
      assert.strictEqual(text(p.serverInbox.memory, (yield* bounded(p.serverFirst.completion)).byteLength), "real")
      const waiting = yield* CmEndpoint.postRecv(p.client, { segments: [{ mr: p.clientInbox }] })
      p.serverOutbox.memory.set(bytesOf("answer"))
      yield* CmEndpoint.send(p.server, { src: p.serverOutbox, length: 6 })
      assert.strictEqual(text(p.clientInbox.memory, (yield* bounded(waiting.completion)).byteLength), "answer")
    })))

  it.effect("a call whose answer never comes: interrupted, it leaves at once; the other side closing fails the next with its send's error", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const close = yield* Deferred.make<void>()
      const requests = yield* Deferred.make<void>()
      // A server that takes one request, never answers, and closes when told.
      const serverSide = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const request = yield* CmListener.next(listener)
        const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
        const first = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
        yield* CmListener.accept(request)
        yield* first.completion
        yield* Deferred.succeed(requests, undefined)
        yield* Deferred.await(close)
      })))
      const client = yield* CmEndpoint.connect(address, listener.port)
      const mr = yield* CmEndpoint.registerMessages(client, new Uint8Array(64))
      const exchange = { send: { src: mr, length: 4 }, recv: { dst: mr, offset: 32, length: 32 } }
      const unanswered = yield* Effect.fork(CmEndpoint.call(client, exchange))
      yield* bounded(Deferred.await(requests))
      const interrupted = yield* Fiber.interrupt(unanswered)
      assert.isTrue(Exit.isInterrupted(interrupted))
      // Its send waits for a receive the server never posts; the server's end fails it.
      const next = yield* Effect.fork(CmEndpoint.call(client, exchange))
      yield* Deferred.succeed(close, undefined)
      yield* Fiber.join(serverSide)
      // The first failure to arrive is the send's (the other side's queue pair is gone: transport
      // retries exhausted, IBV_WC_RETRY_EXC_ERR); the receive's flush after it is not what is reported.
      const ended = yield* Effect.flip(bounded(Fiber.join(next)))
      assert.strictEqual((ended as { _tag?: string })._tag, "CompletionError", JSON.stringify(ended))
      assert.strictEqual((ended as { operation: string }).operation, "rdma_post_send")
      assert.strictEqual((ended as { status: number }).status, 12)
    })))

  it.effect("a full receive queue: the call waits for an entry, interruptibly, and gives back what it took", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* exchangePair({ maxRecvWr: 1 })
      // The client's one receive entry held by a posted receive.
      const held = yield* CmEndpoint.postRecv(p.client, { segments: [{ mr: p.clientInbox, offset: 64, length: 64 }] })
      const exchange = { send: { src: p.clientOutbox, length: 4 }, recv: { dst: p.clientInbox, offset: 0, length: 64 } }
      const waiting = yield* Effect.fork(CmEndpoint.call(p.client, exchange))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      assert.isNull(waiting.unsafePoll(), "the call waits for a receive entry")
      yield* Fiber.interrupt(waiting)
      // Nothing was posted: the server's first receive is still free for the next request.
      p.serverOutbox.memory.set(bytesOf("free"))
      yield* CmEndpoint.send(p.server, { src: p.serverOutbox, length: 4 })
      assert.strictEqual((yield* bounded(held.completion)).byteLength, 4)
      // The entries came back: a call now goes through, answered by the server's reply.
      const answering = yield* Effect.fork(Effect.gen(function*() {
        yield* p.serverFirst.completion
        p.serverOutbox.memory.set(bytesOf("done"))
        return yield* CmEndpoint.reply(p.server, {
          send: { src: p.serverOutbox, length: 4 },
          recv: { dst: p.serverInbox, offset: 64, length: 64 }
        })
      }))
      p.clientOutbox.memory.set(bytesOf("last"))
      const answer = yield* bounded(CmEndpoint.call(p.client, exchange))
      assert.strictEqual(text(p.clientInbox.memory, answer.byteLength), "done")
      assert.strictEqual(text(p.serverInbox.memory, 4), "last")
      yield* Fiber.join(answering)
    })))

  it.effect("traced per operation: one rdma_post span for both halves, op exchange", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.Span> = []
      const base = yield* Effect.tracer
      const recording = Tracer.make({
        span: (...args) => {
          const span = base.span(...args)
          spans.push(span)
          return span
        },
        context: base.context
      })
      yield* inWorld(Effect.gen(function*() {
        const p = yield* exchangePair()
        const echo = yield* Effect.fork(Effect.gen(function*() {
          const request = yield* p.serverFirst.completion
          return yield* CmEndpoint.reply(p.server, {
            send: { src: p.serverInbox, length: request.byteLength },
            recv: { dst: p.serverInbox, offset: 64, length: 64 }
          })
        }))
        p.clientOutbox.memory.set(bytesOf("traced"))
        yield* Tracing.withPerOperation(
          CmEndpoint.call(p.client, { send: { src: p.clientOutbox, length: 6 }, recv: { dst: p.clientInbox } })
        )
        yield* Fiber.join(echo)
      })).pipe(Effect.withTracer(recording))
      const posts = spans.filter((s) => s.name === "rdma_post")
      assert.strictEqual(posts.length, 1)
      assert.strictEqual(posts[0]!.attributes.get("rdma.op"), "exchange")
      assert.strictEqual(posts[0]!.attributes.get("rdma.size"), 6)
    }))
})
