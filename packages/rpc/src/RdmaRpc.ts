/**
 * @effect/rpc's client and server protocols over RDMA, on either path: `transport: "rpma"` (a
 * librpma connection: small messages sent, large ones written into the receiver's landing region,
 * see {@link RdmaChannel}) or `transport: "cm"` (a librdmacm endpoint, send and receive only).
 *
 * The `"cm"` transport's channel, kept small: each side registers a pool of `sends` send slots and
 * one of `receives` receive buffers (`inlineSize` bytes each: by default 8 + 16 of 32 KiB, 768
 * KiB per channel on each side) on its endpoint, and posts every receive before it connects or
 * accepts. Frames have the librpma channel's 8-byte header (kind, flags, sequence, length) and go
 * by rdma_post_send into the other side's posted receives, which its receive loop takes in order
 * and posts again. Each side sends HELLO first (its receive buffer size and count); a message that
 * fits the other side's buffer after the header goes in one frame, a larger one in pieces that
 * fit, posted in order (up to half the send slots in flight), the last one flagged. No region is
 * ever named to the other side (no rkeys), so a client reaches nothing of the server's memory.
 * Flow control is by credits: a side sends a frame only into a receive the other side has posted
 * (one credit per frame, from the other side's receive count), and the reader returns credits
 * for the receives it posts again in the header of its next frame, or in a CREDIT frame once it
 * owes half its receives; the last credit is kept for a frame that returns some, so neither side
 * is left waiting on the other. No frame meets a receiver-not-ready retry
 * (hundreds of milliseconds each on Soft-RoCE), and the channel works with `rnrRetryCount: 0`. A
 * sender that gets no credit back within `ackTimeout` (default 30 seconds) fails and closes the
 * connection. Both sides must run the same version of this package: a HELLO of an earlier one is
 * refused. A KEEPALIVE frame every `keepAlive` finds a dead path while a side only waits.
 *
 * The safety rules are the librpma transport's: a handshake (accept and both HELLOs) bounded by
 * `handshakeTimeout` and at most `maxHandshakes` at once; a message beyond `maxMessageSize`, or a
 * malformed, truncated or unknown frame, drops that client with a logged reason and releases its
 * endpoint and regions; closing the server's scope ends every client at once; the client re-dials
 * as `retrySchedule` says and fails the calls in flight with `RpcClientError` when its connection
 * ends.
 *
 * @since 1.0.0
 */
import type {
  Admission,
  CmEndpoint,
  CmListener,
  Connection,
  DescriptorExchange,
  Listener,
  Peer,
  RdmaError
} from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import type * as RpcClient from "@effect/rpc/RpcClient"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import type * as RpcServer from "@effect/rpc/RpcServer"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as internal from "./internal/rdmaRpc.js"
import type * as RdmaChannel from "./RdmaChannel.js"

/**
 * The `"cm"` transport's channel settings.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmChannelOptions {
  /**
   * Each receive buffer's (and send slot's) size: a message up to this less 8 bytes goes in one
   * frame, a larger one in pieces of this size. Default 32768 (32 KiB): with the default `receives`
   * and `sends`, (16 + 8) × 32 KiB = 768 KiB registered per channel on each side (the librpma
   * transport's landing region alone is 1 MiB); each frame is a send, a receive and its repost,
   * which cost far more than the bytes on an emulated device, so fewer, larger frames are faster.
   * 72 to 1 GiB (2^30); `receives` × `inlineSize` and `sends` × `inlineSize` (the two pools) must
   * each be at most 2^31 - 1 bytes.
   */
  readonly inlineSize?: number | undefined
  /**
   * Receives kept posted: the frames the other side can send ahead (its credits). 3 to 65536 (a
   * queue's most entries); default 16. They must fit the endpoint's `maxRecvWr`: the protocols size
   * it for them unless `endpoint.maxRecvWr` is given, and refuse a smaller one (a listener of your
   * own is taken as it is: make it with `maxRecvWr` at least `receives`).
   */
  readonly receives?: number | undefined
  /** Sends in flight at once. 1 to 65536 (a queue's most entries); default 8. */
  readonly sends?: number | undefined
  /**
   * The largest message taken from the other side, assembled: a larger one ends the channel (on the
   * server, drops that client). It bounds what the other side can make this side hold, as
   * {@link RdmaChannel.Options.maxMessageSize} does. Default 64 MiB.
   */
  readonly maxMessageSize?: number | undefined
  /**
   * How long a frame waits for a credit: a side that has spent the credits the other side gave it
   * (one per receive posted) waits for it to return some, as it posts its receives again. When none
   * comes within `ackTimeout`, the send fails, the connection is closed and the channel ends, all
   * with a `"Timeout"` ChannelError: on the client, the calls in flight fail with `RpcClientError`
   * (its `cause`) and it dials again as `retrySchedule` says; on the server, that client is dropped
   * with a logged warning. It also bounds how long the messages received before the channel's end
   * may take to be handed on. Measured by the Clock; a positive, finite duration (otherwise the
   * protocol fails with a `"Protocol"` ChannelError). Default 30 seconds.
   */
  readonly ackTimeout?: Duration.DurationInput | undefined
  /** How often a KEEPALIVE frame is sent, so a side that only waits finds a dead path. Default 5 seconds; `Duration.infinity`: never. */
  readonly keepAlive?: Duration.DurationInput | undefined
  /** The endpoint's settings (timeout, queue sizes, RNR retries, polling): the listener's on the server. */
  readonly endpoint?: CmEndpoint.Options | undefined
}

/**
 * Where a `"rpma"` client connects: an address and port (with the server's admission token, if it
 * has one), or an offer fetched on every connect.
 *
 * @since 1.0.0
 * @category models
 */
export type RpmaTarget<R = never> =
  | {
    readonly address: string
    readonly port: number
    /**
     * The server's admission token ({@link RpmaServerOptions.admission}), sent with every connect as
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
 * A client over librpma: a connection of the context's `Peer`, its channel's messages sent or
 * written into the server's landing region.
 *
 * @since 1.0.0
 * @category models
 */
export type RpmaClientOptions<R = never> = { readonly transport: "rpma" } & RdmaChannel.Options & RpmaTarget<R> & {
  /** The connection's settings (timeout, queue sizes, private data). */
  readonly connection?: Connection.Options | undefined
  /**
   * When to connect again after a failed connect or a lost connection, fed the failure; its delays
   * are the waits between attempts, and its end stops the client (every call then fails with the
   * last failure). Default as @effect/rpc's socket protocol: 500 ms growing by half each time, at
   * most 5 seconds apart, for ever.
   */
  readonly retrySchedule?: Schedule.Schedule<unknown, unknown> | undefined
  /**
   * How long opening the channel may take once connected (the server's HELLO, the first send):
   * beyond it the connect has failed. Default 10 seconds.
   */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
}

/**
 * A client over librdmacm.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmClientOptions extends CmChannelOptions {
  readonly transport: "cm"
  readonly address: string
  readonly port: number
  /** The server's admission token, sent with every connect as `Admission.privateData(token)`. */
  readonly token?: Uint8Array | undefined
  /**
   * When to dial again after a failed dial or a lost connection, fed the failure. Default as
   * @effect/rpc's socket protocol: 500 ms growing by half each time, at most 5 seconds apart, for ever.
   */
  readonly retrySchedule?: Schedule.Schedule<unknown, unknown> | undefined
  /** How long opening the channel may take once connected (both HELLOs). Default 10 seconds. */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
}

/**
 * Where and how a client connects, on either transport.
 *
 * @since 1.0.0
 * @category models
 */
export type ClientOptions<R = never> = RpmaClientOptions<R> | CmClientOptions

/**
 * How a `"rpma"` server takes its clients, whether it listens itself ({@link RpmaServerOptions})
 * or serves a listener the caller made ({@link makeRpmaProtocolServer}).
 *
 * @since 1.0.0
 * @category models
 */
export interface RpmaServingOptions extends RdmaChannel.Options {
  /**
   * The settings of each accepted connection. Settings core would refuse every accept for (a
   * `timeout`, queue size, `polling` or `privateData` out of range) fail the server when it is
   * made, before it listens, with core's own refusal (`RpmaInvalidError`; over the caller's
   * listener, {@link makeRpmaProtocolServer}, a `"Protocol"` RdmaChannelError with it as cause).
   * The same goes for `isolation` and `ports`, and for an `admission` that is no `Admission`
   * (a `"Protocol"` RdmaChannelError on both).
   */
  readonly connection?: Connection.Options | undefined
  /**
   * Accept only the connection requests that carry this admission's token (`Listener.accept` with
   * `{ admission }`; the client gives the token as {@link RpmaTarget}'s `token`); the others are
   * rejected, and logged at debug level (as `Listener.serve` logs them: a refused client is no
   * server problem). Without it, every request is accepted.
   */
  readonly admission?: Admission.Admission | undefined
  /**
   * Whether each client's connection, channel and regions live in a protection domain of their own
   * (`"perClient"`, the default: a `Peer` per client, which no other client reaches whatever rkeys
   * it guesses; the client follows the server's rendezvous answer by itself) or in the listener's
   * peer (`"shared"`: a connected client can then read and write another client's landing region,
   * and its messages with it, by guessing its rkey). See `Listener.Isolation`.
   */
  readonly isolation?: Listener.Isolation | undefined
  /**
   * The ports isolated clients' listeners take, one per handshake under way: default the 64 after
   * the server's own (`Listener.ClientOptions.ports`).
   */
  readonly ports?: Admission.PortRange | undefined
  /**
   * How long a client has from its connection request to an open channel (accepted, the HELLOs
   * exchanged): one that posts no receive, or answers nothing, is dropped then, with a logged
   * warning. Clients are accepted concurrently, so a slow one keeps nobody else waiting. Measured
   * by the Clock. Default 10 seconds.
   */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
  /**
   * Handshakes under way at once (requests taken and not yet an open channel): while that many are,
   * the next request waits in the listener's backlog, so a flood of clients that connect and then
   * say nothing holds at most this many connections (each until `handshakeTimeout`) and the server
   * takes the next as soon as one ends. Clients with an open channel do not count. Default 64.
   */
  readonly maxHandshakes?: number | undefined
}

/**
 * A server over librpma: a `Listener` of the context's `Peer` on `address:port`.
 *
 * @since 1.0.0
 * @category models
 */
export interface RpmaServerOptions extends RpmaServingOptions {
  readonly transport: "rpma"
  readonly address: string
  readonly port: number
}

/**
 * A server over librdmacm: every client's endpoint has a protection domain of its own (as
 * `CmListener`'s requests all do).
 *
 * @since 1.0.0
 * @category models
 */
export interface CmServerOptions extends CmChannelOptions {
  readonly transport: "cm"
  readonly address: string
  readonly port: number
  /** Accept only the requests that carry this admission's token; the others are rejected, and logged at debug level. */
  readonly admission?: Admission.Admission | undefined
  /** How long a client has from its request to an open channel (accepted, both HELLOs). Default 10 seconds. */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
  /** Handshakes under way at once; the next request waits in the backlog. Default 64. */
  readonly maxHandshakes?: number | undefined
}

/**
 * Where and how a server listens, on either transport.
 *
 * @since 1.0.0
 * @category models
 */
export type ServerOptions = RpmaServerOptions | CmServerOptions

/**
 * A client protocol that dials the server, and dials again as `retrySchedule` says after a failed
 * dial or a lost connection (the calls waiting then fail with `RpcClientError`, as over a socket).
 * The `"rpma"` transport connects with the context's `Peer`. Fails only for options out of range
 * (`RdmaChannelError`, `reason: "Protocol"`). Options whose transport is chosen at run time (a
 * {@link ClientOptions}) are taken too: the protocol then needs what either transport needs.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeProtocolClient: {
  (options: CmClientOptions): Effect.Effect<
    RpcClient.Protocol["Type"],
    RdmaChannel.ChannelError,
    Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  <R = never>(options: RpmaClientOptions<R>): Effect.Effect<
    RpcClient.Protocol["Type"],
    RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
  >
  <R = never>(options: ClientOptions<R>): Effect.Effect<
    RpcClient.Protocol["Type"],
    RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
  >
} = internal.makeProtocolClient as any

/**
 * A server protocol listening on `address`:`port` until the scope closes, one client per
 * connection, each in a fiber and a scope of its own. The `"rpma"` transport listens with the
 * context's `Peer`. Options whose transport is chosen at run time (a {@link ServerOptions}) are
 * taken too: the protocol then needs what either transport needs, and fails as either can.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeProtocolServer: {
  (options: CmServerOptions): Effect.Effect<
    RpcServer.Protocol["Type"],
    RdmaError.RdmaCmError | RdmaChannel.ChannelError,
    Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  (options: RpmaServerOptions): Effect.Effect<
    RpcServer.Protocol["Type"],
    RdmaError.RpmaError | RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  (options: ServerOptions): Effect.Effect<
    RpcServer.Protocol["Type"],
    RdmaError.RdmaCmError | RdmaError.RpmaError | RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
} = internal.makeProtocolServer as any

/**
 * {@link makeProtocolClient} as a Layer, as @effect/rpc's `RpcClient.layerProtocolSocket`.
 *
 * @example
 * ```ts
 * import { RdmaRpc } from "@effect-rdma/rpc"
 * import { RpcSerialization } from "@effect/rpc"
 * import { Layer, Schedule } from "effect"
 *
 * const ProtocolLive = RdmaRpc.layerProtocolClient({
 *   transport: "cm",
 *   address: "192.168.77.1",
 *   port: 7480,
 *   retrySchedule: Schedule.spaced("1 second")
 * }).pipe(Layer.provide(RpcSerialization.layerMsgPack))
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerProtocolClient: {
  (options: CmClientOptions): Layer.Layer<
    RpcClient.Protocol,
    RdmaChannel.ChannelError,
    RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  <R = never>(options: RpmaClientOptions<R>): Layer.Layer<
    RpcClient.Protocol,
    RdmaChannel.ChannelError,
    Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
  >
  <R = never>(options: ClientOptions<R>): Layer.Layer<
    RpcClient.Protocol,
    RdmaChannel.ChannelError,
    Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
  >
} = internal.layerProtocolClient as any

/**
 * {@link makeProtocolServer} as a Layer, as @effect/rpc's `RpcServer.layerProtocolSocketServer`.
 *
 * @example
 * ```ts
 * import { RdmaRpc } from "@effect-rdma/rpc"
 * import { RpcSerialization } from "@effect/rpc"
 * import { Layer } from "effect"
 *
 * const ProtocolLive = RdmaRpc.layerProtocolServer({ transport: "cm", address: "192.168.77.1", port: 7480 }).pipe(
 *   Layer.provide(RpcSerialization.layerMsgPack)
 * )
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerProtocolServer: {
  (options: CmServerOptions): Layer.Layer<
    RpcServer.Protocol,
    RdmaError.RdmaCmError | RdmaChannel.ChannelError,
    RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  (options: RpmaServerOptions): Layer.Layer<
    RpcServer.Protocol,
    RdmaError.RpmaError | RdmaChannel.ChannelError,
    Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
  (options: ServerOptions): Layer.Layer<
    RpcServer.Protocol,
    RdmaError.RdmaCmError | RdmaError.RpmaError | RdmaChannel.ChannelError,
    Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
  >
} = internal.layerProtocolServer as any

/**
 * The listener a `"cm"` server takes its clients from, made by the caller: for a port chosen by
 * the system (`CmListener.make(address, 0)`), or a listener shared with other uses.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeCmProtocolServer: (
  listener: CmListener.CmListener,
  options?: Omit<CmServerOptions, "transport" | "address" | "port" | "endpoint">
) => Effect.Effect<
  RpcServer.Protocol["Type"],
  RdmaChannel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.makeCmServerProtocol

/**
 * The listener a `"rpma"` server takes its clients from, made by the caller: for a port chosen by
 * the system, or a listener shared with other uses. Its clients are isolated as
 * {@link RpmaServingOptions.isolation} says.
 *
 * @since 1.0.0
 * @category constructors
 */
export const makeRpmaProtocolServer: (
  listener: Listener.Listener,
  options?: RpmaServingOptions
) => Effect.Effect<
  RpcServer.Protocol["Type"],
  RdmaChannel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> = internal.makeRpmaServerProtocol
