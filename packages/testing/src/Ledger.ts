/**
 * Leak checks for tests: what the simulated driver still holds, and an assertion that nothing is.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
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

/**
 * Runs `effect` and then asserts that the ledger is empty, whatever the outcome of `effect`.
 *
 * @since 0.1.0
 * @category assertions
 */
export const checked = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | LeakError, R | SimulationControl> =>
  Effect.exit(effect).pipe(Effect.zipLeft(assertEmpty), Effect.flatten)
