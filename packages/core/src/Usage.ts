/**
 * Usage flags of a memory registration (librpma's `RPMA_MR_USAGE_*`), as a branded bitmask whose
 * type also records which flags it holds. A region registered with `Usage<"WRITE_SRC">` can be
 * passed where a write source is required; one registered for reading cannot, and the compiler says so.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import * as Either from "effect/Either"

/**
 * librpma's flag values (librpma.h).
 *
 * @since 0.1.0
 * @category constants
 */
export const Flags = {
  READ_SRC: 0x01,
  READ_DST: 0x02,
  WRITE_SRC: 0x04,
  WRITE_DST: 0x08,
  FLUSH_TYPE_VISIBILITY: 0x10,
  FLUSH_TYPE_PERSISTENT: 0x20,
  SEND: 0x40,
  RECV: 0x80
} as const

/**
 * The name of one usage flag.
 *
 * @since 0.1.0
 * @category models
 */
export type Flag = keyof typeof Flags

/**
 * Every bit librpma accepts (`USAGE_ALL_ALLOWED` in librpma's mr.c).
 *
 * @since 0.1.0
 * @category constants
 */
export const ALL_BITS = 0xff

const FlagNames = Object.keys(Flags) as ReadonlyArray<Flag>

declare const UsageTypeId: unique symbol

/**
 * A non-zero bitmask of known flags. `F` is the union of the flags it is known to hold; the marker
 * is an object with one key per flag, so a usage with more flags is assignable where fewer are
 * required (`Usage<"READ_SRC" | "WRITE_DST">` is a `Usage<"READ_SRC">`).
 *
 * @since 0.1.0
 * @category models
 */
export type Usage<F extends Flag = Flag> = number & {
  readonly [UsageTypeId]: { readonly [K in F]: true }
}

/**
 * The flags a usage type holds.
 *
 * @since 0.1.0
 * @category models
 */
export type FlagsOf<U> = U extends Usage<infer F> ? F : never

const unsafeMake = <F extends Flag>(bits: number): Usage<F> => bits as Usage<F>

/**
 * @since 0.1.0
 * @category constants
 */
export const READ_SRC: Usage<"READ_SRC"> = unsafeMake(Flags.READ_SRC)
/**
 * @since 0.1.0
 * @category constants
 */
export const READ_DST: Usage<"READ_DST"> = unsafeMake(Flags.READ_DST)
/**
 * @since 0.1.0
 * @category constants
 */
export const WRITE_SRC: Usage<"WRITE_SRC"> = unsafeMake(Flags.WRITE_SRC)
/**
 * @since 0.1.0
 * @category constants
 */
export const WRITE_DST: Usage<"WRITE_DST"> = unsafeMake(Flags.WRITE_DST)
/**
 * @since 0.1.0
 * @category constants
 */
export const FLUSH_TYPE_VISIBILITY: Usage<"FLUSH_TYPE_VISIBILITY"> = unsafeMake(Flags.FLUSH_TYPE_VISIBILITY)
/**
 * @since 0.1.0
 * @category constants
 */
export const FLUSH_TYPE_PERSISTENT: Usage<"FLUSH_TYPE_PERSISTENT"> = unsafeMake(Flags.FLUSH_TYPE_PERSISTENT)
/**
 * @since 0.1.0
 * @category constants
 */
export const SEND: Usage<"SEND"> = unsafeMake(Flags.SEND)
/**
 * @since 0.1.0
 * @category constants
 */
export const RECV: Usage<"RECV"> = unsafeMake(Flags.RECV)

/**
 * Combines usages with bitwise OR; the result's type holds every flag of every argument.
 *
 * @example
 * ```ts
 * import { Usage } from "@effect-rdma/core"
 * const target = Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)
 * // target: Usage<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const combine = <const Us extends readonly [Usage<any>, ...Array<Usage<any>>]>(
  ...usages: Us
): Usage<FlagsOf<Us[number]>> => unsafeMake(usages.reduce((bits: number, u) => bits | u, 0))

/**
 * Builds a usage from flag names.
 *
 * @since 0.1.0
 * @category constructors
 */
export const of = <const F extends Flag>(...flags: readonly [F, ...Array<F>]): Usage<F> =>
  unsafeMake(flags.reduce((bits: number, f) => bits | Flags[f], 0))

/**
 * Whether `usage` holds `flag`; narrows the usage's type when it does.
 *
 * @since 0.1.0
 * @category predicates
 */
export const has = <F extends Flag, G extends Flag>(usage: Usage<F>, flag: G): usage is Usage<F | G> =>
  (usage & Flags[flag]) !== 0

/**
 * Whether `usage` holds every flag of `required`.
 *
 * @since 0.1.0
 * @category predicates
 */
export const includes = <F extends Flag, G extends Flag>(usage: Usage<F>, required: Usage<G>): usage is Usage<F | G> =>
  (usage & required) === required

/**
 * The flag names a usage holds, in bit order.
 *
 * @since 0.1.0
 * @category getters
 */
export const flags = (usage: number): ReadonlyArray<Flag> =>
  typeof usage === "number" ? FlagNames.filter((name) => (usage & Flags[name]) !== 0) : []

/**
 * Prints a usage the way C code spells it: `READ_SRC|FLUSH_TYPE_VISIBILITY (0x11)`. Anything that
 * is not a number (it came from outside the type system) is printed as what it is, never thrown on.
 *
 * @since 0.1.0
 * @category formatting
 */
export const format = (usage: number): string => {
  if (typeof usage !== "number") return `not a usage (${describe(usage)})`
  if (!Number.isInteger(usage)) return `not a usage (${usage})`
  const names = flags(usage)
  const unknown = usage & ~ALL_BITS
  const parts = unknown === 0 ? names : [...names, `0x${unknown.toString(16)}`]
  return `${parts.length === 0 ? "none" : parts.join("|")} (0x${usage.toString(16).padStart(2, "0")})`
}

const describe = (value: unknown): string => {
  if (typeof value === "bigint") return `${value}n`
  if (value === null || typeof value !== "object" && typeof value !== "function") return String(value)
  return typeof value
}

/**
 * A number that is not a usage: zero, not an integer, or with bits librpma does not define.
 *
 * @since 0.1.0
 * @category errors
 */
export class InvalidUsageError extends Data.TaggedError("InvalidUsageError")<{
  readonly value: unknown
  readonly reason: "Zero" | "NotAnInteger" | "UnknownBits"
}> {
  override get message(): string {
    switch (this.reason) {
      case "Zero":
        return "usage is 0: a registration needs at least one RPMA_MR_USAGE_* flag (librpma returns RPMA_E_INVAL)"
      case "NotAnInteger":
        return `usage ${String(this.value)} is not an integer bitmask of RPMA_MR_USAGE_* flags`
      case "UnknownBits":
        return `usage 0x${(this.value as number).toString(16)} has bits outside 0xff that librpma does not define ` +
          `(allowed: ${FlagNames.join(", ")})`
    }
  }
}

/**
 * Validates a number from outside (configuration, the network) into a usage. The flags it holds
 * are not known at compile time: narrow them with {@link has} or {@link includes}.
 *
 * @since 0.1.0
 * @category constructors
 */
export const validate = (value: unknown): Either.Either<Usage<never>, InvalidUsageError> => {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    return Either.left(new InvalidUsageError({ value, reason: "NotAnInteger" }))
  }
  if (value === 0) return Either.left(new InvalidUsageError({ value, reason: "Zero" }))
  if (value < 0 || (value & ~ALL_BITS) !== 0 || value > ALL_BITS) {
    return Either.left(new InvalidUsageError({ value, reason: "UnknownBits" }))
  }
  return Either.right(unsafeMake<never>(value))
}

/**
 * {@link validate} as an Effect.
 *
 * @since 0.1.0
 * @category constructors
 */
export const decode = (value: unknown): Effect.Effect<Usage<never>, InvalidUsageError> => validate(value)
