/**
 * An @effect/rpc group served and called over RDMA on the simulated fabric: plain calls, typed
 * errors, streams, messages larger than a receive buffer and than the landing region, both
 * serializations, a server that goes away, admission by token, a connection lost under a call
 * that waits for its answer (found by the keepalive), and nothing left registered afterwards (the
 * ledger).
 */
import { Admission, type Connection, Peer } from "@effect-rdma/core"
import { RdmaRpcClient, RdmaRpcServer } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Schema } from "effect"
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
      const admission = yield* Admission.make(token)
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
      const admitted = yield* client({ privateData: yield* Admission.privateData(token) })
      assert.strictEqual(yield* admitted.Ping(), "pong")
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("@effect/rpc over RDMA: keepalive", () => {
  const Group = RpcGroup.make(Rpc.make("Hang", { success: Schema.String }))
  const address = SimulatedDriver.DEFAULT_ADDRESS

  it.live("a call waiting for its answer fails with RpcClientError when the keepalive finds the connection lost", () =>
    Effect.scoped(Effect.gen(function*() {
      const channel = { keepAlive: "100 millis" as const }
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Hang: () => Effect.never })),
          Layer.provide(RdmaRpcServer.layerProtocol({ address, port: 7482, ...channel })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const protocol = yield* Layer.build(
        RdmaRpcClient.layerProtocol({ address, port: 7482, ...channel }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      const call = yield* Effect.fork(client.Hang())
      // Nothing else is posted while the call waits: the next read is the keepalive's, and it loses the connection.
      yield* Effect.sleep("50 millis")
      yield* SimulatedDriver.fail({ operation: "rpma_read", nth: 1, loseConnection: true })
      const exit = yield* call.await.pipe(Effect.timeout("5 seconds"))
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      assert.strictEqual((error as { _tag?: string } | undefined)?._tag, "RpcClientError")
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("a keepAlive that is not a positive duration is refused with a message", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Hang: () => Effect.never })),
          Layer.provide(RdmaRpcServer.layerProtocol({ address, port: 7483 })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const error = yield* Effect.flip(Layer.build(
        RdmaRpcClient.layerProtocol({ address, port: 7483, keepAlive: "0 millis" }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      ))
      assert.strictEqual(error._tag, "RdmaChannelError")
      assert.match(error.message, /keepAlive must be a positive duration/)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})
