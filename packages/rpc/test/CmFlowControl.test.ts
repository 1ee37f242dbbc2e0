/**
 * The `"cm"` transport's flow control on the simulated fabric: both endpoints ask for no RNR
 * retries (`rnrRetryCount: 0`), so a frame sent with no receive posted at the other side fails its
 * send with IBV_WC_RNR_RETRY_EXC_ERR and ends the connection, as on the device. Large messages,
 * one at a time and 16 in flight each way, must then all arrive whole: the sender spends a credit
 * per frame and waits for the reader to return them, never sending into a receive not posted.
 * Against a raw peer: the credits each frame spends and returns, the last one kept, and the wait's
 * bound (`ackTimeout`, by the TestClock).
 */
import { CmEndpoint, CmListener } from "@effect-rdma/core"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Option, Schedule, Schema, TestClock } from "effect"
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
