/**
 * Bad input to an RDMA runner, on the simulated driver: a listen address that is no RDMA device's
 * and a client-only runner without an address fail the Layer with a tagged error; a runner address
 * where nothing listens, an RDMA RPC server that is not a runner, and one whose bytes are garbage
 * to a runner (another serialization: its frames do not decode, and it drops the runner's
 * connection with a logged reason) are cluster's RunnerUnavailable to the runner that pings them,
 * which serves on; nothing is left alive.
 */
import { RdmaCluster } from "@effect-rdma/cluster"
import { Peer } from "@effect-rdma/core"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { RunnerAddress, Runners } from "@effect/cluster"
import { Rpc, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { address, Counter, runner, tempDatabase } from "./fixtures/counter.js"

/** An RDMA RPC server that speaks another protocol than cluster's runners. */
const Other = RpcGroup.make(Rpc.make("Other"))
const notARunner = (port: number) =>
  RpcServer.layer(Other).pipe(
    Layer.provide(Other.toLayer({ Other: () => Effect.void })),
    Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port })),
    Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
  )

/** A runner whose bytes are garbage to the others: cluster's runner protocol, serialized as ndjson. */
const garbled = (port: number) =>
  RpcServer.layer(Other).pipe(
    Layer.provide(Other.toLayer({ Other: () => Effect.void })),
    Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port })),
    Layer.provide([Peer.layer(address), RpcSerialization.layerNdjson])
  )

describe("@effect/cluster over RDMA: bad input", () => {
  it.live("a listen address that is no RDMA device's fails the runner's Layer with RpmaProviderError", () =>
    Effect.gen(function*() {
      const error = yield* Layer.build(RdmaCluster.layer({
        storage: "local",
        shardingConfig: { runnerAddress: Option.some(RunnerAddress.make("192.0.2.1", 7620)) }
      })).pipe(Effect.flip)
      assert.strictEqual(error._tag, "RpmaProviderError")
      assert.include(error.message, "192.0.2.1")
    }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live("a client-only runner without peerAddress fails with RdmaClusterConfigError saying what to set", () =>
    Effect.gen(function*() {
      const error = yield* Layer.build(RdmaCluster.layer({ storage: "local", clientOnly: true })).pipe(Effect.flip)
      assert.strictEqual(error._tag, "RdmaClusterConfigError")
      assert.match(error.message, /peerAddress/)
    }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live("options that cannot be read fail the runner's Layer with RdmaClusterConfigError, never a throw as it is made", () =>
    Effect.gen(function*() {
      const trapped = new Proxy({ storage: "local" }, {
        get: (_, key) => {
          throw new Error(`no ${String(key)} here`)
        }
      }) as RdmaCluster.Options<false, "local">
      for (const made of [RdmaCluster.layer(trapped), RdmaCluster.layerServerProtocol(trapped)]) {
        const error = yield* Layer.build(made as Layer.Layer<unknown, RdmaCluster.RdmaClusterConfigError>).pipe(
          Effect.flip
        )
        assert.strictEqual(error._tag, "RdmaClusterConfigError")
        assert.include(error.message, "the options cannot be read (Error: no storage here)")
      }
    }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live("untyped option values cluster would misread fail the Layer with RdmaClusterConfigError naming the option", () =>
    Effect.gen(function*() {
      const at = (port: number) => ({ runnerAddress: Option.some(RunnerAddress.make(address, port)) })
      const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
        [
          { storage: "local", shardingConfig: { runnerAddress: RunnerAddress.make(address, 7624) } },
          /shardingConfig\.runnerAddress must be an Option .*wrap it in Option\.some\(\.\.\.\)/
        ],
        [
          { storage: "local", shardingConfig: { runnerListenAddress: RunnerAddress.make(address, 7624) } },
          /shardingConfig\.runnerListenAddress must be an Option .*wrap it in Option\.some\(\.\.\.\)/
        ],
        [{ storage: "memory", shardingConfig: at(7624) }, /storage must be "sql" .*"local" .*"byo" .*got "memory"/],
        ["local", /the options must be an object .*got "local"/],
        [5, /the options must be an object .*got 5/],
        [
          { storage: "local", serialization: "json", shardingConfig: at(7624) },
          /serialization must be "msgpack" .*"ndjson"/
        ],
        [
          { storage: "local", serializationMaxBufferSize: -1, shardingConfig: at(7624) },
          /serializationMaxBufferSize must be a number of bytes of at least 1, or "unbounded", got -1/
        ],
        [
          { storage: "local", shardingConfig: { ...at(7624), shardsPerGroup: 0 } },
          /shardingConfig\.shardsPerGroup must be an integer of at least 1/
        ]
      ]
      for (const [options, expected] of cases) {
        const error = yield* Layer.build(RdmaCluster.layer(options as RdmaCluster.Options<false, "local">)).pipe(
          Effect.flip
        )
        assert.strictEqual(error._tag, "RdmaClusterConfigError", String(expected))
        assert.match(error.message, expected)
      }
    }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live(
    "nothing listening, a peer that is not a runner, or one speaking garbage: RunnerUnavailable, and the runner serves on",
    () =>
      Effect.gen(function*() {
        const filename = yield* tempDatabase
        yield* Effect.gen(function*() {
          yield* Layer.build(notARunner(7622))
          yield* Layer.build(garbled(7623))
          const context = yield* Layer.build(runner(7621, filename))
          const runners = yield* Effect.provide(Runners.Runners, context)
          for (const port of [7699, 7622, 7623]) {
            const error = yield* runners.ping(RunnerAddress.make(address, port)).pipe(
              Effect.flip,
              Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error(`no answer from port ${port}`) })
            )
            assert.strictEqual(error._tag, "RunnerUnavailable")
          }
          const counter = yield* Effect.provide(Counter.client, context)
          const count = yield* counter("after-bad-peers").Increment({ amount: 5 }).pipe(Effect.timeout("60 seconds"))
          assert.strictEqual(count.value, 5)
        }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer))
      }).pipe(Effect.scoped),
    120_000
  )
})
