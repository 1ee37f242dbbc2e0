/**
 * The RPC cases, run on any driver: the simulated one (test/RdmaRpc.test.ts) and the native one in
 * the Soft-RoCE VM (test-device/RdmaRpc.test.ts). `world` wraps each case (a driver Layer, and on
 * the simulated driver the ledger's leak check).
 */
import { Peer } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Exit, Layer, Schema, Scope, Stream } from "effect"

class Refused extends Schema.TaggedError<Refused>()("Refused", { reason: Schema.String }) {}

const Group = RpcGroup.make(
  Rpc.make("Add", { payload: { a: Schema.Number, b: Schema.Number }, success: Schema.Number }),
  Rpc.make("Echo", { payload: { text: Schema.String }, success: Schema.String }),
  Rpc.make("Refuse", { payload: { reason: Schema.String }, error: Refused }),
  Rpc.make("Count", { payload: { to: Schema.Number }, success: Schema.Number, stream: true })
)

const Handlers = Group.toLayer({
  Add: ({ a, b }) => Effect.succeed(a + b),
  Echo: ({ text }) => Effect.succeed(text),
  Refuse: ({ reason }) => Effect.fail(new Refused({ reason })),
  Count: ({ to }) => Stream.range(1, to)
})

/** Small buffers, so that the payload sizes below take every path: inline, pieces, beyond the landing region. */
const channel = { inlineSize: 1024, landingSize: 64 * 1024 }

export type World = <A, E>(effect: Effect.Effect<A, E, Driver.RdmaDriver | Scope.Scope>) => Effect.Effect<void, unknown>

export type Transport = "rpma" | "cm"

/** The server and client protocol Layers of `transport` (librpma's with a Peer of `address`). */
export const protocols = (
  transport: Transport,
  address: string,
  port: number,
  options: { readonly inlineSize?: number; readonly landingSize?: number } = {}
): {
  readonly server: Layer.Layer<RpcServer.Protocol, unknown, RpcSerialization.RpcSerialization | Driver.RdmaDriver>
  readonly client: Layer.Layer<RpcClient.Protocol, unknown, RpcSerialization.RpcSerialization | Driver.RdmaDriver>
} => {
  const { landingSize, ...cm } = options
  return transport === "cm"
    ? {
      server: RdmaRpc.layerProtocolServer({ transport, address, port, ...cm }),
      client: RdmaRpc.layerProtocolClient({ transport, address, port, ...cm })
    }
    : {
      server: RdmaRpc.layerProtocolServer({ transport, address, port, ...cm, landingSize }).pipe(
        Layer.provide(Peer.layer(address))
      ),
      client: RdmaRpc.layerProtocolClient({ transport, address, port, ...cm, landingSize }).pipe(
        Layer.provide(Peer.layer(address))
      )
    }
}

export const cases = (address: string, port: number, world: World, timeout?: number, transport: Transport = "rpma") => {
  const { client: ClientProtocolLive, server: ServerProtocolLive } = protocols(transport, address, port, channel)
  const ServerLive = RpcServer.layer(Group).pipe(
    Layer.provide(Handlers),
    Layer.provide(ServerProtocolLive)
  )
  /** A server, and a client of it, in the caller's scope; `serverScope` closes the server alone. */
  const served = (serialization: Layer.Layer<RpcSerialization.RpcSerialization>) =>
    Effect.gen(function*() {
      const serverScope = yield* Scope.make()
      yield* Layer.buildWithScope(Layer.provide(ServerLive, serialization), serverScope)
      const protocol = yield* Layer.build(Layer.provide(ClientProtocolLive, serialization))
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      return { client, serverScope }
    })
  for (
    const [name, serialization] of [["msgpack", RpcSerialization.layerMsgPack], [
      "json",
      RpcSerialization.layerJson
    ]] as const
  ) {
    describe(`@effect/rpc over RDMA (${transport}, ${name})`, () => {
      it.effect("calls, typed errors and streams", () =>
        world(Effect.gen(function*() {
          const { client, serverScope } = yield* served(serialization)
          assert.strictEqual(yield* client.Add({ a: 2, b: 40 }), 42)
          const refused = yield* Effect.flip(client.Refuse({ reason: "not today" }))
          assert.instanceOf(refused, Refused)
          assert.strictEqual(refused.reason, "not today")
          const counted = yield* Stream.runCollect(client.Count({ to: 500 }))
          assert.deepStrictEqual(Chunk.toReadonlyArray(counted), Array.from({ length: 500 }, (_, i) => i + 1))
          // Concurrent calls share the connection.
          const sums = yield* Effect.forEach(
            Array.from({ length: 50 }, (_, i) => i),
            (i) => client.Add({ a: i, b: i }),
            {
              concurrency: "unbounded"
            }
          )
          assert.deepStrictEqual(sums, Array.from({ length: 50 }, (_, i) => 2 * i))
          yield* Scope.close(serverScope, Exit.void)
        })), timeout)

      it.effect(
        "messages beyond a receive buffer, and beyond the landing region, arrive whole",
        () =>
          world(Effect.gen(function*() {
            const { client, serverScope } = yield* served(serialization)
            for (const size of [900, 5_000, 64 * 1024, 300_000]) {
              const text = Array.from({ length: size }, (_, i) => String.fromCharCode(97 + (i % 26))).join("")
              assert.strictEqual(yield* client.Echo({ text }), text, `${size} characters`)
            }
            const texts = yield* Effect.forEach(
              Array.from({ length: 6 }, (_, i) => "x".repeat(20_000 + i)),
              (text) => client.Echo({ text }),
              { concurrency: "unbounded" }
            )
            assert.deepStrictEqual(texts.map((t) => t.length), Array.from({ length: 6 }, (_, i) => 20_000 + i))
            yield* Scope.close(serverScope, Exit.void)
          })),
        timeout
      )
    })
  }

  describe(`@effect/rpc over RDMA (${transport}): endings`, () => {
    it.effect(
      "a server that goes away fails the calls with RpcClientError, and nothing stays registered",
      () =>
        world(Effect.gen(function*() {
          const { client, serverScope } = yield* served(RpcSerialization.layerMsgPack)
          assert.strictEqual(yield* client.Add({ a: 1, b: 1 }), 2)
          yield* Scope.close(serverScope, Exit.void)
          const error = yield* Effect.flip(client.Add({ a: 1, b: 2 }).pipe(Effect.timeout("10 seconds")))
          assert.strictEqual(error._tag, "RpcClientError")
        })),
      timeout
    )
  })
}
