/**
 * The `"cm"` transport's flow control on the simulated fabric: both endpoints ask for no RNR
 * retries (`rnrRetryCount: 0`), so a frame sent with no receive posted at the other side fails its
 * send with IBV_WC_RNR_RETRY_EXC_ERR and ends the connection, as on the device. Large messages,
 * one at a time and 16 in flight each way, must then all arrive whole: the sender spends a credit
 * per frame and waits for the reader to return them, never sending into a receive not posted.
 * Against a raw peer: the credits each frame spends and returns, the last one kept, and the wait's
 * bound (`ackTimeout`, by the TestClock), given as the public option to a client and to a server.
 */
import { CmEndpoint, CmListener } from "@effect-rdma/core"
import { RdmaChannel, RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Fiber, Layer, Logger, Option, Schedule, Schema, TestClock } from "effect"
import * as cmChannel from "../src/internal/cmChannel.js"

const Group = RpcGroup.make(
  Rpc.make("Echo", { payload: { data: Schema.Uint8ArrayFromSelf }, success: Schema.Uint8ArrayFromSelf })
)
const Handlers = Group.toLayer({ Echo: ({ data }) => Effect.succeed(data) })
const address = SimulatedDriver.DEFAULT_ADDRESS

/** A 64 KiB message whose bytes say which call it is. */
const message = (call: number) => Uint8Array.from({ length: 64 * 1024 }, (_, i) => (call * 31 + i * 7) & 0xff)

describe("@effect/rpc over RDMA (cm): credit-based flow control", () => {
  for (
    const [name, port, channel] of [
      ["default receives", 7595, {}],
      ["4 receives, 8 sends, 1 KiB buffers", 7596, { receives: 4, sends: 8, inlineSize: 1024 }]
    ] as const
  ) {
    it.effect(
      `${name}, no RNR retries: 64 KiB calls one at a time and 16 in flight all come back whole`,
      () =>
        Effect.gen(function*() {
          const endpoint = { rnrRetryCount: 0 }
          yield* Layer.build(
            RpcServer.layer(Group).pipe(
              Layer.provide(Handlers),
              Layer.provide(RdmaRpc.layerProtocolServer({ transport: "cm", address, port, endpoint, ...channel })),
              Layer.provide(RpcSerialization.layerMsgPack)
            )
          )
          const protocol = yield* Layer.build(
            RdmaRpc.layerProtocolClient({
              transport: "cm",
              address,
              port,
              endpoint,
              retrySchedule: Schedule.stop,
              ...channel
            }).pipe(Layer.provide(RpcSerialization.layerMsgPack))
          )
          const client = yield* Effect.provide(RpcClient.make(Group), protocol)
          for (let call = 0; call < 8; call++) {
            const data = message(call)
            assert.deepStrictEqual(yield* client.Echo({ data }), data, `call ${call}, one at a time`)
          }
          for (let round = 0; round < 3; round++) {
            const calls = Array.from({ length: 16 }, (_, i) => 100 + round * 16 + i)
            const replies = yield* Effect.forEach(calls, (call) => client.Echo({ data: message(call) }), {
              concurrency: 16
            })
            replies.forEach((reply, i) =>
              assert.deepStrictEqual(reply, message(calls[i]!), `call ${calls[i]}, 16 in flight`)
            )
          }
        }).pipe(Effect.scoped, Ledger.checked, Effect.timeout("60 seconds"), Effect.provide(SimulatedDriver.layer)),
      120_000
    )
  }
})

describe("cm channel credits, against a raw peer", () => {
  /** The peer's frames: an 8-byte header (kind, flags, credits returned u16 LE, length u32 LE). */
  const header = (kind: number, returned: number, length: number) => [
    kind,
    0,
    returned & 0xff,
    returned >> 8,
    length & 0xff,
    (length >> 8) & 0xff,
    (length >> 16) & 0xff,
    length >>> 24
  ]
  const HELLO = 1
  const INLINE = 2
  const KEEPALIVE = 5

  it.effect(
    "a sender spends one credit per frame, keeps the last for a frame that returns some, waits for returned credits, and fails after ackTimeout without them",
    () =>
      Effect.gen(function*() {
        const port = 7597
        // No RNR retries: a frame sent into no posted receive fails the send, which fails the test.
        const listener = yield* CmListener.make(address, port, { rnrRetryCount: 0 })
        const peer = yield* Effect.gen(function*() {
          const request = yield* CmListener.next(listener)
          const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(3 * 4096))
          const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4096))
          const post = (slot: number) =>
            CmEndpoint.postRecv(request, { segments: [{ mr: inbox, offset: slot * 4096, length: 4096 }] })
          const posted = [yield* post(0), yield* post(1), yield* post(2)]
          yield* CmListener.accept(request)
          /** The frame in receive `slot`: its kind, the credits it returns and its payload. */
          const frame = (slot: number) =>
            Effect.map(posted[slot]!.completion, ({ byteLength }) => {
              const bytes = inbox.memory.slice(slot * 4096, slot * 4096 + byteLength)
              return { kind: bytes[0], returned: bytes[2]! | (bytes[3]! << 8), payload: bytes.subarray(8) }
            })
          const send = (bytes: ReadonlyArray<number>) =>
            Effect.suspend(() => {
              outbox.memory.set(bytes)
              return CmEndpoint.send(request, { src: outbox, length: bytes.length })
            })
          return { frame, post, posted, send }
        }).pipe(Effect.fork)
        const settings = yield* cmChannel.settings({ keepAlive: Duration.infinity, ackTimeout: "30 seconds" })
        const ep = yield* CmEndpoint.make(address, port)
        const half = yield* cmChannel.prepare(ep, () => Effect.void, settings)
        yield* CmEndpoint.establish(ep)
        const raw = yield* Fiber.join(peer)
        // The peer has 3 receives of 4096 bytes, and returns no credit with its HELLO.
        yield* raw.send([...header(HELLO, 0, 8), 0, 16, 0, 0, 3, 0, 0, 0])
        const channel = yield* half.open
        const hello = yield* raw.frame(0)
        assert.strictEqual(hello.kind, HELLO)
        assert.deepStrictEqual([...hello.payload], [0, 128, 0, 0, 16, 0, 0, 0], "32768-byte buffers, 16 receives")

        // 3 receives, less the HELLO: 2 credits. The first message spends one, returning the
        // credit for the peer's HELLO.
        yield* channel.send(new Uint8Array([1]))
        const first = yield* raw.frame(1)
        assert.deepStrictEqual([first.kind, first.returned, [...first.payload]], [INLINE, 1, [1]])
        // One credit left and nothing to return: the next message waits for the peer's credits.
        const second = yield* Effect.fork(channel.send(new Uint8Array([2])))
        yield* TestClock.adjust("29 seconds")
        assert.isTrue(Option.isNone(yield* Fiber.poll(second)), "a send with only the last credit waits")
        // The peer posts its two receives again and returns both credits in a frame of its own.
        raw.posted[0] = yield* raw.post(0)
        raw.posted[1] = yield* raw.post(1)
        yield* raw.send(header(KEEPALIVE, 2, 0))
        yield* Fiber.join(second)
        const secondFrame = yield* raw.frame(2)
        assert.deepStrictEqual([secondFrame.kind, secondFrame.returned, [...secondFrame.payload]], [INLINE, 1, [2]])
        // 3 credits less the second message: 2. One more, then the last waits, and fails after ackTimeout.
        yield* channel.send(new Uint8Array([3]))
        const third = yield* raw.frame(0)
        assert.deepStrictEqual([third.kind, third.returned, [...third.payload]], [INLINE, 0, [3]])
        const fourth = yield* Effect.fork(channel.send(new Uint8Array([4])))
        yield* TestClock.adjust("30 seconds")
        const failed = yield* Effect.flip(Fiber.join(fourth))
        assert.strictEqual(failed.reason, "Timeout")
        assert.match(failed.detail, /returned no credit within/)
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)),
    30_000
  )
})

describe("RdmaRpc cm transport: ackTimeout", () => {
  const header = (kind: number, length: number) => [kind, 0, 0, 0, length & 0xff, (length >> 8) & 0xff, 0, 0]
  const HELLO = 1
  /**
   * Posts 3 receives of 4096 bytes on `ep` and never again, returning no credit: the other side
   * gets 2 credits (less its HELLO). What it returns sends the HELLO that says so.
   */
  const stingy = (ep: CmEndpoint.CmEndpoint) =>
    Effect.gen(function*() {
      const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(3 * 4096))
      const outbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
      for (let slot = 0; slot < 3; slot++) {
        yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox, offset: slot * 4096, length: 4096 }] })
      }
      return Effect.suspend(() => {
        outbox.memory.set([...header(HELLO, 8), 0, 16, 0, 0, 3, 0, 0, 0])
        return CmEndpoint.send(ep, { src: outbox, length: 16 })
      })
    })

  it.effect(
    "a client whose server never returns credits fails the send waiting for one with Timeout at ackTimeout, not before",
    () =>
      Effect.gen(function*() {
        const port = 7598
        const ackTimeout = Duration.seconds(5)
        const listener = yield* CmListener.make(address, port)
        const peer = yield* Effect.gen(function*() {
          const request = yield* CmListener.next(listener)
          const hello = yield* stingy(request)
          yield* CmListener.accept(request)
          yield* hello
        }).pipe(Effect.fork)
        const protocol = yield* RdmaRpc.makeProtocolClient({
          transport: "cm",
          address,
          port,
          ackTimeout,
          keepAlive: Duration.infinity,
          retrySchedule: Schedule.stop
        }).pipe(Effect.provide(RpcSerialization.layerMsgPack))
        yield* Fiber.join(peer)
        // 3 receives less the client's HELLO: 2 credits; the first request spends one, the second
        // has only the last credit (kept for a frame that returns some) and waits.
        yield* protocol.send({ _tag: "Ping" })
        const waiting = yield* Effect.fork(protocol.send({ _tag: "Ping" }))
        yield* TestClock.adjust(Duration.subtract(ackTimeout, Duration.millis(1)))
        assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "the send waits until ackTimeout")
        yield* TestClock.adjust(Duration.millis(1))
        const failed = yield* Effect.flip(Fiber.join(waiting))
        assert.strictEqual(failed._tag, "RpcClientError")
        assert.instanceOf(failed.cause, RdmaChannel.ChannelError)
        assert.strictEqual(failed.cause.reason, "Timeout")
        assert.match(failed.cause.detail, /returned no credit within 5s/)
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)),
    30_000
  )

  it.effect(
    "a server whose client never returns credits drops it with Timeout at ackTimeout, not before",
    () => {
      const logged: Array<{ readonly line: string; readonly level: string; readonly error: unknown }> = []
      const logger = Logger.make(({ cause, logLevel, message }) => {
        logged.push({ line: [message].flat().join(" "), level: logLevel.label, error: Cause.squash(cause) })
      })
      return Effect.gen(function*() {
        const port = 7599
        const ackTimeout = Duration.seconds(5)
        const protocol = yield* RdmaRpc.makeProtocolServer({
          transport: "cm",
          address,
          port,
          ackTimeout,
          keepAlive: Duration.infinity
        }).pipe(Effect.provide(RpcSerialization.layerMsgPack))
        const ep = yield* CmEndpoint.make(address, port)
        const hello = yield* stingy(ep)
        yield* CmEndpoint.establish(ep)
        yield* hello
        // The server registers the client once both HELLOs are in.
        yield* Effect.zipLeft(protocol.clientIds, Effect.yieldNow()).pipe(Effect.repeat({ until: (ids) => ids.has(0) }))
        // 3 receives less the server's HELLO: 2 credits; the first answer spends one, the second
        // has only the last credit (kept for a frame that returns some) and waits.
        yield* protocol.send(0, { _tag: "Pong" })
        const waiting = yield* Effect.fork(protocol.send(0, { _tag: "Pong" }))
        const disconnected = yield* Effect.fork(protocol.disconnects.take)
        yield* TestClock.adjust(Duration.subtract(ackTimeout, Duration.millis(1)))
        assert.isTrue(Option.isNone(yield* Fiber.poll(disconnected)), "the client is kept until ackTimeout")
        assert.isTrue(Option.isNone(yield* Fiber.poll(waiting)), "the answer waits until ackTimeout")
        yield* TestClock.adjust(Duration.millis(1))
        assert.strictEqual(yield* Fiber.join(disconnected), 0)
        yield* Fiber.join(waiting)
        // The channel ends with the wait's Timeout: a drop worth a warning.
        const dropped = logged.find(({ line }) => /client 0 dropped/.test(line))
        assert.strictEqual(dropped?.level, "WARN")
        assert.instanceOf(dropped?.error, RdmaChannel.ChannelError)
        assert.strictEqual(dropped.error.reason, "Timeout")
        assert.match(dropped.error.detail, /returned no credit within 5s/)
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(Logger.add(logger)), Effect.provide(SimulatedDriver.layer))
    },
    30_000
  )
})
