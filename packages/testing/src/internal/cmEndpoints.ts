/**
 * The simulated driver's endpoints of librdmacm's verbs API (rdma_create_ep with a queue pair,
 * rdma_listen / rdma_get_request, rdma_post_*). Placeholder: every call fails with ENOSYS until the
 * simulated fabric implements them.
 *
 * @internal
 */
import type { Driver } from "@effect-rdma/core/Driver"
import * as RdmaError from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"

const ENOSYS = 38
const missing = (operation: string) =>
  RdmaError.fromErrno(ENOSYS, operation, "not implemented by the simulated driver yet")

/** @internal */
export const cmEndpointCalls: Pick<
  Driver,
  | "cmEpCreate"
  | "cmConnect"
  | "cmListen"
  | "cmGetRequest"
  | "cmPrivateData"
  | "cmAccept"
  | "cmReject"
  | "cmNextEvent"
  | "cmDisconnect"
  | "cmEpDestroy"
  | "cmListenerDestroy"
  | "cmEpInfo"
  | "cmPostMany"
  | "cmPollCompletions"
  | "cmArmCompletions"
> = {
  cmEpCreate: () => Effect.fail(missing("rdma_create_ep")),
  cmConnect: () => Effect.fail(missing("rdma_connect")),
  cmListen: () => Effect.fail(missing("rdma_listen")),
  cmGetRequest: () => Effect.fail(missing("rdma_get_request")),
  cmPrivateData: () => Effect.fail(missing("rdma_cm private data")),
  cmAccept: () => Effect.fail(missing("rdma_accept")),
  cmReject: () => Effect.fail(missing("rdma_reject")),
  cmNextEvent: () => Effect.fail(missing("rdma_get_cm_event")),
  cmDisconnect: () => Effect.fail(missing("rdma_disconnect")),
  cmEpDestroy: () => Effect.fail(missing("rdma_destroy_ep")),
  cmListenerDestroy: () => Effect.fail(missing("rdma_destroy_ep")),
  cmEpInfo: () => Effect.fail(missing("rdma_cm endpoint")),
  cmPostMany: () => ({
    posted: 0,
    error: missing("rdma_post_send"),
    ready: [],
    queueError: undefined,
    turnDue: false
  }),
  cmPollCompletions: () => Effect.fail(missing("ibv_poll_cq")),
  cmArmCompletions: () => () => {}
}
