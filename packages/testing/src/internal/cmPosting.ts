/**
 * The posting calls of a simulated librdmacm endpoint (cmPostMany, cmPollCompletions): each work
 * request read once and checked as the native driver and the device check it before anything is
 * posted (EINVAL for a malformed request, a region of another endpoint, too many segments, an
 * inline send above the granted size, a send before the connection; ENOMEM for a full queue),
 * then posted on the endpoint's queue pair, with the fault plan's failures applied.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as QueuePair from "./cmQueuePair.js"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

const { EINVAL, ENOMEM } = RdmaError.Errno
const UINT32_MAX = 4294967295
const NONE: ReadonlyArray<Driver.Model.Completion> = []

/** Synchronous posts in a row before the driver asks for a turn of the event loop (as network.ts). */
const LOOP_BUDGET_CALLS = 256

const operationOf = (op: Driver.Model.CmWorkRequest["op"]): fabric.CmPostOperation => `rdma_post_${op}`

const isIndex = (value: unknown, max: number): value is number =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= max

/**
 * The request read once into a plain one, or what is wrong with it (every read guarded: a throwing
 * getter or Proxy trap is a refusal). `ep`: its segments must be registered on this endpoint.
 */
const readRequest = (
  value: unknown,
  ep: fabric.CmEp,
  config: Driver.Model.CmEpConfig
): Driver.Model.CmWorkRequest | string => {
  if (typeof value !== "object" || value === null) return "the work request must be an object"
  let raw: Record<string, unknown>
  try {
    const v = value as Record<string, unknown>
    raw = {
      op: v.op,
      id: v.id,
      segments: v.segments,
      imm: v.imm,
      inline: v.inline,
      completion: v.completion,
      remoteAddress: v.remoteAddress,
      rkey: v.rkey
    }
  } catch {
    return "reading the work request threw"
  }
  const op = raw.op
  if (op !== "send" && op !== "recv" && op !== "write" && op !== "read") {
    return `unknown work request ${Arguments.show(op)}: expected "send", "recv", "write" or "read"`
  }
  if (typeof raw.id !== "number") return "id must be a number"
  const segments: Array<Driver.Model.CmSegment> = []
  let plain = false
  try {
    if (!Array.isArray(raw.segments)) return "segments must be an array of { mr, offset, length }"
    for (const s of Array.from(raw.segments as ReadonlyArray<unknown>)) {
      if (typeof s !== "object" || s === null) return "a segment must be an object { mr, offset, length }"
      const { length, mr: mrValue, offset } = s as Driver.Model.CmSegment
      if (Arguments.isUint8Array(mrValue)) {
        const bytes = plainBytes(mrValue, offset, length, config.maxInlineData)
        if (typeof bytes === "string") return bytes
        segments.push({ mr: bytes, offset: 0, length: bytes.byteLength })
        plain = true
        continue
      }
      const mr = fabric.asHandle(mrValue, "CmMr")
      if (mr === undefined) return "a segment's mr must be a region (from cmReg)"
      if (!mr.alive) return "a segment's region was already deregistered"
      if (mr.cmId !== ep) {
        return "a segment's region is registered on another endpoint's protection domain: register it on this one"
      }
      if (!isIndex(offset, Number.MAX_SAFE_INTEGER)) {
        return `a segment's offset ${Arguments.show(offset)} is not an integer from 0`
      }
      if (!isIndex(length, UINT32_MAX)) {
        return `a segment's length ${Arguments.show(length)} is not an integer from 0 to ${UINT32_MAX}`
      }
      // As the native driver: refused before the device's lkey check would fail it (LOC_PROT_ERR).
      if (offset + length > mr.memory.byteLength) {
        return `a segment (offset ${offset}, length ${length}) passes its region's end (${mr.memory.byteLength} bytes)`
      }
      segments.push({ mr: mrValue, offset, length })
    }
  } catch {
    return "reading the work request's segments threw"
  }
  if (segments.length === 0) return "a request needs at least one segment"
  const maxSge = op === "recv" ? config.maxRecvSge : config.maxSendSge
  if (segments.length > maxSge) {
    return `${segments.length} segments; the queue pair takes at most ${maxSge} (${
      op === "recv" ? "maxRecvSge" : "maxSendSge"
    })`
  }
  if (plain && (op === "recv" || op === "read")) {
    return "a receive or a read lands in registered memory: plain bytes go only in an inline send or write"
  }
  // A receive has no immediate data, inline flag or signal to read (the native driver ignores them too).
  if (op === "recv") return { op, id: raw.id, segments }
  if (raw.imm !== undefined && (op === "read" || !isIndex(raw.imm, UINT32_MAX))) {
    return op === "read"
      ? "immediate data goes with a send or a write only"
      : `imm ${Arguments.show(raw.imm)} is not a 32-bit unsigned integer`
  }
  if (raw.inline !== undefined && (op === "read" || typeof raw.inline !== "boolean")) {
    return op === "read" ? "a read cannot be inline" : "inline must be a boolean"
  }
  if (plain && raw.inline !== true) return "plain bytes (a Uint8Array, not a region) go only inline: set inline"
  const total = segments.reduce((n, s) => n + s.length, 0)
  if (raw.inline === true && total > config.maxInlineData) {
    return `an inline ${op} of ${total} bytes; the queue pair sends at most ${config.maxInlineData} inline`
  }
  if (raw.completion !== undefined && raw.completion !== "always" && raw.completion !== "onError") {
    return "completion must be \"always\" or \"onError\""
  }
  const imm = raw.imm as number | undefined
  const inline = raw.inline as boolean | undefined
  const completion = raw.completion as Driver.Model.Signal | undefined
  if (op === "send") return { op, id: raw.id, segments, imm, inline, completion }
  if (typeof raw.remoteAddress !== "bigint" || raw.remoteAddress < 0n || raw.remoteAddress >= 2n ** 64n) {
    return "remoteAddress must be a bigint from 0 to 2^64 - 1"
  }
  if (!isIndex(raw.rkey, UINT32_MAX)) return `rkey ${Arguments.show(raw.rkey)} is not a 32-bit unsigned integer`
  const remote = { remoteAddress: raw.remoteAddress, rkey: raw.rkey as number }
  return op === "write"
    ? { op, id: raw.id, segments, ...remote, imm, inline, completion }
    : { op, id: raw.id, segments, ...remote, completion }
}

/**
 * Plain bytes in place of a region (an inline send or write only), copied now as the native driver
 * copies them: their real bytes, whatever the view's getters say; or what is wrong.
 */
const plainBytes = (bytes: Uint8Array, offset: unknown, length: unknown, maxInline: number): Uint8Array | string => {
  if (!isIndex(offset, Number.MAX_SAFE_INTEGER)) {
    return `a segment's offset ${Arguments.show(offset)} is not an integer from 0`
  }
  if (!isIndex(length, UINT32_MAX)) {
    return `a segment's length ${Arguments.show(length)} is not an integer from 0 to ${UINT32_MAX}`
  }
  const size = Arguments.byteLengthOf(bytes)
  if (offset + length > size) {
    return `a segment (offset ${offset}, length ${length}) passes the bytes' end (${size} bytes)`
  }
  if (length > maxInline) {
    return `${length} plain bytes cannot go inline: the queue pair takes at most ${maxInline} (maxInlineData); ` +
      "send more from a region"
  }
  return Arguments.realView(bytes).slice(offset, offset + length)
}

export const cmPostCalls = (
  world: fabric.Fabric,
  tools: Tools,
  endpoints: {
    /** The queue pair of a live endpoint, or nothing. */
    readonly queuePairOf: (value: unknown) => QueuePair.QueuePair | undefined
    /** A fault plan's lost connection. */
    readonly lose: (ep: fabric.CmEp) => void
  }
) => {
  const { errno } = tools

  let runLength = 0
  const turnDue = (): boolean => {
    if (runLength++ === 0) setImmediate(() => (runLength = 0))
    return runLength > LOOP_BUDGET_CALLS
  }

  const refusedHandle = (operation: string) =>
    errno(operation, EINVAL, "expected a live endpoint handle (from cmEpCreate or cmGetRequest)")

  /** Posts one request; its refusal, or nothing. */
  const postOne = (qp: QueuePair.QueuePair, value: unknown): RdmaError.RdmaCmError | undefined => {
    const wr = readRequest(value, qp.ep, qp.config)
    if (typeof wr === "string") return errno("rdma_post", EINVAL, wr)
    const operation = operationOf(wr.op)
    // In the native driver's order: a full queue first, then a send-queue request before the connection.
    if (!QueuePair.hasRoom(qp, wr.op)) {
      const size = wr.op === "recv" ? `maxRecvWr ${qp.config.maxRecvWr}` : `maxSendWr ${qp.config.maxSendWr}`
      return errno(
        operation,
        ENOMEM,
        `the ${wr.op === "recv" ? "receive" : "send"} queue is full (${size}) until a request's completion is taken`
      )
    }
    if (wr.op !== "recv" && qp.state === "init") {
      return errno(
        operation,
        EINVAL,
        "the endpoint is not connected yet: only receives may be posted before cmConnect or cmAccept"
      )
    }
    const planned = fabric.countCall(world, operation)
    if (planned !== undefined && "code" in planned) return errno(operation, planned.code, "planned fault")
    if (planned !== undefined && "loseConnection" in planned) endpoints.lose(qp.ep)
    QueuePair.post(
      qp,
      wr,
      planned !== undefined && "completionStatus" in planned ? planned.completionStatus : undefined
    )
    return undefined
  }

  return {
    cmPostMany: (value, given) => {
      const qp = endpoints.queuePairOf(value)
      if (qp === undefined) {
        return { posted: 0, error: refusedHandle("rdma_post"), ready: NONE, queueError: undefined, turnDue: turnDue() }
      }
      let requests: ReadonlyArray<unknown> | undefined
      try {
        requests = Array.isArray(given) ? Array.from(given as ReadonlyArray<unknown>) : undefined
      } catch {
        requests = undefined
      }
      let posted = 0
      let error: RdmaError.RdmaCmError | undefined = requests === undefined
        ? errno("rdma_post", EINVAL, "the requests must be an array of work requests")
        : undefined
      for (const request of requests ?? []) {
        error = postOne(qp, request)
        if (error !== undefined) break
        posted++
      }
      const ready = posted === 0 ? NONE : qp.completions.drain()
      return { posted, error, ready, queueError: undefined, turnDue: turnDue() }
    },

    cmPollCompletions: (value) =>
      Effect.suspend(() => {
        const qp = endpoints.queuePairOf(value)
        return qp === undefined ? Effect.fail(refusedHandle("ibv_poll_cq")) : Effect.succeed(qp.completions.drain())
      }),

    // No real time to spin on: what is queued, as a spin that found it at once (or none).
    cmSpinCompletions: (value, budgetNs): Driver.Model.SpinOutcome<RdmaError.RdmaCmError> => {
      const qp = endpoints.queuePairOf(value)
      if (qp === undefined) return Exit.fail(refusedHandle("ibv_poll_cq"))
      const badBudget = Arguments.spinBudget(budgetNs)
      if (badBudget !== undefined) return Exit.fail(errno("ibv_poll_cq", EINVAL, badBudget))
      return Exit.succeed(qp.completions.drain())
    }
  } satisfies Partial<Driver.Driver>
}
