/**
 * The queue pair of a simulated librdmacm endpoint: the work requests of rdma_post_send / _recv /
 * _read / _write (and ibv_post_send's immediate data and inline sends), run between two connected
 * queue pairs as an RC queue pair on a device runs them: a send waits for a receive on the other
 * side (librdmacm's default RNR retry is infinite), a remote read or write is checked against the
 * other side's registrations (rkey, bounds, what its rdma_reg_* call allows), and a failed request
 * puts the queue pair in the error state, where everything posted completes with WR_FLUSH_ERR.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Model } from "@effect-rdma/core/Driver"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import type * as wire from "./wire.js"

/** A receive waiting for a message: where the bytes go. */
interface PostedRecv {
  readonly id: number
  readonly segments: ReadonlyArray<Driver.Model.CmSegment>
}

/** A send-queue request, in the queue until it has run. */
interface SendJob {
  readonly wr: Exclude<Driver.Model.CmWorkRequest, { readonly op: "recv" }>
  /** Its place in the send queue's order (what an unsignalled request's slot waits on). */
  readonly seq: number
  readonly signalled: boolean
  /** An inline request's bytes, taken at post time. */
  readonly taken: Uint8Array | undefined
  /** A fault plan's completion status instead of its own outcome. */
  readonly planned: number | undefined
}

/**
 * The other side's half of a send-queue request, as plain data (what crosses to another
 * process when the connected queue pair is there): what it does to that side's receives or memory.
 */
export type Reach = wire.CmReach

/** What the other side answers: a status, the bytes a read took, or undefined while a receive is awaited. */
export type Reached = number | Uint8Array | undefined

/** A connected queue pair in another process: where the send queue's first request's half goes. */
export interface FarPeer {
  readonly post: (reach: Reach) => void
  /** The most bytes one request may carry to it (the network's frame less its envelope). */
  readonly maxMessageSize: number
}

export interface QueuePair {
  readonly ep: fabric.CmEp
  readonly config: Driver.Model.CmEpConfig
  /** "init" until the connection is established: receives may be posted, nothing else. */
  state: "init" | "ready" | "error"
  /** The connected queue pair; it stays after a disconnect (a request to it then fails as on a wire). */
  peer: QueuePair | undefined
  readonly completions: CompletionQueue.CompletionQueue<RdmaError.RdmaCmError>
  readonly recvs: Array<PostedRecv>
  /** Send-queue requests not yet run, in order: the first may wait for a receive on the other side. */
  readonly sendQueue: Array<SendJob>
  /**
   * The slots in use, as the native driver counts them against maxRecvWr / maxSendWr: a request
   * holds one until its completion is taken (polled); an unsignalled one, until the completion of
   * a later send-queue request is taken.
   */
  recvSlots: number
  readonly sendSlots: Map<number, { readonly signalled: boolean }>
  nextSeq: number
  /** Whether its send queue is running (a request's failure reaches back to it through the other side). */
  running: boolean
  /** The connected queue pair when it is in another process (then `peer` stays undefined). */
  far: FarPeer | undefined
  /** Whether the send queue's first request went to `far` and waits for its answer (`settle`). */
  awaiting: boolean
  /** Requests of the far side waiting here for a receive, in order, each with where its answer goes. */
  readonly incoming: Array<{ readonly reach: Reach; readonly answer: (result: number | Uint8Array) => void }>
}

/** Which queue and request each completion belongs to, for the slot it frees when taken. */
const origins = new WeakMap<
  Driver.Model.Completion,
  { readonly recv: true } | { readonly recv: false; readonly seq: number }
>()

/** The completions taken: their slots are free, and those of the unsignalled requests before them. */
const freeSlots = (qp: QueuePair, taken: ReadonlyArray<Driver.Model.Completion>) => {
  for (const wc of taken) {
    const origin = origins.get(wc)
    if (origin === undefined) continue
    if (origin.recv) {
      qp.recvSlots--
      continue
    }
    for (const [seq, slot] of qp.sendSlots) {
      if (seq > origin.seq) break
      if (seq === origin.seq || !slot.signalled) qp.sendSlots.delete(seq)
    }
  }
}

export const make = (ep: fabric.CmEp, config: Driver.Model.CmEpConfig): QueuePair => {
  const qp: QueuePair = {
    ep,
    config,
    state: "init",
    peer: undefined,
    completions: CompletionQueue.make<RdmaError.RdmaCmError>((taken) => freeSlots(qp, taken)),
    recvs: [],
    sendQueue: [],
    recvSlots: 0,
    sendSlots: new Map(),
    nextSeq: 0,
    running: false,
    far: undefined,
    awaiting: false,
    incoming: []
  }
  return qp
}

/** Whether a request of this kind finds a free slot (else the post is refused with ENOMEM). */
export const hasRoom = (qp: QueuePair, op: Driver.Model.CmWorkRequest["op"]): boolean =>
  op === "recv" ? qp.recvSlots < qp.config.maxRecvWr : qp.sendSlots.size < qp.config.maxSendWr

/** An ibv_wc: no opcode on a failure; immediate data with its flag. */
const completion = (
  id: number,
  status: number,
  opcode: number,
  byteLength = 0,
  imm?: number
): Driver.Model.Completion =>
  imm === undefined || status !== RdmaError.WcStatus.SUCCESS
    ? { id, status, byteLength, opcode: status === RdmaError.WcStatus.SUCCESS ? opcode : -1, flags: 0 }
    : { id, status, byteLength, opcode, flags: Model.WcFlags.WITH_IMM, imm }

const completeRecv = (qp: QueuePair, wc: Driver.Model.Completion) => {
  origins.set(wc, { recv: true })
  qp.completions.push(wc)
}

const opcodeOf = (op: SendJob["wr"]["op"]): number =>
  op === "send" ? Model.WcOpcode.SEND : op === "write" ? Model.WcOpcode.RDMA_WRITE : Model.WcOpcode.RDMA_READ

/** The send queue's first request has run: its completion (unless it succeeded unsignalled), and it leaves the queue. */
const completeSend = (qp: QueuePair, status: number) => {
  const job = qp.sendQueue.shift()!
  if (status === RdmaError.WcStatus.SUCCESS && !job.signalled) return
  const wc = completion(job.wr.id, status, opcodeOf(job.wr.op))
  origins.set(wc, { recv: false, seq: job.seq })
  qp.completions.push(wc)
}

/** Every request still in the send queue completes with WR_FLUSH_ERR. */
const flushSendQueue = (qp: QueuePair) => {
  qp.awaiting = false
  while (qp.sendQueue.length > 0) completeSend(qp, RdmaError.WcStatus.WR_FLUSH_ERR)
}

/**
 * The queue pair goes to the error state: its posted receives and its send queue
 * complete with WR_FLUSH_ERR; a send of the other side waiting for a receive here then fails there
 * as a send to a dead responder does (its retries run out: RETRY_EXC_ERR).
 */
export const toError = (qp: QueuePair): void => {
  if (qp.state === "error") return
  qp.state = "error"
  for (const recv of qp.recvs.splice(0)) {
    completeRecv(qp, completion(recv.id, RdmaError.WcStatus.WR_FLUSH_ERR, Model.WcOpcode.RECV))
  }
  flushSendQueue(qp)
  if (qp.peer !== undefined) run(qp.peer)
  // The far side's requests waiting here fail there as they would against this queue pair in one process.
  for (const waiting of qp.incoming.splice(0)) waiting.answer(RdmaError.WcStatus.RETRY_EXC_ERR)
}

/** A request fails: its completion, and the queue pair in error (the rest of the queue flushed). */
const fail = (qp: QueuePair, status: number) => {
  completeSend(qp, status)
  toError(qp)
}

/** Ready to send to a queue pair in another process (ESTABLISHED there). */
export const connectFar = (qp: QueuePair, far: FarPeer): void => {
  qp.far = far
  if (qp.state === "init") qp.state = "ready"
}

/** Both queue pairs ready to send to each other (ESTABLISHED). */
export const connect = (a: QueuePair, b: QueuePair): void => {
  a.peer = b
  b.peer = a
  if (a.state === "init") a.state = "ready"
  if (b.state === "init") b.state = "ready"
}

/** The queue pair is destroyed: nothing more is delivered to it, and nothing waits on it. */
export const destroy = (qp: QueuePair, error: RdmaError.RdmaCmError): void => {
  toError(qp)
  qp.completions.close(error)
}

/**
 * A segment's bytes. Posting checked it against its region, and the driver holds the region until
 * the request completes (deregistered meanwhile, its memory still serves the request, as the
 * native driver keeps it).
 */
const bytesOf = (segment: Driver.Model.CmSegment): Uint8Array => {
  // Plain bytes of an inline request: copied already when it was read.
  if (segment.mr instanceof Uint8Array) return segment.mr.subarray(segment.offset, segment.offset + segment.length)
  const mr = fabric.asHandle(segment.mr, "CmMr")!
  return mr.memory.subarray(segment.offset, segment.offset + segment.length)
}

/** The gathered bytes of a request's segments (a copy). */
const gather = (segments: ReadonlyArray<Driver.Model.CmSegment>): Uint8Array => {
  const parts = segments.map(bytesOf)
  const all = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const part of parts) {
    all.set(part, at)
    at += part.byteLength
  }
  return all
}

/** Scatters `bytes` over the segments; LOC_LEN_ERR when they do not fit. */
const scatter = (segments: ReadonlyArray<Driver.Model.CmSegment>, bytes: Uint8Array): number => {
  const capacity = segments.reduce((n, s) => n + s.length, 0)
  if (bytes.byteLength > capacity) return RdmaError.WcStatus.LOC_LEN_ERR
  let at = 0
  for (const segment of segments) {
    if (at >= bytes.byteLength) break
    const part = bytes.subarray(at, at + segment.length)
    bytesOf(segment).set(part)
    at += part.byteLength
  }
  return RdmaError.WcStatus.SUCCESS
}

/**
 * What a remote key and address reach on the other side: one of its regions whose rdma_reg_* call
 * allows `access`, covering the whole range; or REM_ACCESS_ERR.
 */
const remoteTarget = (other: QueuePair, rkey: number, address: bigint, length: number, access: "read" | "write") => {
  for (const mr of other.ep.regions) {
    if (!mr.alive || mr.access !== access || mr.rkey !== rkey) continue
    const end = mr.address + BigInt(mr.memory.byteLength)
    if (address < mr.address || address + BigInt(length) > end) return RdmaError.WcStatus.REM_ACCESS_ERR
    return mr.memory.subarray(Number(address - mr.address), Number(address - mr.address) + length)
  }
  return RdmaError.WcStatus.REM_ACCESS_ERR
}

/**
 * A message (a send's bytes, or a write's immediate data) into the other side's next receive: its
 * status, or undefined when no receive is posted there (the request waits: RNR retries forever).
 */
const deliver = (other: QueuePair, bytes: Uint8Array, imm: number | undefined, written: number | undefined) => {
  const recv = other.recvs.shift()
  if (recv === undefined) return undefined
  const status = scatter(recv.segments, bytes)
  if (status !== RdmaError.WcStatus.SUCCESS) {
    completeRecv(other, completion(recv.id, status, Model.WcOpcode.RECV))
    toError(other)
    return RdmaError.WcStatus.REM_INV_REQ_ERR
  }
  completeRecv(
    other,
    written === undefined
      ? completion(recv.id, RdmaError.WcStatus.SUCCESS, Model.WcOpcode.RECV, bytes.byteLength, imm)
      : completion(recv.id, RdmaError.WcStatus.SUCCESS, Model.WcOpcode.RECV_RDMA_WITH_IMM, written, imm)
  )
  return RdmaError.WcStatus.SUCCESS
}

/**
 * The other side's half of a request, run on its queue pair: a status, the bytes a read takes, or
 * undefined when it waits for a receive there. One place for both a peer in this process and a
 * request arriving from another (`received`).
 */
const reach = (other: QueuePair, r: Reach): Reached => {
  const result = reachNow(other, r)
  // No receive there: the requester's RNR retries wait for one, unless the responder asked for finite
  // ones (rdma_conn_param's rnr_retry_count is what the other side's sends retry; no RNR timer here:
  // they run out at once).
  return result === undefined && (other.config.rnrRetryCount ?? 7) < 7 ? RdmaError.WcStatus.RNR_RETRY_EXC_ERR : result
}

const reachNow = (other: QueuePair, r: Reach): Reached => {
  // The responder is gone: the requester's retries run out.
  if (other.state === "error") return RdmaError.WcStatus.RETRY_EXC_ERR
  if (r.op === "send") return deliver(other, r.bytes, r.imm, undefined)
  const target = remoteTarget(other, r.rkey, r.remoteAddress, r.length, r.op)
  if (typeof target === "number") {
    // The responder answers with a NAK and goes to the error state too (a class C error).
    toError(other)
    return target
  }
  // A write with immediate data needs a receive there before anything is written.
  if (r.op === "write" && r.imm !== undefined && other.recvs.length === 0) return undefined
  if (r.op === "read") return target.slice()
  target.set(r.bytes)
  return r.imm !== undefined ? deliver(other, new Uint8Array(0), r.imm, r.length) : RdmaError.WcStatus.SUCCESS
}

/** The requester's half: what the request asks of the other side. */
const reachOf = (job: SendJob): Reach => {
  const wr = job.wr
  const length = wr.segments.reduce((n, s) => n + s.length, 0)
  return {
    op: wr.op,
    rkey: wr.op === "send" ? 0 : wr.rkey,
    remoteAddress: wr.op === "send" ? 0n : wr.remoteAddress,
    length,
    bytes: wr.op === "read" ? new Uint8Array(0) : job.taken ?? gather(wr.segments),
    imm: wr.op === "read" ? undefined : wr.imm
  }
}

/** The answer as the requester's status: a read's bytes land in its segments. */
const landed = (job: SendJob, result: number | Uint8Array): number =>
  typeof result === "number" ? result : (scatter(job.wr.segments, result), RdmaError.WcStatus.SUCCESS)

/** The outcome of the send queue's first request, or undefined while it waits (for a receive, or the far side's answer). */
const execute = (qp: QueuePair, job: SendJob): number | undefined => {
  if (job.planned !== undefined) return job.planned
  if (qp.far !== undefined) {
    if (!qp.awaiting) {
      const reach = reachOf(job)
      // More than one frame of the network carries: refused here, as a device refuses more than its max_msg_sz.
      if (reach.length > qp.far.maxMessageSize) return RdmaError.WcStatus.LOC_LEN_ERR
      qp.awaiting = true
      qp.far.post(reach)
    }
    return undefined
  }
  const result = reach(qp.peer!, reachOf(job))
  return result === undefined ? undefined : landed(job, result)
}

/** The far side's answer to the send queue's first request; the queue runs on. */
export const settle = (qp: QueuePair, result: number | Uint8Array): void => {
  // Flushed meanwhile (the queue pair went to the error state): the answer comes too late.
  if (!qp.awaiting || qp.state !== "ready" || qp.sendQueue.length === 0) return
  qp.awaiting = false
  const status = landed(qp.sendQueue[0]!, result)
  if (status === RdmaError.WcStatus.SUCCESS) completeSend(qp, status)
  else fail(qp, status)
  run(qp)
}

/** A request of the far side arrives here: answered now, or once a receive is posted. */
export const received = (qp: QueuePair, r: Reach, answer: (result: number | Uint8Array) => void): void => {
  if (qp.incoming.length === 0) {
    const result = reach(qp, r)
    if (result !== undefined) return answer(result)
  }
  qp.incoming.push({ reach: r, answer })
}

/** The far side's waiting requests, in order, while they find their receives. */
const runIncoming = (qp: QueuePair) => {
  while (qp.incoming.length > 0) {
    const result = reach(qp, qp.incoming[0]!.reach)
    if (result === undefined) return
    qp.incoming.shift()!.answer(result)
  }
}

/** Runs the send queue in order until it is empty or its first request waits. */
const run = (qp: QueuePair): void => {
  if (qp.running) return
  qp.running = true
  try {
    while (qp.state === "ready" && qp.sendQueue.length > 0) {
      const status = execute(qp, qp.sendQueue[0]!)
      if (status === undefined) return
      if (status === RdmaError.WcStatus.SUCCESS) completeSend(qp, status)
      else fail(qp, status)
    }
  } finally {
    qp.running = false
  }
}

/**
 * Posts a request the caller has checked (its segments are this endpoint's regions, the
 * queue has room, a send-queue request only once connected). `planned`: a fault plan's completion
 * status instead of the request's own outcome.
 */
export const post = (qp: QueuePair, wr: Driver.Model.CmWorkRequest, planned?: number): void => {
  if (wr.op === "recv") {
    qp.recvSlots++
    if (qp.state === "error") {
      return completeRecv(qp, completion(wr.id, RdmaError.WcStatus.WR_FLUSH_ERR, Model.WcOpcode.RECV))
    }
    if (planned !== undefined) {
      completeRecv(qp, completion(wr.id, planned, Model.WcOpcode.RECV))
      return toError(qp)
    }
    qp.recvs.push({ id: wr.id, segments: wr.segments })
    // A send of the other side may have been waiting for it.
    if (qp.peer !== undefined) run(qp.peer)
    runIncoming(qp)
    return
  }
  const seq = qp.nextSeq++
  const signalled = wr.completion !== "onError"
  qp.sendSlots.set(seq, { signalled })
  qp.sendQueue.push({
    wr,
    seq,
    signalled,
    taken: wr.op !== "read" && wr.inline === true ? gather(wr.segments) : undefined,
    planned
  })
  // Posted in the error state, it completes at once with WR_FLUSH_ERR.
  if (qp.state === "error") return flushSendQueue(qp)
  run(qp)
}
