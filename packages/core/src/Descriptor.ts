/**
 * librpma's memory-region descriptor: the 21 bytes a peer sends so that another peer can reach one
 * of its regions. Layout (mr.c): raddr u64 LE, length u64 LE, rkey u32 LE, usage u8.
 *
 * Decoding never trusts its input. librpma checks only that the buffer has at least 21 bytes and a
 * non-zero usage; the strict default here also requires exactly 21 bytes, a non-zero length and a
 * region that does not wrap past 2^64, because a descriptor can be tampered with in transit.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as checks from "./DriverArguments.js"
import * as widths from "./internal/fieldWidths.js"
import type { Usage } from "./Usage.js"
import * as Usages from "./Usage.js"

/**
 * The size of a descriptor (librpma's `RPMA_MR_DESC_SIZE`).
 *
 * @since 0.1.0
 * @category constants
 */
export const SIZE = 21

/**
 * A decoded descriptor. `usage` is whatever the sender claimed: its flags are not known statically.
 *
 * @since 0.1.0
 * @category models
 */
export interface Descriptor {
  /** The region's start address in the remote process. */
  readonly address: bigint
  /** The region's length in bytes. */
  readonly length: bigint
  /** The remote key that grants access to the region. */
  readonly rkey: number
  /** The usage the region was registered with. */
  readonly usage: Usage<never>
}

/**
 * Why a descriptor was refused. `TooShort` and `UsageZero` are what librpma itself refuses with
 * RPMA_E_INVAL; the others are this library's stricter checks.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidDescriptorError extends Data.TaggedError("InvalidDescriptorError")<{
  readonly reason: "NotBytes" | "TooShort" | "WrongSize" | "UsageZero" | "LengthZero" | "AddressOverflow"
  readonly size: number
}> {
  /** Whether librpma's rpma_mr_remote_from_descriptor would also refuse it (with RPMA_E_INVAL). */
  get refusedByLibrpma(): boolean {
    return this.reason === "TooShort" || this.reason === "UsageZero" || this.reason === "NotBytes"
  }
  override get message(): string {
    switch (this.reason) {
      case "NotBytes":
        return "a descriptor must be a Uint8Array"
      case "TooShort":
        return `descriptor has ${this.size} bytes, fewer than the ${SIZE} librpma needs: it was cut in transit ` +
          `or is not a descriptor`
      case "WrongSize":
        return `descriptor has ${this.size} bytes, not exactly ${SIZE}: if it came padded (rdma_cm private data ` +
          `is), carry its length and slice it, or decode with { lenient: true } to ignore trailing bytes as librpma does`
      case "UsageZero":
        return "descriptor's usage byte is 0: no operation is allowed on such a region (librpma refuses it)"
      case "LengthZero":
        return "descriptor's length is 0: it describes no memory"
      case "AddressOverflow":
        return "descriptor's address + length passes 2^64: the region wraps around and cannot exist"
    }
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface DecodeOptions {
  /**
   * librpma's own rules only: at least 21 bytes (the rest ignored) and a non-zero usage.
   * For interoperating with peers that pad descriptors; prefer the strict default.
   */
  readonly lenient?: boolean | undefined
}

const readU32 = (b: Uint8Array, at: number): number =>
  (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0

const readU64 = (b: Uint8Array, at: number): bigint => {
  const lo = readU32(b, at)
  const hi = readU32(b, at + 4)
  return hi === 0 ? BigInt(lo) : (BigInt(hi) << 32n) | BigInt(lo)
}

const writeU32 = (b: Uint8Array, at: number, v: number): void => {
  b[at] = v & 0xff
  b[at + 1] = (v >>> 8) & 0xff
  b[at + 2] = (v >>> 16) & 0xff
  b[at + 3] = (v >>> 24) & 0xff
}

const writeU64 = (b: Uint8Array, at: number, v: bigint): void => {
  writeU32(b, at, Number(v & 0xffffffffn))
  writeU32(b, at + 4, Number((v >> 32n) & 0xffffffffn))
}

const U64_MAX = (1n << 64n) - 1n

/**
 * What keeps `d` from being written as rpma_mr_get_descriptor writes a descriptor, or undefined. A
 * zero length or usage is written: they are what the decoder's checks are tested with.
 */
const fieldsProblem = (d: unknown): string | undefined => {
  if (typeof d !== "object" || d === null) return `takes { address, length, rkey, usage }, not ${widths.shown(d)}`
  const { address, length, rkey, usage } = d as Record<string, unknown>
  return widths.u64Problem("address", address) ?? widths.u64Problem("length", length) ??
    widths.u32Problem("rkey", rkey) ??
    (typeof usage === "number" && Number.isInteger(usage) && usage >= 0 && usage <= 0xff
      ? undefined
      : `its usage must be usage flags (an integer from 0 to 255), not ${widths.shown(usage)}`)
}

/** Whether `options` ask for lenient decoding; options that cannot be read ask for nothing (strict). */
const isLenient = (options: DecodeOptions | undefined): boolean => {
  try {
    return options?.lenient === true
  } catch {
    return false
  }
}

/**
 * Decodes and validates a descriptor. Never throws, whatever the bytes.
 *
 * @since 0.1.0
 * @category decoding
 */
export const validate = (
  bytes: Uint8Array,
  options?: DecodeOptions
): Either.Either<Descriptor, InvalidDescriptorError> => {
  // Not instanceof: a Proxy passes it and then throws from every getter.
  if (!checks.isUint8Array(bytes)) return Either.left(new InvalidDescriptorError({ reason: "NotBytes", size: 0 }))
  const size = bytes.byteLength
  if (size < SIZE) return Either.left(new InvalidDescriptorError({ reason: "TooShort", size }))
  const lenient = isLenient(options)
  if (size !== SIZE && !lenient) return Either.left(new InvalidDescriptorError({ reason: "WrongSize", size }))
  const usage = bytes[20]!
  if (usage === 0) return Either.left(new InvalidDescriptorError({ reason: "UsageZero", size }))
  const address = readU64(bytes, 0)
  const length = readU64(bytes, 8)
  if (!lenient) {
    if (length === 0n) return Either.left(new InvalidDescriptorError({ reason: "LengthZero", size }))
    if (address + length - 1n > U64_MAX) {
      return Either.left(new InvalidDescriptorError({ reason: "AddressOverflow", size }))
    }
  }
  return Either.right({ address, length, rkey: readU32(bytes, 16), usage: usage as Usage<never> })
}

/**
 * {@link validate} as an Effect.
 *
 * @since 0.1.0
 * @category decoding
 */
export const decode = (bytes: Uint8Array, options?: DecodeOptions): Effect.Effect<Descriptor, InvalidDescriptorError> =>
  validate(bytes, options)

/**
 * Encodes a descriptor exactly as rpma_mr_get_descriptor writes it. A field that does not fit
 * its width (address and length 64 bits, rkey 32, usage 8) or is of another type throws an
 * `IllegalArgumentException` (effect's `Cause`) saying which: cut to fit, it would name another
 * address.
 *
 * @example
 * ```ts
 * import { Descriptor, Usage } from "@effect-rdma/core"
 * Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: Usage.of("READ_SRC", "FLUSH_TYPE_VISIBILITY") })
 * // 00 10 00 00 00 7f 00 00 00 10 00 00 00 00 00 00 34 12 00 00 11
 * ```
 *
 * @since 0.1.0
 * @category encoding
 */
export const encode = (descriptor: {
  readonly address: bigint
  readonly length: bigint
  readonly rkey: number
  readonly usage: number
}): Uint8Array => {
  const problem = fieldsProblem(descriptor)
  if (problem !== undefined) throw new Cause.IllegalArgumentException(`Descriptor.encode: ${problem}`)
  const bytes = new Uint8Array(SIZE)
  writeU64(bytes, 0, descriptor.address)
  writeU64(bytes, 8, descriptor.length)
  writeU32(bytes, 16, descriptor.rkey >>> 0)
  bytes[20] = descriptor.usage & 0xff
  return bytes
}

/**
 * A one-line description for logs: `raddr=0x7f0000001000 len=4096 rkey=0x1234 usage=READ_SRC|... (0x11)`;
 * for anything that is no descriptor, `not a descriptor: ` and why (it never throws).
 *
 * @since 0.1.0
 * @category formatting
 */
export const format = (d: Descriptor): string => {
  // For logs: what is no descriptor is said so, never thrown.
  const problem = fieldsProblem(d)
  return problem !== undefined
    ? `not a descriptor: ${problem}`
    : `raddr=0x${d.address.toString(16)} len=${d.length} rkey=0x${d.rkey.toString(16)} usage=${Usages.format(d.usage)}`
}
