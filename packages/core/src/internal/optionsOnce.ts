/**
 * Options read once, where a call starts: each key the call knows is read into a plain object,
 * which the call uses from then on. A getter or Proxy trap that throws is then the call's tagged
 * refusal, found before anything is made, not a defect out of the middle of a connect; and a
 * getter that answers differently each time cannot pass a check with one value and be used with
 * another. Only objects are copied: anything else goes on as given, for the call's own checks.
 */
import * as Either from "effect/Either"
import { Errno, fromErrno, fromRpmaCode, type RdmaCmError, RpmaCode, type RpmaError } from "../RdmaError.js"

/** Every key of `O`, so that a key added to an options interface cannot be left out of its copy. */
export type Keys<O> = { readonly [K in keyof Required<O>]: true }

/** What a throw says, without trusting it: its message may be a getter that throws too. */
const thrownWords = (thrown: unknown): string => {
  try {
    return thrown instanceof Error ? thrown.message : String(thrown)
  } catch {
    return "something that cannot be shown"
  }
}

/** An option whose read threw, and what the throw said. */
export interface Unreadable {
  readonly key: string
  readonly thrown: string
}

/** An unreadable option in a refusal's words, for an error that names the option itself. */
export const unreadableDetail = ({ thrown }: Unreadable): string =>
  `could not be read (it threw: ${thrown}): pass plain values`

/** An unreadable option in a refusal's words. */
export const unreadableWords = ({ key, thrown }: Unreadable): string =>
  `its options could not be read (${key} threw: ${thrown}): pass plain values`

/** `options`' `keys`, copied (absent and undefined ones left out), or the option whose read threw. */
export const readOnce = <O extends object>(
  options: O | undefined,
  keys: Keys<O>
): Either.Either<O | undefined, Unreadable> => {
  if (typeof options !== "object" || options === null) return Either.right(options)
  const copy: Record<string, unknown> = {}
  let key = ""
  try {
    for (key in keys) {
      const value = (options as Record<string, unknown>)[key]
      if (value !== undefined) copy[key] = value
    }
  } catch (thrown) {
    return Either.left({ key, thrown: thrownWords(thrown) })
  }
  return Either.right(copy as O)
}

/** Settings read once, or librpma's answer to arguments it cannot use (RPMA_E_INVAL of `operation`). */
export const readRpmaSettings = <O extends object>(
  options: O | undefined,
  operation: string,
  keys: Keys<O>
): Either.Either<O | undefined, RpmaError> =>
  Either.mapLeft(
    readOnce(options, keys),
    (unreadable) => fromRpmaCode(RpmaCode.RPMA_E_INVAL, operation, unreadableWords(unreadable))
  )

/** Settings read once, or librdmacm's answer to arguments it cannot use (EINVAL of `operation`). */
export const readCmSettings = <O extends object>(
  options: O | undefined,
  operation: string,
  keys: Keys<O>
): Either.Either<O | undefined, RdmaCmError> =>
  Either.mapLeft(
    readOnce(options, keys),
    (unreadable) => fromErrno(Errno.EINVAL, operation, unreadableWords(unreadable))
  )
