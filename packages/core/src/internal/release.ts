/**
 * The one release policy. A release has three outcomes (see the Driver's contract):
 * - success: the handle is gone;
 * - a failure: logged and counted, never retried (librpma frees the handle even when the
 *   deregistration fails, so a retry would be a double free); the handle is gone, and the caller
 *   decides what to keep alive (`onFailure`);
 * - a refusal ({@link ResourceInUseError}): something still uses the handle, which is alive and
 *   unchanged. Core defers releases until their users are gone (internal/owner.ts), so a refusal
 *   means a user core does not know of (a raw Driver call): it is logged, and nothing is counted as
 *   released.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as Option from "effect/Option"
import type { SynchronousCall } from "../DriverModel.js"
import * as RdmaMetrics from "../RdmaMetrics.js"

const refusal = (cause: Cause.Cause<unknown>): string | undefined => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) return undefined
  const error = failure.value as { readonly _tag?: unknown; readonly message?: unknown }
  return error?._tag === "ResourceInUseError" ? String(error.message) : undefined
}

/** Runs a release; succeeds with whether the handle is gone (false only when refused). */
export const release = <E>(
  operation: string,
  /** What is released, for the log line; a function when building the text costs something. */
  describe: string | (() => string),
  effect: Effect.Effect<void, E>,
  onFailure: () => void = () => {}
): Effect.Effect<boolean> =>
  Effect.matchCauseEffect(effect, {
    onSuccess: () => Effect.succeed(true),
    onFailure: (cause) => failed(operation, describe, cause, onFailure)
  })

/**
 * {@link release}, then `onGone` once the handle is gone (on success, or after a failure
 * that was not a refusal): plain JavaScript that returns what to run next, if anything, so that a
 * release that succeeds costs one step over the driver's call.
 */
export const releaseThen = <E>(
  operation: string,
  describe: string | (() => string),
  effect: Effect.Effect<void, E>,
  onFailure: () => void,
  /** `released` is false after a failure (`onFailure` has run). */
  onGone: (released: boolean) => Effect.Effect<void> | undefined
): Effect.Effect<void> =>
  Effect.matchCauseEffect(effect, {
    onSuccess: () => onGone(true) ?? Effect.void,
    onFailure: (cause) => afterFailure(operation, describe, cause, onFailure, onGone)
  })

/**
 * What a release does around its driver call, as functions of what is released (`T`),
 * so that a release built per handle allocates no closures.
 */
export interface Policy<T> {
  readonly operation: string
  /** What is released, for the log line. */
  readonly describe: (of: T) => string
  /** After a failure that is not a refusal (see {@link releaseThen}). */
  readonly onFailure: (of: T) => void
  /** Once the handle is gone (see {@link releaseThen}). */
  readonly onGone: (of: T, released: boolean) => Effect.Effect<void> | undefined
}

/**
 * {@link releaseThen} of a driver call that may answer synchronously: when it does, the
 * call and `onGone` are one step (no Effect of the driver's to run and match).
 */
export const releaseNowThen = <H, E, T>(
  policy: Policy<T>,
  call: SynchronousCall<[handle: H], void, E>,
  handle: H,
  of: T
): Effect.Effect<void> => {
  const now = call.now
  if (now === undefined) return releaseOf(policy, call(handle), of)
  return Effect.suspend(() => {
    const exit = now(handle)
    if (exit === undefined) return releaseOf(policy, call(handle), of)
    return exit._tag === "Success"
      ? policy.onGone(of, true) ?? Effect.void
      : afterFailure(
        policy.operation,
        () => policy.describe(of),
        exit.cause,
        () => policy.onFailure(of),
        (released) => policy.onGone(of, released)
      )
  })
}

const releaseOf = <E, T>(policy: Policy<T>, effect: Effect.Effect<void, E>, of: T): Effect.Effect<void> =>
  releaseThen(
    policy.operation,
    () => policy.describe(of),
    effect,
    () => policy.onFailure(of),
    (released) => policy.onGone(of, released)
  )

const afterFailure = (
  operation: string,
  describe: string | (() => string),
  cause: Cause.Cause<unknown>,
  onFailure: () => void,
  onGone: (released: boolean) => Effect.Effect<void> | undefined
): Effect.Effect<void> =>
  Effect.flatMap(
    failed(operation, describe, cause, onFailure),
    (gone) => (gone ? onGone(false) : undefined) ?? Effect.void
  )

const failed = (
  operation: string,
  describe: string | (() => string),
  cause: Cause.Cause<unknown>,
  onFailure: () => void
): Effect.Effect<boolean> => {
  const resource = typeof describe === "string" ? describe : describe()
  const refused = refusal(cause)
  if (refused !== undefined) {
    return Effect.logError(`${operation} refused while releasing ${resource}: it is still in use and stays alive`)
      .pipe(Effect.annotateLogs({ operation, resource }), Effect.as(false))
  }
  // An interruption of the release itself cannot happen (finalizers are uninterruptible), but
  // a failure caused by one must not be reported as a release failure.
  if (Cause.isInterruptedOnly(cause)) return Effect.succeed(true)
  return Effect.sync(onFailure).pipe(
    Effect.zipRight(Metric.increment(Metric.tagged(RdmaMetrics.releaseFailures, "operation", operation))),
    Effect.zipRight(
      Effect.logError(`${operation} failed while releasing ${resource}; not retried, memory kept alive`, cause)
        .pipe(Effect.annotateLogs({ operation, resource }))
    ),
    Effect.as(true)
  )
}
