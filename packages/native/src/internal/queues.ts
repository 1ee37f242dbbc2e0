/**
 * The data path on every queue: postMany on a connection, a shared receive queue or a connection
 * request (the addon's post picks rpma_write ... rpma_recv, rpma_srq_recv or rpma_conn_req_recv
 * and refuses anything but a receive where only receives go), and the completions of a connection
 * or a shared receive queue, read (pollCompletions) or waited for with a plain callback
 * (armCompletions): one mechanism for both, in the addon's completions.cc.
 */
import type { RdmaError } from "@effect-rdma/core"
import type { Driver, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Binding, WaitCallback } from "../RpmaBinding.js"
import { rpma } from "./addon.js"
import { invalidArgument, rpmaErrorOrThrow, rpmaExit } from "./failures.js"
import { type LoopTurns, makeLoopTurns } from "./loopTurns.js"
import { packedArray, readPacked, RPMA_FIELDS } from "./packedCompletions.js"
import { armOnce, pollAfterPost, type Poster, postInOrder } from "./posting.js"
import { makeWindows } from "./window.js"

const postOperations = {
  write: "rpma_write",
  read: "rpma_read",
  flush: "rpma_flush",
  atomicWrite: "rpma_atomic_write",
  send: "rpma_send",
  recv: "rpma_recv"
} as const

/**
 * The operation a work request names, for a failure the addon did not name (it names its own);
 * never throws (a getter or Proxy trap may).
 */
const operationOf = (request: Model.WorkRequest): string => {
  try {
    const op: unknown = typeof request === "object" && request !== null ? request.op : undefined
    return typeof op === "string" && Object.hasOwn(postOperations, op)
      ? postOperations[op as Model.WorkRequest["op"]]
      : "rpma_write"
  } catch {
    return "rpma_write"
  }
}

const NONE: ReadonlyArray<Model.Completion> = []

/** A full array's rest, read without waiting. */
const pollAgain = (binding: Binding, queue: unknown, into: Float64Array): number => binding.pollPacked(queue, into)

const pollFailed = (cause: unknown): RdmaError.RpmaError => rpmaErrorOrThrow("rpma_cq_get_wc", cause)

/** What postMany answers when it is not given an array, as the simulated driver does. */
const notAList = (): RdmaError.RpmaError =>
  rpmaErrorOrThrow("rpma_post", invalidArgument("rpma_post", "the requests must be an array of work requests"))

export const queueCalls = (
  binding: Binding,
  loop: LoopTurns = makeLoopTurns()
): Pick<Driver, "postMany" | "pollCompletions" | "armCompletions" | "spinCompletions"> => {
  const windows = makeWindows(binding)
  // Completions come back as numbers where the addon can (pollPacked): one array per driver, read
  // out before anything else polls. A binding without it (an older addon, a test's) gives objects.
  const packed = typeof binding.pollPacked === "function" ? packedArray(RPMA_FIELDS) : undefined
  const poll = (queue: unknown): ReadonlyArray<Model.Completion> =>
    packed === undefined
      ? binding.pollCompletions(queue)
      : readPacked(packed, RPMA_FIELDS, binding.pollPacked(queue, packed), binding, queue, pollAgain) ?? NONE
  const spin = (queue: unknown, budgetNs: number): ReadonlyArray<Model.Completion> =>
    packed === undefined || typeof binding.spinPacked !== "function"
      ? binding.spinCompletions(queue, budgetNs)
      : readPacked(packed, RPMA_FIELDS, binding.spinPacked(queue, packed, budgetNs), binding, queue, pollAgain) ?? NONE
  // Made for a post one by one, or a window's refusal: a list posted whole in windows needs none.
  const posterOf = (queue: unknown): Poster<Model.WorkRequest, RdmaError.RpmaError> => ({
    post: (request) => binding.post(queue, request),
    // A connection request has no completion queue yet: the addon answers none.
    poll: () => poll(queue),
    refused: (request, cause) => rpmaErrorOrThrow(operationOf(request), cause),
    pollFailed,
    notAList
  })
  return {
    postMany: (queue, requests): Model.PostOutcome => {
      // Every list goes in windows, one request too: packed in JavaScript it costs less than
      // post's eleven napi reads (a 64 B write's latency on the device: 2.5-2.8x C to 2.1-2.2x).
      let list = false
      try {
        list = Array.isArray(requests) && requests.length >= 1
      } catch {
        // A Proxy's length threw: postInOrder refuses the list.
      }
      if (!list) return postInOrder(requests, posterOf(queue), loop)
      const { error, posted } = windows.post(queue, requests, posterOf)
      return pollAfterPost(posted, error, queue, poll, pollFailed, loop)
    },
    // Core polls right after each post: the event loop gets a turn first when the queue has kept
    // answering synchronously for too long (see LOOP_BUDGET_MS).
    pollCompletions: (queue) =>
      Effect.zipRight(
        loop.fair,
        rpma("rpma_cq_get_wc", (): ReadonlyArray<Model.Completion> => poll(queue))
      ),
    spinCompletions: (queue, budgetNs) => {
      try {
        return Exit.succeed(spin(queue, budgetNs))
      } catch (cause) {
        return rpmaExit("rpma_cq_get_wc", cause)
      }
    },
    // The addon's wait (uv_poll on the channel's descriptor) answers one callback; core re-arms.
    // Packed, the callback reads the driver's array at once: nothing else runs in between.
    armCompletions: (queue, onReady: Model.CompletionsReady) =>
      armOnce(
        (callback: WaitCallback<ReadonlyArray<Model.Completion>>) =>
          packed === undefined || typeof binding.waitPacked !== "function"
            ? binding.waitCompletions(queue, callback)
            : binding.waitPacked(queue, packed, (error, count) =>
              error !== undefined && error !== null
                ? callback(error, NONE)
                : callback(
                  null,
                  readPacked(packed, RPMA_FIELDS, count!, binding, queue, pollAgain) ?? NONE
                )),
        (id) => binding.cancelWait(queue, id),
        (cause) => rpmaExit("rpma_cq_wait", cause),
        onReady
      )
  }
}
