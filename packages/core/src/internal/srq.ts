/**
 * A shared receive queue's life and data path: its receives posted through a posting kernel of
 * its own (internal/poster.ts) on the queue, their completions read from the queue's receive CQ
 * with the same armed channel as a connection's; or, with none (rcqSize 0), from the CQs of its
 * connections, whose kernels hand them to this one (Link.shared) and stay armed while it has
 * receives outstanding; and its release deferred
 * until the last connection made with it is gone (the driver refuses to delete a queue that queue
 * pairs still point at).
 *
 * Declared and documented in SharedReceiveQueue.ts.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import type * as Connection from "../Connection.js"
import type { OperationError } from "../ConnectionError.js"
import type { Driver, RdmaDriver } from "../Driver.js"
import type { Completion as DriverCompletion, SrqHandle } from "../DriverModel.js"
import type { Peer } from "../Peer.js"
import { type RpmaError, RpmaInvalidError } from "../RdmaError.js"
import type * as SharedReceiveQueue from "../SharedReceiveQueue.js"
import { PendingTable, runAll, Slots } from "./dataPath.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import { Operations } from "./operationTable.js"
import { readRpmaSettings } from "./optionsOnce.js"
import * as Owner from "./owner.js"
import { ownerOf as peerOwner } from "./peer.js"
import type { Poster } from "./poster.js"
import { submitRecv, toCompletion } from "./posting.js"
import { closedError, settle, startPoster } from "./queueLife.js"
import { release } from "./release.js"
import { PipeableBase } from "./resource.js"
import { notAPeer, notTheResource } from "./resourceGuard.js"

export const TypeId: SharedReceiveQueue.TypeId = Symbol.for(
  "@effect-rdma/core/SharedReceiveQueue"
) as SharedReceiveQueue.TypeId

/** The driver's sizes of a queue. */
export interface Sizes {
  readonly rqSize: number
  /** 0: no receive CQ; its receives complete on the CQs of the connections made with it. */
  readonly rcqSize: number
}

/** A queue's machinery behind its public face: the kernel its receives are posted through. */
export class SharedReceiveQueueImpl extends PipeableBase implements SharedReceiveQueue.SharedReceiveQueue {
  readonly [TypeId]: SharedReceiveQueue.TypeId = TypeId
  constructor(readonly handle: SrqHandle, readonly peer: Peer, readonly kernel: Poster, readonly sizes: Sizes) {
    super()
  }
}

export const isSharedReceiveQueue = (u: unknown): u is SharedReceiveQueue.SharedReceiveQueue =>
  u instanceof SharedReceiveQueueImpl

const impl = (srq: SharedReceiveQueue.SharedReceiveQueue): SharedReceiveQueueImpl => srq as SharedReceiveQueueImpl

/** The queues core made, by handle: what a connection's config names. */
const byHandle = new WeakMap<object, SharedReceiveQueueImpl>()

const ofHandle = (handle: SrqHandle | undefined): SharedReceiveQueueImpl | undefined =>
  typeof handle === "object" && handle !== null ? byHandle.get(handle) : undefined

/** The sizes of the queue a connection's config names, if core made it. */
export const sizesOf = (handle: SrqHandle | undefined): Sizes | undefined => ofHandle(handle)?.sizes

/**
 * The kernel of the queue a connection's config names when its receives complete on the
 * connection's CQs (it has no receive CQ): the connection's kernel reads them for it.
 */
export const completingOn = (handle: SrqHandle | undefined): Poster | undefined => {
  const queue = ofHandle(handle)
  return queue !== undefined && queue.sizes.rcqSize === 0 ? queue.kernel : undefined
}

/** The queue's owner record: connections made with it are its users. */
const ownerOf = (queue: SharedReceiveQueue.SharedReceiveQueue): Owner.Owner =>
  Owner.of(queue, () => `the shared receive queue on the peer at ${queue.peer.address}`)

/**
 * A connection (or accepted request) made with `queue` uses it until its scope closes:
 * acquired before the connection, so released after it.
 */
export const usedBy = (
  queue: SharedReceiveQueue.SharedReceiveQueue | undefined
): Effect.Effect<void, never, Scope.Scope> =>
  queue === undefined ? Effect.void : Effect.acquireRelease(
    Effect.sync(() => Owner.retain(ownerOf(queue))),
    () => Owner.drop(ownerOf(queue))
  )

/** No send queue: a shared receive queue takes receives only. */
const NO_SEND_SLOTS = new Slots(0)

/** rpma_srq_new, scoped; its completion channel is armed while receives are outstanding. */
const open = (
  driver: Driver,
  peer: Peer,
  config: { readonly rqSize: number; readonly rcqSize: number }
): Effect.Effect<SharedReceiveQueueImpl, RpmaError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const handle = yield* driver.srqNew(handles.peer(peer), config)
      Owner.retain(peerOwner(peer))
      const table = new PendingTable<OperationError>()
      const slots = new Slots(config.rqSize)
      let open = true
      let lostCause: unknown = undefined
      const closed = (operation: string, unsignalled?: boolean) =>
        closedError(lostCause === undefined ? "CLOSED" : "LOST", lostCause)(operation, unsignalled)
      const kernel = yield* startPoster(() => ({
        driver,
        queue: handle,
        // Without a receive CQ, each receive completes on its connection's CQ, read by that connection's kernel.
        completions: config.rcqSize === 0 ? undefined : handle,
        table,
        sendSlots: NO_SEND_SLOTS,
        recvSlots: slots,
        refusal: (operation) => open ? undefined : closed(operation),
        flushed: () => open ? undefined : closed,
        // The receive CQ failing: nothing will complete what waits.
        lost: (cause) => {
          open = false
          lostCause = cause
          slots.close()
          table.failAll(closed)
        }
      }))

      const close = Effect.gen(function*() {
        open = false
        slots.close()
        kernel.stop()
        // What completed already is delivered; what still waits for a message fails.
        yield* settle({
          poster: kernel,
          table,
          poll: driver.pollCompletions(handle),
          failedAs: closed,
          drainMs: undefined
        })
        const gone = yield* release("rpma_srq_delete", "a shared receive queue", driver.srqDelete(handle))
        // Refused (a queue pair core does not know of still points at it): it stays, with what it holds.
        if (!gone) return
        // Deleted, or failed and freed all the same: the device no longer writes the receives' regions.
        yield* runAll(table.releaseHeld())
        yield* Owner.drop(peerOwner(peer))
      })
      const queue = new SharedReceiveQueueImpl(handle, peer, kernel, config)
      byHandle.set(handle as object, queue)
      return { queue, close }
    }),
    ({ close, queue }) => Owner.releaseWhenUnused(ownerOf(queue), close)
  ).pipe(Effect.map(({ queue }) => queue))

export const make = (
  peer: Peer,
  options?: SharedReceiveQueue.Options
): Effect.Effect<SharedReceiveQueue.SharedReceiveQueue, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const notPeer = notAPeer("rpma_srq_new", peer)
    if (notPeer !== undefined) return instrument.refused(notPeer)
    const read = readRpmaSettings(options, "rpma_srq_new", { receiveQueueSize: true, completionQueueSize: true })
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const rqSize = read.right?.receiveQueueSize ?? 64
    return open(driver, peer, { rqSize, rcqSize: read.right?.completionQueueSize ?? rqSize })
  })

const withQpNum = (c: DriverCompletion): SharedReceiveQueue.Completion => {
  // Added to the fresh completion, not spread into a copy (a new hidden class per completion).
  const completion = toCompletion(c) as { qpNum?: number }
  completion.qpNum = c.qpNum ?? 0
  return completion as SharedReceiveQueue.Completion
}

export const postRecv = (
  srq: SharedReceiveQueue.SharedReceiveQueue,
  args: Connection.RecvArgs
): Effect.Effect<SharedReceiveQueue.Posted, Connection.TransferError> =>
  Effect.suspend(() => {
    const refused = notTheResource(
      Operations.srqRecv.name,
      "queue must be a SharedReceiveQueue (SharedReceiveQueue.make)",
      isSharedReceiveQueue,
      srq
    )
    return refused === undefined ? postOn(srq, args) : instrument.refused(refused)
  })

const postOn = (
  srq: SharedReceiveQueue.SharedReceiveQueue,
  args: Connection.RecvArgs
): Effect.Effect<SharedReceiveQueue.Posted, Connection.TransferError> =>
  submitRecv(impl(srq).kernel, Operations.srqRecv, args, ({ dst }) =>
    // Another protection domain: the device would take the receive and fail it only when a
    // message arrives for it, and that message would be lost.
    handles.peer(dst.peer) === handles.peer(srq.peer) ? undefined : new RpmaInvalidError({
      operation: Operations.srqRecv.name,
      detail:
        `the destination region is registered on another peer than the queue's (the peer at ${srq.peer.address}): register it there`
    }), withQpNum)

export const recv = (
  srq: SharedReceiveQueue.SharedReceiveQueue,
  args: Connection.RecvArgs
): Effect.Effect<SharedReceiveQueue.Completion, Connection.TransferError> =>
  Effect.flatMap(postRecv(srq, args), (posted) => posted.completion)
