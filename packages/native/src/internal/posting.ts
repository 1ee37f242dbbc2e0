/**
 * What both posting calls share (queues.ts for librpma's queues, cmEndpoint.ts for librdmacm's
 * endpoints): posting a list in order up to the first refusal, then one poll; and a completion
 * wait in the addon answered once, from the event loop.
 */
import type { Model } from "@effect-rdma/core/Driver"
import type * as Exit from "effect/Exit"
import * as ExitValue from "effect/Exit"
import type { WaitCallback } from "../RpmaBinding.js"
import type { LoopTurns } from "./loopTurns.js"

const NONE: ReadonlyArray<Model.Completion> = []

/** How one queue kind posts, polls and names its failures. */
export interface Poster<R, E> {
  readonly post: (request: R) => void
  readonly poll: () => ReadonlyArray<Model.Completion>
  /** The refusal of `request` (which threw `cause`). */
  readonly refused: (request: R, cause: unknown) => E
  /** The poll's failure. */
  readonly pollFailed: (cause: unknown) => E
  /** What a value that is not a readable array of requests gets. */
  readonly notAList: () => E
}

/**
 * Posts `requests` in order, stopping at the first refusal, then polls once (when anything was
 * posted: otherwise nothing new can be read). Never throws for a refusal.
 */
export const postInOrder = <R, E>(requests: unknown, poster: Poster<R, E>, loop: LoopTurns): Model.PostOutcome<E> => {
  if (!Array.isArray(requests)) {
    return { posted: 0, error: poster.notAList(), ready: NONE, queueError: undefined, turnDue: false }
  }
  const { error, posted } = postFrom(requests, 0, poster)
  return afterPosting(posted, error, poster, loop)
}

/**
 * Posts `requests` from index `from` in order, stopping at the first refusal: how many of the list
 * are posted then (those before `from` counted), and the refusal.
 */
export const postFrom = <R, E>(
  requests: ReadonlyArray<unknown>,
  from: number,
  poster: Poster<R, E>
): { readonly posted: number; readonly error: E | undefined } => {
  let posted = from
  let error: E | undefined
  for (;;) {
    // A hostile array (a Proxy, a getter) may throw when read: refused as not a list of requests.
    let request: R
    try {
      if (posted >= requests.length) break
      request = requests[posted] as R
    } catch {
      error = poster.notAList()
      break
    }
    try {
      poster.post(request)
    } catch (cause) {
      error = poster.refused(request, cause)
      break
    }
    posted++
  }
  return { posted, error }
}

/**
 * The outcome of a post that ended with `posted` requests posted and `error` (if any): the queue
 * polled once when anything was posted.
 */
export const afterPosting = <R, E>(
  posted: number,
  error: E | undefined,
  poster: Poster<R, E>,
  loop: LoopTurns
): Model.PostOutcome<E> => pollAfterPost(posted, error, poster, pollPoster, poster.pollFailed, loop)

const pollPoster = (poster: Poster<any, any>) => poster.poll()

/**
 * {@link afterPosting} with the poll as `poll(queue)` and its failure as `pollFailed`: a caller that
 * posted without making a {@link Poster} (a list the windows took whole) needs none for the poll.
 */
export const pollAfterPost = <Q, E>(
  posted: number,
  error: E | undefined,
  queue: Q,
  poll: (queue: Q) => ReadonlyArray<Model.Completion>,
  pollFailed: (cause: unknown) => E,
  loop: LoopTurns
): Model.PostOutcome<E> => {
  if (posted === 0) return { posted, error, ready: NONE, queueError: undefined, turnDue: false }
  let ready: ReadonlyArray<Model.Completion> = NONE
  let queueError: E | undefined
  try {
    ready = poll(queue)
  } catch (cause) {
    queueError = pollFailed(cause)
  }
  return { posted, error, ready, queueError, turnDue: loop.due() }
}

/**
 * A completion wait in the addon (`start` returns its id, `cancel` stops it): `onReady` once,
 * never during this call (a refusal is reported from the event loop, like an answer); the
 * returned disarm stops the wait.
 */
export const armOnce = <A, E>(
  start: (callback: WaitCallback<A>) => number,
  cancel: (id: number) => void,
  failure: (cause: unknown) => Exit.Exit<never, E>,
  onReady: Model.CompletionsReady<E>
): () => void => {
  let done = false
  let id: number | undefined
  let refused: ReturnType<typeof setImmediate> | undefined
  try {
    id = start((error, value) => {
      if (done) return
      done = true
      onReady(
        error === undefined || error === null
          ? ExitValue.succeed(value as ReadonlyArray<Model.Completion>)
          : failure(error)
      )
    })
  } catch (cause) {
    refused = setImmediate(() => {
      if (done) return
      done = true
      onReady(failure(cause))
    })
  }
  return () => {
    if (done) return
    done = true
    if (refused !== undefined) clearImmediate(refused)
    if (id !== undefined) cancel(id)
  }
}
