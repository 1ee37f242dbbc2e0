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
 * trap that throws is the layer's RdmaClusterConfigError, not a throw as the layer is made, and so
 * are options that are no object (a string, a number) where they were read as no options.
 */
export const readOptions = <O extends object>(options: O | undefined): O | undefined | RdmaClusterConfigError => {
  if (options === undefined || options === null) return options
  if (typeof options !== "object") {
    return new RdmaClusterConfigError({
      detail: `the options must be an object (RdmaCluster.Options), got ${show(options)}: give { ... } or nothing`
    })
  }
  try {
    const copy: Record<string, unknown> = {}
    for (const key in options) copy[key] = options[key]
    return copy as O
  } catch (cause) {
    return new RdmaClusterConfigError({ detail: `the options cannot be read (${String(cause)}): give plain options` })
  }
}

/** A value as a message shows it: strings quoted, objects by their class. */
const show = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "function") return "a function"
  if (typeof value === "object" && value !== null) {
    const name = (value as { constructor?: { name?: unknown } }).constructor?.name
    return typeof name === "string" && name !== "Object" ? `a ${name}` : "an object"
  }
  return String(value)
}

const storages: ReadonlyArray<unknown> = ["sql", "local", "byo"]
const serializations: ReadonlyArray<unknown> = ["msgpack", "ndjson"]

/** What is wrong with an Option field of ShardingConfig, if anything. */
const addressProblem = (name: string, value: unknown): string | undefined => {
  if (value === undefined) return undefined
  if (!Option.isOption(value)) {
    return `shardingConfig.${name} must be an Option of a RunnerAddress, got ${show(value)}: ` +
      `wrap it in Option.some(...), as Option.some(RunnerAddress.make(host, port)), or give Option.none()`
  }
  if (Option.isSome(value)) {
    const address = value.value as { readonly host?: unknown; readonly port?: unknown } | null | undefined
    if (
      typeof address !== "object" || address === null || typeof address.host !== "string" ||
      typeof address.port !== "number"
    ) {
      return `shardingConfig.${name} must hold a RunnerAddress, got Option.some(${show(address)}): ` +
        `give Option.some(RunnerAddress.make(host, port))`
    }
  }
  return undefined
}

/** What is wrong with a runner's options (read once by readOptions), if anything. */
const runnerOptionsProblem = (options: Record<string, unknown>): string | undefined => {
  const { serialization, serializationMaxBufferSize, shardingConfig, storage } = options
  if (storage !== undefined && !storages.includes(storage)) {
    return `storage must be "sql" (the default: through the context's SqlClient), "local" (in memory, one runner) ` +
      `or "byo" (MessageStorage and RunnerStorage from the context), got ${show(storage)}`
  }
  if (serialization !== undefined && !serializations.includes(serialization)) {
    return `serialization must be "msgpack" (the default) or "ndjson", the same on every runner, got ${
      show(serialization)
    }`
  }
  if (
    serializationMaxBufferSize !== undefined && serializationMaxBufferSize !== "unbounded" &&
    !(typeof serializationMaxBufferSize === "number" && serializationMaxBufferSize >= 1)
  ) {
    return `serializationMaxBufferSize must be a number of bytes of at least 1, or "unbounded", got ${
      show(serializationMaxBufferSize)
    }`
  }
  if (shardingConfig === undefined || shardingConfig === null) return undefined
  if (typeof shardingConfig !== "object") {
    return `shardingConfig must be an object of ShardingConfig fields, got ${show(shardingConfig)}`
  }
  const { runnerAddress, runnerListenAddress, shardsPerGroup } = shardingConfig as Record<string, unknown>
  const problem = addressProblem("runnerAddress", runnerAddress) ??
    addressProblem("runnerListenAddress", runnerListenAddress)
  if (problem !== undefined) return problem
  if (shardsPerGroup !== undefined && !(Number.isSafeInteger(shardsPerGroup) && (shardsPerGroup as number) >= 1)) {
    return `shardingConfig.shardsPerGroup must be an integer of at least 1, the same on every runner (default 300), ` +
      `got ${show(shardsPerGroup)}`
  }
  return undefined
}

/**
 * A runner's options, read once as {@link readOptions} does (its `shardingConfig` too), and checked:
 * a value cluster would take for another (an unknown `storage` as `"sql"`, an unknown
 * `serialization` as `"msgpack"`) or break on later (an address not in an Option, no shards) is the
 * layer's RdmaClusterConfigError, naming the option and what to give.
 */
export const readRunnerOptions = <O extends object>(
  given: O | undefined
): O | undefined | RdmaClusterConfigError => {
  const options = readOptions(given)
  if (options === undefined || options === null || options instanceof RdmaClusterConfigError) return options
  const record = options as Record<string, unknown>
  const shardingConfig = record.shardingConfig
  if (typeof shardingConfig === "object" && shardingConfig !== null) {
    const copy = readOptions(shardingConfig)
    if (copy instanceof RdmaClusterConfigError) {
      return new RdmaClusterConfigError({ detail: `shardingConfig: ${copy.detail}` })
    }
    record.shardingConfig = copy
  }
  const problem = runnerOptionsProblem(record)
  return problem === undefined ? options : new RdmaClusterConfigError({ detail: problem })
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
