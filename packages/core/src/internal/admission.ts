/**
 * Admission tokens: what a client sends as private data to be admitted, the budget of uses a token
 * carries, and the decision (the request carries the token and the token has a use left).
 *
 * Declared and documented in Admission.ts.
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { timingSafeEqual } from "node:crypto"
import { types } from "node:util"
import type * as Admission from "../Admission.js"
import * as DriverArguments from "../DriverArguments.js"
import { readOnce, unreadableWords } from "./optionsOnce.js"
import { PipeableBase } from "./resource.js"

export const TypeId: Admission.TypeId = Symbol.for("@effect-rdma/core/Admission") as Admission.TypeId

export const MAX_TOKEN: number = DriverArguments.PRIVATE_DATA_LIMIT.connect - 1

export const MAX_TOKEN_USES = 65_535

export class InvalidTokenError extends Data.TaggedError("InvalidTokenError")<{ readonly reason: string }> {
  override get message(): string {
    return `admission token refused: ${this.reason}`
  }
}

export class AdmissionRefusedError extends Data.TaggedError("AdmissionRefusedError")<{
  readonly address: string
  readonly port: number
  readonly reason: "WrongToken" | "TokenUsed" | "TooSoon"
}> {
  override get message(): string {
    const what = this.reason === "TokenUsed"
      ? "carried a token whose uses are spent"
      : this.reason === "TooSoon"
      ? "carried a token whose uses in its window are spent (try again later)"
      : "did not carry the expected token"
    return `a connection request on ${this.address}:${this.port} ${what}: rejected`
  }
}

// The wire form, what a client sends as private data: one byte with the token's length, then the
// token. rdma_cm pads private data with zeros, so without the length a token's trailing zeros
// (or an all-zero token) would match a client that never sent them.
export class AdmissionImpl extends PipeableBase implements Admission.Admission {
  readonly [TypeId]: Admission.TypeId = TypeId
  constructor(
    readonly uses: number,
    readonly window: Duration.Duration | undefined,
    readonly expected: Uint8Array,
    /** When each counted use was admitted (ms, the Clock's): the window's, or all of them. */
    readonly admittedAt: Array<number> = []
  ) {
    super()
  }
  get singleUse(): boolean {
    return this.uses === 1 && this.window === undefined
  }
}

export const isAdmission = (u: unknown): u is Admission.Admission => u instanceof AdmissionImpl

// The token's bytes (its real view: a subclass's getters and methods are not asked), or what is
// wrong with it. Not instanceof: a Proxy of a Uint8Array passes it and then throws from its getters.
const tokenBytes = (token: unknown): Uint8Array | string => {
  if (!DriverArguments.isUint8Array(token)) {
    return `a token is a Uint8Array, not ${
      token === null ? "null" : types.isProxy(token) ? "a Proxy (pass the Uint8Array itself)" : typeof token
    }`
  }
  if (DriverArguments.isDetached(token)) {
    return "its ArrayBuffer is detached (transferred or released): pass a token whose memory is still attached"
  }
  const bytes = DriverArguments.realView(token)
  return bytes.byteLength === 0
    ? "it is empty: use random bytes, e.g. randomBytes(16)"
    : bytes.byteLength > MAX_TOKEN
    ? `it is ${bytes.byteLength} bytes; a connection request carries at most ${MAX_TOKEN} with its length byte`
    : bytes.every((byte) => byte === 0)
    ? `its ${bytes.byteLength} bytes are all zero (an unfilled buffer?): use random bytes, e.g. randomBytes(16)`
    : bytes
}

// The budget the options give, or what is wrong with them.
const budgetOf = (
  options: Admission.Options | undefined
): { readonly uses: number; readonly window: Duration.Duration | undefined } | string => {
  // Read once already (optionsOnce): plain values.
  const { singleUse, uses, window } = options ?? {}
  if (singleUse === true && uses !== undefined && uses !== 1) return `singleUse admits 1 connection, not uses: ${uses}`
  if (uses === undefined && singleUse === false) {
    return "a token admits a bounded number of connections: with singleUse false give uses (and a window), e.g. { uses: 10, window: \"1 minute\" }"
  }
  if (uses !== undefined && !(Number.isSafeInteger(uses) && uses >= 1)) {
    return `uses is how many connections the token admits, a positive integer, not ${String(uses)}`
  }
  if (uses !== undefined && uses > MAX_TOKEN_USES) {
    return `uses is at most ${MAX_TOKEN_USES} (there is no unlimited token), not ${uses}: give a client that needs more a new token`
  }
  if (window === undefined) return { uses: uses ?? 1, window: undefined }
  const length = Duration.decodeUnknown(window)
  if (Option.isNone(length) || !Duration.isFinite(length.value) || Duration.toMillis(length.value) <= 0) {
    return `window is a positive, finite duration (e.g. "1 minute"), not ${String(window)}`
  }
  return { uses: uses ?? 1, window: length.value }
}

export const privateData = (token: Uint8Array): Effect.Effect<Uint8Array, InvalidTokenError> =>
  Effect.suspend(() => {
    const bytes = tokenBytes(token)
    if (typeof bytes === "string") return Effect.fail(new InvalidTokenError({ reason: bytes }))
    const wire = new Uint8Array(1 + bytes.byteLength)
    wire[0] = bytes.byteLength
    wire.set(bytes, 1)
    return Effect.succeed(wire)
  })

export const make = (
  token: Uint8Array,
  options?: Admission.Options
): Effect.Effect<Admission.Admission, InvalidTokenError> =>
  Effect.flatMap(privateData(token), (expected) => {
    const read = readOnce(options, { singleUse: true, uses: true, window: true })
    if (Either.isLeft(read)) return Effect.fail(new InvalidTokenError({ reason: unreadableWords(read.left) }))
    const budget = budgetOf(read.right)
    if (typeof budget === "string") return Effect.fail(new InvalidTokenError({ reason: budget }))
    return Effect.succeed(new AdmissionImpl(budget.uses, budget.window, expected))
  })

/**
 * The admission decision at `now` (the Clock's ms): why `presented` (a request's private
 * data) is refused, or undefined and the use is counted. The whole token is compared whatever
 * differs first: no timing to learn it from.
 */
export const decide = (
  admission: AdmissionImpl,
  presented: Uint8Array,
  now: number
): AdmissionRefusedError["reason"] | undefined => {
  const { admittedAt, expected, uses, window } = admission
  const head = presented.subarray(0, expected.byteLength)
  const carried = head.byteLength === expected.byteLength && timingSafeEqual(head, expected)
  if (window !== undefined) {
    const since = now - Duration.toMillis(window)
    while (admittedAt.length > 0 && admittedAt[0]! <= since) admittedAt.shift()
  }
  const reason = !carried
    ? "WrongToken"
    : admittedAt.length >= uses
    ? (window === undefined ? "TokenUsed" : "TooSoon")
    : undefined
  if (reason === undefined) admittedAt.push(now)
  return reason
}

/** Gives back a use that {@link decide} spent at `at`, when the server, not the client, could not serve it. */
export const refund = (admission: Admission.Admission, at: number): Effect.Effect<void> =>
  Effect.sync(() => {
    const { admittedAt } = admission as AdmissionImpl
    const index = admittedAt.lastIndexOf(at)
    if (index >= 0) admittedAt.splice(index, 1)
  })

// What a librdmacm listener's admission sends with its rejection (rdma_reject's private data, which
// rdma_cm pads with zeros): a mark, then the reason's code. A rejection without it (a listener's
// close, librpma's) says nothing. A client reads it with {@link refusalOf}.
const REFUSAL_MARK = [0x52, 0x44, 0x41, 0x01] // "RDA", version 1
const REFUSAL_REASONS: ReadonlyArray<AdmissionRefusedError["reason"]> = ["WrongToken", "TokenUsed", "TooSoon"]

/** The private data of a rejection for `reason`. */
export const refusalData = (reason: AdmissionRefusedError["reason"]): Uint8Array =>
  new Uint8Array([...REFUSAL_MARK, REFUSAL_REASONS.indexOf(reason)])

/** The reason a rejection's private data gives, or undefined when it gives none. */
export const refusalOf = (data: Uint8Array): AdmissionRefusedError["reason"] | undefined =>
  data.byteLength > REFUSAL_MARK.length && REFUSAL_MARK.every((byte, i) => data[i] === byte)
    ? REFUSAL_REASONS[data[REFUSAL_MARK.length]!]
    : undefined
