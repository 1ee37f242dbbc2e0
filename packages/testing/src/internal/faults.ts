/**
 * What keeps a planned fault from ever firing as written (an operation the driver does not count,
 * an `nth` that is no call, no kind of failure or two, a kind the operation cannot have), in words
 * that say what to write instead. A fault that never fires would leave the test that planned it
 * passing for the wrong reason, so planning one is refused.
 */
import * as Cause from "effect/Cause"
import type { DataOperation, Operation } from "../SimulatedDriver.js"

const DATA: { readonly [K in DataOperation]: true } = {
  rpma_write: true,
  rpma_read: true,
  rpma_flush: true,
  rpma_atomic_write: true,
  rpma_send: true,
  rpma_recv: true,
  rdma_post_send: true,
  rdma_post_recv: true,
  rdma_post_read: true,
  rdma_post_write: true
}

const OTHER: { readonly [K in Exclude<Operation, DataOperation>]: true } = {
  rpma_utils_get_ibv_context: true,
  rpma_peer_new: true,
  rpma_peer_delete: true,
  rpma_mr_reg: true,
  rpma_mr_dereg: true,
  rpma_mr_get_descriptor: true,
  rpma_mr_remote_from_descriptor: true,
  rpma_mr_remote_delete: true,
  rdma_create_ep: true,
  rdma_destroy_ep: true,
  rdma_reg_msgs: true,
  rdma_reg_read: true,
  rdma_reg_write: true,
  rdma_dereg_mr: true,
  posix_memalign: true,
  rpma_ep_listen: true,
  rpma_ep_next_conn_req: true,
  rpma_conn_req_new: true,
  rpma_conn_req_connect: true,
  rpma_conn_disconnect: true,
  rdma_connect: true,
  rdma_listen: true,
  rdma_get_request: true,
  rdma_accept: true,
  rdma_reject: true,
  rdma_disconnect: true
}

const show = (value: unknown): string =>
  value === null ? "null" : typeof value === "string" ? JSON.stringify(value) : typeof value === "number"
    ? String(value)
    : typeof value

const KINDS = ["code", "completionStatus", "loseConnection", "freezePeer"] as const

/** What is wrong with `fault`, or undefined. */
export const faultProblem = (fault: unknown): string | undefined => {
  if (typeof fault !== "object" || fault === null) {
    return `takes a fault { operation, nth, and one of ${KINDS.join(", ")} }, not ${show(fault)}`
  }
  const f = fault as Record<string, unknown>
  const operation = f.operation
  const data = typeof operation === "string" && Object.hasOwn(DATA, operation)
  if (!data && !(typeof operation === "string" && Object.hasOwn(OTHER, operation))) {
    return `operation ${show(operation)} is no call the simulated driver counts (SimulatedDriver.Operation)`
  }
  if (typeof f.nth !== "number" || !Number.isInteger(f.nth) || f.nth < 1) {
    return `nth must be a positive integer (1: the next call of ${operation}), not ${show(f.nth)}`
  }
  const kinds = KINDS.filter((kind) => f[kind] !== undefined)
  if (kinds.length !== 1) {
    return `a fault is one of ${KINDS.join(", ")}; this one has ${kinds.length === 0 ? "none" : kinds.join(" and ")}`
  }
  const kind = kinds[0]!
  const value = f[kind]
  if (kind === "code") {
    return typeof value === "number" && Number.isInteger(value) && value !== 0
      ? undefined
      : `code must be a librpma code (RPMA_E_*, negative) or an errno (positive), not ${show(value)}`
  }
  if (!data) return `${kind} is a fault of a request's operation (SimulatedDriver.DataOperation), not of ${operation}`
  if (kind === "completionStatus") {
    return typeof value === "number" && Number.isInteger(value) && value > 0
      ? undefined
      : `completionStatus must be a failed ibv_wc_status (a positive integer), not ${show(value)}`
  }
  if (value !== true) return `${kind} must be true, not ${show(value)}`
  return kind === "freezePeer" && !(operation as string).startsWith("rpma_")
    ? `freezePeer is a fault of librpma's operations (rpma_*): librdmacm's endpoints have no frozen peer yet`
    : undefined
}

/** `fault`, or the caller's mistake thrown as such. */
export const checked = <F>(call: string, fault: F): F => {
  const problem = faultProblem(fault)
  if (problem !== undefined) throw new Cause.IllegalArgumentException(`${call}: ${problem}`)
  return fault
}
