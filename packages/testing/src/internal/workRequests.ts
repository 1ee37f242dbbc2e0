/**
 * A work request of librpma's path as plain data: what it grants and reaches (access masks, the
 * flush's read), what it holds while posted, its completion as ibv_wc has it, and its other side's
 * half (wire.Reach). No state: the network's modules share these.
 */
import { Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Model } from "@effect-rdma/core/Driver"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import type * as wire from "./wire.js"

/** What ibv_reg_mr grants for each usage (librpma's usage_to_access). */
export const REMOTE_READ = Usage.Flags.READ_SRC | Usage.Flags.FLUSH_TYPE_VISIBILITY | Usage.Flags.FLUSH_TYPE_PERSISTENT
export const REMOTE_WRITE = Usage.Flags.WRITE_DST
export const LOCAL_WRITE = Usage.Flags.READ_DST | Usage.Flags.WRITE_SRC | Usage.Flags.WRITE_DST | Usage.Flags.RECV
/**
 * librpma's flush is an RDMA read of this many bytes at the flush's offset, whatever its
 * length (RAW_SIZE in flush.c).
 */
export const FLUSH_READ_SIZE = 8

/** A receive posted on a connection, until a send takes it. */
export interface PostedRecv {
  readonly id: number
  readonly mr: fabric.MrLocal
  readonly offset: number
  readonly length: number
}

/** A send that waits on the other side for a receive. */
export interface PendingSend {
  readonly id: number
  readonly bytes: Uint8Array
  readonly from: fabric.Conn
  /** Immediate data, for a send or a write with it. */
  readonly imm?: number | undefined
  /** For a write with immediate data: its length (the bytes went to the remote region, not the receive). */
  readonly written?: number | undefined
  /** Whether its success produces a completion on the sending side. */
  readonly signalled: boolean
}

/** What a posted request holds until its completion is returned. */
export interface Held {
  readonly regions: Array<fabric.MrLocal>
  readonly sendQueue: boolean
  readonly signalled: boolean
}

export const NONE: ReadonlyArray<Driver.Model.Completion> = []
/** What a shared receive queue without a receive CQ polls: nothing ever completes there. */
export const NO_RECEIVE_CQ = CompletionQueue.make(() => {})
export const NONE_POSTED: ReadonlyArray<Driver.Model.WorkRequest> = []
export const NO_BYTES = new Uint8Array(0)
/** The requests of a postMany call as a plain array, or undefined when they are not an array (or reading them threw). */
export const requestList = (value: unknown): ReadonlyArray<Driver.Model.WorkRequest> | undefined => {
  if (!Array.isArray(value)) return undefined
  try {
    return Array.from(value as ReadonlyArray<Driver.Model.WorkRequest>)
  } catch {
    return undefined
  }
}

export type Recv = Extract<Driver.Model.WorkRequest, { readonly op: "recv" }>

/**
 * A completion as ibv_wc has it: no opcode on a failure; immediate data with its flag; the queue
 * pair number on a shared receive queue's.
 */
export const completion = (
  id: number,
  status: number,
  opcode: number,
  byteLength: number,
  imm: number | undefined,
  qpNum?: number
): Driver.Model.Completion => {
  const wc: Driver.Model.Completion = imm === undefined
    ? { id, status, byteLength, opcode: status === 0 ? opcode : -1, flags: 0 }
    : { id, status, byteLength, opcode, flags: Model.WcFlags.WITH_IMM, imm }
  return qpNum === undefined ? wc : { ...wc, qpNum }
}

/** Synchronous posts in a row before the simulated driver asks for a turn of the event loop. */
export const LOOP_BUDGET_CALLS = 256

/** The live local regions a request names: what it holds while posted. */
export const localRegionsOf = (wr: Driver.Model.WorkRequest): Array<fabric.MrLocal> => {
  const value = wr.op === "write" || wr.op === "send"
    ? wr.src
    : wr.op === "read" || wr.op === "recv"
    ? wr.dst
    : undefined
  const mr = fabric.asHandle(value, "MrLocal")
  return mr === undefined || !mr.alive ? [] : [mr]
}

/** The other side's half of a send-queue request, as data (a send names no remote region). */
export const halfOf = (
  wr: Exclude<Driver.Model.WorkRequest, Recv>,
  remote: fabric.MrRemote | undefined,
  offset: number,
  length: number,
  bytes: Uint8Array
): wire.Reach => ({
  op: wr.op,
  id: wr.id,
  rkey: remote?.rkey ?? 0,
  address: remote?.address ?? 0n,
  offset,
  length,
  bytes,
  imm: wr.op === "write" || wr.op === "send" ? wr.imm : undefined,
  signalled: wr.completion !== "onError"
})

/** The completion opcode of a request. */
export const opcodeOf = (wr: Driver.Model.WorkRequest): number =>
  wr.op === "write" || wr.op === "atomicWrite"
    ? Model.WcOpcode.RDMA_WRITE
    : wr.op === "read" || wr.op === "flush"
    ? Model.WcOpcode.RDMA_READ
    : wr.op === "send"
    ? Model.WcOpcode.SEND
    : Model.WcOpcode.RECV

/** The librpma call that posts a request (what errors and fault plans name). */
export const operationOf = (wr: Driver.Model.WorkRequest): fabric.DataOperation =>
  wr.op === "atomicWrite" ? "rpma_atomic_write" : `rpma_${wr.op}`
