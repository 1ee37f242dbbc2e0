import type * as Driver from "@effect-rdma/core/Driver"
import type * as Peer from "@effect-rdma/core/Peer"
import type * as RdmaError from "@effect-rdma/core/RdmaError"
import type { RdmaChannel } from "@effect-rdma/rpc"
import { RdmaRpc } from "@effect-rdma/rpc"
import type { RunnerAddress } from "@effect/cluster/RunnerAddress"
import * as Runners from "@effect/cluster/Runners"
import * as ShardingConfig from "@effect/cluster/ShardingConfig"
import * as RpcClient from "@effect/rpc/RpcClient"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as RpcServer from "@effect/rpc/RpcServer"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as RdmaCluster from "../RdmaCluster.js"

export class RdmaClusterConfigError extends Data.TaggedError("RdmaClusterConfigError")<{
  readonly detail: string
}> {
  override get message(): string {
    return this.detail
  }
}

const annotations = { package: "@effect-rdma/cluster", service: "Runner" }

/**
 * The options' values, read once into a plain object the layers are built from: a getter or Proxy
 * trap that throws is the layer's RdmaClusterConfigError, not a throw as the layer is made.
 */
export const readOptions = <O extends object>(options: O | undefined): O | undefined | RdmaClusterConfigError => {
  if (options === null || typeof options !== "object") return options
  try {
    const copy: Record<string, unknown> = {}
    for (const key in options) copy[key] = options[key]
    return copy as O
  } catch (cause) {
    return new RdmaClusterConfigError({ detail: `the options cannot be read (${String(cause)}): give plain options` })
  }
}

/** Where the runner's server listens: the listen address, else the advertised one, as cluster's socket runner. */
const listenAddress = Effect.flatMap(
  ShardingConfig.ShardingConfig,
  (config) =>
    Option.match(Option.orElse(config.runnerListenAddress, () => config.runnerAddress), {
      onNone: () =>
        Effect.fail(
          new RdmaClusterConfigError({
            detail: "an RDMA runner that serves needs ShardingConfig.runnerAddress (or runnerListenAddress): " +
              "the RDMA address and port other runners connect to; for a runner that only sends, use clientOnly: true"
          })
        ),
      onSome: Effect.succeed
    })
)

export const peerAddress = (
  given: string | undefined,
  clientOnly: boolean
): Effect.Effect<string, RdmaClusterConfigError, ShardingConfig.ShardingConfig> => {
  if (given !== undefined) return Effect.succeed(given)
  if (clientOnly) {
    return Effect.fail(
      new RdmaClusterConfigError({
        detail: "a client-only RDMA runner has no runner address to take its device from: " +
          "set peerAddress to a local RDMA address"
      })
    )
  }
  return Effect.map(listenAddress, (address) => address.host)
}

const clientOptions = (options: RdmaCluster.ProtocolOptions | undefined, address: RunnerAddress) => ({
  ...options,
  transport: "rpma" as const,
  address: address.host,
  port: address.port
})

export const layerClientProtocol = (
  given?: RdmaCluster.ProtocolOptions
): Layer.Layer<
  Runners.RpcClientProtocol,
  never,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> => {
  const options = readOptions(given)
  // Unreadable options are a defect here too, as options out of range are (below).
  if (options instanceof RdmaClusterConfigError) return Layer.die(options)
  return Layer.effect(
    Runners.RpcClientProtocol,
    Effect.gen(function*() {
      const context = yield* Effect.context<Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver>()
      // Options out of range are a defect here, as in cluster's socket client: the server side's
      // Layer, built from the same options, has already failed on them with an RdmaChannelError.
      return (address: RunnerAddress) =>
        Layer.build(RdmaRpc.layerProtocolClient(clientOptions(options, address))).pipe(
          Effect.map(Context.get(RpcClient.Protocol)),
          Effect.provide(context),
          Effect.orDie
        )
    })
  )
}

export const layerServerProtocol = (
  given?: RdmaCluster.ProtocolOptions
): Layer.Layer<
  RpcServer.Protocol,
  RdmaClusterConfigError | RdmaError.RpmaError | RdmaChannel.ChannelError,
  ShardingConfig.ShardingConfig | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> => {
  const options = readOptions(given)
  if (options instanceof RdmaClusterConfigError) return Layer.fail(options)
  return Layer.unwrapEffect(Effect.map(listenAddress, (address) =>
    Layer.effectDiscard(
      Effect.annotateLogs(Effect.logInfo(`Listening on: ${address.host}:${address.port} (RDMA)`), annotations)
    ).pipe(
      Layer.provideMerge(
        RdmaRpc.layerProtocolServer({ ...options, transport: "rpma", address: address.host, port: address.port })
      )
    )))
}
