/**
 * What the driver's calls take and return ({@link Driver.Driver}): handles, configurations, work
 * requests and completions, and the helpers drivers build their calls with. Apart from the Tag so
 * that what the calls exchange can be read (and imported) without the service.
 *
 * @since 1.0.0
 */
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import type * as Driver from "./Driver.js"
import type { RpmaError } from "./RdmaError.js"

declare const HandleTypeId: unique symbol

/**
 * An opaque handle owned by a driver. `Kind` keeps handles of different kinds apart at compile
 * time; drivers check it again at run time.
 *
 * @since 0.1.0
 * @category models
 */
export interface Handle<Kind extends string> {
  readonly [HandleTypeId]: Kind
}

/**
 * `struct ibv_context *` as returned by rpma_utils_get_ibv_context. Owned by librdmacm's device
 * list: it needs no release.
 *
 * @since 0.1.0
 * @category models
 */
export type IbvContextHandle = Handle<"IbvContext">
/**
 * `struct rpma_peer *`.
 *
 * @since 0.1.0
 * @category models
 */
export type PeerHandle = Handle<"Peer">
/**
 * `struct rpma_mr_local *`.
 *
 * @since 0.1.0
 * @category models
 */
export type MrHandle = Handle<"MrLocal">
/**
 * `struct rpma_mr_remote *`.
 *
 * @since 0.1.0
 * @category models
 */
export type RemoteMrHandle = Handle<"MrRemote">
/**
 * `struct ibv_mr *` from rdma_reg_msgs / rdma_reg_read / rdma_reg_write.
 *
 * @since 0.1.0
 * @category models
 */
export type CmMrHandle = Handle<"CmMr">

/**
 * `struct rdma_cm_id *` with a queue pair: an endpoint of librdmacm's verbs API, made by
 * rdma_create_ep (active side) or taken from a listener by rdma_get_request (passive side). It has
 * its own protection domain (regions registered on it serve it alone), a send and a receive
 * completion queue, and their completion channels.
 *
 * @since 1.0.0
 * @category models
 */
export type CmEpHandle = Handle<"CmEp">

/**
 * `struct rdma_cm_id *` listening for connection requests (rdma_create_ep with RAI_PASSIVE, then
 * rdma_listen).
 *
 * @since 1.0.0
 * @category models
 */
export type CmListenerHandle = Handle<"CmListener">

/**
 * `struct rpma_ep *`: a listening endpoint.
 *
 * @since 0.1.0
 * @category models
 */
export type EndpointHandle = Handle<"Endpoint">
/**
 * `struct rpma_conn_req *`: an outgoing or incoming connection request.
 *
 * @since 0.1.0
 * @category models
 */
export type ConnReqHandle = Handle<"ConnReq">
/**
 * `struct rpma_conn *`.
 *
 * @since 0.1.0
 * @category models
 */
export type ConnHandle = Handle<"Conn">
/**
 * `struct rpma_srq *`: a shared receive queue, with its own receive completion queue.
 *
 * @since 1.0.0
 * @category models
 */
export type SrqHandle = Handle<"Srq">

/**
 * Where requests are posted ({@link Driver.Driver.postMany}): a connection's queue pair, a shared receive
 * queue (receives only), or an incoming connection request before it is accepted (receives only,
 * rpma_conn_req_recv: they complete on the connection's queue once it exists).
 *
 * @since 1.0.0
 * @category models
 */
export type PostQueue = ConnHandle | SrqHandle | ConnReqHandle

/**
 * Where completions are read ({@link Driver.Driver.pollCompletions}, {@link Driver.Driver.armCompletions}): a
 * connection's completion queue (and its receive completion queue, if it has one), or a shared
 * receive queue's receive completion queue.
 *
 * @since 1.0.0
 * @category models
 */
export type CompletionQueue = ConnHandle | SrqHandle

/**
 * A shared receive queue's settings (`struct rpma_srq_cfg`).
 *
 * @since 1.0.0
 * @category models
 */
export interface SrqConfig {
  /** Receives posted at once (rpma_srq_cfg_set_rq_size). */
  readonly rqSize: number
  /**
   * Its receive completion queue (rpma_srq_cfg_set_rcq_size). 0, as librpma allows: no queue of
   * its own; each receive completes on the receive CQ (or, without one, the CQ) of the connection
   * the message came on, read with that connection's completions and naming its queue pair
   * ({@link Completion.qpNum}); the queue itself then has no completions to poll or wait for.
   * Smaller than rqSize is accepted: see DriverArguments.srqConfig.
   */
  readonly rcqSize: number
}

/**
 * librpma's connection events (`enum rpma_conn_event`).
 *
 * @since 0.1.0
 * @category models
 */
export type ConnEvent = "ESTABLISHED" | "CLOSED" | "LOST" | "REJECTED" | "UNREACHABLE" | "UNDEFINED"

/**
 * Connection settings (`struct rpma_conn_cfg`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnConfig {
  /** Address and route resolution timeout, and the wait for a connection to be established. */
  readonly timeoutMs: number
  /** Send queue size: work requests (write, read, flush, atomic write, send) in flight at once. */
  readonly sqSize: number
  /** Receive queue size: receives posted at once. */
  readonly rqSize: number
  /** Completion queue size: at least sqSize + rqSize. */
  readonly cqSize: number
  /** The remote peer writes directly to persistent memory (rpma_peer_cfg_set_direct_write_to_pmem): allows persistent flushes. */
  readonly directWriteToPmem: boolean
  /**
   * rpma_conn_cfg_set_srq: the connection's receives come from this shared receive queue (a receive
   * posted on the connection itself is refused), and their completions from its receive CQ.
   */
  readonly srq?: SrqHandle | undefined
  /**
   * rpma_conn_cfg_set_rcq_size: receives complete on a receive CQ of this size, apart from the CQ
   * (0 or absent: on the CQ). {@link Driver.Driver.pollCompletions} and {@link Driver.Driver.armCompletions}
   * report the completions of both.
   */
  readonly rcqSize?: number | undefined
  /**
   * rpma_conn_cfg_set_compl_channel: one completion channel for the CQ and the receive CQ, its
   * events taken with rpma_conn_wait. Not with a shared receive queue (librpma refuses it).
   */
  readonly sharedCompletionChannel?: boolean | undefined
}

/**
 * When a send-queue request produces a completion: `"always"` (RPMA_F_COMPLETION_ALWAYS, the
 * default) or `"onError"` (RPMA_F_COMPLETION_ON_ERROR: an unsignalled request, whose success is
 * known only when a later signalled request on the same send queue completes, completions of a
 * reliable connection's send queue being in order).
 *
 * @since 1.0.0
 * @category models
 */
export type Signal = "always" | "onError"

/**
 * A work request to post on a connection. `id` comes back in its {@link Completion}. Offsets and
 * lengths are checked by core before a driver sees them.
 *
 * @since 0.1.0
 * @category models
 */
export type WorkRequest =
  | {
    readonly op: "write"
    readonly id: number
    readonly dst: RemoteMrHandle
    readonly dstOffset: number
    readonly src: MrHandle
    readonly srcOffset: number
    readonly length: number
    /** rpma_write_with_imm: consumes a receive on the other side, which completes with this value. */
    readonly imm?: number | undefined
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "read"
    readonly id: number
    readonly dst: MrHandle
    readonly dstOffset: number
    readonly src: RemoteMrHandle
    readonly srcOffset: number
    readonly length: number
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "flush"
    readonly id: number
    readonly dst: RemoteMrHandle
    readonly dstOffset: number
    readonly length: number
    readonly type: "visibility" | "persistent"
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "atomicWrite"
    readonly id: number
    readonly dst: RemoteMrHandle
    readonly dstOffset: number
    readonly value: Uint8Array
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "send"
    readonly id: number
    readonly src: MrHandle
    readonly offset: number
    readonly length: number
    /** rpma_send_with_imm. */
    readonly imm?: number | undefined
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "recv"
    readonly id: number
    readonly dst: MrHandle
    readonly offset: number
    readonly length: number
  }

/**
 * A work completion (`struct ibv_wc`): `status` is an `enum ibv_wc_status` (0 is success).
 *
 * @since 0.1.0
 * @category models
 */
export interface Completion {
  readonly id: number
  readonly status: number
  /** The bytes received, for a recv (also for one consumed by a write with immediate data). */
  readonly byteLength: number
  /** `enum ibv_wc_opcode` ({@link WcOpcode}); meaningful only when `status` is 0. */
  readonly opcode: number
  /** `ibv_wc.wc_flags` (IBV_WC_WITH_IMM = 2). */
  readonly flags: number
  /** The immediate data in host byte order, when `flags` has IBV_WC_WITH_IMM. */
  readonly imm?: number | undefined
  /**
   * `ibv_wc.qp_num`, on the completions of a shared receive queue: which connection the message
   * came on (see {@link Driver.Driver.connQpNum}). Absent on a connection's own completions; present
   * on those of its queue's receives that complete on its CQs (a queue with rcqSize 0): they
   * belong to the queue.
   */
  readonly qpNum?: number | undefined
}

/**
 * `enum ibv_wc_opcode`: what a completion completed.
 *
 * @since 1.0.0
 * @category models
 */
export const WcOpcode = {
  SEND: 0,
  RDMA_WRITE: 1,
  RDMA_READ: 2,
  RECV: 128,
  RECV_RDMA_WITH_IMM: 129
} as const

/**
 * `ibv_wc.wc_flags` bits.
 *
 * @since 1.0.0
 * @category models
 */
export const WcFlags = { WITH_IMM: 2 } as const

/**
 * What one {@link Driver.Driver.postMany} call did: the requests posted, the refusal that stopped it, and
 * the completions already queued right after the posts.
 *
 * @since 1.0.0
 * @category models
 */
export interface PostOutcome<E = RpmaError> {
  /** How many of the requests were posted, in order: all of them unless `error` is set. */
  readonly posted: number
  /** Why request number `posted` was refused (the post function's error); nothing after it was tried. */
  readonly error: E | undefined
  /** The completions queued right after the posts (rpma_cq_get_wc without waiting), possibly none. */
  readonly ready: ReadonlyArray<Completion>
  /** The completion queue failed when read: the connection cannot report completions any more. */
  readonly queueError: E | undefined
  /**
   * The driver's synchronous answers have kept the event loop from its I/O phase for too long (a
   * loop of posts whose completions are always already queued): the caller should let the loop
   * turn (setImmediate) before it goes on.
   */
  readonly turnDue: boolean
}

/**
 * Called once by {@link Driver.Driver.armCompletions}: the completions queued (at least one), or the
 * completion channel's failure.
 *
 * @since 1.0.0
 * @category models
 */
export type CompletionsReady<E = RpmaError> = (ready: Exit.Exit<ReadonlyArray<Completion>, E>) => void

/**
 * The longest busy-poll a driver takes ({@link Driver.Driver.spinCompletions}), in nanoseconds:
 * 10 ms. A spin holds the event loop for its whole budget when nothing arrives.
 *
 * @since 1.0.0
 * @category models
 */
export const MAX_SPIN_NS = 10_000_000

/**
 * What a busy-poll found ({@link Driver.Driver.spinCompletions}): the completions (none when the
 * budget ran out first), or the failure (a bad budget, a failed completion queue).
 *
 * @since 1.0.0
 * @category models
 */
export type SpinOutcome<E = RpmaError> = Exit.Exit<ReadonlyArray<Completion>, E>

/**
 * Which side of a connection an address is (librpma's `enum rpma_util_ibv_context_type`).
 *
 * @since 0.1.0
 * @category models
 */
export type AddressKind = "local" | "remote"

/**
 * A new local registration: its handle and the region's address in this process
 * (rpma_mr_get_ptr), returned together so that a registration is one call into the driver.
 *
 * @since 1.0.0
 * @category models
 */
export interface MrRegistration {
  readonly handle: MrHandle
  readonly address: bigint
}

/**
 * A driver call that may also answer synchronously. Called, it is an Effect like every other; its
 * optional `now` makes the same call at once and returns the outcome as an `Exit` (the same value,
 * the same tagged errors, the same defects), or `undefined` when this call has to take the Effect
 * (a registration large enough to go to a worker thread, say). Core calls `now` inside a step of
 * its own and so spares the runtime steps of running an Effect; it calls the Effect when there is
 * no `now`, when `now` declines, and when per-operation tracing is on (the traced call has a span).
 *
 * `now` belongs to the function: a wrapper that replaces the call (to record or delay it) has
 * none unless it makes one, so core runs the wrapper's Effect and never goes around it. Build
 * one with {@link synchronousCall}.
 *
 * @since 1.0.0
 * @category models
 */
export interface SynchronousCall<Args extends ReadonlyArray<unknown>, A, E> {
  (...args: Args): Effect.Effect<A, E>
  /** The call made now; undefined: take the Effect. Never throws. */
  readonly now?: ((...args: Args) => Exit.Exit<A, E> | undefined) | undefined
}

/**
 * A {@link SynchronousCall} from its synchronous form, for a call that never declines: the
 * Effect runs `now` when it is run.
 *
 * @since 1.0.0
 * @category constructors
 */
export function synchronousCall<Args extends ReadonlyArray<unknown>, A, E>(
  now: (...args: Args) => Exit.Exit<A, E>
): SynchronousCall<Args, A, E>
/**
 * A {@link SynchronousCall} whose `now` may decline: the Effect then runs `otherwise`.
 *
 * @since 1.0.0
 * @category constructors
 */
export function synchronousCall<Args extends ReadonlyArray<unknown>, A, E>(
  now: (...args: Args) => Exit.Exit<A, E> | undefined,
  otherwise: (...args: Args) => Effect.Effect<A, E>
): SynchronousCall<Args, A, E>
/**
 * The implementation of both forms above.
 *
 * @since 1.0.0
 * @category constructors
 */
export function synchronousCall<Args extends ReadonlyArray<unknown>, A, E>(
  now: (...args: Args) => Exit.Exit<A, E> | undefined,
  otherwise?: (...args: Args) => Effect.Effect<A, E>
): SynchronousCall<Args, A, E> {
  const call = (...args: Args): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const exit = now(...args)
      if (exit === undefined) return otherwise!(...args)
      // A failure as Effect.fail gives it: the error then carries the fiber's span.
      return exit._tag === "Failure" && exit.cause._tag === "Fail" ? Effect.fail(exit.cause.error) : exit
    })
  return Object.assign(call, { now })
}

/**
 * What librdmacm exposes of a `struct ibv_mr`.
 *
 * @since 0.1.0
 * @category models
 */
export interface CmMrInfo {
  readonly address: bigint
  readonly length: number
  readonly lkey: number
  readonly rkey: number
}

/**
 * Which rdma_cm registration call made a region.
 *
 * @since 0.1.0
 * @category models
 */
export type CmRegistrationKind = "msgs" | "read" | "write"

/**
 * A file to map, as core passes it to {@link Driver.Driver.mapFile} once the options are checked.
 *
 * @since 1.0.0
 * @category models
 */
export interface MapFileRequest {
  /** A regular file, or a character or block device (a device DAX, /dev/dax0.0). */
  readonly path: string
  /** Where the mapping starts in the file: a multiple of the page size. */
  readonly offset: number
  /** Bytes to map; undefined: from `offset` to the end of the file (a device needs a size). */
  readonly size: number | undefined
  /** Make a missing file, sized to `offset + size` (a size is then required). */
  readonly create: boolean
}

/**
 * How many handles of each kind a driver holds alive: what a leak check reads.
 *
 * @since 0.1.0
 * @category models
 */
export interface LiveHandles {
  readonly peers: number
  readonly localRegions: number
  readonly remoteRegions: number
  readonly cmRegions: number
  /** librdmacm endpoints (with a queue pair), incoming requests included. */
  readonly cmEndpoints: number
  readonly cmListeners: number
  readonly endpoints: number
  readonly connectionRequests: number
  readonly connections: number
  readonly sharedReceiveQueues: number
}

/**
 * What an endpoint of librdmacm's verbs API is made with (`struct ibv_qp_init_attr` and the
 * waits): rdma_create_ep's queue pair on the active side, the queue pair of every request a
 * listener hands out on the passive side.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmEpConfig {
  /**
   * Bound on every wait of the endpoint's set-up: address and route resolution, rdma_connect until
   * ESTABLISHED (or REJECTED / UNREACHABLE), rdma_accept until ESTABLISHED, rdma_disconnect until
   * DISCONNECTED. A wait that reaches it fails with ETIMEDOUT.
   */
  readonly timeoutMs: number
  /** `cap.max_send_wr`: send-queue requests (send, write, read) in flight at once. */
  readonly maxSendWr: number
  /** `cap.max_recv_wr`: receives posted at once. */
  readonly maxRecvWr: number
  /** `cap.max_send_sge`: segments of one send, write or read. */
  readonly maxSendSge: number
  /** `cap.max_recv_sge`: segments of one receive. */
  readonly maxRecvSge: number
  /**
   * `cap.max_inline_data`: a send or write of at most this many bytes may go inline
   * (IBV_SEND_INLINE: the bytes are copied at post time, the region is not read later). The
   * device may grant more; {@link CmEpInfo.maxInlineData} says what it granted.
   */
  readonly maxInlineData: number
  /**
   * rdma_conn_param's `retry_count`: how often the device resends a request the other side does not
   * acknowledge before it fails with IBV_WC_RETRY_EXC_ERR, 0 to 7. Not given: 7. The connecting
   * side's value holds for both sides (the CM carries it in the request; an accept's is not sent).
   */
  readonly retryCount?: number | undefined
  /**
   * rdma_conn_param's `rnr_retry_count`: how often the other side retries a send to this endpoint
   * while this endpoint has no receive posted, before that send fails with
   * IBV_WC_RNR_RETRY_EXC_ERR there, 0 to 7, 7 meaning for ever. Not given: 7.
   */
  readonly rnrRetryCount?: number | undefined
  /**
   * rdma_conn_param's `responder_resources`: reads (and atomics) the other side may have in flight
   * against this endpoint at once, 0 to 255, capped by the device and, on accept, by the request's
   * initiator depth. Not given: the device's maximum.
   */
  readonly responderResources?: number | undefined
  /**
   * rdma_conn_param's `initiator_depth`: reads this endpoint may have in flight at once, 0 to 255,
   * capped by the device and, on accept, by the request's responder resources. Not given: the
   * device's maximum.
   */
  readonly initiatorDepth?: number | undefined
}

/**
 * A listener and the port it listens on (rdma_get_src_port: port 0 asks the system for one).
 *
 * @since 1.0.0
 * @category models
 */
export interface CmListening {
  readonly handle: CmListenerHandle
  readonly port: number
}

/**
 * What an endpoint is, once made: its queue pair's number, what the device granted, and the
 * addresses of its two sides (`remote` is the peer's, as rdma_get_peer_addr gives it; both are
 * known once the route is resolved, or, on the passive side, once the request arrived).
 *
 * @since 1.0.0
 * @category models
 */
export interface CmEpInfo {
  readonly qpNum: number
  readonly maxInlineData: number
  readonly localAddress: string
  readonly localPort: number
  readonly remoteAddress: string
  readonly remotePort: number
}

/**
 * The events an endpoint reports after it is established ({@link Driver.Driver.cmNextEvent}),
 * librdmacm's `enum rdma_cm_event_type` names: the peer disconnected (or the local side did), the
 * device went away, or something this library does not act on.
 *
 * @since 1.0.0
 * @category models
 */
export type CmEvent = "DISCONNECTED" | "DEVICE_REMOVAL" | "TIMEWAIT_EXIT" | "OTHER"

/**
 * A part of a region in a librdmacm work request (`struct ibv_sge`): the region registered on the
 * same endpoint by rdma_reg_msgs / rdma_reg_read / rdma_reg_write, and the bytes of it used.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmSegment {
  /**
   * The region; or, in an inline send or write only, plain bytes (IBV_SEND_INLINE copies them when
   * the request is posted, so the device never reads them and they need no registration).
   */
  readonly mr: CmMrHandle | Uint8Array
  readonly offset: number
  readonly length: number
}

/**
 * A work request on an endpoint of librdmacm's verbs API ({@link Driver.Driver.cmPostMany}).
 * `segments` holds one segment for rdma_post_send / rdma_post_recv / rdma_post_read /
 * rdma_post_write, several for their `v` forms (rdma_post_sendv, ...); a request with immediate
 * data or `inline` goes through ibv_post_send, which librdmacm's wrappers do not expose. The remote
 * side of a read or a write is an address and an rkey, as the other side gave them. Core checks
 * offsets, lengths, the regions' kinds and their endpoint before a driver sees a request.
 *
 * @since 1.0.0
 * @category models
 */
export type CmWorkRequest =
  | {
    readonly op: "send"
    readonly id: number
    readonly segments: ReadonlyArray<CmSegment>
    /** IBV_WR_SEND_WITH_IMM: the receive on the other side completes with this value. */
    readonly imm?: number | undefined
    /** IBV_SEND_INLINE: at most {@link CmEpInfo.maxInlineData} bytes in all. */
    readonly inline?: boolean | undefined
    readonly completion?: Signal | undefined
  }
  | { readonly op: "recv"; readonly id: number; readonly segments: ReadonlyArray<CmSegment> }
  | {
    readonly op: "write"
    readonly id: number
    readonly segments: ReadonlyArray<CmSegment>
    readonly remoteAddress: bigint
    readonly rkey: number
    /** IBV_WR_RDMA_WRITE_WITH_IMM: consumes a receive on the other side, which completes with it. */
    readonly imm?: number | undefined
    readonly inline?: boolean | undefined
    readonly completion?: Signal | undefined
  }
  | {
    readonly op: "read"
    readonly id: number
    readonly segments: ReadonlyArray<CmSegment>
    readonly remoteAddress: bigint
    readonly rkey: number
    readonly completion?: Signal | undefined
  }

/**
 * The calls of librdmacm's verbs API: an endpoint with a queue pair, its listener, posting and
 * completions. Each driver implements them in a module of their own.
 *
 * @since 1.0.0
 * @category models
 */
export type CmEndpointCalls = Pick<
  Driver.Driver,
  | "cmEpCreate"
  | "cmConnect"
  | "cmListen"
  | "cmGetRequest"
  | "cmPrivateData"
  | "cmAccept"
  | "cmReject"
  | "cmNextEvent"
  | "cmDisconnect"
  | "cmEpDestroy"
  | "cmListenerDestroy"
  | "cmEpInfo"
  | "cmPostMany"
  | "cmPollCompletions"
  | "cmArmCompletions"
  | "cmSpinCompletions"
>
