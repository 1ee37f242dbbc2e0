/**
 * The argument checks that librpma, librdmacm and the addon make, written once so that every
 * driver (the simulated one checks with these functions; the addon makes the same checks in C++)
 * and core refuse the same values with the same words. Each check returns `undefined` for a good
 * value or the detail of the refusal. None of them throws, whatever the value (Proxies, getters,
 * BigInts, revoked objects included).
 *
 * @since 0.1.0
 */
import { types } from "node:util"

// The engine's own getters, captured once: a subclass or an object in the prototype chain can
// override `byteLength`, `byteOffset` and `buffer` on a real Uint8Array, these cannot lie.
const typedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype) as object
const intrinsic = <A>(owner: object, name: PropertyKey) =>
  Object.getOwnPropertyDescriptor(owner, name)!.get as (this: unknown) => A
const typedArrayTag = intrinsic<string | undefined>(typedArrayPrototype, Symbol.toStringTag)
const viewBuffer = intrinsic<ArrayBufferLike>(typedArrayPrototype, "buffer")
const viewByteLength = intrinsic<number>(typedArrayPrototype, "byteLength")
const viewByteOffset = intrinsic<number>(typedArrayPrototype, "byteOffset")
const bufferByteLength = intrinsic<number>(ArrayBuffer.prototype, "byteLength")
const arrayBufferResizable = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, "resizable")?.get as
  | ((this: unknown) => boolean)
  | undefined

/**
 * Whether `value` is a real Uint8Array (a Buffer included). A Proxy of one is not: the engine's
 * own getters refuse it, and so does the addon. Never throws, never runs the value's code.
 *
 * @since 0.1.0
 * @category validation
 */
export const isUint8Array = (value: unknown): value is Uint8Array => {
  try {
    return typedArrayTag.call(value) === "Uint8Array"
  } catch {
    return false
  }
}

/**
 * Whether the view's memory is a SharedArrayBuffer (another thread may own it).
 *
 * @since 0.1.0
 * @category validation
 */
export const isShared = (memory: Uint8Array): boolean => {
  try {
    // The engine's own check: nothing thrown for the usual answer (a thrown probe cost ~100k
    // instructions per registration).
    return types.isSharedArrayBuffer(viewBuffer.call(memory))
  } catch {
    return false
  }
}

/**
 * Whether the view's memory can be resized (or moved) by JavaScript.
 *
 * @since 0.1.0
 * @category validation
 */
export const isResizable = (memory: Uint8Array): boolean => {
  if (arrayBufferResizable === undefined || isShared(memory)) return false
  try {
    return arrayBufferResizable.call(viewBuffer.call(memory)) === true
  } catch {
    return false
  }
}

/**
 * Whether the view's ArrayBuffer has been detached (transferred or released).
 *
 * @since 0.1.0
 * @category validation
 */
export const isDetached = (memory: Uint8Array): boolean => {
  const buffer = viewBuffer.call(memory)
  if (types.isSharedArrayBuffer(buffer) || bufferByteLength.call(buffer) !== 0) return false
  try {
    // Node 20 has no ArrayBuffer.prototype.detached; a view of a detached buffer cannot be made
    // (and making one runs none of the buffer's own code, where `slice` would).
    new Uint8Array(buffer)
    return false
  } catch {
    return true
  }
}

/**
 * The view's length in bytes, read with the engine's own getter: what a subclass's `byteLength`
 * says does not count. For a real Uint8Array ({@link isUint8Array}).
 *
 * @since 1.0.0
 * @category validation
 */
export const byteLengthOf = (memory: Uint8Array): number => viewByteLength.call(memory)

/**
 * The view's real memory, whatever its getters say: the view itself when `buffer`, `byteOffset`,
 * `byteLength` and `length` are the engine's own (a plain Uint8Array or a Buffer), otherwise a
 * plain Uint8Array over the same bytes. Drivers and core register and bound-check this view, so a
 * region's length is the real length of its memory (the addon reads the same values in C++).
 * For a real Uint8Array over an attached buffer (one that the `memory` check above accepted).
 *
 * @since 1.0.0
 * @category validation
 */
export const realView = (memory: Uint8Array): Uint8Array => {
  const prototype = Object.getPrototypeOf(memory)
  const plain = (prototype === Uint8Array.prototype || prototype === globalThis.Buffer?.prototype) &&
    !Object.hasOwn(memory, "buffer") && !Object.hasOwn(memory, "byteOffset") &&
    !Object.hasOwn(memory, "byteLength") && !Object.hasOwn(memory, "length")
  return plain
    ? memory
    : new Uint8Array(viewBuffer.call(memory), viewByteOffset.call(memory), viewByteLength.call(memory))
}

/**
 * Memory a driver can register: a real Uint8Array over a plain, fixed-size, attached ArrayBuffer,
 * of at least one byte. The words are the addon's (memory.cc ResolveBytes).
 *
 * @since 0.1.0
 * @category validation
 */
export const memory = (value: unknown): string | undefined => {
  if (value === null || value === undefined) return "memory is NULL"
  if (!isUint8Array(value)) return "memory must be a Uint8Array"
  if (isShared(value)) return "memory backed by a SharedArrayBuffer cannot be registered"
  if (isDetached(value)) return "memory's ArrayBuffer is detached"
  if (isResizable(value)) return "memory backed by a resizable ArrayBuffer cannot be registered"
  if (byteLengthOf(value) === 0) return "size is 0"
  return undefined
}

/**
 * rpma_mr_reg's usage: an integer from 1 to 0xff (mr.cc, librpma's USAGE_ALL_ALLOWED).
 *
 * @since 0.1.0
 * @category validation
 */
export const usage = (value: unknown): string | undefined => {
  if (typeof value !== "number") return "usage must be a number"
  if (!Number.isInteger(value) || value < 0 || value > 0xff) return "usage has bits outside RPMA_MR_USAGE_* (0xff)"
  if (value === 0) return "usage is 0"
  return undefined
}

/**
 * A TCP port to listen on or connect to: an integer from 1 to 65535.
 *
 * @since 0.1.0
 * @category validation
 */
export const port = (value: unknown): string | undefined =>
  typeof value !== "number"
    ? "port must be a number"
    : Number.isInteger(value) && value >= 1 && value <= 65535
    ? undefined
    : `port ${String(value)} is not 1 to 65535`

/**
 * An address: a string (what rdma_getaddrinfo and librpma take).
 *
 * @since 0.1.0
 * @category validation
 */
export const address = (value: unknown): string | undefined =>
  value === null || value === undefined
    ? "addr is NULL"
    : typeof value !== "string"
    ? "addr must be a string"
    : undefined

const INT_MAX = 2147483647
const UINT32_MAX = 4294967295

const integerIn = (value: unknown, what: string, min: number, max: number): string | undefined =>
  typeof value !== "number"
    ? `${what} must be a number`
    : Number.isInteger(value) && value >= min && value <= max
    ? undefined
    : `${what} ${String(value)} is not an integer from ${min} to ${max}`

/**
 * A connection configuration (core's ConnConfig), read once per field with every read guarded:
 * a getter or a Proxy trap that throws is a refusal, not a crash. The ranges are the addon's
 * (conn.cc ParseConfig): what librpma's setters and the verbs would otherwise refuse later, or
 * accept and then never complete (a send queue of 0, a completion queue smaller than the requests
 * that can be in flight).
 *
 * @since 0.1.0
 * @category validation
 */
export const connConfig = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null) return "cfg must be an object"
  const read: Record<string, unknown> = {}
  for (
    const key of ["timeoutMs", "sqSize", "rqSize", "cqSize", "directWriteToPmem", "rcqSize", "sharedCompletionChannel"]
  ) {
    try {
      read[key] = (value as Record<string, unknown>)[key]
    } catch {
      return `reading cfg.${key} threw`
    }
  }
  return integerIn(read.timeoutMs, "timeoutMs", 0, INT_MAX) ??
    integerIn(read.sqSize, "sqSize", 0, UINT32_MAX) ??
    integerIn(read.rqSize, "rqSize", 0, UINT32_MAX) ??
    integerIn(read.cqSize, "cqSize", 0, UINT32_MAX) ??
    (read.directWriteToPmem !== undefined && typeof read.directWriteToPmem !== "boolean"
      ? "directWriteToPmem must be a boolean"
      : undefined) ??
    (read.rcqSize !== undefined ? integerIn(read.rcqSize, "rcqSize", 0, UINT32_MAX) : undefined) ??
    (read.sharedCompletionChannel !== undefined && typeof read.sharedCompletionChannel !== "boolean"
      ? "sharedCompletionChannel must be a boolean"
      : undefined)
}

/**
 * A shared receive queue's sizes (rpma_srq_cfg), as both drivers check them: integers, a receive
 * queue of 1 to 65536, and a receive CQ of its own of 0 to 131072. A receive CQ smaller than the
 * queue is accepted, as librpma does: it holds fewer completions than receives in flight, and if
 * more complete before they are polled the device overruns it (IBV_EVENT_CQ_ERR): those
 * completions are lost, and their receives fail only when the queue ends.
 * A receive CQ of 0 (librpma's 08srq example, modes `m` and `r`): the receives complete on each
 * connection's receive CQ, or its CQ (see {@link queueSizes}).
 *
 * @since 1.0.0
 * @category validation
 */
export const srqConfig = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null) return "the shared receive queue's cfg must be an object"
  let rqSize: unknown, rcqSize: unknown
  try {
    rqSize = (value as Record<string, unknown>).rqSize
    rcqSize = (value as Record<string, unknown>).rcqSize
  } catch {
    return "reading the shared receive queue's cfg threw"
  }
  return integerIn(rqSize, "receiveQueueSize", 1, 65536) ?? integerIn(rcqSize, "completionQueueSize", 0, 131072)
}

/**
 * The queue sizes a connection can live with, beyond what the C libraries check: at least one send
 * and one completion slot, and a completion queue that holds every request that can be in flight
 * (every work request here asks for a completion, and a full completion queue loses them).
 * A receive CQ smaller than the receive queue is accepted, as librpma does (its example 09 uses
 * one of 1): core polls it as it polls the CQ, but if more receives complete than it holds before
 * they are polled, the device overruns it (IBV_EVENT_CQ_ERR): those completions are lost, and
 * what waits for them fails only when the connection ends.
 * For Connection.toConfig (or wherever the user's options become a ConnConfig).
 *
 * @since 0.1.0
 * @category validation
 */
export const queueSizes = (sizes: {
  readonly sqSize: number
  readonly rqSize: number
  readonly cqSize: number
  readonly rcqSize?: number | undefined
  readonly srq?: unknown
  /**
   * The shared receive queue's own sizes (its SrqConfig), when known; unknown, it is taken to have
   * a receive CQ of its own. With none (rcqSize 0) its receives complete on this connection's
   * receive CQ, or its CQ, which must then hold them too.
   */
  readonly srqSizes?: { readonly rqSize: number; readonly rcqSize: number } | undefined
  readonly sharedCompletionChannel?: boolean | undefined
}) => {
  const rcqSize = sizes.rcqSize ?? 0
  // Where receives complete: the shared receive queue's receive CQ, the connection's own receive CQ, or the CQ.
  const onQueuesCq = sizes.srq !== undefined && (sizes.srqSizes?.rcqSize ?? 1) > 0
  const receivesOnCq = !onQueuesCq && rcqSize === 0
  const receives = sizes.srq === undefined ? sizes.rqSize : sizes.srqSizes?.rqSize ?? 0
  const needed = sizes.sqSize + (receivesOnCq ? receives : 0)
  return integerIn(sizes.sqSize, "sendQueueSize", 1, 65536) ??
    integerIn(sizes.rqSize, "receiveQueueSize", 0, 65536) ??
    integerIn(sizes.cqSize, "completionQueueSize", 1, 131072) ??
    integerIn(rcqSize, "receiveCompletionQueueSize", 0, 131072) ??
    (onQueuesCq && rcqSize > 0
      ? "receiveCompletionQueueSize with a shared receive queue that has its own receive CQ: the connection's " +
        "receives complete there, so one of the connection's would never be used (librpma ignores the size); " +
        "make the queue with completionQueueSize 0 for its receives to complete on the connection's receive CQ"
      : undefined) ??
    (onQueuesCq && sizes.sharedCompletionChannel === true
      ? "sharedCompletionChannel with a shared receive queue that has its own receive CQ: that CQ has its own " +
        "channel (librpma refuses it: \"connection shared completion channel cannot be used when the shared RQ " +
        "has its own RCQ\")"
      : undefined) ??
    (sizes.cqSize < needed
      ? `completionQueueSize ${sizes.cqSize} is smaller than ` +
        (!receivesOnCq
          ? `sendQueueSize (${needed})`
          : sizes.srq === undefined
          ? `sendQueueSize + receiveQueueSize (${needed})`
          : `sendQueueSize + the shared receive queue's receiveQueueSize (${needed}), whose receives complete on it`) +
        ": completions of requests in flight would be lost"
      : undefined)
}

/**
 * What rdma_cm carries as private data on RoCE and InfiniBand: 56 bytes with a connection request,
 * 196 with an accept and 148 with a rejection (the CM's REQ, REP and REJ messages less rdma_cm's
 * own header). What arrives is padded with zeros to these sizes. The one table of these limits:
 * the simulated driver reads it, and a host test checks the addon's (private_data.h) against it.
 *
 * @since 1.0.0
 * @category validation
 */
export const PRIVATE_DATA_LIMIT = { connect: 56, accept: 196, reject: 148 } as const

/**
 * Private data for rdma_cm: a Uint8Array (or nothing) of at most 255 bytes, what the addon accepts;
 * with `side`, at most what rdma_cm accepts there on RoCE ({@link PRIVATE_DATA_LIMIT}), which a
 * device refuses with a bare "Invalid argument".
 *
 * @since 0.1.0
 * @category validation
 */
export const privateData = (value: unknown, side?: "connect" | "accept"): string | undefined =>
  value === null || value === undefined
    ? undefined
    : !isUint8Array(value)
    ? "private data must be a Uint8Array"
    : byteLengthOf(value) > 255
    ? `private data is ${byteLengthOf(value)} bytes; rdma_cm carries at most 255 (56 with a connection request)`
    : side !== undefined && byteLengthOf(value) > PRIVATE_DATA_LIMIT[side]
    ? `private data is ${byteLengthOf(value)} bytes; rdma_cm on RoCE carries at most ${PRIVATE_DATA_LIMIT[side]} ` +
      `with ${side === "connect" ? "a connection request (56)" : "an accept (196)"}`
    : undefined

/**
 * A peer configuration descriptor (rpma_peer_cfg_from_descriptor): exactly 1 byte.
 *
 * @since 1.0.0
 * @category validation
 */
export const peerCfgDescriptor = (value: unknown): string | undefined =>
  !isUint8Array(value)
    ? "the peer configuration descriptor must be a Uint8Array"
    : byteLengthOf(value) !== 1
    ? `a peer configuration descriptor is 1 byte, not ${byteLengthOf(value)}`
    : undefined

/**
 * A busy-poll's budget (spin.cc ReadDeadline): whole nanoseconds from 0 to 10 ms
 * (Model.MAX_SPIN_NS).
 *
 * @since 1.0.0
 * @category validation
 */
export const spinBudget = (value: unknown): string | undefined =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= 10_000_000
    ? undefined
    : "the spin budget must be a whole number of nanoseconds from 0 to 10000000 (10 ms)"

/**
 * A size to allocate: a positive integer within a Uint8Array's limit (memory.cc Allocate).
 *
 * @since 0.1.0
 * @category validation
 */
export const allocationSize = (value: unknown): string | undefined =>
  typeof value !== "number"
    ? "size must be a number"
    : value === 0
    ? "size is 0"
    : Number.isInteger(value) && value >= 1 && value <= 2 ** 32
    ? undefined
    : "size must be a positive integer within a Uint8Array's limit"

const WR_FIELDS = [
  "op",
  "id",
  "dst",
  "src",
  "dstOffset",
  "srcOffset",
  "offset",
  "length",
  "type",
  "value",
  "imm",
  "completion"
] as const
const MAX_SAFE = Number.MAX_SAFE_INTEGER

/**
 * A work request read once, field by field, into a plain object, with the addon's checks
 * (conn.cc Post): a known op, a numeric id, offsets that are safe integers, a length that fits
 * librpma's uint32_t, a flush type, 8 bytes for an atomic write. Handles are left to the driver.
 * A getter or Proxy trap that throws is a refusal.
 *
 * @since 0.1.0
 * @category validation
 */
export const workRequest = (
  value: unknown
): { readonly request: Record<(typeof WR_FIELDS)[number], unknown>; readonly problem?: undefined } | {
  readonly request?: undefined
  readonly problem: string
} => {
  if (typeof value !== "object" || value === null) return { problem: "the work request must be an object" }
  const request = {} as Record<(typeof WR_FIELDS)[number], unknown>
  for (const key of WR_FIELDS) {
    try {
      request[key] = (value as Record<string, unknown>)[key]
    } catch {
      return { problem: `reading the work request's ${key} threw` }
    }
  }
  const op = request.op
  if (op !== "write" && op !== "read" && op !== "flush" && op !== "atomicWrite" && op !== "send" && op !== "recv") {
    return { problem: `unknown work request "${typeof op === "string" ? op : ""}"` }
  }
  if (typeof request.id !== "number") return { problem: "id must be a number" }
  const problem = op === "write" || op === "read"
    ? integerIn(request.dstOffset, "dst_offset", 0, MAX_SAFE) ??
      integerIn(request.srcOffset, "src_offset", 0, MAX_SAFE) ??
      integerIn(request.length, "len", 0, UINT32_MAX)
    : op === "flush"
    ? integerIn(request.dstOffset, "dst_offset", 0, MAX_SAFE) ?? integerIn(request.length, "len", 0, UINT32_MAX) ??
      (request.type !== "visibility" && request.type !== "persistent" ? "unknown flush type" : undefined)
    : op === "atomicWrite"
    ? integerIn(request.dstOffset, "dst_offset", 0, MAX_SAFE) ??
      (!isUint8Array(request.value) || byteLengthOf(request.value) !== 8
        ? "src must be a Uint8Array of 8 bytes"
        : undefined)
    : integerIn(request.offset, "offset", 0, MAX_SAFE) ?? integerIn(request.length, "len", 0, UINT32_MAX)
  const extra = problem ??
    (request.imm !== undefined && op !== "write" && op !== "send"
      ? "immediate data goes with a write or a send only"
      : request.imm !== undefined
      ? integerIn(request.imm, "imm", 0, UINT32_MAX)
      : undefined) ??
    (request.completion === undefined || request.completion === "always" ||
        (request.completion === "onError" && op !== "recv")
      ? undefined
      : "completion must be \"always\" or \"onError\" (a receive always completes)")
  return extra === undefined ? { request } : { problem: extra }
}

/**
 * A value for an error message, whatever it is: never throws, never runs the value's code (a
 * Proxy's traps, a toString, a Symbol.toPrimitive).
 *
 * @since 0.1.0
 * @category formatting
 */
export const show = (value: unknown): string => {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}…` : value)
    case "bigint":
      return `${value}n`
    case "number":
    case "boolean":
    case "undefined":
      return String(value)
    case "symbol":
      return "a symbol"
    case "function":
      return "a function"
    default:
      return value === null ? "null" : isUint8Array(value) ? `a ${byteLengthOf(value)}-byte Uint8Array` : "an object"
  }
}
