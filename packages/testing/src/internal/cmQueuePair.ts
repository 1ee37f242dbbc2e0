/**
 * The queue pair of a simulated librdmacm endpoint: the work requests of rdma_post_send / _recv /
 * _read / _write (and ibv_post_send's immediate data and inline sends), run between two connected
 * queue pairs as an RC queue pair on a device runs them: a send waits for a receive on the other
 * side (librdmacm's default RNR retry is infinite), a remote read or write is checked against the
 * other side's registrations (rkey, bounds, what its rdma_reg_* call allows), and a failed request
 * puts the queue pair in the error state, where everything posted completes with WR_FLUSH_ERR.
 *
 * @internal
 */
import type * as Driver from "@effect-rdma/core/Driver"
import { WcFlags, WcOpcode } from "@effect-rdma/core/Driver"
import type { RdmaCmError } from "@effect-rdma/core/RdmaError"
import { WcStatus } from "@effect-rdma/core/RdmaError"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"

/** A receive waiting for a message: where the bytes go. */
interface PostedRecv {
  readonly id: number
  readonly segments: ReadonlyArray<Driver.CmSegment>
}

/** A send (or a write with immediate data) waiting for a receive on the other side. */
interface PendingSend {
  readonly id: number
  readonly from: QueuePair
  /** The bytes, read when the message is delivered (inline: taken at post time). */
  readonly bytes: () => Uint8Array
  readonly imm: number | undefined
  /** For a write with immediate data: its length (the bytes went to the remote region, not the receive). */
  readonly written: number | undefined
  readonly signalled: boolean
}

/** @internal */
export interface QueuePair {
  readonly ep: fabric.CmEp
  readonly config: Driver.CmEpConfig
  /** "init" until the connection is established: receives may be posted, nothing else. */
  state: "init" | "ready" | "error"
  /** The connected queue pair; it stays after a disconnect (a request to it then fails as on a wire). */
  peer: QueuePair | undefined
  readonly completions: CompletionQueue.CompletionQueue<RdmaCmError>
  readonly recvs: Array<PostedRecv>
  /** The other side's sends waiting for a receive here. */
  readonly waiting: Array<PendingSend>
  /** Send-queue requests posted whose completion is not generated yet. */
  sendsInFlight: number
}

/** @internal */
export const make = (ep: fabric.CmEp, config: Driver.CmEpConfig): QueuePair => ({
  ep,
  config,
  state: "init",
  peer: undefined,
  completions: CompletionQueue.make<RdmaCmError>(() => {}),
  recvs: [],
  waiting: [],
  sendsInFlight: 0
})

/** An ibv_wc: no opcode on a failure; immediate data with its flag. */
const completion = (id: number, status: number, opcode: number, byteLength = 0, imm?: number): Driver.Completion =>
  imm === undefined || status !== WcStatus.SUCCESS
    ? { id, status, byteLength, opcode: status === WcStatus.SUCCESS ? opcode : -1, flags: 0 }
    : { id, status, byteLength, opcode, flags: WcFlags.WITH_IMM, imm }

/** A send-queue request's end: its completion unless it succeeded unsignalled; its slot is free. */
const completeSend = (qp: QueuePair, id: number, status: number, opcode: number, signalled: boolean) => {
  qp.sendsInFlight--
  if (status !== WcStatus.SUCCESS || signalled) qp.completions.push(completion(id, status, opcode))
}

/**
 * @internal The queue pair goes to the error state: its posted receives complete with
 * WR_FLUSH_ERR, and the other side's sends waiting here fail there as a send to a dead responder
 * does (the requester's retries run out: RETRY_EXC_ERR), which puts that side in error too.
 */
export const toError = (qp: QueuePair): void => {
  if (qp.state === "error") return
  qp.state = "error"
  for (const recv of qp.recvs.splice(0)) qp.completions.push(completion(recv.id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV))
  for (const send of qp.waiting.splice(0)) failFrom(send, WcStatus.RETRY_EXC_ERR)
}

/** A request of `send.from` fails with `status`: its completion, and its queue pair in error. */
const failFrom = (send: PendingSend, status: number) => {
  const opcode = send.written === undefined ? WcOpcode.SEND : WcOpcode.RDMA_WRITE
  completeSend(send.from, send.id, status, opcode, true)
  toError(send.from)
}

/** @internal Both queue pairs ready to send to each other (ESTABLISHED). */
export const connect = (a: QueuePair, b: QueuePair): void => {
  a.peer = b
  b.peer = a
  if (a.state === "init") a.state = "ready"
  if (b.state === "init") b.state = "ready"
}

/** @internal The queue pair is destroyed: nothing more is delivered to it, and nothing waits on it. */
export const destroy = (qp: QueuePair, error: RdmaCmError): void => {
  toError(qp)
  qp.completions.close(error)
}

/**
 * A segment's bytes. Posting checked it against its region, and the driver holds the region until
 * the request completes (deregistered meanwhile, its memory still serves the request, as the
 * native driver keeps it).
 */
const bytesOf = (segment: Driver.CmSegment): Uint8Array => {
  const mr = fabric.asHandle(segment.mr, "CmMr")!
  return mr.memory.subarray(segment.offset, segment.offset + segment.length)
}

/** The gathered bytes of a request's segments (a copy). */
const gather = (segments: ReadonlyArray<Driver.CmSegment>): Uint8Array => {
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
const scatter = (segments: ReadonlyArray<Driver.CmSegment>, bytes: Uint8Array): number => {
  const capacity = segments.reduce((n, s) => n + s.length, 0)
  if (bytes.byteLength > capacity) return WcStatus.LOC_LEN_ERR
  let at = 0
  for (const segment of segments) {
    if (at >= bytes.byteLength) break
    const part = bytes.subarray(at, at + segment.length)
    bytesOf(segment).set(part)
    at += part.byteLength
  }
  return WcStatus.SUCCESS
}

/**
 * What a remote key and address reach on the other side: one of its regions whose rdma_reg_* call
 * allows `access`, covering the whole range; or REM_ACCESS_ERR.
 */
const remoteTarget = (qp: QueuePair, rkey: number, address: bigint, length: number, access: "read" | "write") => {
  const other = qp.peer
  if (other === undefined || other.state === "error") return WcStatus.REM_ACCESS_ERR
  for (const mr of other.ep.regions) {
    if (!mr.alive || mr.access !== access || mr.rkey !== rkey) continue
    const end = mr.address + BigInt(mr.memory.byteLength)
    if (address < mr.address || address + BigInt(length) > end) return WcStatus.REM_ACCESS_ERR
    return mr.memory.subarray(Number(address - mr.address), Number(address - mr.address) + length)
  }
  return WcStatus.REM_ACCESS_ERR
}

/** Delivers a message to the next receive posted on `to`, or leaves it waiting there. */
const deliver = (to: QueuePair, send: PendingSend) => {
  if (to.state === "error") return failFrom(send, WcStatus.RETRY_EXC_ERR)
  const recv = to.recvs.shift()
  if (recv === undefined) return void to.waiting.push(send)
  const bytes = send.bytes()
  const status = scatter(recv.segments, bytes)
  if (status !== WcStatus.SUCCESS) {
    to.completions.push(completion(recv.id, status, WcOpcode.RECV))
    toError(to)
    return failFrom(send, WcStatus.REM_INV_REQ_ERR)
  }
  to.completions.push(
    send.written === undefined
      ? completion(recv.id, WcStatus.SUCCESS, WcOpcode.RECV, bytes.byteLength, send.imm)
      : completion(recv.id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM, send.written, send.imm)
  )
  completeSend(send.from, send.id, WcStatus.SUCCESS, send.written === undefined ? WcOpcode.SEND : WcOpcode.RDMA_WRITE, send.signalled)
}

const opcodeOf = (wr: Driver.CmWorkRequest): number =>
  wr.op === "send" ? WcOpcode.SEND : wr.op === "write" ? WcOpcode.RDMA_WRITE : wr.op === "read" ? WcOpcode.RDMA_READ : WcOpcode.RECV

/**
 * @internal Posts a request the caller has checked (its segments are this endpoint's regions, the
 * queue has room): it runs now, or waits for a receive on the other side. `status`: a planned
 * completion status instead of the request's own outcome.
 */
export const post = (qp: QueuePair, wr: Driver.CmWorkRequest, status?: number): void => {
  if (wr.op === "recv") {
    if (qp.state === "error") return qp.completions.push(completion(wr.id, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV))
    if (status !== undefined) {
      qp.completions.push(completion(wr.id, status, WcOpcode.RECV))
      return toError(qp)
    }
    qp.recvs.push({ id: wr.id, segments: wr.segments })
    const waiting = qp.waiting.shift()
    if (waiting !== undefined) deliver(qp, waiting)
    return
  }
  qp.sendsInFlight++
  const signalled = wr.completion !== "onError"
  const opcode = opcodeOf(wr)
  const fail = (failed: number) => {
    completeSend(qp, wr.id, failed, opcode, true)
    toError(qp)
  }
  if (qp.state === "error") return completeSend(qp, wr.id, WcStatus.WR_FLUSH_ERR, opcode, true)
  if (status !== undefined) return fail(status)
  const peer = qp.peer!
  if (wr.op === "send") {
    const taken = wr.inline === true ? gather(wr.segments) : undefined
    return deliver(peer, {
      id: wr.id,
      from: qp,
      bytes: () => taken ?? gather(wr.segments),
      imm: wr.imm,
      written: undefined,
      signalled
    })
  }
  if (wr.op === "write") {
    const bytes = gather(wr.segments)
    const target = remoteTarget(qp, wr.rkey, wr.remoteAddress, bytes.byteLength, "write")
    if (typeof target === "number") {
      // The responder answers with a NAK and goes to the error state too (a class C error).
      if (peer.state !== "error") toError(peer)
      return fail(target)
    }
    target.set(bytes)
    if (wr.imm === undefined) return completeSend(qp, wr.id, WcStatus.SUCCESS, opcode, signalled)
    // The immediate data consumes a receive on the other side, which completes with it.
    return deliver(peer, {
      id: wr.id,
      from: qp,
      bytes: () => new Uint8Array(0),
      imm: wr.imm,
      written: bytes.byteLength,
      signalled
    })
  }
  const length = wr.segments.reduce((n, s) => n + s.length, 0)
  const source = remoteTarget(qp, wr.rkey, wr.remoteAddress, length, "read")
  if (typeof source === "number") {
    if (peer.state !== "error") toError(peer)
    return fail(source)
  }
  scatter(wr.segments, source.slice())
  completeSend(qp, wr.id, WcStatus.SUCCESS, opcode, signalled)
}
