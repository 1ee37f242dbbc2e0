/**
 * An `@effect/cluster` runner whose runner-to-runner protocols run over RDMA: the same runner as
 * `@effect/platform-node`'s `NodeClusterSocket`, with `@effect-rdma/rpc`'s protocols in place of
 * TCP sockets. Cluster's configuration (`ShardingConfig`), its storage (`MessageStorage`,
 * `RunnerStorage`) and its rules (shard assignment, at-least-once delivery of persisted messages,
 * take-over of a dead runner's shards) are cluster's own; only the wire between runners changes.
 *
 * @since 1.0.0
 */
import type { Connection, RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Peer from "@effect-rdma/core/Peer"
import type { RdmaChannel } from "@effect-rdma/rpc"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as RunnerHealth from "@effect/cluster/RunnerHealth"
import * as Runners from "@effect/cluster/Runners"
import * as RunnerServer from "@effect/cluster/RunnerServer"
import * as RunnerStorage from "@effect/cluster/RunnerStorage"
import type { Sharding } from "@effect/cluster/Sharding"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as SqlMessageStorage from "@effect/cluster/SqlMessageStorage"
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as RpcServer from "@effect/rpc/RpcServer"
import type { SqlClient } from "@effect/sql/SqlClient"
import type { ConfigError } from "effect/ConfigError"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Schedule from "effect/Schedule"
import * as internal from "./internal/runner.js"

/**
 * The runner's configuration cannot make an RDMA runner: `detail` says what is missing or wrong and
 * what to set (a runner that serves needs `ShardingConfig.runnerAddress` or `runnerListenAddress`; a
 * client-only one needs `peerAddress`). {@link layer} also fails with it, before building anything,
 * on options that are no object or cannot be read, a `storage` or `serialization` that is none of
 * the documented values, a `serializationMaxBufferSize` below 1, a `shardingConfig.runnerAddress` or
 * `runnerListenAddress` that is not an `Option` of a `RunnerAddress` (wrap it in `Option.some(...)`),
 * and a `shardingConfig.shardsPerGroup` that is not an integer of at least 1.
 *
 * @since 1.0.0
 * @category errors
 */
export const RdmaClusterConfigError: typeof internal.RdmaClusterConfigError = internal.RdmaClusterConfigError

/**
 * @since 1.0.0
 * @category errors
 */
export type RdmaClusterConfigError = internal.RdmaClusterConfigError

/**
 * The RDMA settings of the runner-to-runner protocols: the channel's (`inlineSize`, `landingSize`,
 * `maxMessageSize`, ...), each connection's, and how a client to another runner re-dials.
 *
 * @since 1.0.0
 * @category models
 */
export interface ProtocolOptions extends RdmaChannel.Options {
  /** The settings of each connection, dialled or accepted (`timeout` bounds a connect; default 5 seconds). */
  readonly connection?: Connection.Options | undefined
  /**
   * When a client to another runner connects again after a failed connect or a lost connection
   * (`RdmaRpc.RpmaClientOptions`' `retrySchedule`). Cluster drops a client whose runner is unavailable
   * and dials anew on the next message, so this matters only for a connection lost between calls.
   */
  readonly retrySchedule?: Schedule.Schedule<unknown, unknown> | undefined
  /** How long opening a channel may take once connected, on either side. Default 10 seconds. */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
}

/**
 * `Runners.RpcClientProtocol` over RDMA: for each runner address, an `RpcClient.Protocol` that
 * connects with the context's `Peer` to the runner's `host` and `port` (an RDMA address and port:
 * the other runner's {@link layerServerProtocol}) and re-dials as `retrySchedule` says. A runner
 * that cannot be reached fails its calls with an `RpcClientError`, which cluster turns into
 * `RunnerUnavailable`; the connection is closed when cluster drops the client.
 *
 * Channel options out of range are a defect on the first message to a runner, as in cluster's
 * socket client; {@link layer} has failed on them before, with {@link layerServerProtocol}'s
 * `RdmaChannelError`.
 *
 * @since 1.0.0
 * @category layers
 */
export const layerClientProtocol: (
  options?: ProtocolOptions
) => Layer.Layer<
  Runners.RpcClientProtocol,
  never,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.layerClientProtocol

/**
 * `RpcServer.Protocol` over RDMA for the runner's server: listens with the context's `Peer` on
 * `ShardingConfig.runnerListenAddress`, or `runnerAddress` when that is unset, as
 * `NodeClusterSocket.layerSocketServer` does, and logs the address it listens on. Fails with
 * {@link RdmaClusterConfigError} when neither is set, and with the listener's `RpmaError` when the
 * address is no RDMA device's or the port is taken.
 *
 * @since 1.0.0
 * @category layers
 */
export const layerServerProtocol: (
  options?: ProtocolOptions
) => Layer.Layer<
  RpcServer.Protocol,
  RdmaClusterConfigError | RdmaError.RpmaError | RdmaChannel.ChannelError,
  ShardingConfig.ShardingConfig | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.layerServerProtocol

/**
 * The runner's options: those of `NodeClusterSocket.layer` (serialization, client-only, storage,
 * sharding configuration) and the RDMA ones.
 *
 * @since 1.0.0
 * @category models
 */
export interface Options<ClientOnly extends boolean, Storage extends "local" | "sql" | "byo"> extends ProtocolOptions {
  /** How messages are encoded on the wire. Default `"msgpack"`. */
  readonly serialization?: "msgpack" | "ndjson" | undefined
  /** The largest message the serialization buffers (`RpcSerialization.layerMsgPackWith`'s `maxBufferSize`). */
  readonly serializationMaxBufferSize?: number | "unbounded" | undefined
  /** A runner that sends to the others but serves no shards and listens nowhere. Default `false`. */
  readonly clientOnly?: ClientOnly | undefined
  /**
   * Where messages and runners are stored: `"sql"` (the default) through the context's `SqlClient`,
   * `"local"` in memory (one runner, nothing persisted), `"byo"` from `MessageStorage` and
   * `RunnerStorage` in the context.
   */
  readonly storage?: Storage | undefined
  /** The sharding configuration, over what `ShardingConfig.layerFromEnv` reads. */
  readonly shardingConfig?: Partial<ShardingConfig.ShardingConfig["Type"]> | undefined
  /**
   * The local RDMA address whose device the runner's connections use. Default: the host of
   * `runnerListenAddress`, or of `runnerAddress`; required for a client-only runner.
   */
  readonly peerAddress?: string | undefined
}

/**
 * An `@effect/cluster` runner over RDMA, as `NodeClusterSocket.layer` is one over TCP: `Sharding`
 * and `Runners` from cluster's `RunnerServer`, with the runner-to-runner client and server
 * protocols of {@link layerClientProtocol} and {@link layerServerProtocol}, cluster's ping-based
 * `RunnerHealth`, `SqlMessageStorage` and `SqlRunnerStorage` (or as `storage` says), and
 * `ShardingConfig.layerFromEnv(shardingConfig)`. `runnerAddress` is an RDMA address and port; the
 * runner's `Peer` is made on `peerAddress` (default the listen address's host). It needs a driver
 * (`NativeDriver.layer`, or a simulated one in tests) and, for `"sql"` storage, a `SqlClient`.
 *
 * What cluster guarantees over TCP holds here: persisted messages are stored before they are sent
 * and delivered at least once, to whichever runner owns the shard; a runner whose pings fail is
 * dropped and its shards are taken over. A message that is not persisted and is in flight when a
 * connection is lost fails with cluster's `RunnerUnavailable`, as over a socket.
 *
 * @example
 * ```ts
 * import { RdmaCluster } from "@effect-rdma/cluster"
 * import { RunnerAddress } from "@effect/cluster"
 * import { Option } from "effect"
 *
 * // Storage in the SqlClient you provide; the driver from NativeDriver.layer.
 * export const RunnerLive = RdmaCluster.layer({
 *   shardingConfig: { runnerAddress: Option.some(RunnerAddress.make("192.168.77.1", 7600)) }
 * })
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layer = <
  const ClientOnly extends boolean = false,
  const Storage extends "local" | "sql" | "byo" = never
>(
  given?: Options<ClientOnly, Storage>
): Layer.Layer<
  Sharding | Runners.Runners | ("byo" extends Storage ? never : MessageStorage.MessageStorage),
  | ConfigError
  | RdmaClusterConfigError
  | RdmaError.RpmaError
  | RdmaChannel.ChannelError,
  | Driver.RdmaDriver
  | ("local" extends Storage ? never
    : "byo" extends Storage ? MessageStorage.MessageStorage | RunnerStorage.RunnerStorage
    : SqlClient)
> => {
  const options = internal.readRunnerOptions(given)
  if (options instanceof internal.RdmaClusterConfigError) return Layer.fail(options)
  const client = layerClientProtocol(options)
  const runner: Layer.Layer<any, any, any> = options?.clientOnly
    ? Layer.provide(RunnerServer.layerClientOnly, client)
    : RunnerServer.layerWithClients.pipe(
      Layer.provide(layerServerProtocol(options)),
      Layer.provide(client),
      Layer.provide(RunnerHealth.layerPing.pipe(Layer.provide(Runners.layerRpc), Layer.provide(client)))
    )
  const [messageStorage, runnerStorage] = options?.storage === "local"
    ? [MessageStorage.layerNoop, RunnerStorage.layerMemory] as const
    : options?.storage === "byo"
    ? [Layer.empty, Layer.empty] as const
    : [Layer.orDie(SqlMessageStorage.layer), Layer.orDie(SqlRunnerStorage.layer)] as const
  return runner.pipe(
    Layer.provide(Layer.unwrapEffect(Effect.map(
      internal.peerAddress(options?.peerAddress, Boolean(options?.clientOnly)),
      (address) => Peer.layer(address)
    ))),
    Layer.provideMerge(messageStorage),
    Layer.provide(runnerStorage),
    Layer.provide(ShardingConfig.layerFromEnv(options?.shardingConfig)),
    Layer.provide(
      options?.serialization === "ndjson"
        ? RpcSerialization.layerNdjsonWith({ maxBufferSize: options.serializationMaxBufferSize })
        : RpcSerialization.layerMsgPackWith({ maxBufferSize: options?.serializationMaxBufferSize })
    )
  ) as any
}
