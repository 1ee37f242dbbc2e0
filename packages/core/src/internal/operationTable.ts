/**
 * Every operation core posts, in one table: the name its errors and spans carry, the work
 * request it posts (`WorkRequest["op"]`), the queue whose entry it takes, and the opcode of its
 * completion (for the completions that carry none: a failure, an unsignalled request's implied
 * success). Nothing else derives one from another.
 */
import { WcOpcode, type WorkRequest } from "../DriverModel.js"

/** One operation: what the posting kernel needs to know of it. */
export interface OperationSpec {
  /** The C call, as errors and spans name it. */
  readonly name: string
  readonly op: WorkRequest["op"]
  /** The queue whose entries it takes: a send queue's or a receive queue's. */
  readonly queue: "send" | "recv"
  /** `enum ibv_wc_opcode` of its completion. */
  readonly opcode: number
}

const spec = (name: string, op: WorkRequest["op"], queue: "send" | "recv", opcode: number): OperationSpec => ({
  name,
  op,
  queue,
  opcode
})

export const Operations = {
  write: spec("rpma_write", "write", "send", WcOpcode.RDMA_WRITE),
  writeWithImm: spec("rpma_write_with_imm", "write", "send", WcOpcode.RDMA_WRITE),
  read: spec("rpma_read", "read", "send", WcOpcode.RDMA_READ),
  flush: spec("rpma_flush", "flush", "send", WcOpcode.RDMA_READ),
  atomicWrite: spec("rpma_atomic_write", "atomicWrite", "send", WcOpcode.RDMA_WRITE),
  send: spec("rpma_send", "send", "send", WcOpcode.SEND),
  sendWithImm: spec("rpma_send_with_imm", "send", "send", WcOpcode.SEND),
  recv: spec("rpma_recv", "recv", "recv", WcOpcode.RECV),
  /** A receive on a shared receive queue. */
  srqRecv: spec("rpma_srq_recv", "recv", "recv", WcOpcode.RECV),
  /** A receive on an incoming connection request, before it is accepted. */
  connReqRecv: spec("rpma_conn_req_recv", "recv", "recv", WcOpcode.RECV),
  // librdmacm's verbs API on an endpoint (CmEndpoint.ts); immediate data and inline sends go
  // through ibv_post_send, which its wrappers do not expose.
  cmSend: spec("rdma_post_send", "send", "send", WcOpcode.SEND),
  cmSendv: spec("rdma_post_sendv", "send", "send", WcOpcode.SEND),
  cmSendWithImm: spec("ibv_post_send(IBV_WR_SEND_WITH_IMM)", "send", "send", WcOpcode.SEND),
  cmRecv: spec("rdma_post_recv", "recv", "recv", WcOpcode.RECV),
  cmRecvv: spec("rdma_post_recvv", "recv", "recv", WcOpcode.RECV),
  cmWrite: spec("rdma_post_write", "write", "send", WcOpcode.RDMA_WRITE),
  cmWriteWithImm: spec("ibv_post_send(IBV_WR_RDMA_WRITE_WITH_IMM)", "write", "send", WcOpcode.RDMA_WRITE),
  cmRead: spec("rdma_post_read", "read", "send", WcOpcode.RDMA_READ)
} as const
