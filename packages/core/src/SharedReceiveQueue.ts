/**
 * A shared receive queue (`struct rpma_srq`): one pool of receives for many connections, with its
 * own receive completion queue or none (its receives then complete on the connections' queues). Connections made with it (the `sharedReceiveQueue` option of
 * {@link Connection.connect}, {@link Listener.next} and {@link Listener.acceptNext}) take their
 * incoming messages from its receives; a receive posted on such a connection itself is refused.
 * Each completion says which connection the message came on (`qpNum`, compared with
 * {@link Connection.qpNum}). librpma does not keep the order of the posted receives: a message
 * lands in any of them.
 *
 * The queue is deleted when its scope closes and no connection made with it is left (so a server
 * may open it before its endpoint, in the same scope). A receive still waiting then fails with
 * {@link Connection.ConnectionClosedError}; its region stays registered until the queue is deleted.
 *
 * @since 1.0.0
 */
import type * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Connection from "./Connection.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/srq.js"
import type { Peer } from "./Peer.js"
import type { RpmaError } from "./RdmaError.js"

/**
 * What marks a {@link SharedReceiveQueue}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * A shared receive queue: the peer whose regions its receives use; its machinery (the driver's
 * handle, the kernel its receives are posted through) is its own.
 *
 * @since 1.0.0
 * @category models
 */
export interface SharedReceiveQueue extends Pipeable {
  readonly [TypeId]: TypeId
  readonly peer: Peer
}

/**
 * Sizes; every field has a default.
 *
 * @since 1.0.0
 * @category models
 */
export interface Options {
  /** Receives posted at once. Default 64. */
  readonly receiveQueueSize?: number | undefined
  /**
   * Its receive completion queue. Default: the receive queue size. Less than the receive queue is
   * accepted (as librpma does): if more receives complete than it holds before they are polled,
   * the device overruns it (IBV_EVENT_CQ_ERR): those completions are lost, and their receives fail
   * only when the queue ends. 0, as in librpma's 08srq example (modes m and r): no queue of its
   * own; each receive completes on the receive CQ (`receiveCompletionQueueSize`), or else the CQ,
   * of the connection its message came on, which reads it and completes the receive here, the
   * same as with a queue of its own.
   */
  readonly completionQueueSize?: number | undefined
}

/**
 * A completed receive of the queue: as a connection's, plus the queue pair number of the connection
 * the message came on.
 *
 * @since 1.0.0
 * @category models
 */
export interface Completion extends Connection.Completion {
  readonly qpNum: number
}

/**
 * A receive posted on the queue; `completion` may be awaited any number of times, or never.
 *
 * @since 1.0.0
 * @category models
 */
export interface Posted {
  readonly operation: string
  readonly completion: Effect.Effect<Completion, Connection.TransferError>
}

/**
 * rpma_srq_new on `peer` (its regions are the ones its receives may use), deleted with the scope
 * once no connection made with it is left.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, Listener, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
 *
 * // One pool of receives for every client of the endpoint: whose message was it?
 * const serve = Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const srq = yield* SharedReceiveQueue.make(peer, { receiveQueueSize: 16 })
 *   const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
 *   const ep = yield* Listener.make(peer, "192.168.77.1", 7471)
 *   const conn = yield* Listener.acceptNext(ep, { sharedReceiveQueue: srq })
 *   const message = yield* SharedReceiveQueue.recv(srq, { dst: inbox })
 *   return message.qpNum === (yield* Connection.qpNum(conn))
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: (
  peer: Peer,
  options?: Options
) => Effect.Effect<SharedReceiveQueue, RpmaError, RdmaDriver | Scope.Scope> = internal.make

/**
 * rpma_srq_recv without waiting: a receive that the next message on any connection made with the
 * queue may consume. Its region must be registered on the queue's peer (RPMA_E_INVAL otherwise).
 * Its arguments are read and checked when the Effect runs.
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: {
  (args: Connection.RecvArgs): (srq: SharedReceiveQueue) => Effect.Effect<Posted, Connection.TransferError>
  (srq: SharedReceiveQueue, args: Connection.RecvArgs): Effect.Effect<Posted, Connection.TransferError>
} = dual(2, internal.postRecv)

/**
 * rpma_srq_recv, awaited: the completion of this receive, with the connection it came on.
 *
 * @since 1.0.0
 * @category operations
 */
export const recv: {
  (args: Connection.RecvArgs): (srq: SharedReceiveQueue) => Effect.Effect<Completion, Connection.TransferError>
  (srq: SharedReceiveQueue, args: Connection.RecvArgs): Effect.Effect<Completion, Connection.TransferError>
} = dual(2, internal.recv)

/**
 * @since 1.0.0
 * @category guards
 */
export const isSharedReceiveQueue: (u: unknown) => u is SharedReceiveQueue = internal.isSharedReceiveQueue
