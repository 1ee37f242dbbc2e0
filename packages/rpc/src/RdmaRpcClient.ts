/**
 * @effect/rpc's client protocol over RDMA: an `RpcClient.Protocol` whose messages travel over an
 * effect-rdma connection, small ones by send into the server's pre-posted receives, large ones
 * written into the server's registered landing region and acknowledged (see {@link RdmaChannel}).
 *
 * @since 1.0.0
 */
import type { Connection, Peer, RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import type * as RpcClient from "@effect/rpc/RpcClient"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as Layer from "effect/Layer"
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type * as RdmaChannel from "./RdmaChannel.js"
import * as internal from "./internal/protocol.js"

/**
 * Where to connect, and the channel's settings.
 *
 * @since 1.0.0
 * @category models
 */
export interface LayerOptions extends RdmaChannel.Options {
  readonly address: string
  readonly port: number
  /** The connection's settings (timeout, queue sizes, private data such as an admission token). */
  readonly connection?: Connection.Options | undefined
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
 * The client protocol as a Layer: connects with the context's `Peer` to `address`:`port` (an
 * {@link RdmaRpcServer.layerProtocol} there) and carries the client's messages over that
 * connection, which is closed with the Layer.
 *
 * @example
 * ```ts
 * import { Peer } from "@effect-rdma/core"
 * import { RdmaRpcClient } from "@effect-rdma/rpc"
 * import { RpcSerialization } from "@effect/rpc"
 * import { Layer } from "effect"
 *
 * const ProtocolLive = RdmaRpcClient.layerProtocol({ address: "192.168.77.1", port: 7480 }).pipe(
 *   Layer.provide([Peer.layer("192.168.77.1"), RpcSerialization.layerMsgPack])
 * )
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerProtocol: (
  options: LayerOptions
) => Layer.Layer<
  RpcClient.Protocol,
  RdmaChannel.ChannelError | Connection.ConnectionFailedError | RdmaError.RpmaError,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.layerClientProtocol
