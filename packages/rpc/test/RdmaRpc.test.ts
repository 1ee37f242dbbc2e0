/**
 * An @effect/rpc group served and called over RDMA on the simulated fabric: plain calls, typed
 * errors, streams, messages larger than a receive buffer and than the landing region, both
 * serializations, a server that goes away, admission by token, and nothing left registered
 * afterwards (the ledger).
 */
import { type Connection, Endpoint, Peer } from "@effect-rdma/core"
import { RdmaRpcClient, RdmaRpcServer } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { cases } from "./cases.js"

cases(
  SimulatedDriver.DEFAULT_ADDRESS,
  7480,
  (effect) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.asVoid, Effect.provide(SimulatedDriver.layer))
)

describe("@effect/rpc over RDMA: admission", () => {
  const Group = RpcGroup.make(Rpc.make("Ping", { success: Schema.String }))
  const address = SimulatedDriver.DEFAULT_ADDRESS
  const token = new Uint8Array(16).fill(7)

  it.effect("a server with an admission serves the client with its token and rejects one without", () =>
    Effect.scoped(Effect.gen(function*() {
      const admission = yield* Endpoint.admission(token)
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Ping: () => Effect.succeed("pong") })),
          Layer.provide(RdmaRpcServer.layerProtocol({ address, port: 7481, admission })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = (connection: Connection.Options) =>
        RdmaRpcClient.layerProtocol({ address, port: 7481, connection }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack]),
          Layer.build,
          Effect.flatMap((protocol) => Effect.provide(RpcClient.make(Group), protocol))
        )
      const refused = yield* Effect.flip(client({ privateData: new Uint8Array([16, ...new Uint8Array(16)]) }))
      assert.strictEqual(refused._tag, "ConnectionFailedError")
      const admitted = yield* client({ privateData: yield* Endpoint.tokenPrivateData(token) })
      assert.strictEqual(yield* admitted.Ping(), "pong")
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})
