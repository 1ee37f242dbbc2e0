/**
 * Endpoints of librdmacm's verbs API (`<rdma/rdma_verbs.h>`): rdma_create_ep with a queue pair,
 * rdma_connect / rdma_listen + rdma_get_request + rdma_accept or rdma_reject, the regions of
 * rdma_reg_msgs(3) on the endpoint's own protection domain, and rdma_post_send / rdma_post_recv /
 * rdma_post_read / rdma_post_write (and their `v` forms, immediate data, inline sends) through the
 * same posting kernel as librpma's connections: one Effect per operation, batches, posting
 * without waiting, unsignalled requests.
 *
 * Everything is scoped. Release order is rdma_reg_msgs(3)'s: the endpoint is disconnected, its
 * regions deregistered (each once no request in flight names it), then the endpoint destroyed
 * (queue pair, then identifier); a listener after the requests it handed out, which are rejected
 * if still unanswered. Every wait is bounded by the endpoint's `timeout`.
 *
 * @since 1.0.0
 */
import * as Effect from "effect/Effect"
import type * as Duration from "effect/Duration"
import type * as Scope from "effect/Scope"
import type { CmMr } from "./CmId.js"
import * as errors from "./CmEndpointError.js"
import type * as Connection from "./Connection.js"
import type { ConnectionClosedError, OutOfRangeError } from "./ConnectionError.js"
import type { CmEpConfig, CmEpHandle, CmEpInfo, CmListenerHandle, Signal } from "./DriverModel.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/cmEndpoint.js"
import * as posting from "./internal/cmPosting.js"
import * as serving from "./internal/cmServe.js"
import { register } from "./internal/cmRegistration.js"
import * as keys from "./internal/cmRemoteKey.js"
import type { CompletionError, MemoryRefusedError, RdmaCmError } from "./RdmaError.js"

/**
 * Where an endpoint is in its life: made and not yet connected (`created`), an incoming request
 * not yet answered (`request`), connecting or accepting, connected, or done with.
 *
 * @since 1.0.0
 * @category models
 */
export type State = "created" | "request" | "connecting" | "connected" | "rejected" | "failed" | "closed"

/**
 * An endpoint: an rdma_cm identifier with its queue pair, on a protection domain of its own.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmEndpoint {
  readonly handle: CmEpHandle
  /** Its local address (for regions' metrics and logs). */
  readonly address: string
  /** Its queue pair number, the inline size granted, and the addresses of both sides. */
  readonly info: CmEpInfo
  /** Where it is in its life. */
  readonly state: State
  /**
   * The private data of its last connection event: on an incoming request, the client's (padded
   * to 56 bytes by rdma_cm); once connected, the acceptance's (padded to 196).
   */
  readonly privateData: Uint8Array
}

/**
 * A listener (rdma_listen) and the port it listens on.
 *
 * @since 1.0.0
 * @category models
 */
export interface Listener {
  readonly handle: CmListenerHandle
  readonly address: string
  /** The port it listens on: the system's choice when 0 was asked for. */
  readonly port: number
  /** @internal */
  readonly config: CmEpConfig
  /** @internal Requests handed out and not answered yet: rejected when the listener closes. */
  readonly unanswered: Set<CmEndpoint>
}

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
}

/**
 * A region registered on an endpoint: `"msgs"` ones are sent, received into, and the local side of
 * a read or a write; `"read"` / `"write"` ones only the target of the other side's read / write.
 *
 * @since 1.0.0
 * @category models
 */
export type Region<K extends "msgs" | "read" | "write" = "msgs" | "read" | "write"> = CmMr<K, CmEndpoint>

/**
 * A region of rdma_reg_msgs on an endpoint.
 *
 * @since 1.0.0
 * @category models
 */
export type MessageRegion = Region<"msgs">

/**
 * The other side's region as a key: address, length, rkey and the access it allows. Exported from a
 * region of rdma_reg_read / rdma_reg_write with {@link remoteKey}, carried as bytes
 * ({@link encodeRemoteKey}, {@link decodeRemoteKey}).
 *
 * @since 1.0.0
 * @category models
 */
export interface RemoteKey<A extends "read" | "write" = "read" | "write"> {
  readonly address: bigint
  readonly length: bigint
  readonly rkey: number
  readonly access: A
}

/**
 * The field of a remote key's bytes that {@link decodeRemoteKey} refused.
 *
 * @since 1.0.0
 * @category models
 */
export type RemoteKeyField = errors.InvalidRemoteKeyError["field"]

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
 * rdma_post_send of one region's bytes; `imm`: with immediate data; `inline`: by default a message
 * of at most the granted inline size goes inline (copied when posted), `false` never, `true`
 * always (refused when larger).
 *
 * @since 1.0.0
 * @category models
 */
export interface SendArgs {
  readonly src: MessageRegion
  readonly offset?: number | undefined
  readonly length: number
  readonly imm?: number | undefined
  readonly inline?: boolean | undefined
  /** Posted without waiting ({@link postSend}): `"onError"` leaves it unsignalled. */
  readonly completion?: Signal | undefined
}

/**
 * rdma_post_sendv: one message gathered from several segments.
 *
 * @since 1.0.0
 * @category models
 */
export interface SendvArgs {
  readonly segments: ReadonlyArray<Segment>
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
 * rdma_post_write of local bytes to the other side's region; `imm`: with immediate data (it
 * consumes a receive on the other side, which completes with it).
 *
 * @since 1.0.0
 * @category models
 */
export interface WriteArgs {
  readonly src: MessageRegion
  readonly srcOffset?: number | undefined
  readonly dst: RemoteKey<"write">
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
  readonly src: RemoteKey<"read">
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
 * @since 1.0.0
 * @category errors
 */
export const ClientGoneError: typeof errors.ClientGoneError = errors.ClientGoneError
/**
 * An accept of a request whose client has gone (gave up, closed its endpoint, was killed): the
 * request is spent; take the next one.
 *
 * @since 1.0.0
 * @category errors
 */
export type ClientGoneError = errors.ClientGoneError
/**
 * @since 1.0.0
 * @category errors
 */
export const InvalidRemoteKeyError: typeof errors.InvalidRemoteKeyError = errors.InvalidRemoteKeyError
/**
 * Bytes that are not a remote key, with the field that is wrong.
 *
 * @since 1.0.0
 * @category errors
 */
export type InvalidRemoteKeyError = errors.InvalidRemoteKeyError

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
 * receives can be posted before {@link connect}.
 *
 * @since 1.0.0
 * @category constructors
 */
export const create: (
  address: string,
  port: number,
  options?: Options
) => Effect.Effect<CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.create

/**
 * rdma_connect with `privateData` (at most 56 bytes), waiting at most the endpoint's timeout:
 * refused by the other side, RdmaCmError ECONNREFUSED (its private data in `privateData`);
 * nobody there, EHOSTUNREACH; no answer, ETIMEDOUT.
 *
 * @since 1.0.0
 * @category constructors
 */
export const connect: (
  ep: CmEndpoint,
  privateData?: Uint8Array
) => Effect.Effect<void, RdmaCmError, RdmaDriver> = internal.connect

/**
 * {@link create} then {@link connect}: for a client that posts no receive before it connects.
 *
 * @since 1.0.0
 * @category constructors
 */
export const open = (
  address: string,
  port: number,
  options?: Options & { readonly privateData?: Uint8Array | undefined }
): Effect.Effect<CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.tap(create(address, port, options), (ep) => connect(ep, options?.privateData))

/**
 * rdma_listen on `address`:`port` (0: the system chooses; see `port`), scoped.
 *
 * @example
 * ```ts
 * import { CmEndpoint } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Answers one client's messages with their length, until it disconnects.
 * const serveOne = (listener: CmEndpoint.Listener) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const request = yield* CmEndpoint.next(listener)
 *     const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4096))
 *     const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4))
 *     // A receive posted before the accept: the client may send at once.
 *     let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *     yield* CmEndpoint.accept(request)
 *     for (;;) {
 *       const { byteLength } = yield* next.completion
 *       next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *       new DataView(outbox.memory.buffer).setUint32(0, byteLength, true)
 *       yield* CmEndpoint.send(request, { src: outbox, length: 4 })
 *     }
 *   })).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))
 *
 * export const server = Effect.scoped(Effect.gen(function*() {
 *   const listener = yield* CmEndpoint.listen("192.168.77.1", 0)
 *   yield* Effect.logInfo(`listening on port ${listener.port}`)
 *   yield* Effect.forever(serveOne(listener))
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const listen: (
  address: string,
  port: number,
  options?: Options
) => Effect.Effect<Listener, RdmaCmError, RdmaDriver | Scope.Scope> = internal.listen

/**
 * rdma_get_request: the next incoming request as an endpoint (state `request`, the client's
 * private data in `privateData`), scoped: rejected when its scope closes unanswered. Receives may
 * be posted on it before {@link accept}. Waits until a request comes (interruptible). A server
 * taking requests one after another, several at once, is {@link serve}.
 *
 * @since 1.0.0
 * @category constructors
 */
export const next: (
  listener: Listener
) => Effect.Effect<CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.next

/**
 * How {@link serve} runs its handlers.
 *
 * @since 1.0.0
 * @category models
 */
export interface ServeOptions {
  /**
   * Requests handled at once; the next is taken from the listener only when a handler is done
   * (the others wait in the CM's backlog). Default `"unbounded"`.
   */
  readonly concurrency?: number | "unbounded" | undefined
}

/**
 * Serves a listener: every incoming request ({@link next}) goes to `handler` in a fiber and a scope
 * of its own, which the handler may use (regions, receives posted before {@link accept}). When the
 * handler ends, its scope closes: the request is rejected if it was not answered, disconnected and
 * destroyed if it was. At most `concurrency` requests are handled at once.
 *
 * It runs until interrupted, or until it fails: with the listener's failure, or the first failure
 * of a handler (the others are interrupted, every request released), as @effect/platform's
 * `SocketServer.run` does. Catch in the handler what should not stop the server (a
 * `ConnectionClosedError` when the client leaves, say); a {@link ClientGoneError} from its accept
 * only ends that request. Interrupted, it leaves nothing alive.
 *
 * @example
 * ```ts
 * import { CmEndpoint } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Answers each client's messages with their length, eight clients at a time.
 * const answer = (request: CmEndpoint.CmEndpoint) =>
 *   Effect.gen(function*() {
 *     const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4096))
 *     const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4))
 *     let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *     yield* CmEndpoint.accept(request)
 *     for (;;) {
 *       const { byteLength } = yield* next.completion
 *       next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *       new DataView(outbox.memory.buffer).setUint32(0, byteLength, true)
 *       yield* CmEndpoint.send(request, { src: outbox, length: 4 })
 *     }
 *   }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))
 *
 * export const server = Effect.scoped(Effect.gen(function*() {
 *   const listener = yield* CmEndpoint.listen("192.168.77.1", 0)
 *   yield* Effect.logInfo(`listening on port ${listener.port}`)
 *   return yield* CmEndpoint.serve(listener, answer, { concurrency: 8 })
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const serve: <A, E, R>(
  listener: Listener,
  handler: (request: CmEndpoint) => Effect.Effect<A, E, R>,
  options?: ServeOptions
) => Effect.Effect<never, RdmaCmError | Exclude<E, ClientGoneError>, RdmaDriver | Exclude<R, Scope.Scope>> =
  serving.serve

/**
 * rdma_accept with `privateData` (at most 196 bytes), waiting at most the listener's timeout. A
 * request whose client has gone meanwhile fails with {@link ClientGoneError}: it is spent, take the
 * next one.
 *
 * @since 1.0.0
 * @category constructors
 */
export const accept: (
  request: CmEndpoint,
  privateData?: Uint8Array
) => Effect.Effect<void, RdmaCmError | ClientGoneError, RdmaDriver> = internal.accept

/**
 * rdma_reject with `privateData` (at most 148 bytes): the client's connect fails with ECONNREFUSED.
 *
 * @since 1.0.0
 * @category constructors
 */
export const reject: (
  request: CmEndpoint,
  privateData?: Uint8Array
) => Effect.Effect<void, RdmaCmError, RdmaDriver> = internal.reject

const registerAs = <K extends "msgs" | "read" | "write">(kind: K) =>
(ep: CmEndpoint, memory: Uint8Array): Effect.Effect<Region<K>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  register(kind, ep, internal.endpointOwner(ep), memory)

/**
 * rdma_reg_msgs on the endpoint's protection domain: buffers to send, receive into, and read or
 * write the other side's regions with. Deregistered when the scope closes and no request uses it.
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerMessages: (
  ep: CmEndpoint,
  memory: Uint8Array
) => Effect.Effect<MessageRegion, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("msgs")

/**
 * rdma_reg_read: memory the other side may read (export it with {@link remoteKey}).
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerRead: (
  ep: CmEndpoint,
  memory: Uint8Array
) => Effect.Effect<Region<"read">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("read")

/**
 * rdma_reg_write: memory the other side may write (export it with {@link remoteKey}).
 *
 * @since 1.0.0
 * @category constructors
 */
export const registerWrite: (
  ep: CmEndpoint,
  memory: Uint8Array
) => Effect.Effect<Region<"write">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("write")

/**
 * The key the other side needs to read (or write) a region of rdma_reg_read (rdma_reg_write).
 *
 * @since 1.0.0
 * @category getters
 */
export const remoteKey = <A extends "read" | "write">(mr: Region<A>): RemoteKey<A> => ({
  address: mr.address,
  length: BigInt(mr.length),
  rkey: mr.rkey,
  access: mr.kind
})

/**
 * A remote key's bytes (24, versioned) to send to the other side.
 *
 * @since 1.0.0
 * @category getters
 */
export const encodeRemoteKey: (key: RemoteKey) => Uint8Array = keys.encode

/**
 * A remote key from the bytes the other side sent, every field checked (a refusal names it); then
 * {@link requireAccess} narrows what it allows.
 *
 * @since 1.0.0
 * @category constructors
 */
export const decodeRemoteKey = (bytes: Uint8Array): Effect.Effect<RemoteKey, InvalidRemoteKeyError> =>
  Effect.suspend(() => {
    const decoded = keys.decode(bytes)
    return "field" in decoded ? Effect.fail(new errors.InvalidRemoteKeyError(decoded)) : Effect.succeed(decoded)
  })

/**
 * Checks that a remote key allows `access` and narrows its type.
 *
 * @since 1.0.0
 * @category refinements
 */
export const requireAccess = <A extends "read" | "write">(access: A) =>
(key: RemoteKey): Effect.Effect<RemoteKey<A>, InvalidRemoteKeyError> =>
  key.access === access
    ? Effect.succeed(key as RemoteKey<A>)
    : Effect.fail(
      new errors.InvalidRemoteKeyError({
        field: "access",
        detail: `the key allows a remote ${key.access}, not a ${access}: ask for a key of a region from rdma_reg_${access}`
      })
    )

/**
 * rdma_post_send, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const send: (ep: CmEndpoint, args: SendArgs) => Effect.Effect<void, TransferError> = posting.send

/**
 * rdma_post_sendv, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const sendv: (ep: CmEndpoint, args: SendvArgs) => Effect.Effect<void, TransferError> = posting.sendv

/**
 * rdma_post_recv, awaited: the completion (bytes received, immediate data).
 *
 * @since 1.0.0
 * @category operations
 */
export const recv: (ep: CmEndpoint, args: RecvArgs) => Effect.Effect<Connection.Completion, TransferError> =
  posting.recv

/**
 * rdma_post_recvv, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const recvv: (ep: CmEndpoint, args: RecvvArgs) => Effect.Effect<Connection.Completion, TransferError> =
  posting.recvv

/**
 * rdma_post_write, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const write: (ep: CmEndpoint, args: WriteArgs) => Effect.Effect<void, TransferError> = posting.write

/**
 * rdma_post_read, awaited.
 *
 * @since 1.0.0
 * @category operations
 */
export const read: (ep: CmEndpoint, args: ReadArgs) => Effect.Effect<void, TransferError> = posting.read

/**
 * A send (one segment or several) posted without waiting.
 *
 * @since 1.0.0
 * @category operations
 */
export const postSend: (ep: CmEndpoint, args: SendvArgs) => Effect.Effect<Posted, TransferError> = posting.postSend

/**
 * A receive posted without waiting (before connect or accept, say).
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: (ep: CmEndpoint, args: RecvvArgs) => Effect.Effect<Posted, TransferError> = posting.postRecv

/**
 * A write posted without waiting.
 *
 * @since 1.0.0
 * @category operations
 */
export const postWrite: (ep: CmEndpoint, args: WriteArgs) => Effect.Effect<Posted, TransferError> = posting.postWrite

/**
 * A read posted without waiting.
 *
 * @since 1.0.0
 * @category operations
 */
export const postRead: (ep: CmEndpoint, args: ReadArgs) => Effect.Effect<Posted, TransferError> = posting.postRead

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
export const call: (ep: CmEndpoint, args: ExchangeArgs) => Effect.Effect<Connection.Completion, TransferError> =
  posting.call

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
export const reply: (ep: CmEndpoint, args: ExchangeArgs) => Effect.Effect<Posted, TransferError> = posting.reply

/**
 * Sends of one kind (all with immediate data, or none) in one batch: posted as the send queue
 * allows, one wait for all; the first failure once every posted one has its outcome.
 *
 * @since 1.0.0
 * @category operations
 */
export const sendMany: (ep: CmEndpoint, sends: ReadonlyArray<SendArgs>) => Effect.Effect<void, TransferError> =
  posting.sendMany

/**
 * Receives in one batch; succeeds once every one has received.
 *
 * @since 1.0.0
 * @category operations
 */
export const recvMany: (ep: CmEndpoint, recvs: ReadonlyArray<RecvArgs>) => Effect.Effect<void, TransferError> =
  posting.recvMany

/**
 * Writes of one kind in one batch.
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany: (ep: CmEndpoint, writes: ReadonlyArray<WriteArgs>) => Effect.Effect<void, TransferError> =
  posting.writeMany
