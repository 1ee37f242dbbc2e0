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
 * in flight, a peer with regions, endpoints, requests or connections, an rdma_cm endpoint with regions),
 * after which the handle is alive and unchanged.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { CmEndpoint, Region } from "./CmEndpoint.js"
import type { CmListener } from "./CmListener.js"
import type { Connection } from "./Connection.js"
import type {
  AddressKind,
  CmEpConfig,
  CmEpHandle,
  CmEpInfo,
  CmEvent,
  CmListenerHandle,
  CmListening,
  CmMrHandle,
  CmMrInfo,
  CmRegistrationKind,
  CmWorkRequest,
  Completion,
  CompletionQueue,
  CompletionsReady,
  ConnConfig,
  ConnEvent,
  ConnHandle,
  ConnReqHandle,
  EndpointHandle,
  IbvContextHandle,
  LiveHandles,
  MapFileRequest,
  MrHandle,
  MrRegistration,
  PeerHandle,
  PostOutcome,
  PostQueue,
  RemoteMrHandle,
  SpinOutcome,
  SrqConfig,
  SrqHandle,
  SynchronousCall,
  WorkRequest
} from "./DriverModel.js"
import * as handles from "./internal/handles.js"
import type { LocalMr } from "./LocalMr.js"
import type { Peer } from "./Peer.js"
import type { MapFileError, RdmaCmError, ResourceInUseError, RpmaError } from "./RdmaError.js"
import type { RemoteMr } from "./RemoteMr.js"
import type { SharedReceiveQueue } from "./SharedReceiveQueue.js"

/**
 * What the driver's calls take and give: handles, configurations, work requests, completions,
 * events and the live-handle counts, as plain types, and the helpers drivers build their calls with.
 *
 * @example
 * ```ts
 * import type { Model } from "@effect-rdma/core/Driver"
 *
 * // What a leak check reads: no handle of any kind alive.
 * const nothingAlive = (live: Model.LiveHandles): boolean => Object.values(live).every((n) => n === 0)
 * ```
 *
 * @since 1.0.0
 */
export * as Model from "./DriverModel.js"

/**
 * The argument checks that librpma, librdmacm and the addon make, written once so that every driver
 * (the simulated one checks with these functions; the addon makes the same checks in C++) and core
 * refuse the same values with the same words. Each check returns `undefined` for a good value or
 * the detail of the refusal, and never throws, whatever the value.
 *
 * @example
 * ```ts
 * import { Arguments } from "@effect-rdma/core/Driver"
 *
 * Arguments.usage(0x100) // "usage has bits outside RPMA_MR_USAGE_* (0xff)"
 * Arguments.usage(0x11) // undefined: a good value
 * ```
 *
 * @since 1.0.0
 */
export * as Arguments from "./DriverArguments.js"

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

  /** rdma_reg_msgs / rdma_reg_read / rdma_reg_write, on an endpoint's own protection domain. */
  readonly cmReg: (
    ep: CmEpHandle,
    kind: CmRegistrationKind,
    memory: Uint8Array
  ) => Effect.Effect<CmMrHandle, RdmaCmError>
  /** rdma_dereg_mr. The handle is gone afterwards, even when it fails. */
  readonly cmDeregMr: (mr: CmMrHandle) => Effect.Effect<void, RdmaCmError>
  /** The address, length and keys of an rdma_cm registration. */
  readonly cmMrInfo: (mr: CmMrHandle) => Effect.Effect<CmMrInfo, RdmaCmError>

  /**
   * librdmacm's verbs API, active side: rdma_getaddrinfo(`address`, `port`) + rdma_create_ep with a
   * queue pair of `config`'s sizes on a protection domain of the endpoint's own. Resolves the
   * address and the route within `config.timeoutMs` without blocking the event loop. Nothing is
   * connected yet: receives may be posted before {@link cmConnect}.
   */
  readonly cmEpCreate: (address: string, port: number, config: CmEpConfig) => Effect.Effect<CmEpHandle, RdmaCmError>
  /**
   * rdma_connect with `privateData` (at most 56 bytes; longer is refused with EINVAL before
   * anything is sent), waiting on the event loop until ESTABLISHED, at most `timeoutMs` (ETIMEDOUT).
   * Refused by the other side (REJECTED): ECONNREFUSED, the rejection's private data in
   * {@link cmPrivateData}; no one listening or no route (UNREACHABLE / CONNECT_ERROR): EHOSTUNREACH.
   * Interrupted, the endpoint is left to {@link cmEpDestroy}.
   */
  readonly cmConnect: (
    ep: CmEpHandle,
    privateData: Uint8Array | undefined,
    timeoutMs: number
  ) => Effect.Effect<void, RdmaCmError>
  /**
   * rdma_create_ep with RAI_PASSIVE + rdma_listen on `address`:`port` (0: the system chooses; the
   * port is returned). Every request it hands out gets a queue pair of `config`'s sizes.
   */
  readonly cmListen: (address: string, port: number, config: CmEpConfig) => Effect.Effect<CmListening, RdmaCmError>
  /**
   * rdma_get_request: waits on the event loop for the next connection request and returns it as
   * an endpoint with its queue pair (on a protection domain of its own), not yet accepted:
   * receives may be posted before {@link cmAccept}. Interruptible (the wait stops; a request that
   * arrives later waits for the next call). Fails with ECANCELED once the listener is destroyed.
   */
  readonly cmGetRequest: (listener: CmListenerHandle) => Effect.Effect<CmEpHandle, RdmaCmError>
  /**
   * The private data of the endpoint's last connection event: the request's on the passive side,
   * the acceptance's (or the rejection's) on the active side; empty when there was none. As
   * rdma_cm carries it, padded (a request's to 56 bytes, an acceptance's to 196).
   */
  readonly cmPrivateData: (ep: CmEpHandle) => Effect.Effect<Uint8Array, RdmaCmError>
  /**
   * rdma_accept of a request from {@link cmGetRequest}, with `privateData` (at most 196 bytes;
   * longer refused with EINVAL before anything is sent, the request untouched and acceptable
   * again), waiting on the event loop until ESTABLISHED, at most `timeoutMs` (ETIMEDOUT).
   */
  readonly cmAccept: (
    ep: CmEpHandle,
    privateData: Uint8Array | undefined,
    timeoutMs: number
  ) => Effect.Effect<void, RdmaCmError>
  /** rdma_reject of a request, with `privateData` (at most 148 bytes). The endpoint still needs {@link cmEpDestroy}. */
  readonly cmReject: (ep: CmEpHandle, privateData: Uint8Array | undefined) => Effect.Effect<void, RdmaCmError>
  /**
   * Waits on the event loop for the next event of an established endpoint (the peer's disconnect,
   * say). Interruptible. Fails with ECANCELED once the endpoint is destroyed.
   */
  readonly cmNextEvent: (ep: CmEpHandle) => Effect.Effect<CmEvent, RdmaCmError>
  /**
   * rdma_disconnect: the queue pair goes to the error state (requests still posted complete with
   * IBV_WC_WR_FLUSH_ERR) and the peer is told. Does not wait for the peer. A second call, or one on
   * an endpoint never connected, does nothing.
   */
  readonly cmDisconnect: (ep: CmEpHandle) => Effect.Effect<void, RdmaCmError>
  /**
   * rdma_destroy_ep: the queue pair, the completion queues and channels, the protection domain
   * and the identifier, in that order. Refused ({@link ResourceInUseError}, still alive) while
   * regions are registered on the endpoint; otherwise gone afterwards, even when it fails.
   */
  readonly cmEpDestroy: (ep: CmEpHandle) => Effect.Effect<void, RdmaCmError | ResourceInUseError>
  /**
   * rdma_destroy_ep of a listener. Refused ({@link ResourceInUseError}, still alive) while
   * endpoints it handed out are alive; pending {@link cmGetRequest} calls fail with ECANCELED.
   */
  readonly cmListenerDestroy: (listener: CmListenerHandle) => Effect.Effect<void, RdmaCmError | ResourceInUseError>
  /** The endpoint's queue pair number, granted inline size and addresses. */
  readonly cmEpInfo: (ep: CmEpHandle) => Effect.Effect<CmEpInfo, RdmaCmError>
  /**
   * The posting call of an endpoint, synchronous, as {@link postMany} is for librpma's queues:
   * rdma_post_send(v) / rdma_post_recv(v) / rdma_post_read(v) / rdma_post_write(v) (ibv_post_send
   * for immediate data and inline sends). Posts `requests` in order, stopping at the first one
   * refused (ENOMEM: the queue is full; EINVAL: a request the device refuses), then polls the two
   * completion queues once without waiting. Never throws. A region is held by the driver until its
   * request completes or the endpoint is destroyed; a region of another endpoint is refused (EINVAL).
   */
  readonly cmPostMany: (ep: CmEpHandle, requests: ReadonlyArray<CmWorkRequest>) => PostOutcome<RdmaCmError>
  /** ibv_poll_cq on the endpoint's send and receive CQs, without waiting. */
  readonly cmPollCompletions: (ep: CmEpHandle) => Effect.Effect<ReadonlyArray<Completion>, RdmaCmError>
  /**
   * The endpoint's two completion channels watched on the event loop (ibv_req_notify_cq +
   * ibv_get_cq_event + ibv_ack_cq_events + ibv_poll_cq), with {@link armCompletions}'s contract:
   * `onReady` once, never during this call, with at least one completion or the failure; the
   * returned disarm stops the watch.
   */
  readonly cmArmCompletions: (ep: CmEpHandle, onReady: CompletionsReady<RdmaCmError>) => () => void
  /**
   * {@link spinCompletions} on an endpoint's two CQs (ibv_poll_cq in a loop), the same budget and
   * refusal (EINVAL). Optional: without it, a polling endpoint waits as a waiting one does.
   *
   * @since 1.0.0
   */
  readonly cmSpinCompletions?: (ep: CmEpHandle, budgetNs: number) => SpinOutcome<RdmaCmError>

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
   * rpma_conn_req_connect: accepts an incoming request or initiates an outgoing one. Private data
   * the request cannot carry (DriverArguments.privateData with the request's side: not a
   * Uint8Array, or longer than rdma_cm carries with a connect or an accept) is refused
   * (RpmaInvalidError) before librpma sees the request, which stays as it was: connect it again
   * or delete it. Past that check the request is consumed, success or not. The connection is
   * not usable before its ESTABLISHED event.
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
   * A bounded busy-poll, synchronous: {@link pollCompletions} again and again until something is
   * queued or `budgetNs` nanoseconds (a whole number from 0 to {@link Model.MAX_SPIN_NS}) have
   * passed on a monotonic clock; none then. A driver that cannot spin on real time (the simulated
   * one) answers what is queued. Another budget is refused with RPMA_E_INVAL, never thrown.
   * Optional: without it, a polling connection waits as a waiting one does.
   *
   * @since 1.0.0
   */
  readonly spinCompletions?: (queue: CompletionQueue, budgetNs: number) => SpinOutcome

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

/**
 * The driver's handle of a resource core made, as the driver answered it: a peer's (from
 * {@link Driver.peerNew}), a region's ({@link Driver.mrReg}), a remote region's
 * ({@link Driver.mrRemoteFromDescriptor}), a shared receive queue's ({@link Driver.srqNew}) or a
 * connection's ({@link Driver.connReqConnect}, on either side); on the librdmacm path, an endpoint's
 * ({@link Driver.cmEpCreate}, or {@link Driver.cmGetRequest} for a request), a region's on an
 * endpoint ({@link Driver.cmReg}) or a listener's ({@link Driver.cmListen}).
 * For driver authors and conformance cases that call the driver directly on resources made through
 * the user modules; the resources themselves do not show it. A plain read of the field: no call to
 * the driver and no allocation. The handle stays the resource's: releasing it through the driver
 * behind core's back leaves the resource's own release to fail.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr } from "@effect-rdma/core"
 * import { handleOf, RdmaDriver } from "@effect-rdma/core/Driver"
 *
 * // The size the driver registered, asked of the driver itself (rpma_mr_get_size).
 * const registeredSize = (mr: LocalMr.LocalMr) => Effect.flatMap(RdmaDriver, (driver) => driver.mrGetSize(handleOf(mr)))
 * ```
 *
 * @since 1.0.0
 * @category getters
 */
export const handleOf: {
  (peer: Peer): PeerHandle
  (mr: LocalMr<any>): MrHandle
  (mr: RemoteMr<any>): RemoteMrHandle
  (queue: SharedReceiveQueue): SrqHandle
  (conn: Connection): ConnHandle
  (ep: CmEndpoint): CmEpHandle
  (mr: Region): CmMrHandle
  (listener: CmListener): CmListenerHandle
} = handles.any as never
