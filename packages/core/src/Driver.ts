/**
 * The native calls, as a service. Everything above this Tag (resources, ordering, release policy,
 * logging) is written once in core; a driver only performs calls and reports codes through
 * {@link RdmaError.fromRpmaCode} / {@link RdmaError.fromErrno}. `@effect-rdma/native` implements it
 * over librpma and librdmacm; `@effect-rdma/testing` implements it in memory.
 *
 * Drivers validate their arguments at run time the way the C libraries do (a `null` where C takes
 * a pointer, a size of 0, a usage of 0 or with unknown bits: RPMA_E_INVAL), since JavaScript
 * callers can pass anything.
 *
 * A release has three outcomes, and drivers keep them apart: success; a failure with the library's
 * error, after which the handle is gone (librpma frees it even when the verbs call fails); and a
 * refusal, {@link ResourceInUseError}, when something still uses the handle (a region with requests
 * in flight, a peer with regions, endpoints, requests or connections, an rdma_cm id with regions),
 * after which the handle is alive and unchanged.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import type { MapFileError, RdmaCmError, ResourceInUseError, RpmaError } from "./RdmaError.js"

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
 * `struct rdma_cm_id *` bound to a local address, with a protection domain.
 *
 * @since 0.1.0
 * @category models
 */
export type CmIdHandle = Handle<"CmId">
/**
 * `struct ibv_mr *` from rdma_reg_msgs / rdma_reg_read / rdma_reg_write.
 *
 * @since 0.1.0
 * @category models
 */
export type CmMrHandle = Handle<"CmMr">

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
 * @since 0.3.0
 * @category models
 */
export type SrqHandle = Handle<"Srq">

/**
 * Where requests are posted ({@link Driver.postMany}): a connection's queue pair, a shared receive
 * queue (receives only), or an incoming connection request before it is accepted (receives only,
 * rpma_conn_req_recv: they complete on the connection's queue once it exists).
 *
 * @since 0.5.0
 * @category models
 */
export type PostQueue = ConnHandle | SrqHandle | ConnReqHandle

/**
 * Where completions are read ({@link Driver.pollCompletions}, {@link Driver.armCompletions}): a
 * connection's completion queue (and its receive completion queue, if it has one), or a shared
 * receive queue's receive completion queue.
 *
 * @since 0.5.0
 * @category models
 */
export type CompletionQueue = ConnHandle | SrqHandle

/**
 * A shared receive queue's settings (`struct rpma_srq_cfg`).
 *
 * @since 0.3.0
 * @category models
 */
export interface SrqConfig {
  /** Receives posted at once (rpma_srq_cfg_set_rq_size). */
  readonly rqSize: number
  /**
   * Its receive completion queue (rpma_srq_cfg_set_rcq_size): at least 1 here. librpma allows 0
   * (no queue of its own: completions would land on each connection's queue), which drivers refuse,
   * because a receive's completion must come back where it was posted.
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
   * (0 or absent: on the CQ). {@link Driver.pollCompletions} and {@link Driver.armCompletions}
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
 * @since 0.3.0
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
  | { readonly op: "recv"; readonly id: number; readonly dst: MrHandle; readonly offset: number; readonly length: number }

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
   * came on (see {@link Driver.connQpNum}). Absent on a connection's own completions.
   */
  readonly qpNum?: number | undefined
}

/**
 * `enum ibv_wc_opcode`: what a completion completed.
 *
 * @since 0.3.0
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
 * @since 0.3.0
 * @category models
 */
export const WcFlags = { WITH_IMM: 2 } as const

/**
 * What one {@link Driver.postMany} call did: the requests posted, the refusal that stopped it, and
 * the completions already queued right after the posts.
 *
 * @since 0.4.0
 * @category models
 */
export interface PostOutcome {
  /** How many of the requests were posted, in order: all of them unless `error` is set. */
  readonly posted: number
  /** Why request number `posted` was refused (the post function's error); nothing after it was tried. */
  readonly error: RpmaError | undefined
  /** The completions queued right after the posts (rpma_cq_get_wc without waiting), possibly none. */
  readonly ready: ReadonlyArray<Completion>
  /** The completion queue failed when read: the connection cannot report completions any more. */
  readonly queueError: RpmaError | undefined
  /**
   * The driver's synchronous answers have kept the event loop from its I/O phase for too long (a
   * loop of posts whose completions are always already queued): the caller should let the loop
   * turn (setImmediate) before it goes on.
   */
  readonly turnDue: boolean
}

/**
 * Called once by {@link Driver.armCompletions}: the completions queued (at least one), or the
 * completion channel's failure.
 *
 * @since 0.4.0
 * @category models
 */
export type CompletionsReady = (ready: Exit.Exit<ReadonlyArray<Completion>, RpmaError>) => void

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
 * @since 0.2.0
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
 * @since 0.4.0
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
 * @since 0.4.0
 * @category constructors
 */
export function synchronousCall<Args extends ReadonlyArray<unknown>, A, E>(
  now: (...args: Args) => Exit.Exit<A, E>
): SynchronousCall<Args, A, E>
/**
 * A {@link SynchronousCall} whose `now` may decline: the Effect then runs `otherwise`.
 *
 * @since 0.4.0
 * @category constructors
 */
export function synchronousCall<Args extends ReadonlyArray<unknown>, A, E>(
  now: (...args: Args) => Exit.Exit<A, E> | undefined,
  otherwise: (...args: Args) => Effect.Effect<A, E>
): SynchronousCall<Args, A, E>
/**
 * The implementation of both forms above.
 *
 * @since 0.4.0
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
 * A file to map, as core passes it to {@link Driver.mapFile} once the options are checked.
 *
 * @since 0.3.0
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
  readonly cmIds: number
  readonly cmRegions: number
  readonly endpoints: number
  readonly connectionRequests: number
  readonly connections: number
  readonly sharedReceiveQueues: number
}

/**
 * One Effect per native call. Registration and deregistration may also answer synchronously
 * ({@link SynchronousCall}); the data path's posting call ({@link Driver.postMany}) and its
 * completion channel ({@link Driver.armCompletions}) are synchronous only.
 *
 * @since 0.1.0
 * @category models
 */
export interface Driver {
  /** "native", "simulated", ...: for logs and reports. */
  readonly name: string

  /** rpma_utils_get_ibv_context: the device that answers at an IP address. */
  readonly getIbvContext: (address: string, kind: AddressKind) => Effect.Effect<IbvContextHandle, RpmaError>
  /** rpma_peer_new. */
  readonly peerNew: (context: IbvContextHandle) => Effect.Effect<PeerHandle, RpmaError>
  /**
   * rpma_peer_delete. Refused ({@link ResourceInUseError}, still alive) while regions, endpoints,
   * connection requests or connections use the peer; otherwise the handle is gone afterwards, even
   * when it fails (librpma frees it).
   */
  readonly peerDelete: (peer: PeerHandle) => Effect.Effect<void, RpmaError | ResourceInUseError>

  /**
   * rpma_mr_reg, and the region's address (rpma_mr_get_ptr) from the same call. `usage` is a raw
   * number so that drivers can be shown to refuse bad ones; the driver keeps `memory` alive for as
   * long as the registration lives. May answer synchronously (`mrReg.now`): registration pins the
   * pages, which is quick for small regions; a driver that moves large ones off the event loop
   * declines those (`now` returns undefined) and registers them in the Effect.
   */
  readonly mrReg: SynchronousCall<[peer: PeerHandle, memory: Uint8Array, usage: number], MrRegistration, RpmaError>
  /**
   * rpma_mr_dereg. Refused ({@link ResourceInUseError}, still registered) while posted requests
   * that use the region have not completed and their connection is not deleted; otherwise the
   * handle is gone afterwards, even when it fails (librpma frees it). May answer synchronously
   * (`mrDereg.now`), declining the regions it registered off the event loop.
   */
  readonly mrDereg: SynchronousCall<[mr: MrHandle], void, RpmaError | ResourceInUseError>
  /** rpma_mr_get_descriptor_size. */
  readonly mrGetDescriptorSize: (mr: MrHandle) => Effect.Effect<number, RpmaError>
  /** rpma_mr_get_descriptor. */
  readonly mrGetDescriptor: (mr: MrHandle) => Effect.Effect<Uint8Array, RpmaError>
  /** rpma_mr_get_ptr. */
  readonly mrGetPtr: (mr: MrHandle) => Effect.Effect<bigint, RpmaError>
  /** rpma_mr_get_size. */
  readonly mrGetSize: (mr: MrHandle) => Effect.Effect<number, RpmaError>

  /** rpma_mr_remote_from_descriptor, with librpma's own (lenient) checks. */
  readonly mrRemoteFromDescriptor: (descriptor: Uint8Array) => Effect.Effect<RemoteMrHandle, RpmaError>
  /** rpma_mr_remote_delete. */
  readonly mrRemoteDelete: (mr: RemoteMrHandle) => Effect.Effect<void, RpmaError>
  /** rpma_mr_remote_get_size. */
  readonly mrRemoteGetSize: (mr: RemoteMrHandle) => Effect.Effect<bigint, RpmaError>
  /** rpma_mr_remote_get_flush_type: the FLUSH_TYPE_* bits of the remote usage. */
  readonly mrRemoteGetFlushType: (mr: RemoteMrHandle) => Effect.Effect<number, RpmaError>

  /**
   * rdma_getaddrinfo + rdma_create_ep, bound to a local address, with a protection domain
   * allocated for it (rdma_reg_* would otherwise dereference a NULL `id->pd`).
   */
  readonly cmCreateId: (address: string) => Effect.Effect<CmIdHandle, RdmaCmError>
  /**
   * Deallocates the protection domain and rdma_destroy_ep. Refused ({@link ResourceInUseError},
   * still alive) while regions are registered on the id.
   */
  readonly cmDestroyId: (id: CmIdHandle) => Effect.Effect<void, RdmaCmError | ResourceInUseError>
  /** rdma_reg_msgs / rdma_reg_read / rdma_reg_write. */
  readonly cmReg: (
    id: CmIdHandle,
    kind: CmRegistrationKind,
    memory: Uint8Array
  ) => Effect.Effect<CmMrHandle, RdmaCmError>
  /** rdma_dereg_mr. The handle is gone afterwards, even when it fails. */
  readonly cmDeregMr: (mr: CmMrHandle) => Effect.Effect<void, RdmaCmError>
  /** The address, length and keys of an rdma_cm registration. */
  readonly cmMrInfo: (mr: CmMrHandle) => Effect.Effect<CmMrInfo, RdmaCmError>

  /** Page-aligned memory owned by the driver (posix_memalign for the native one). */
  readonly allocate: (size: number) => Effect.Effect<Uint8Array, RpmaError>
  /**
   * Gives back memory from {@link allocate}: detaches its ArrayBuffer so that JavaScript can no
   * longer reach it. Core calls it only when nothing registered covers the memory.
   */
  readonly free: (memory: Uint8Array) => Effect.Effect<void>

  /**
   * open + mmap(MAP_SHARED, PROT_READ | PROT_WRITE) of a file or device: its bytes, read and written
   * in place, and registrable like any memory. The driver keeps the mapping alive for as long as a
   * registration over it lives, even after {@link unmapFile}.
   */
  readonly mapFile: (request: MapFileRequest) => Effect.Effect<Uint8Array, MapFileError>
  /**
   * Writes a mapping from {@link mapFile} back to its file (msync, MS_SYNC) and detaches its
   * ArrayBuffer; the pages are unmapped once no registration holds them. Core calls it only when
   * nothing registered covers the mapping. A second call does nothing.
   */
  readonly unmapFile: (memory: Uint8Array) => Effect.Effect<void, MapFileError>

  /**
   * rpma_ep_listen on `address`:`port`. Port 0 is refused (RPMA_E_INVAL): librpma cannot report
   * which port the system would choose.
   */
  readonly epListen: (peer: PeerHandle, address: string, port: number) => Effect.Effect<EndpointHandle, RpmaError>
  /** rpma_ep_shutdown. Pending {@link epNextConnReq} calls fail. */
  readonly epShutdown: (ep: EndpointHandle) => Effect.Effect<void, RpmaError>
  /** rpma_ep_next_conn_req: waits, without blocking the event loop, for an incoming request. */
  readonly epNextConnReq: (ep: EndpointHandle, config: ConnConfig) => Effect.Effect<ConnReqHandle, RpmaError>
  /** rpma_conn_req_new: an outgoing request to `address`:`port` (resolves the address and route). */
  readonly connReqNew: (
    peer: PeerHandle,
    address: string,
    port: number,
    config: ConnConfig
  ) => Effect.Effect<ConnReqHandle, RpmaError>
  /** rpma_conn_req_get_private_data of an incoming request. */
  readonly connReqPrivateData: (req: ConnReqHandle) => Effect.Effect<Uint8Array, RpmaError>
  /**
   * rpma_conn_req_connect: accepts an incoming request or initiates an outgoing one. The request
   * is consumed, success or not, including when the driver refuses the arguments (e.g. private
   * data too long): an incoming request refused that way is rejected. The connection is not
   * usable before its ESTABLISHED event.
   */
  readonly connReqConnect: (req: ConnReqHandle, privateData: Uint8Array | undefined) => Effect.Effect<
    ConnHandle,
    RpmaError
  >
  /** rpma_conn_req_delete: rejects an incoming request or drops an outgoing one. */
  readonly connReqDelete: (req: ConnReqHandle) => Effect.Effect<void, RpmaError>
  /** rpma_conn_next_event: waits, without blocking the event loop, for the next connection event. */
  readonly connNextEvent: (conn: ConnHandle) => Effect.Effect<ConnEvent, RpmaError>
  /** rpma_conn_get_private_data. */
  readonly connPrivateData: (conn: ConnHandle) => Effect.Effect<Uint8Array, RpmaError>
  /**
   * rpma_peer_cfg_new + rpma_peer_cfg_set_direct_write_to_pmem + rpma_peer_cfg_get_descriptor:
   * the bytes that tell the other side how this side's memory is written.
   */
  readonly peerCfgDescriptor: (directWriteToPmem: boolean) => Effect.Effect<Uint8Array, RpmaError>
  /**
   * rpma_peer_cfg_from_descriptor + rpma_conn_apply_remote_peer_cfg: what the other side said of
   * its memory (a persistent flush is refused with RPMA_E_NOSUPP unless it writes straight to pmem).
   */
  readonly connApplyRemotePeerCfg: (conn: ConnHandle, descriptor: Uint8Array) => Effect.Effect<void, RpmaError>
  /** rpma_conn_disconnect. */
  readonly connDisconnect: (conn: ConnHandle) => Effect.Effect<void, RpmaError>
  /** rpma_conn_delete. */
  readonly connDelete: (conn: ConnHandle) => Effect.Effect<void, RpmaError>
  /**
   * The data path's one posting call, synchronous (not an Effect: core calls it inside its own,
   * once per operation or per batch): rpma_write(_with_imm) / rpma_read / rpma_flush /
   * rpma_atomic_write / rpma_send(_with_imm) / rpma_recv on a connection, rpma_srq_recv on a shared
   * receive queue, rpma_conn_req_recv on a connection request (a queue that is not a connection
   * takes receives only: anything else is refused with RPMA_E_INVAL). Posts `requests` in order,
   * stopping at the first one refused, then reads the completion queue once without waiting (a
   * connection request has none yet: `ready` is empty). It never throws for a refusal or a failing
   * queue: both are in the outcome.
   *
   * A send-queue request posted with `completion: "onError"` that succeeds produces no completion:
   * the driver releases what it holds for it when a later request on the same send queue
   * completes. A request's region is held by the driver until its completion, or until its queue
   * (the connection a request became, the shared receive queue) is deleted.
   */
  readonly postMany: (queue: PostQueue, requests: ReadonlyArray<WorkRequest>) => PostOutcome
  /**
   * rpma_cq_get_wc without waiting: the completions already queued, possibly none (a connection's
   * CQ and receive CQ; a shared receive queue's receive CQ, whose completions carry `qpNum`).
   */
  readonly pollCompletions: (queue: CompletionQueue) => Effect.Effect<ReadonlyArray<Completion>, RpmaError>
  /**
   * Arms a queue's completion channel (rpma_conn_get_compl_fd / rpma_cq_get_fd + rpma_cq_wait +
   * rpma_cq_get_wc) with a plain callback: `onReady` is called once, from the event loop and never
   * during this call, with the completions queued by then (at least one; a completion already
   * queued when the channel is armed counts) or with the channel's failure (a handle the driver
   * refuses is reported that way too). A completion taken by a poll in the meantime is not
   * reported twice: the wait goes on until there is one. Core re-arms from the callback while it
   * has requests outstanding, so a request completing later costs one callback, not a fiber. The
   * same mechanism serves connections and shared receive queues.
   *
   * Returns the disarm: it stops the wait (nothing is left watching the channel, no libuv handle
   * active) and `onReady` is then never called. It never throws and may be called more than once.
   */
  readonly armCompletions: (queue: CompletionQueue, onReady: CompletionsReady) => () => void

  /**
   * rpma_srq_new with an rpma_srq_cfg of these sizes. The peer is in use (its delete refused) until
   * the queue is deleted.
   */
  readonly srqNew: (peer: PeerHandle, config: SrqConfig) => Effect.Effect<SrqHandle, RpmaError>
  /**
   * rpma_srq_delete. Refused ({@link ResourceInUseError}, still alive) while connection requests or
   * connections made with it exist; otherwise gone afterwards, even when it fails. The regions of
   * receives still posted are let go.
   */
  readonly srqDelete: (srq: SrqHandle) => Effect.Effect<void, RpmaError | ResourceInUseError>
  /** rpma_conn_get_qp_num: what {@link Completion.qpNum} says of the connection's messages. */
  readonly connQpNum: (conn: ConnHandle) => Effect.Effect<number, RpmaError>

  /** The handles alive now, by kind. */
  readonly live: Effect.Effect<LiveHandles>
}

/**
 * The driver service.
 *
 * @since 0.1.0
 * @category tags
 */
export class RdmaDriver extends Context.Tag("@effect-rdma/core/Driver")<RdmaDriver, Driver>() {}
