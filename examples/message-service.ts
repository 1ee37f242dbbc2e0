/**
 * A request/response message service on librdmacm's verbs API: rdma_reg_msgs(3)'s model, scoped.
 *
 * The server listens (rdma_listen) and serves it (CmListener.serve): each connection request
 * (rdma_get_request) goes to a handler in a scope of its own, which registers its message buffers
 * on the request's own protection domain (rdma_reg_msgs), posts its first
 * receive before it accepts (so the client's first request always has a buffer), and accepts with
 * the remote key of a counters region registered with rdma_reg_read in the private data. It then
 * answers every request message with CmEndpoint.reply (the next request's rdma_post_recv and the
 * answer's rdma_post_send in one post): the reply carries the request's sequence number and its
 * text upper-cased, and small replies go inline.
 *
 * The client creates its endpoint (rdma_create_ep) and connects, makes each request with
 * CmEndpoint.call (the reply's receive and the request's send in one post, one wait for both) and
 * checks each reply, then reads the server's counters with rdma_post_read using the
 * key from the acceptance, and checks that the server counted every request. Both sides release
 * everything with their scopes (disconnect, regions, then the endpoints); on the simulated driver
 * the leak ledger proves it.
 *
 *   node --import tsx examples/message-service.ts                                   # simulated fabric
 *   node --import tsx examples/message-service.ts --requests 5000
 *   node --import tsx examples/message-service.ts --native --address 192.168.77.1   # a real device
 */
import { CmEndpoint, CmListener, RemoteKey } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Console, Effect, Fiber, Layer } from "effect"
import { parseArgs } from "node:util"

const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === "--")),
  options: {
    native: { type: "boolean", default: false },
    address: { type: "string", default: SimulatedDriver.DEFAULT_ADDRESS },
    requests: { type: "string", default: "1000" }
  }
})
const requests = Number(args.requests)
const address = args.address

/** A message: a u32 sequence number, a u32 text length, then the text (UTF-8). */
const MESSAGE_SIZE = 256
const HEADER = 8
const encoder = new TextEncoder()
const decoder = new TextDecoder()

const writeMessage = (into: Uint8Array, seq: number, text: string): number => {
  const { written } = encoder.encodeInto(text, into.subarray(HEADER))
  const view = new DataView(into.buffer, into.byteOffset, HEADER)
  view.setUint32(0, seq, true)
  view.setUint32(4, written, true)
  return HEADER + written
}

const readMessage = (from: Uint8Array, received: number) => {
  const view = new DataView(from.buffer, from.byteOffset, HEADER)
  const length = view.getUint32(4, true)
  if (received < HEADER || HEADER + length > received) return undefined
  return { seq: view.getUint32(0, true), text: decoder.decode(from.subarray(HEADER, HEADER + length)) }
}

/** One connection, server side (in its request's scope): answer every request until the client disconnects. */
const answer = (request: CmEndpoint.CmEndpoint) =>
  Effect.gen(function*() {
    const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(MESSAGE_SIZE))
    const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(MESSAGE_SIZE))
    const counters = yield* CmEndpoint.registerRead(request, new Uint8Array(8))
    const answered = new DataView(counters.memory.buffer, counters.memory.byteOffset, 8)
    // The first receive goes in before the accept: the client may send as soon as it is connected.
    let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
    yield* CmListener.accept(request, { privateData: RemoteKey.encode(RemoteKey.make(counters)) })
    for (;;) {
      const received = yield* next.completion
      const message = readMessage(inbox.memory, received.byteLength)
      if (message === undefined) return yield* Effect.dieMessage("a malformed request")
      answered.setBigUint64(0, answered.getBigUint64(0, true) + 1n, true)
      const length = writeMessage(outbox.memory, message.seq, message.text.toUpperCase())
      // The next request's receive and this answer in one post (the inbox has been read: the
      // client sends its next request only once it has this answer).
      next = yield* CmEndpoint.reply(request, { recv: { dst: inbox }, send: { src: outbox, length } })
    }
  }).pipe(
    // The client's disconnect ends the connection: the pending receive fails with it.
    Effect.catchTag("ConnectionClosedError", () => Effect.void)
  )

const client = (port: number) =>
  Effect.gen(function*() {
    const ep = yield* CmEndpoint.make(address, port, { timeout: "10 seconds" })
    const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(MESSAGE_SIZE))
    const outbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(MESSAGE_SIZE))
    const counters = yield* CmEndpoint.registerMessages(ep, new Uint8Array(8))
    yield* CmEndpoint.establish(ep)
    // The acceptance's private data is padded to 196 bytes: the key is its first 24.
    const key = yield* RemoteKey.decode(ep.privateData.subarray(0, 24)).pipe(
      Effect.flatMap(RemoteKey.require("read"))
    )
    const started = performance.now()
    for (let seq = 0; seq < requests; seq++) {
      const text = `request ${seq}: hello over rdma_post_send`
      const length = writeMessage(outbox.memory, seq, text)
      // The reply's receive and the request in one post, then one wait for both.
      const received = yield* CmEndpoint.call(ep, { send: { src: outbox, length }, recv: { dst: inbox } })
      const answer = readMessage(inbox.memory, received.byteLength)
      if (answer?.seq !== seq || answer.text !== text.toUpperCase()) {
        return yield* Effect.dieMessage(`reply ${seq} is wrong: ${JSON.stringify(answer)}`)
      }
    }
    const elapsed = performance.now() - started
    yield* CmEndpoint.read(ep, { dst: counters, src: key, length: 8 })
    const counted = new DataView(counters.memory.buffer, counters.memory.byteOffset, 8).getBigUint64(0, true)
    if (counted !== BigInt(requests)) {
      return yield* Effect.dieMessage(`the server counted ${counted} requests, not ${requests}`)
    }
    yield* Console.log(
      `${requests} requests answered and checked in ${elapsed.toFixed(0)} ms ` +
        `(${((elapsed * 1000) / Math.max(requests, 1)).toFixed(1)} µs each); the server's counter, read with ` +
        `rdma_post_read: ${counted}`
    )
  }).pipe(Effect.scoped)

const main = Effect.gen(function*() {
  const listener = yield* CmListener.make(address, 0)
  yield* Console.log(`listening on ${address}:${listener.port}`)
  const server = yield* Effect.fork(CmListener.serve(listener, answer, { concurrency: 16 }))
  yield* client(listener.port)
  // Stopping the server releases every request it still holds (none here: the client has gone).
  yield* Fiber.interrupt(server)
})

/** The native driver is imported only when asked for, so the example runs where it was never built. */
const nativeLayer: Layer.Layer<Driver.RdmaDriver, unknown> = Layer.unwrapEffect(
  Effect.promise(() => import("@effect-rdma/native" as string)).pipe(
    Effect.map((native: { NativeDriver: { layer: Layer.Layer<Driver.RdmaDriver, unknown> } }) =>
      native.NativeDriver.layer
    )
  )
)

const program: Effect.Effect<void, unknown> = args.native
  ? Effect.scoped(main).pipe(Effect.provide(nativeLayer))
  : Effect.scoped(main).pipe(
    Effect.zipRight(Effect.flatMap(Ledger.live, (live) => Console.log(`live resources at exit: ${live.length}`))),
    Effect.zipRight(Ledger.assertEmpty),
    Effect.provide(SimulatedDriver.layerWith({ devices: [address] }))
  )

Effect.runPromise(program).catch((error) => {
  console.error(String(error?.message ?? error))
  process.exitCode = 1
})
