/**
 * A shared receive queue's life and data path: its receives in a table of their own, completed by
 * one fiber that waits on the queue's receive CQ (not on any connection's), and its release
 * deferred until the last connection made with it is gone (the driver refuses to delete a queue
 * that queue pairs still point at).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import { ConnectionClosedError, type OperationError } from "./connectionErrors.js"
import type { Completion, Driver, RecvRequest, SrqConfig, SrqHandle } from "../Driver.js"
import { WcOpcode } from "../Driver.js"
import type { LocalMr } from "../LocalMr.js"
import { ownerOf as peerOwner, type Peer } from "../Peer.js"
import type { RpmaError } from "../RdmaError.js"
import { PendingTable, runAll, Slots } from "./dataPath.js"
import * as Owner from "./owner.js"
import { release } from "./release.js"

/** @internal What core keeps of a queue beside its handle. */
export interface Queue {
  readonly handle: SrqHandle
  readonly peer: Peer
  /** Posts a receive and succeeds, once posted, with the wait for its completion. */
  readonly post: (
    dst: LocalMr<any>,
    request: Omit<RecvRequest, "id">
  ) => Effect.Effect<Effect.Effect<Completion, OperationError>, OperationError>
}

const OPERATION = "rpma_srq_recv"

/** @internal The queue's owner record: connections made with it are its users. */
export const ownerOf = (queue: Queue): Owner.Owner =>
  Owner.of(queue, () => `the shared receive queue on the peer at ${queue.peer.address}`)

/**
 * @internal A connection (or accepted request) made with `queue` uses it until its scope closes:
 * acquired before the connection, so released after it.
 */
export const usedBy = (queue: Queue | undefined): Effect.Effect<void, never, Scope.Scope> =>
  queue === undefined ? Effect.void : Effect.acquireRelease(
    Effect.sync(() => Owner.retain(ownerOf(queue))),
    () => Owner.drop(ownerOf(queue))
  )

/** @internal rpma_srq_new, scoped; the completion fiber runs until the queue is deleted. */
export const make = (
  driver: Driver,
  peer: Peer,
  config: SrqConfig
): Effect.Effect<Queue, RpmaError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const handle = yield* driver.srqNew(peer.handle, config)
      Owner.retain(peerOwner(peer))
      const table = new PendingTable<OperationError>()
      const slots = new Slots(config.rqSize)
      let open = true
      const closed = (cause?: unknown) => (operation: string) =>
        new ConnectionClosedError({ operation, reason: cause === undefined ? "CLOSED" : "LOST", cause })

      const fiber = yield* driver.srqNextCompletions(handle).pipe(
        Effect.flatMap((completions) => runAll(table.dispatch(completions))),
        Effect.forever,
        // The receive CQ failing: nothing will complete what waits.
        Effect.catchAll((cause) =>
          Effect.sync(() => {
            open = false
            slots.close()
            table.failAll(closed(cause))
          })
        ),
        Effect.interruptible,
        Effect.forkDaemon
      )

      const post: Queue["post"] = (dst, request) =>
        Effect.uninterruptibleMask((restore) => {
          const afterSlot = (): Effect.Effect<Effect.Effect<Completion, OperationError>, OperationError> => {
            if (!open) {
              slots.give()
              return Effect.fail(closed()(OPERATION))
            }
            const entry = table.add(OPERATION, [dst], slots, false, WcOpcode.RECV)
            return Effect.matchEffect(driver.srqRecv(handle, { ...request, id: entry.id }), {
              onFailure: (error) => Effect.zipRight(runAll(table.unpost(entry)), Effect.fail(error)),
              onSuccess: () => Effect.succeed(table.await(entry))
            })
          }
          return slots.tryTake() ? afterSlot() : Effect.zipRight(restore(slots.take), Effect.suspend(afterSlot))
        })

      const close = Effect.gen(function*() {
        open = false
        slots.close()
        // What completed already is delivered; what still waits for a message fails.
        const ready = yield* Effect.orElseSucceed(driver.srqPollCompletions(handle), () => [])
        yield* runAll(table.dispatch(ready))
        yield* Fiber.interrupt(fiber)
        table.failAll(closed())
        const gone = yield* release("rpma_srq_delete", "a shared receive queue", driver.srqDelete(handle))
        // Refused (a queue pair core does not know of still points at it): it stays, with what it holds.
        if (!gone) return
        // Deleted, or failed and freed all the same: the device no longer writes the receives' regions.
        yield* runAll(table.releaseHeld())
        yield* Owner.drop(peerOwner(peer))
      })
      const queue: Queue = { handle, peer, post }
      return { queue, close }
    }),
    ({ close, queue }) => Owner.releaseWhenUnused(ownerOf(queue), close)
  ).pipe(Effect.map(({ queue }) => queue))
