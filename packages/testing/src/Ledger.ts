/**
 * Leak checks for tests: what the simulated driver still holds, and an assertion that nothing is;
 * and, on any driver (the native one included), that a piece of work leaves no more handles alive
 * than it found, by the driver's own counts (`Driver.live`).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Peer, Usage } from "@effect-rdma/core"
 * import { Ledger } from "@effect-rdma/testing"
 *
 * // Fails with a HandleLeakError if the region outlived the scope, on whichever driver runs it.
 * const registersAndReleases = Ledger.checkedOnAnyDriver(Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
 * })))
 * ```
 *
 * @since 0.1.0
 */
import { type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schedule from "effect/Schedule"
import { type LedgerEntry, SimulationControl } from "./SimulatedDriver.js"

/**
 * Resources still alive when a test said nothing should be.
 *
 * @since 0.1.0
 * @category errors
 */
export class LeakError extends Data.TaggedError("LeakError")<{ readonly leaked: ReadonlyArray<LedgerEntry> }> {
  override get message(): string {
    const lines = this.leaked.map((e) => `  - ${e.kind} #${e.id}: ${e.description}, acquired in ${e.acquiredIn}`)
    return `${this.leaked.length} resources still alive:\n${lines.join("\n")}`
  }
}

/**
 * The resources alive now.
 *
 * @since 0.1.0
 * @category getters
 */
export const live: Effect.Effect<ReadonlyArray<LedgerEntry>, never, SimulationControl> = Effect.flatMap(
  SimulationControl,
  (s) => s.live
)

/**
 * Fails with a {@link LeakError} listing every live resource and where it was acquired.
 *
 * @since 0.1.0
 * @category assertions
 */
export const assertEmpty: Effect.Effect<void, LeakError, SimulationControl> = Effect.flatMap(
  live,
  (leaked) => leaked.length === 0 ? Effect.void : Effect.fail(new LeakError({ leaked }))
)

// The leak, then the effect's own cause, kept beside it. The leak first: it is the failure that
// Effect.flip, catchTag and Cause.failureOption see, so that code which catches the effect's error
// outside the check can never hide a leak.
const withLeak = <A, E, L>(exit: Exit.Exit<A, E>, leak: L): Cause.Cause<E | L> =>
  Exit.isFailure(exit) ? Cause.sequential(Cause.fail(leak), exit.cause) : Cause.fail(leak)

/**
 * Runs `effect` and then asserts that the ledger is empty, whatever the outcome of `effect`:
 *
 * - `effect` succeeds and nothing is alive: its value.
 * - `effect` succeeds and something is alive: fails with a {@link LeakError}.
 * - `effect` fails, dies or is interrupted and nothing is alive: its own cause, unchanged.
 * - `effect` fails, dies or is interrupted and something is alive: the {@link LeakError}, with the
 *   effect's own cause after it (`Cause.sequential(Cause.fail(leak), cause)`): `Cause.pretty` shows
 *   both, and the `LeakError` is the first failure, the one `Effect.flip`, `Effect.catchTag` and
 *   `Cause.failureOption` see (`Cause.failures` has the effect's own error too), so that catching
 *   the effect's error outside the check never hides a leak.
 *
 * @since 0.1.0
 * @category assertions
 */
export const checked = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | LeakError, R | SimulationControl> =>
  Effect.flatMap(Effect.exit(effect), (exit) =>
    Effect.matchEffect(assertEmpty, {
      onFailure: (leak) => Effect.failCause(withLeak(exit, leak)),
      onSuccess: () => exit
    }))

/**
 * Handles a driver still held after a checked piece of work, beyond those it held before: the
 * kinds whose count grew, from the driver's own counts (`Driver.live`). Unlike {@link LeakError}
 * it has no acquisition sites: only the simulated driver records those.
 *
 * @since 1.0.0
 * @category errors
 */
export class HandleLeakError extends Data.TaggedError("HandleLeakError")<{
  readonly driver: string
  readonly before: Model.LiveHandles
  readonly after: Model.LiveHandles
}> {
  override get message(): string {
    const grown = grownKinds(this.before, this.after).map((k) => `${k} ${this.before[k]} -> ${this.after[k]}`)
    return `the ${this.driver} driver holds more handles than before the checked effect: ${grown.join(", ")} ` +
      `(release them in the effect's scope; on the simulated driver, Ledger.checked names where each was acquired)`
  }
}

const grownKinds = (before: Model.LiveHandles, after: Model.LiveHandles): ReadonlyArray<keyof Model.LiveHandles> =>
  (Object.keys(after) as Array<keyof Model.LiveHandles>).filter((k) => after[k] > (before[k] ?? 0))

/**
 * Runs `effect` on any driver and then fails with a {@link HandleLeakError}, whatever the outcome
 * of `effect`, if the driver holds more handles of some kind than it did before (peers, regions,
 * connections, ...; `Driver.live`). Handles released by another fiber a moment after `effect` ends
 * are waited for, up to `within` (default 2 seconds) of real time, under a `TestClock` too (the
 * releases it waits for come from real events); a leak is reported only after it.
 *
 * - `effect` succeeds and no kind grew: its value.
 * - `effect` succeeds and some kind grew: fails with a {@link HandleLeakError}.
 * - `effect` fails, dies or is interrupted and no kind grew: its own cause, unchanged.
 * - `effect` fails, dies or is interrupted and some kind grew: the {@link HandleLeakError}, with the
 *   effect's own cause after it (`Cause.sequential(Cause.fail(leak), cause)`): `Cause.pretty` shows
 *   both, and the `HandleLeakError` is the first failure, the one `Effect.flip`, `Effect.catchTag`
 *   and `Cause.failureOption` see, so that catching the effect's error outside the check never
 *   hides a leak.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { Ledger } from "@effect-rdma/testing"
 *
 * const connectsCleanly = Ledger.checkedOnAnyDriver(Effect.scoped(Peer.Peer), { within: "5 seconds" })
 * ```
 *
 * @since 1.0.0
 * @category assertions
 */
export const checkedOnAnyDriver = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  options?: { readonly within?: Duration.DurationInput | undefined }
): Effect.Effect<A, E | HandleLeakError, R | RdmaDriver> =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const before = yield* driver.live
    const exit = yield* Effect.exit(effect)
    const settled = (after: Model.LiveHandles) => grownKinds(before, after).length === 0
    // The counts as an error until they are back: retried until they are, or `within` has passed.
    // On the live clock: what it waits for is a release that real events make (a native callback,
    // another process), and under a TestClock (`it.effect`) nothing would move this wait at all.
    const leaked = yield* driver.live.pipe(
      Effect.filterOrFail(settled, (after) => after),
      Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo(options?.within ?? Duration.seconds(2)))),
      Effect.flip,
      Effect.option,
      Effect.withClock(Clock.make())
    )
    if (leaked._tag === "Some") {
      return yield* Effect.failCause(
        withLeak(exit, new HandleLeakError({ driver: driver.name, before, after: leaked.value }))
      )
    }
    return yield* exit
  })
