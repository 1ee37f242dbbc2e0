/**
 * @effect/rpc's server protocol over RDMA: an `RpcServer.Protocol` that accepts connections on an
 * effect-rdma endpoint, one client per connection, and carries its messages over them (see
 * {@link RdmaChannel}).
 *
 * `RdmaRpc` is the new entry point: `RdmaRpc.layerProtocolServer({ transport: "rpma", ... })` takes these
 * same options and delegates here, and `transport: "cm"` runs over librdmacm instead. This module
 * stays (packages/cluster builds on it) until the move, then goes with a migration note.
 *
 * @since 1.0.0
 */
import type { Admission, Connection, Listener, Peer, RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as RpcServer from "@effect/rpc/RpcServer"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as internal from "./internal/protocol.js"
import type * as RdmaChannel from "./RdmaChannel.js"

/**
 * The channel's settings, and those of each accepted connection.
 *
 * @since 1.0.0
 * @category models
 */
export interface Options extends RdmaChannel.Options {
  /** The settings of each accepted connection. */
  readonly connection?: Connection.Options | undefined
  /**
   * Accept only the connection requests that carry this admission's token (`Listener.accept` with `{ admission }`:
   * the client connects with `connection: { privateData: yield* Admission.privateData(token) }`);
   * the others are rejected. Without it, every request is accepted.
   */
  readonly admission?: Admission.Admission | undefined
  /**
   * Whether each client's connection, channel and regions live in a protection domain of their own
   * (`"perClient"`, the default: a `Peer` per client, which no other client reaches whatever rkeys
   * it guesses; `RdmaRpcClient` follows the server's rendezvous answer by itself) or in the
   * listener's peer (`"shared"`: a connected client can then read and write another client's
   * landing region, and its messages with it, by guessing its rkey). See `Listener.Isolation`.
   *
   * @since 1.0.0
   */
  readonly isolation?: Listener.Isolation | undefined
  /**
   * The ports isolated clients' listeners take, one per handshake under way: default the 64 after
   * the server's own (`Listener.ClientOptions.ports`).
   *
   * @since 1.0.0
   */
  readonly ports?: Admission.PortRange | undefined
  /**
   * How long a client has from its connection request to an open channel (accepted, the HELLOs
   * exchanged): one that posts no receive, or answers nothing, is dropped then, with a logged
   * warning. Clients are accepted concurrently, so a slow one keeps nobody else waiting. Measured
   * by the Clock. Default 10 seconds.
   *
   * @since 1.0.0
   */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
  /**
   * Handshakes under way at once (requests taken and not yet an open channel): while that many are,
   * the next request waits in the listener's backlog, so a flood of clients that connect and then
   * say nothing holds at most this many connections (each until `handshakeTimeout`) and the server
   * takes the next as soon as one ends. Clients with an open channel do not count. Default 64.
   *
   * @since 1.0.0
   */
  readonly maxHandshakes?: number | undefined
}

/**
 * Where to listen, and the settings of each client's connection and channel.
 *
 * @since 1.0.0
 * @category models
 */
export interface LayerOptions extends Options {
  readonly address: string
  readonly port: number
}

/**
 * A server protocol that accepts the connection requests on `endpoint` (those with the token of
 * `options.admission`, if given), one client each, each in a fiber of its own and within
 * `handshakeTimeout`, and in a protection domain of its own unless `isolation: "shared"`. A client whose connection ends is reported in `disconnects`, and its
 * connection and regions are released then. A request that cannot be accepted is logged.
 *
 * No client holds the server hostage: one that breaks the channel's rules (a malformed, truncated
 * or unknown frame, a message that is not an RPC message, a message beyond `maxMessageSize`) is
 * dropped with a logged warning saying why, and releases its connection and regions; what a client
 * can make the server hold is bounded (see {@link RdmaChannel.Options.maxMessageSize}); closing
 * the scope ends every client at once.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeProtocol: (
  endpoint: Listener.Listener,
  options?: Options
) => Effect.Effect<
  RpcServer.Protocol["Type"],
  RdmaChannel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.makeServerProtocol

/**
 * The server protocol as a Layer: listens with the context's `Peer` on `address`:`port` until the
 * Layer is released.
 *
 * @example
 * ```ts
 * import { Peer } from "@effect-rdma/core"
 * import { RdmaRpcServer } from "@effect-rdma/rpc"
 * import { RpcSerialization } from "@effect/rpc"
 * import { Layer } from "effect"
 *
 * const ProtocolLive = RdmaRpcServer.layerProtocol({ address: "192.168.77.1", port: 7480 }).pipe(
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
  RpcServer.Protocol,
  RdmaError.RpmaError | RdmaChannel.ChannelError,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.layerServerProtocol
