/**
 * The one release policy: a failed release is logged and counted, never retried (librpma frees the
 * handle even when the deregistration fails, so a retry would be a double free), and the caller
 * decides what to keep alive.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import * as RdmaMetrics from "../RdmaMetrics.js"

/** @internal */
export const release = <E>(
  operation: string,
  /** What is released, for the log line; a function when building the text costs something. */
  describe: string | (() => string),
  effect: Effect.Effect<void, E>,
  onFailure: () => void = () => {}
): Effect.Effect<void> =>
  Effect.catchAllCause(effect, (cause) =>
    Effect.sync(onFailure).pipe(
      Effect.zipRight(Metric.increment(Metric.tagged(RdmaMetrics.releaseFailures, "operation", operation))),
      Effect.zipRight(
        Effect.suspend(() => {
          const resource = typeof describe === "string" ? describe : describe()
          return Effect.logError(`${operation} failed while releasing ${resource}; not retried, memory kept alive`, cause)
            .pipe(Effect.annotateLogs({ operation, resource }))
        })
      ),
      // An interruption of the release itself cannot happen (finalizers are uninterruptible), but
      // a failure caused by one must not be reported as a release failure.
      Effect.unlessEffect(Effect.succeed(Cause.isInterruptedOnly(cause)))
    ))
