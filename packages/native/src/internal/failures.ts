/**
 * The one place where the addon's failures become tagged errors, through core's mappings
 * (fromRpmaCode, fromErrno, mapFileError). The addon throws (or rejects with) an Error carrying
 * `operation`, an optional `detail`, and `code` (librpma) or `errno` (librdmacm, verbs, mmap); a
 * release it refused because the handle is in use also carries `inUse`. A failure without a code
 * is a bug in the binding, not an RDMA error: it is a defect.
 */
import { RdmaError } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"

interface NativeFailure {
  readonly operation?: unknown
  readonly detail?: unknown
  readonly code?: unknown
  readonly errno?: unknown
  readonly inUse?: unknown
  readonly reason?: unknown
}

const field = (cause: unknown, key: keyof NativeFailure): unknown =>
  typeof cause === "object" && cause !== null ? (cause as NativeFailure)[key] : undefined

const text = (value: unknown): string | undefined => typeof value === "string" ? value : undefined

/** The addon's failure as a tagged error; undefined for one without a code (a bug in the binding). */
const rpmaError = (operation: string, cause: unknown): RdmaError.RpmaError | undefined => {
  const code = field(cause, "code")
  return typeof code === "number"
    ? RdmaError.fromRpmaCode(code, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause)
    : undefined
}

/** A librpma call's failure as a failed Effect (a defect without a code). */
export const rpmaFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RdmaError.RpmaError> => {
  const error = rpmaError(operation, cause)
  return error !== undefined ? Effect.fail(error) : Effect.die(cause)
}

/** As {@link rpmaFailure}, for the calls that answer in JavaScript; a defect is thrown. */
export const rpmaErrorOrThrow = (operation: string, cause: unknown): RdmaError.RpmaError => {
  const error = rpmaError(operation, cause)
  if (error === undefined) throw cause
  return error
}

/** As {@link rpmaFailure}, as an Exit. */
export const rpmaExit = (operation: string, cause: unknown): Exit.Exit<never, RdmaError.RpmaError> => {
  const error = rpmaError(operation, cause)
  return error !== undefined ? Exit.fail(error) : Exit.die(cause)
}

/** A refusal the driver makes itself, before the addon, shaped as the addon's (RPMA_E_INVAL). */
export const invalidArgument = (operation: string, detail: string): Error =>
  Object.assign(new Error(detail), { operation, code: RdmaError.RpmaCode.RPMA_E_INVAL, detail })

/** A librdmacm call's failure (`errno`) as a failed Effect. */
export const cmFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RdmaError.RdmaCmError> => {
  const errno = field(cause, "errno")
  return typeof errno === "number"
    ? Effect.fail(
      RdmaError.fromErrno(errno, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause)
    )
    : Effect.die(cause)
}

/** A librdmacm call's failure as a tagged error, for the calls that answer in JavaScript; a defect is thrown. */
export const cmErrorOrThrow = (operation: string, cause: unknown): RdmaError.RdmaCmError => {
  const errno = field(cause, "errno")
  if (typeof errno !== "number") throw cause
  return RdmaError.fromErrno(errno, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause)
}

/** {@link cmFailure} as an Exit. */
export const cmExit = (operation: string, cause: unknown): Exit.Exit<never, RdmaError.RdmaCmError> => {
  const errno = field(cause, "errno")
  return typeof errno === "number"
    ? Exit.fail(
      RdmaError.fromErrno(errno, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause)
    )
    : Exit.die(cause)
}

/** The addon's mapFile / unmapFile failures: `errno` and, for what it checked itself, `reason`. */
export const mapFailure =
  (path: string, operation: string) => (cause: unknown): Effect.Effect<never, RdmaError.MapFileError> => {
    const errno = field(cause, "errno")
    return typeof errno === "number"
      ? Effect.fail(RdmaError.mapFileError({
        path,
        operation: text(field(cause, "operation")) ?? operation,
        errno,
        reason: text(field(cause, "reason")),
        detail: text(field(cause, "detail")),
        cause
      }))
      : Effect.die(cause)
  }

/** The addon's refusal of a release because the handle is in use (it stays alive), if it is one. */
const inUseError = (operation: string, cause: unknown): RdmaError.ResourceInUseError | undefined =>
  field(cause, "inUse") === true
    ? new RdmaError.ResourceInUseError({
      operation: text(field(cause, "operation")) ?? operation,
      detail: text(field(cause, "detail")) ?? "the handle is in use",
      cause
    })
    : undefined

/** A release the addon refused because the handle is in use (it stays alive), else `otherwise`. */
export const inUseOr =
  <E>(operation: string, otherwise: (cause: unknown) => Effect.Effect<never, E>) =>
  (cause: unknown): Effect.Effect<never, E | RdmaError.ResourceInUseError> => {
    const inUse = inUseError(operation, cause)
    return inUse !== undefined ? Effect.fail(inUse) : otherwise(cause)
  }

/** {@link inUseOr} of a librpma release, as an Exit. */
export const inUseExitOr = (
  operation: string,
  cause: unknown
): Exit.Exit<never, RdmaError.RpmaError | RdmaError.ResourceInUseError> => {
  const inUse = inUseError(operation, cause)
  return inUse !== undefined ? Exit.fail(inUse) : rpmaExit(operation, cause)
}
