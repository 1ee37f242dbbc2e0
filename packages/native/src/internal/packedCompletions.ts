/**
 * Completions read as numbers (the addon's pollPacked and cmPollPacked, and their spins) made
 * objects here: an object literal, through JavaScript's inline caches, costs a fraction of the
 * addon's property writes (five to seven napi calls and a map transition each a completion; on a
 * 64 B write window under TCG, building them in the addon was about a tenth of a write's CPU).
 */
import { Model } from "@effect-rdma/core/Driver"

/** Completions read per addon call; more are read by calling again. */
export const PACKED_COMPLETIONS = 64

/**
 * The numbers of one completion: id, status, byteLength, opcode, flags, imm (meaningful with
 * IBV_WC_WITH_IMM), and on librpma's queues qpNum (-1 when the completion does not name it).
 */
export type Layout = typeof CM_FIELDS | typeof RPMA_FIELDS
/** librdmacm's endpoints: CmEpState::kCompletionFields. */
export const CM_FIELDS = 6
/** librpma's connections and shared receive queues: CompletionQueues::kCompletionFields. */
export const RPMA_FIELDS = 7

/** An array for {@link readPacked}: one per driver, read out before anything else can poll. */
export const packedArray = (fields: Layout): Float64Array => new Float64Array(PACKED_COMPLETIONS * fields)

/**
 * The completions of a read that found `count` into `into` (the caller's first read of `queue`),
 * then of `again(binding, queue, into)` while the array comes back full; their objects, or undefined when
 * none were read (the callers' common case, with no array made). A read that throws after some
 * were read ends the reading: what was read is returned and the failure comes back on the next
 * poll, as the addon does within one call (a completion read from a CQ is never read again).
 * `again` is given what it reads from (no closure made a read), and the array is made with its
 * first completion (a push onto an empty one grows it).
 */
export const readPacked = <B, Q>(
  into: Float64Array,
  fields: Layout,
  count: number,
  binding: B,
  queue: Q,
  again: (binding: B, queue: Q, into: Float64Array) => number
): Array<Model.Completion> | undefined => {
  if (count === 0) return undefined
  const ready = [completionAt(into, 0, fields)]
  for (let from = 1;; from = 0) {
    for (let i = from, at = from * fields; i < count; i++, at += fields) ready.push(completionAt(into, at, fields))
    if (count < PACKED_COMPLETIONS) break
    try {
      count = again(binding, queue, into)
    } catch {
      break
    }
    if (count === 0) break
  }
  return ready
}

const completionAt = (into: Float64Array, at: number, fields: Layout): Model.Completion => {
  const id = into[at]!
  const status = into[at + 1]!
  const byteLength = into[at + 2]!
  const opcode = into[at + 3]!
  const flags = into[at + 4]!
  const imm = (flags & Model.WcFlags.WITH_IMM) !== 0 ? into[at + 5]! : undefined
  const qpNum = fields === RPMA_FIELDS ? into[at + 6]! : -1
  // Each shape as the addon's objects had it: imm and qpNum only when they mean something.
  if (qpNum < 0) {
    return imm === undefined
      ? { id, status, byteLength, opcode, flags }
      : { id, status, byteLength, opcode, flags, imm }
  }
  return imm === undefined
    ? { id, status, byteLength, opcode, flags, qpNum }
    : { id, status, byteLength, opcode, flags, imm, qpNum }
}
