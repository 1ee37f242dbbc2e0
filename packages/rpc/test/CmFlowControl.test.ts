/**
 * The `"cm"` transport's flow control on the simulated fabric: both endpoints ask for no RNR
 * retries (`rnrRetryCount: 0`), so a frame sent with no receive posted at the other side fails its
 * send with IBV_WC_RNR_RETRY_EXC_ERR and ends the connection, as on the device. Large messages,
 * one at a time and 16 in flight each way, must then all arrive whole: the sender spends a credit
 * per frame and waits for the reader to return them, never sending into a receive not posted.
 */
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schedule, Schema } from "effect"

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
