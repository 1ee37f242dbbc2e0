/**
 * @effect/rpc's client protocol over RDMA: an `RpcClient.Protocol` whose messages travel over an
 * effect-rdma connection, small ones by send into the server's pre-posted receives, large ones
 * written into the server's registered landing region and acknowledged (see {@link RdmaChannel}).
 *
 * `RdmaRpc` is the new entry point: `RdmaRpc.layerProtocolClient({ transport: "rpma", ... })` takes these
 * same options and delegates here, and `transport: "cm"` runs over librdmacm instead. This module
 * stays (packages/cluster builds on it) until the move, then goes with a migration note.
 *
 * @since 1.0.0
 */
import type { Connection, DescriptorExchange, Peer } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import type * as RpcClient from "@effect/rpc/RpcClient"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as internal from "./internal/protocol.js"
import type * as RdmaChannel from "./RdmaChannel.js"

/**
 * Where to connect: an `address` and `port` (with an admission `token` if the server asks for one),
 * or an `offer` fetched on every connect, as `RdmaClient` does (a restarted server may listen
 * elsewhere, with a new token).
 *
 * @since 1.0.0
 * @category models
 */
export type Target<R = never> =
  | {
    readonly address: string
    readonly port: number
    /**
     * The server's admission token (`RdmaRpcServer.Options.admission`), sent with every connect as
     * `Admission.privateData(token)`. `connection.privateData`, if given, is sent instead.
     */
    readonly token?: Uint8Array | undefined
  }
  | {
    /**
     * Fetches the offer on every connect: its `rdma` address and its `token` are used, its regions
     * and config ignored. Bound it (`DescriptorExchange.fetch` has a timeout): a failure is a
     * failed connect, after which `retrySchedule` decides.
     */
    readonly offer: Effect.Effect<DescriptorExchange.Offer, unknown, R>
  }

/**
 * Where to connect, how to reconnect, and the channel's settings.
 *
 * @since 1.0.0
 * @category models
 */
export type LayerOptions<R = never> = RdmaChannel.Options & Target<R> & {
  /** The connection's settings (timeout, queue sizes, private data). */
  readonly connection?: Connection.Options | undefined
  /**
   * When to connect again after a failed connect or a lost connection, fed the failure; its delays
   * are the waits between attempts, and its end stops the client (every call then fails with the
   * last failure). Default as @effect/rpc's socket protocol: 500 ms growing by half each time, at
   * most 5 seconds apart, for ever.
   *
   * @since 1.0.0
   */
  readonly retrySchedule?: Schedule.Schedule<unknown, unknown> | undefined
  /**
   * How long opening the channel may take once connected (the server's HELLO, the first send):
   * beyond it the connect has failed. Default 10 seconds.
   *
   * @since 1.0.0
   */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
}

/**
 * A client protocol over an established connection. When the connection ends, every request still
 * waiting fails with an `RpcClientError` (`reason: "Protocol"`), as over a closed socket.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeProtocol: (
  peer: Peer.Peer,
  conn: Connection.Connection,
  options?: RdmaChannel.Options
) => Effect.Effect<
  RpcClient.Protocol["Type"],
  RdmaChannel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.makeClientProtocol

/**
 * The client protocol as a Layer: connects with the context's `Peer` to the target (an
 * {@link RdmaRpcServer.layerProtocol} there) and carries the client's messages over that
 * connection, which is closed with the Layer. It connects again, waiting as `retrySchedule` says,
 * after a failed connect and after the connection ends, as @effect/rpc's socket protocol does:
 *
 * - the calls waiting for an answer when the connection ends fail with an `RpcClientError`
 *   (`reason: "Protocol"`); their outcome on the server is unknown, as over a socket;
 * - while there is no connection, a call fails at once with an `RpcClientError` saying why (the
 *   last failure), except before the first connect has finished, when it waits for it;
 * - calls are served again once a connect succeeds: retry what is safe to repeat
 *   (`Effect.retry({ schedule, while: (e) => e._tag === "RpcClientError" })`).
 *
 * The Layer fails only for options out of range (`RdmaChannelError`, `reason: "Protocol"`).
 *
 * @example
 * ```ts
 * import { Peer } from "@effect-rdma/core"
 * import { RdmaRpcClient } from "@effect-rdma/rpc"
 * import { RpcSerialization } from "@effect/rpc"
 * import { Layer, Schedule } from "effect"
 *
 * const ProtocolLive = RdmaRpcClient.layerProtocol({
 *   address: "192.168.77.1",
 *   port: 7480,
 *   retrySchedule: Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("2 seconds")))
 * }).pipe(Layer.provide([Peer.layer("192.168.77.1"), RpcSerialization.layerMsgPack]))
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerProtocol: <R = never>(
  options: LayerOptions<R>
) => Layer.Layer<
  RpcClient.Protocol,
  RdmaChannel.ChannelError,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
> = internal.layerClientProtocol
