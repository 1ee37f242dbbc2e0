/**
 * A completion queue and its channel, as librpma has them, for a connection and for a shared
 * receive queue alike: completions stay queued until a poll or an answered wait takes them; a
 * completion arriving while a wait is armed signals the channel, and the wait is answered on a
 * later turn of the event loop with what is queued then (if a poll took everything in between, the
 * wait goes on).
 */
import type { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Exit from "effect/Exit"

export interface CompletionQueue<E = RdmaError.RpmaError> {
  /** Queues a completion; an armed wait is answered on a later turn. */
  readonly push: (completion: Driver.Model.Completion) => void
  /** rpma_cq_get_wc: everything queued, possibly none; `onTaken` lets go of what they held. */
  readonly drain: () => ReadonlyArray<Driver.Model.Completion>
  /** Arms the channel: `onReady` once, on a later turn; the returned function disarms. */
  readonly arm: (onReady: Driver.Model.CompletionsReady<E>) => () => void
  /** The queue is deleted: every armed wait hears `error` at once, and nothing is answered after. */
  readonly close: (error: E) => void
}

const NONE: ReadonlyArray<Driver.Model.Completion> = []

/** `onTaken`: the completions a poll or an answered wait returns, to let go of what they held. */
export const make = <E = RdmaError.RpmaError>(
  onTaken: (taken: ReadonlyArray<Driver.Model.Completion>) => void
): CompletionQueue<E> => {
  let queue: Array<Driver.Model.Completion> = []
  const waiters: Array<Driver.Model.CompletionsReady<E>> = []
  let signalled = false
  let closed = false

  const drain = (): ReadonlyArray<Driver.Model.Completion> => {
    if (queue.length === 0) return NONE
    const all = queue
    queue = []
    onTaken(all)
    return all
  }
  /** The channel's signal, answered on a later turn: the first wait gets what is queued then. */
  const answer = () => {
    signalled = false
    if (waiters.length === 0 || closed) return
    const ready = drain()
    if (ready.length === 0) return // a poll took them: the wait goes on
    waiters.shift()!(Exit.succeed(ready))
    if (waiters.length > 0 && queue.length > 0) signal()
  }
  const signal = () => {
    if (signalled || waiters.length === 0) return
    signalled = true
    setImmediate(answer)
  }

  return {
    push: (completion) => {
      queue.push(completion)
      signal()
    },
    drain,
    arm: (onReady) => {
      waiters.push(onReady)
      if (queue.length > 0) signal()
      return () => {
        const i = waiters.indexOf(onReady)
        if (i >= 0) waiters.splice(i, 1)
      }
    },
    close: (error) => {
      closed = true
      queue = []
      for (const waiter of waiters.splice(0)) waiter(Exit.fail(error))
    }
  }
}

/** Never during the call, as the addon answers: a refused handle's wait hears it on a later turn. */
export const refusedWait = <E>(error: E, onReady: Driver.Model.CompletionsReady<E>): () => void => {
  let disarmed = false
  setImmediate(() => disarmed || onReady(Exit.fail(error)))
  return () => {
    disarmed = true
  }
}
