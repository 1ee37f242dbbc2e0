/**
 * The widths of the fields a descriptor and a remote key carry on the wire (rpma_mr_get_descriptor's
 * 21 bytes, RemoteKey's 24): a value outside its width would be cut to fit and name another region,
 * so the encoders refuse it, saying which field and what it takes.
 */

/** What a value is, for a refusal's words: numbers and strings as themselves, anything else by kind. */
export const shown = (value: unknown): string =>
  value === null
    ? "null"
    : typeof value === "number" || typeof value === "bigint"
    ? String(value)
    : typeof value === "string"
    ? JSON.stringify(value)
    : typeof value === "object"
    ? "another object"
    : typeof value

const U64_MAX = (1n << 64n) - 1n

/** An address or a length: a bigint from 0 to 2^64 - 1. */
export const u64Problem = (name: string, value: unknown): string | undefined =>
  typeof value === "bigint" && value >= 0n && value <= U64_MAX
    ? undefined
    : `its ${name} must be a bigint from 0 to 2^64 - 1, not ${typeof value === "number" ? "a number" : shown(value)}`

/** An rkey: an integer from 0 to 2^32 - 1. */
export const u32Problem = (name: string, value: unknown): string | undefined =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= 0xffffffff
    ? undefined
    : `its ${name} must be a 32-bit unsigned integer, not ${shown(value)}`
