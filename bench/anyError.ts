import type { Effect } from "effect"

/**
 * A bench's setup with its error channel widened to `unknown` (the identity at run time): a setup
 * that fails ends the bench whatever the error, and the wide type keeps the declarations of these
 * exports from naming core's modules by file (core exports its index and `/Driver` only, so
 * declaration emit cannot name them: TS2742).
 */
export const anyError = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, unknown, R> => effect
