/**
 * Endpoints of librdmacm's verbs API (`<rdma/rdma_verbs.h>`): rdma_create_ep with a queue pair and
 * rdma_connect (a server's endpoints come from `CmListener`), the regions of rdma_reg_msgs(3)
 * on the endpoint's own protection domain, and rdma_post_send / rdma_post_recv / rdma_post_read /
 * rdma_post_write (and their `v` forms, immediate data, inline sends) through the same posting
 * kernel as librpma's connections: one Effect per operation, batches, posting without waiting,
 * unsignalled requests.
 *
 * Everything is scoped. Release order is rdma_reg_msgs(3)'s: the endpoint is disconnected, its
 * regions deregistered (each once no request in flight names it), then the endpoint destroyed
 * (queue pair, then identifier). Every wait is bounded by the endpoint's `timeout`. Operations
 * that take the endpoint first are dual: `CmEndpoint.send(ep, args)` or
 * `ep.pipe(CmEndpoint.send(args))`.
 *
 * @since 1.0.0
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import * as errors from "./CmEndpointError.js"
import type * as Connection from "./Connection.js"
import type { ConnectionClosedError, OutOfRangeError } from "./ConnectionError.js"
import type { RdmaDriver } from "./Driver.js"
import type { CmEpInfo, CmMrInfo, CmRegistrationKind, Signal } from "./DriverModel.js"
import * as internal from "./internal/cmEndpoint.js"
import * as posting from "./internal/cmPosting.js"
import * as registration from "./internal/cmRegistration.js"
import type * as Polling from "./Polling.js"
import type { CompletionError, MemoryRefusedError, RdmaCmError } from "./RdmaError.js"
import type * as RemoteKey from "./RemoteKey.js"

/**
 * @since 1.0.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 1.0.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * What marks a {@link Region}.
 *
 * @since 1.0.0
 * @category type ids
 */
export const RegionTypeId: unique symbol = registration.RegionTypeId

/**
 * @since 1.0.0
 * @category type ids
 */
export type RegionTypeId = typeof RegionTypeId

/**
 * Where an endpoint is in its life, as `RdmaClient.State` and librpma's `Connection` say it:
 * made, an incoming request not yet answered, or connecting (`Connecting`); `Connected`; ending
 * (`Closing`: disconnected, its requests draining); ended by either side's disconnect, a rejection
 * or a failed connect (`Closed`); or ended by a loss (`Lost`: the device went away, the completion
 * queue failed, or the other side stopped answering reads and writes). `Closed` and `Lost` are
 * final.
 *
 * @since 1.0.0
 * @category models
 */
export type State = "Connecting" | "Connected" | "Closing" | "Closed" | "Lost"

/**
 * An endpoint: an rdma_cm identifier with its queue pair, on a protection domain of its own. Its
 * state is read with {@link state}, {@link changes} and {@link awaitClosed}.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmEndpoint extends Pipeable {
  readonly [TypeId]: TypeId
  /** Its local address (for regions' metrics and logs). */
  readonly address: string
  /** Its queue pair number, the inline size granted, and the addresses of both sides. */
  readonly info: CmEpInfo
  /**
   * The private data of its last connection event: on an incoming request, the client's (padded
   * to 56 bytes by rdma_cm); once connected, the acceptance's (padded to 196); once rejected, the
   * rejection's.
   */
  readonly privateData: Uint8Array
}

/**
 * Whether a value is an endpoint.
 *
 * @since 1.0.0
 * @category refinements
 */
export const isCmEndpoint: (u: unknown) => u is CmEndpoint = internal.isCmEndpoint

/**
 * Whether a value is a region registered on an endpoint ({@link registerMessages},
 * {@link registerRead}, {@link registerWrite}).
 *
 * @since 1.0.0
 * @category refinements
 */
export const isRegion: (u: unknown) => u is Region = registration.isRegion

/**
 * An endpoint's settings: the queue pair's sizes (`struct ibv_qp_init_attr`'s `cap`) and the bound
 * of every wait (address and route resolution, connect, accept, the drain when it closes). A
 * listener's settings are those of every request it hands out.
 *
 * @since 1.0.0
 * @category models
 */
export interface Options {
  /** The bound of every wait, as `Connection`'s `timeout` is. Default 5 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Send-queue requests in flight at once (send, write, read). Default 64. */
  readonly maxSendWr?: number | undefined
  /** Receives posted at once. Default 64. */
  readonly maxRecvWr?: number | undefined
  /** Segments of one send, write or read. Default 4. */
  readonly maxSendSge?: number | undefined
  /** Segments of one receive. Default 4. */
  readonly maxRecvSge?: number | undefined
  /** Inline bytes asked for; the device may grant more (`info.maxInlineData`). Default 64. */
  readonly maxInlineData?: number | undefined
  /**
   * How often the device resends an unacknowledged request before it fails with
   * `IBV_WC_RETRY_EXC_ERR` (rdma_conn_param's `retry_count`), 0 to 7. Default 7. The connecting
   * side's value holds for the whole connection: the CM sends it with the request, an accept's is
   * not sent.
   */
  readonly retryCount?: number | undefined
  /**
   * How often the other side retries a send to this endpoint while this endpoint has no receive
   * posted (`rnr_retry_count`, as rdma_cm defines it), before that send fails there with
   * `IBV_WC_RNR_RETRY_EXC_ERR`; 0 to 7, and 7, the default, retries for ever. The simulated driver
   * fails such a send as soon as it finds no receive (it has no RNR timer).
   */
  readonly rnrRetryCount?: number | undefined
  /**
   * Reads the other side may have in flight against this endpoint (`responder_resources`), 0 to
   * 255. Default: the device's maximum; an accept takes at most what the request's initiator depth
   * asked for (rping asks 1).
   */
  readonly responderResources?: number | undefined
  /**
   * Reads this endpoint may have in flight (`initiator_depth`), 0 to 255. Default: the device's
   * maximum; an accept takes at most the request's responder resources.
   */
  readonly initiatorDepth?: number | undefined
  /**
   * How it waits for completions: `"off"` (arm the completion channel and wait), `{ budget }`
   * (busy-poll up to `budget`, at most 10 ms, before each wait) or `"adaptive"` / `{ budget,
   * adaptive: true }` (the budget shrinks to 0 while polls find nothing, so an idle one costs no
   * CPU). One wake-up holds the event loop at most `budget`. Default: `Polling.layer`'s, else
   * `"off"` (see the Polling module).
   */
  readonly polling?: Polling.Polling | undefined
}

/**
 * What rdma_connect sends ({@link establish}).
 *
 * @since 1.0.0
 * @category models
 */
export interface EstablishOptions {
  /** Private data for the other side's request (at most 56 bytes). */
  readonly privateData?: Uint8Array | undefined
}

/**
 * {@link connect}'s options: the endpoint's settings and what rdma_connect sends.
 *
 * @since 1.0.0
 * @category models
 */
export interface ConnectOptions extends Options, EstablishOptions {}

/**
 * A region registered on an endpoint: `"msgs"` ones are sent, received into, and the local side of
 * a read or a write; `"read"` / `"write"` ones only the target of the other side's read / write
 * (export them with `RemoteKey.make`).
 *
 * @since 1.0.0
 * @category models
 */
export interface Region<K extends CmRegistrationKind = CmRegistrationKind> extends CmMrInfo, Pipeable {
  readonly [RegionTypeId]: RegionTypeId
  /** Which call made it: rdma_reg_msgs, rdma_reg_read or rdma_reg_write. */
  readonly kind: K
  /** The endpoint whose protection domain it is registered on: the only one that can post it. */
  readonly endpoint: CmEndpoint
  readonly memory: Uint8Array
}

/**
 * A region of rdma_reg_msgs on an endpoint.
 *
 * @since 1.0.0
 * @category models
 */
export type MessageRegion = Region<"msgs">

/**
 * A part of a message region in a request: `offset` default 0, `length` default the rest.
 *
 * @since 1.0.0
 * @category models
 */
export interface Segment {
  readonly mr: MessageRegion
  readonly offset?: number | undefined
  readonly length?: number | undefined
}

/**
 * A part of what a send or a write sends: a message region's bytes, or plain bytes (any
 * `Uint8Array`, registered or not), which go inline: copied when the request is posted
 * (IBV_SEND_INLINE, as rdma_post_send takes unregistered memory for an inline send), so at most the
 * granted inline size (`info.maxInlineData`) in all. `offset` default 0, `length` default the rest.
 *
 * @since 1.0.0
 * @category models
 */
export interface SourceSegment {
  readonly mr: MessageRegion | Uint8Array
  readonly offset?: number | undefined
  readonly length?: number | undefined
}

/**
 * rdma_post_send of one region's bytes, or of plain bytes inline ({@link SourceSegment}); `imm`:
 * with immediate data; `inline`: by default a message of at most the granted inline size goes
 * inline (copied when posted), `false` never (refused for plain bytes), `true` always (refused when
 * larger).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CmEndpoint } from "@effect-rdma/core"
 *
 * // A short message straight from a string's bytes: no region, copied when posted.
 * const hello = (ep: CmEndpoint.CmEndpoint) => {
 *   const bytes = new TextEncoder().encode("hello")
 *   return CmEndpoint.send(ep, { src: bytes, length: bytes.byteLength })
 * }
 * ```
 *
 * @since 1.0.0
 * @category models
 */
export interface SendArgs {
  readonly src: MessageRegion | Uint8Array
  readonly offset?: number | undefined
  readonly length: number
  readonly imm?: number | undefined
  readonly inline?: boolean | undefined
  /** Posted without waiting ({@link postSend}): `"onError"` leaves it unsignalled. */
  readonly completion?: Signal | undefined
}

/**
 * rdma_post_sendv: one message gathered from several segments (plain bytes among them go inline).
 *
 * @since 1.0.0
 * @category models
 */
export interface SendvArgs {
  readonly segments: ReadonlyArray<SourceSegment>
  readonly imm?: number | undefined
  readonly inline?: boolean | undefined
  readonly completion?: Signal | undefined
}

/**
 * rdma_post_recv into one region (`length` default: the rest of it).
 *
 * @since 1.0.0
 * @category models
 */
export interface RecvArgs {
  readonly dst: MessageRegion
  readonly offset?: number | undefined
  readonly length?: number | undefined
}

/**
 * rdma_post_recvv: one message scattered over several segments.
 *
 * @since 1.0.0
 * @category models
 */
export interface RecvvArgs {
  readonly segments: ReadonlyArray<Segment>
}

/**
 * rdma_post_write of local bytes (a message region's, or plain bytes inline: {@link SourceSegment})
 * to the other side's region; `imm`: with immediate data (it consumes a receive on the other side,
 * which completes with it).
 *
 * @since 1.0.0
 * @category models
 */
export interface WriteArgs {
  readonly src: MessageRegion | Uint8Array
  readonly srcOffset?: number | undefined
  readonly dst: RemoteKey.RemoteKey<"write">
  readonly dstOffset?: number | undefined
  readonly length: number
  readonly imm?: number | undefined
  readonly inline?: boolean | undefined
  readonly completion?: Signal | undefined
}

/**
 * rdma_post_read of the other side's region into local bytes.
 *
 * @since 1.0.0
 * @category models
 */
export interface ReadArgs {
  readonly dst: MessageRegion
  readonly dstOffset?: number | undefined
  readonly src: RemoteKey.RemoteKey<"read">
  readonly srcOffset?: number | undefined
  readonly length: number
  readonly completion?: Signal | undefined
}

/**
 * A request/response round trip's two requests ({@link call}, {@link reply}): the message to
 * send, and the receive posted with it (one segment or several each). The send is always
 * signalled (its `completion` is not read).
 *
 * @since 1.0.0
 * @category models
 */
export interface ExchangeArgs {
  readonly send: SendArgs | SendvArgs
  readonly recv: RecvArgs | RecvvArgs
}

/**
 * A request posted without waiting: its completion may be awaited any number of times, or never
 * (it keeps its regions registered until it completes or the endpoint is closed).
 *
 * @since 1.0.0
 * @category models
 */
export interface Posted {
  readonly operation: string
  readonly completion: Effect.Effect<Connection.Completion, TransferError>
}

/**
 * @since 1.0.0
 * @category errors
 */
export const CmRegionError: typeof errors.CmRegionError = errors.CmRegionError
/**
 * A region (or remote key) a request cannot use, refused before anything is posted.
 *
 * @since 1.0.0
 * @category errors
 */
export type CmRegionError = errors.CmRegionError
/**
 * @since 1.0.0
 * @category errors
 */
export const RemoteKeyRefusedError: typeof errors.RemoteKeyRefusedError = errors.RemoteKeyRefusedError
/**
 * The other side's device refused the remote key (IBV_WC_REM_ACCESS_ERR).
 *
 * @since 1.0.0
 * @category errors
 */
export type RemoteKeyRefusedError = errors.RemoteKeyRefusedError

/**
 * What an operation can fail with: a check before posting (range, region, immediate data), the
 * endpoint's end, the completion's status, the driver's refusal of the post, or the other side
 * refusing a remote key.
 *
 * @since 1.0.0
 * @category errors
 */
export type TransferError =
  | OutOfRangeError
  | CmRegionError
  | ConnectionClosedError
  | CompletionError
  | RdmaCmError
  | RemoteKeyRefusedError

/**
 * rdma_getaddrinfo + rdma_create_ep with a queue pair, scoped: nothing is connected yet, so
 * regions can be registered and receives posted before {@link establish}.
 *
 * @example
 * ```ts
 * import { CmEndpoint } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // A receive posted before the connection exists: the server may answer at once.
 * const hello = Effect.scoped(Effect.gen(function*() {
 *   const ep = yield* CmEndpoint.make("192.168.77.1", 7471)
 *   const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
 *   const reply = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
 *   yield* CmEndpoint.establish(ep, { privateData: new TextEncoder().encode("hello") })
 *   const { byteLength } = yield* reply.completion
 *   return inbox.memory.slice(0, byteLength)
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: (
  address: string,
  port: number,
  options?: Options
) => Effect.Effect<CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.make

/**
 * rdma_connect of an endpoint from {@link make}, with `privateData` (at most 56 bytes), waiting at
 * most the endpoint's timeout: refused by the other side, RdmaCmError ECONNREFUSED (its private
 * data in `privateData`); nobody there, EHOSTUNREACH; no answer, ETIMEDOUT. Interrupted, the
 * endpoint stays to be closed by its scope.
 *
 * @since 1.0.0
 * @category constructors
 */
export const establish: {
  // Data-first first: an endpoint also matches the options (its privateData), so its overload goes first.
  (self: CmEndpoint, options?: EstablishOptions): Effect.Effect<void, RdmaCmError, RdmaDriver>
  (options?: EstablishOptions): (self: CmEndpoint) => Effect.Effect<void, RdmaCmError, RdmaDriver>
} = internal.establish

/**
 * {@link make} then {@link establish}: for a client that posts no receive before it connects.
 *
 * @example
 * ```ts
 * import { CmEndpoint } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Sends one message, then waits until the server disconnects.
 * const tell = (message: Uint8Array) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const ep = yield* CmEndpoint.connect("192.168.77.1", 7471)
 *     const outbox = yield* CmEndpoint.registerMessages(ep, message)
 *     yield* CmEndpoint.send(ep, { src: outbox, length: message.byteLength })
 *     return yield* CmEndpoint.awaitClosed(ep)
 *   }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const connect: (
  address: string,
  port: number,
  options?: ConnectOptions
) => Effect.Effect<CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.connect

/**
 * The endpoint's state now.
 *
 * @since 1.0.0
 * @category getters
 */
export const state: (self: CmEndpoint) => Effect.Effect<State> = internal.state

/**
 * The endpoint's state now, then each change; the stream ends with the final state (`Closed` or
 * `Lost`).
 *
 * @since 1.0.0
 * @category getters
 */
export const changes: (self: CmEndpoint) => Stream.Stream<State> = internal.changes

/**
 * Waits until the endpoint has ended, and answers how: `Closed` when either side disconnected (the
 * other side's rdma_disconnect or destroy, or {@link close}), a rejection or a failed connect;
 * `Lost` when the device went away or the other side stopped answering reads and writes. Answers at
 * once if it has ended already. It waits for the other side as long as the connection lives: bound
 * it (`Effect.timeout`) where that is too long.
 *
 * @since 1.0.0
 * @category getters
 */
export const awaitClosed: (self: CmEndpoint) => Effect.Effect<State> = internal.awaitClosed

/**
 * rdma_disconnect, then what is posted drains (at most the endpoint's timeout) and what is left
 * fails with `ConnectionClosedError`; an unanswered request is rejected instead. Idempotent: a
 * second close waits for the first. The endpoint's scope calls it before it destroys the endpoint.
 *
 * @since 1.0.0
 * @category destructors
 */
export const close: (self: CmEndpoint) => Effect.Effect<void> = internal.close

/**
 * rdma_reg_msgs on the endpoint's protection domain: buffers to send, receive into, and read or
 * write the other side's regions with. Deregistered when the scope closes and no request uses it.
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerMessages: {
  (memory: Uint8Array): (
    self: CmEndpoint
  ) => Effect.Effect<MessageRegion, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
  (
    self: CmEndpoint,
    memory: Uint8Array
  ): Effect.Effect<MessageRegion, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
} = registration.registerMessages

/**
 * rdma_reg_read: memory the other side may read (export it with `RemoteKey.make`).
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerRead: {
  (memory: Uint8Array): (
    self: CmEndpoint
  ) => Effect.Effect<Region<"read">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
  (
    self: CmEndpoint,
    memory: Uint8Array
  ): Effect.Effect<Region<"read">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
} = registration.registerRead

/**
 * rdma_reg_write: memory the other side may write (export it with `RemoteKey.make`).
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerWrite: {
  (memory: Uint8Array): (
    self: CmEndpoint
  ) => Effect.Effect<Region<"write">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
  (
    self: CmEndpoint,
    memory: Uint8Array
  ): Effect.Effect<Region<"write">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
} = registration.registerWrite

/**
 * rdma_post_send, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const send: {
  (args: SendArgs): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, args: SendArgs): Effect.Effect<void, TransferError>
} = posting.send

/**
 * rdma_post_sendv, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const sendv: {
  (args: SendvArgs): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, args: SendvArgs): Effect.Effect<void, TransferError>
} = posting.sendv

/**
 * rdma_post_recv, awaited: the completion (bytes received, immediate data).
 *
 * @since 1.0.0
 * @category operations
 */
export const recv: {
  (args: RecvArgs): (self: CmEndpoint) => Effect.Effect<Connection.Completion, TransferError>
  (self: CmEndpoint, args: RecvArgs): Effect.Effect<Connection.Completion, TransferError>
} = posting.recv

/**
 * rdma_post_recvv, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const recvv: {
  (args: RecvvArgs): (self: CmEndpoint) => Effect.Effect<Connection.Completion, TransferError>
  (self: CmEndpoint, args: RecvvArgs): Effect.Effect<Connection.Completion, TransferError>
} = posting.recvv

/**
 * rdma_post_write, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const write: {
  (args: WriteArgs): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, args: WriteArgs): Effect.Effect<void, TransferError>
} = posting.write

/**
 * rdma_post_read, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const read: {
  (args: ReadArgs): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, args: ReadArgs): Effect.Effect<void, TransferError>
} = posting.read

/**
 * A send posted without waiting: `send`'s arguments (one region or plain bytes) or `sendv`'s
 * (segments).
 *
 * @since 1.0.0
 * @category operations
 */
export const postSend: {
  (args: SendArgs | SendvArgs): (self: CmEndpoint) => Effect.Effect<Posted, TransferError>
  (self: CmEndpoint, args: SendArgs | SendvArgs): Effect.Effect<Posted, TransferError>
} = posting.postSend

/**
 * A receive posted without waiting (before connect or accept, say): `recv`'s arguments (one
 * region) or `recvv`'s (segments).
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: {
  (args: RecvArgs | RecvvArgs): (self: CmEndpoint) => Effect.Effect<Posted, TransferError>
  (self: CmEndpoint, args: RecvArgs | RecvvArgs): Effect.Effect<Posted, TransferError>
} = posting.postRecv

/**
 * A write posted without waiting.
 *
 * @since 1.0.0
 * @category operations
 */
export const postWrite: {
  (args: WriteArgs): (self: CmEndpoint) => Effect.Effect<Posted, TransferError>
  (self: CmEndpoint, args: WriteArgs): Effect.Effect<Posted, TransferError>
} = posting.postWrite

/**
 * A read posted without waiting.
 *
 * @since 1.0.0
 * @category operations
 */
export const postRead: {
  (args: ReadArgs): (self: CmEndpoint) => Effect.Effect<Posted, TransferError>
  (self: CmEndpoint, args: ReadArgs): Effect.Effect<Posted, TransferError>
} = posting.postRead

/**
 * A request and its answer: the answer's receive and the request's send posted in one driver call
 * (rdma_post_recv, then rdma_post_send: the receive first, so the answer cannot arrive before
 * it), then one wait for both. Succeeds with the answer's completion once both succeeded; fails
 * with the first failure to arrive (a failed request's error state flushes the other after it).
 *
 * The client's half of a request/response protocol, with one post and one wait where
 * {@link postRecv}, {@link send} and the receive's completion take two of each: what the
 * latency of a small round trip is made of. The other side answers with {@link reply}.
 *
 * Nothing is posted when either request fails its checks. If the device refuses the send after
 * the receive was posted (rare: a queue pair that has just failed), the call fails with the
 * refusal and the receive stays posted, holding its region, until a message fills it or the
 * endpoint ends.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CmEndpoint } from "@effect-rdma/core"
 *
 * // One 64-byte request out of the region's first half, its answer into the second.
 * const ask = (ep: CmEndpoint.CmEndpoint, mr: CmEndpoint.MessageRegion) =>
 *   Effect.map(
 *     CmEndpoint.call(ep, {
 *       send: { src: mr, offset: 0, length: 64 },
 *       recv: { dst: mr, offset: 64, length: 64 }
 *     }),
 *     (answer) => mr.memory.subarray(64, 64 + answer.byteLength)
 *   )
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const call: {
  (args: ExchangeArgs): (self: CmEndpoint) => Effect.Effect<Connection.Completion, TransferError>
  (self: CmEndpoint, args: ExchangeArgs): Effect.Effect<Connection.Completion, TransferError>
} = posting.call

/**
 * The server's half of a request/response protocol: the next request's receive and this answer's
 * send posted in one driver call (the receive first), then a wait for the send. Succeeds with the
 * receive's ticket: await its completion for the next request.
 *
 * Fails as {@link call} does. When the send fails after the receive was posted, the receive's
 * ticket is not returned: the receive stays posted, holding its region, until a message fills it
 * or the endpoint ends (a send that failed on the device puts the queue pair in its error state,
 * which flushes it at once).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { CmEndpoint } from "@effect-rdma/core"
 *
 * // Echoes every request back, from two halves of one region in turn.
 * const echo = (ep: CmEndpoint.CmEndpoint, mr: CmEndpoint.MessageRegion) =>
 *   Effect.gen(function*() {
 *     let next = yield* CmEndpoint.postRecv(ep, { segments: [{ mr, offset: 0, length: 64 }] })
 *     for (let slot = 0;; slot = 1 - slot) {
 *       const request = yield* next.completion
 *       next = yield* CmEndpoint.reply(ep, {
 *         recv: { dst: mr, offset: (1 - slot) * 64, length: 64 },
 *         send: { src: mr, offset: slot * 64, length: request.byteLength }
 *       })
 *     }
 *   })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const reply: {
  (args: ExchangeArgs): (self: CmEndpoint) => Effect.Effect<Posted, TransferError>
  (self: CmEndpoint, args: ExchangeArgs): Effect.Effect<Posted, TransferError>
} = posting.reply

/**
 * Sends of one kind (all with immediate data, or none) in one batch: posted as the send queue
 * allows, one wait for all; the first failure once every posted one has its outcome.
 *
 * @since 1.0.0
 * @category operations
 */
export const sendMany: {
  (sends: ReadonlyArray<SendArgs>): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, sends: ReadonlyArray<SendArgs>): Effect.Effect<void, TransferError>
} = posting.sendMany

/**
 * Receives in one batch; succeeds once every one has received.
 *
 * @since 1.0.0
 * @category operations
 */
export const recvMany: {
  (recvs: ReadonlyArray<RecvArgs>): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, recvs: ReadonlyArray<RecvArgs>): Effect.Effect<void, TransferError>
} = posting.recvMany

/**
 * Writes of one kind in one batch.
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany: {
  (writes: ReadonlyArray<WriteArgs>): (self: CmEndpoint) => Effect.Effect<void, TransferError>
  (self: CmEndpoint, writes: ReadonlyArray<WriteArgs>): Effect.Effect<void, TransferError>
} = posting.writeMany
