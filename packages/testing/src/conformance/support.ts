/**
 * What the conformance modules share: a case, and a check that fails it with a message.
 *
 * @internal
 */
import type { Driver } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

/** @internal `port` is free for this case alone, for an endpoint to listen on. */
export interface CaseOf {
  readonly name: string
  readonly run: (address: string, port: number) => Effect.Effect<void, unknown, Driver.RdmaDriver | Scope.Scope>
}

class ConformanceFailure extends Error {}

/** @internal */
export const check = (condition: boolean, message: string): Effect.Effect<void> =>
  condition ? Effect.void : Effect.die(new ConformanceFailure(message))
