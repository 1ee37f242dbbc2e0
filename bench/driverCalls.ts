/**
 * One request through the driver's own calls, without Connection: postMany, and, when its poll
 * found nothing, the completion channel armed once (the Effect form of what core's kernel does
 * with a callback). The baseline of the rows that measure core over the driver.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import { Effect, Exit } from "effect"

/** The completions of `conn`: the ones postMany's poll found, else the channel's next answer. */
export const postOne = (
  driver: Driver.Driver,
  conn: Driver.Model.ConnHandle,
  request: Driver.Model.WorkRequest
): Effect.Effect<ReadonlyArray<Driver.Model.Completion>, unknown> =>
  Effect.suspend(() => {
    const outcome = driver.postMany(conn, [request])
    if (outcome.error !== undefined) return Effect.fail(outcome.error)
    if (outcome.ready.length > 0) return Effect.succeed(outcome.ready)
    return Effect.async<ReadonlyArray<Driver.Model.Completion>, unknown>((resume) => {
      const disarm = driver.armCompletions(conn, (ready) =>
        resume(Exit.isSuccess(ready) ? Effect.succeed(ready.value) : ready))
      return Effect.sync(disarm)
    })
  })
