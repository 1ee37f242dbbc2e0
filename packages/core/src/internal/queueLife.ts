/**
 * What every queue's life is made of, written once: a connection's (internal/connection.ts), an
 * rdma_cm endpoint's (internal/cmEndpoint.ts) and a shared receive queue's (internal/srq.ts).
 *
 * - {@link startPoster}: the queue's posting kernel, its callbacks' work forked on the current runtime.
 * - {@link closedError}: how a request fails once its queue has ended.
 * - {@link watchEvents}: the fiber that follows a queue's connection events to the last one.
 * - {@link watchdog}: the fiber that finds a request the other side never answers.
 * - {@link settle}: an ending queue's requests, each given its outcome.
 * - {@link boundedWait} and {@link deadline}: the waits of a release, bounded on Effect's Clock.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Runtime from "effect/Runtime"
import { ConnectionClosedError, type OperationError } from "../ConnectionError.js"
import type { Completion, WorkRequest } from "../DriverModel.js"
import { type PendingTable, runAll } from "./dataPath.js"
import { type Link, Poster } from "./poster.js"

/** Runs an effect in a fiber of its own, from a callback that cannot return it. */
export type Fork = (effect: Effect.Effect<void>) => Fiber.RuntimeFiber<void>

/**
 * A queue's posting kernel. Its callbacks (the completion channel's) run what they cannot return
 * in fibers of their own, on the runtime this runs in: `link` gets that fork for its `lost`.
 */
export const startPoster = <R = WorkRequest>(
  link: (fork: Fork) => Omit<Link<R>, "run">
): Effect.Effect<Poster<R>> =>
  Effect.map(Effect.runtime<never>(), (runtime) => {
    const fork: Fork = Runtime.runFork(runtime)
    return new Poster<R>({
      ...link(fork),
      run: (effect) => {
        fork(effect)
      }
    })
  })

/** How a request fails once its queue has ended: closed, or lost (with why). */
export const closedError = (reason: "CLOSED" | "LOST", cause?: unknown) =>
(
  operation: string,
  unsignalled?: boolean
): ConnectionClosedError =>
  new ConnectionClosedError(
    unsignalled === true ? { operation, reason, cause, unsignalled } : { operation, reason, cause }
  )

/**
 * A wait inside a finalizer, really bounded. `Effect.timeout` cannot end what it times in
 * an uninterruptible region, and making that part interruptible is no better when the finalizer
 * runs because its fiber was interrupted: the pending interruption would end the finalizer there
 * and skip the rest of it. So the wait runs in a fiber of its own, interruptible, and this one
 * (still uninterruptible) awaits it.
 */
export const boundedWait = <A, E>(wait: Effect.Effect<A, E>, timeoutMs: number): Effect.Effect<void> =>
  Effect.flatMap(
    Effect.forkDaemon(Effect.interruptible(Effect.timeout(wait, Duration.millis(timeoutMs)))),
    Fiber.await
  ).pipe(Effect.asVoid)

/**
 * A deadline `ms` from now on Effect's Clock (a TestClock drives it): what is left of it, at
 * least 1 ms, so that a wait bounded by it still looks at what is ready.
 */
export const deadline = (ms: number): Effect.Effect<{ readonly remainingMs: Effect.Effect<number> }> =>
  Effect.map(Effect.clock, (clock) => {
    const at = clock.unsafeCurrentTimeMillis() + ms
    return { remainingMs: Effect.sync(() => Math.max(at - clock.unsafeCurrentTimeMillis(), 1)) }
  })

/**
 * A daemon fiber that reads a queue's events until the last one (`isLast`) and then ends the
 * queue with it (`onLast`), or with the failure of the read (`onFailure`); `andThen` runs after
 * either, and when the fiber is interrupted.
 */
export const watchEvents = <Event, E>(options: {
  readonly next: Effect.Effect<Event, E>
  readonly isLast: (event: Event) => boolean
  readonly onLast: (event: Event) => Effect.Effect<void>
  readonly onFailure: (cause: E) => Effect.Effect<void>
  readonly andThen?: Effect.Effect<void> | undefined
}): Effect.Effect<Fiber.RuntimeFiber<void>> => {
  const watched = options.next.pipe(
    Effect.repeat({ until: options.isLast }),
    Effect.matchEffect({ onSuccess: options.onLast, onFailure: options.onFailure })
  )
  return Effect.forkDaemon(
    Effect.interruptible(options.andThen === undefined ? watched : Effect.ensuring(watched, options.andThen))
  )
}

/**
 * A one-sided request (write, read, flush, atomic) with no completion within `timeoutMs` means
 * the other side, or the path to it, is gone (a cut link, a frozen host: the transport may keep
 * retrying far longer). Sends and receives wait on the other side's application and are not timed.
 *
 * A daemon fiber that advances the table's tick every tenth of the timeout (requests are stamped
 * with the tick when posted, so the data path reads no clock, and a request is seen late by at
 * most one period) and, once its oldest timed request has waited longer than the timeout, ends
 * the queue as lost (`lost`). It stops once `watching` is false. Its sleeps are on Effect's Clock.
 */
export const watchdog = (options: {
  readonly table: PendingTable<OperationError>
  readonly timeoutMs: number
  readonly watching: () => boolean
  readonly lost: (cause: Error) => Effect.Effect<void>
}): Effect.Effect<Fiber.RuntimeFiber<void>> => {
  const { table, timeoutMs } = options
  const period = Math.max(timeoutMs / 10, 1)
  return Effect.sleep(Duration.millis(period)).pipe(
    Effect.zipRight(Effect.suspend(() => {
      table.tick++
      const waited = (table.oldestWait() - 1) * period
      return waited <= timeoutMs ? Effect.void : options.lost(
        new Error(
          `no completion for over ${Math.round(waited)} ms (timeout ${timeoutMs} ms): the other side does not answer`
        )
      )
    })),
    Effect.repeat({ until: () => !options.watching() }),
    Effect.asVoid,
    Effect.interruptible,
    Effect.forkDaemon
  )
}

/**
 * An ending queue's requests, each given its outcome (after its disconnect, when it has one: a
 * queue pair in the error state flushes what it holds): the completions already queued (`poll`)
 * delivered, a flushed one failing as `failedAs`; then, for up to `drainMs` (no wait if
 * undefined), the requests that report by themselves waited for; what is still pending then fails
 * as `failedAs`.
 */
export const settle = <R>(options: {
  readonly poster: Poster<R>
  readonly table: PendingTable<OperationError>
  readonly poll: Effect.Effect<ReadonlyArray<Completion>, unknown>
  readonly failedAs: (operation: string, unsignalled?: boolean) => OperationError
  readonly drainMs: number | undefined
}): Effect.Effect<void> => {
  const { failedAs, poster, table } = options
  return Effect.all([
    options.poll.pipe(
      Effect.map((ready) => poster.dispatch(ready, failedAs)),
      Effect.orElseSucceed(() => []),
      Effect.flatMap(runAll)
    ),
    options.drainMs === undefined ? Effect.void : boundedWait(table.drained, options.drainMs),
    Effect.sync(() => table.failAll(failedAs))
  ], { discard: true })
}
