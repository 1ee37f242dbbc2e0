/**
 * The data path on every queue: postMany on a connection, a shared receive queue or a connection
 * request (the addon's post picks rpma_write ... rpma_recv, rpma_srq_recv or rpma_conn_req_recv
 * and refuses anything but a receive where only receives go), and the completions of a connection
 * or a shared receive queue, read (pollCompletions) or waited for with a plain callback
 * (armCompletions): one mechanism for both, in the addon's completions.cc.
 *
 * @internal
 */
import type { Completion, CompletionsReady, Driver, PostOutcome, WorkRequest } from "@effect-rdma/core/Driver"
import type { RpmaError } from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Binding } from "../RpmaBinding.js"
import { rpma } from "./addon.js"
import { invalidArgument, rpmaErrorOrThrow, rpmaExit } from "./failures.js"
import { type LoopTurns, makeLoopTurns } from "./loopTurns.js"

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
const operationOf = (request: WorkRequest): string => {
  try {
    const op: unknown = typeof request === "object" && request !== null ? request.op : undefined
    return typeof op === "string" && Object.hasOwn(postOperations, op) ? postOperations[op as WorkRequest["op"]] : "rpma_write"
  } catch {
    return "rpma_write"
  }
}

const NONE: ReadonlyArray<Completion> = []

/** What postMany answers when it is not given an array, as the simulated driver does. */
const notAList = (): PostOutcome => ({
  posted: 0,
  error: rpmaErrorOrThrow("rpma_post", invalidArgument("rpma_post", "the requests must be an array of work requests")),
  ready: NONE,
  queueError: undefined,
  turnDue: false
})

/** @internal */
export const queueCalls = (
  binding: Binding,
  loop: LoopTurns = makeLoopTurns()
): Pick<Driver, "postMany" | "pollCompletions" | "armCompletions"> => ({
  postMany: (queue, requests): PostOutcome => {
    if (!Array.isArray(requests)) return notAList()
    let posted = 0
    let error: RpmaError | undefined
    for (;;) {
      // A hostile array (a Proxy, a getter) may throw when read: refused as not a list of requests.
      let request: WorkRequest
      try {
        if (posted >= requests.length) break
        request = requests[posted]
      } catch {
        error = notAList().error
        break
      }
      try {
        binding.post(queue, request)
      } catch (cause) {
        error = rpmaErrorOrThrow(operationOf(request), cause)
        break
      }
      posted++
    }
    // Nothing posted: nothing new to read (the armed channel reports what was there before).
    if (posted === 0) return { posted, error, ready: NONE, queueError: undefined, turnDue: false }
    // A connection request has no completion queue yet: the addon answers none.
    let ready: ReadonlyArray<Completion> = NONE
    let queueError: RpmaError | undefined
    try {
      ready = binding.pollCompletions(queue)
    } catch (cause) {
      queueError = rpmaErrorOrThrow("rpma_cq_get_wc", cause)
    }
    return { posted, error, ready, queueError, turnDue: loop.due() }
  },
  // Core polls right after each post: the event loop gets a turn first when the queue has kept
  // answering synchronously for too long (see LOOP_BUDGET_MS).
  pollCompletions: (queue) =>
    Effect.zipRight(loop.fair, rpma("rpma_cq_get_wc", (): ReadonlyArray<Completion> => binding.pollCompletions(queue))),
  // The addon's wait (uv_poll on the channel's descriptor) answers one callback; core re-arms.
  armCompletions: (queue, onReady: CompletionsReady) => {
    let done = false
    let id: number | undefined
    let refused: ReturnType<typeof setImmediate> | undefined
    try {
      id = binding.waitCompletions(queue, (error, value) => {
        if (done) return
        done = true
        onReady(error === undefined || error === null ? Exit.succeed(value) : rpmaExit("rpma_cq_wait", error))
      })
    } catch (cause) {
      // Never during the call: the refusal is reported from the event loop, like an answer.
      refused = setImmediate(() => {
        if (done) return
        done = true
        onReady(rpmaExit("rpma_cq_wait", cause))
      })
    }
    return () => {
      if (done) return
      done = true
      if (refused !== undefined) clearImmediate(refused)
      if (id !== undefined) binding.cancelWait(queue, id)
    }
  }
})
