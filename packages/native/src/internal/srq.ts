/**
 * The native driver's shared receive queue calls (srq.cc): creation and deletion, receives, and
 * the completions of the queue's own receive CQ, waited for like a connection's.
 *
 * @internal
 */
import type { ConnHandle, Driver, SrqCompletion, SrqHandle } from "@effect-rdma/core/Driver"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import { RpmaCode } from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { attempt, inUseOr, rpma, rpmaFailure, wait } from "./driver.js"

/** @internal */
export const srqCalls = (
  binding: Binding
): Pick<Driver, "srqNew" | "srqDelete" | "srqRecv" | "srqPollCompletions" | "srqNextCompletions" | "connQpNum"> => {
  // A wait on a queue is cancelled through its own entry point.
  const srqBinding: Binding = { ...binding, cancelWait: binding.srqCancelWait }
  const poll = (srq: SrqHandle) =>
    rpma("rpma_cq_get_wc", (): ReadonlyArray<SrqCompletion> => binding.srqPollCompletions(srq))
  return {
    // The sizes are checked with core's words first, as the simulated driver does.
    srqNew: (peer, config) =>
      rpma("rpma_srq_new", () => {
        const refused = DriverArguments.srqConfig(config)
        if (refused !== undefined) {
          throw Object.assign(new Error(refused), { operation: "rpma_srq_new", code: RpmaCode.RPMA_E_INVAL, detail: refused })
        }
        return binding.srqNew(peer, config) as SrqHandle
      }),
    srqDelete: (srq) =>
      attempt(() => binding.srqDelete(srq), inUseOr("rpma_srq_delete", rpmaFailure("rpma_srq_delete"))),
    srqRecv: (srq, request) => rpma("rpma_srq_recv", () => binding.srqRecv(srq, request)),
    srqPollCompletions: poll,
    srqNextCompletions: (srq) =>
      Effect.flatMap(poll(srq), (ready) =>
        ready.length > 0
          ? Effect.succeed(ready)
          : wait<ReadonlyArray<SrqCompletion>>(
            srqBinding,
            "rpma_cq_wait",
            srq,
            (callback) => binding.srqWaitCompletions(srq, callback)
          )),
    connQpNum: (conn: ConnHandle) => rpma("rpma_conn_get_qp_num", () => binding.connQpNum(conn))
  }
}
