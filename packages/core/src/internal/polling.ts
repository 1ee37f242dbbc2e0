/**
 * A queue's polling state (Polling.ts): the budget of its next spin, adapted to what spins find.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as DriverArguments from "../DriverArguments.js"
import * as Polling from "../Polling.js"

export interface Spinner {
  /** The next spin's budget, in nanoseconds; 0: wait without spinning. */
  budgetNs: number
  readonly maxNs: number
  readonly adaptive: boolean
}

/** Below this an adaptive budget is 0: a spin shorter than a poll's own cost finds nothing. */
const MIN_NS = 1_000

const budgetOf = (polling: Exclude<Polling.Polling, "off">): number | undefined => {
  try {
    const nanos = Duration.toNanos(polling === "adaptive" ? Polling.ADAPTIVE_BUDGET : polling.budget)
    return nanos._tag === "Some" ? Number(nanos.value) : undefined
  } catch {
    return undefined
  }
}

/** What is wrong with a polling setting, or undefined. Never throws, whatever the value. */
export const problem = (polling: unknown): string | undefined => {
  try {
    if (polling === "off" || polling === "adaptive") return undefined
    if (typeof polling !== "object" || polling === null || !("budget" in polling)) {
      return `polling must be "off", "adaptive" or { budget, adaptive? }, not ${DriverArguments.show(polling)}`
    }
    const adaptive = (polling as { adaptive?: unknown }).adaptive
    if (adaptive !== undefined && typeof adaptive !== "boolean") return "polling's adaptive must be a boolean"
    const ns = budgetOf(polling as Exclude<Polling.Polling, "off">)
    return ns === undefined || DriverArguments.spinBudget(Math.round(ns)) !== undefined || ns <= 0
      ? "polling's budget must be a duration above 0 and at most 10 millis"
      : undefined
  } catch {
    return "polling must be \"off\", \"adaptive\" or { budget, adaptive? }"
  }
}

/** The spinner of a valid setting ({@link problem} said nothing), or undefined for "off". */
export const spinner = (polling: Polling.Polling): Spinner | undefined => {
  if (polling === "off") return undefined
  const maxNs = Math.round(budgetOf(polling)!)
  return { budgetNs: maxNs, maxNs, adaptive: polling === "adaptive" || polling.adaptive === true }
}

/**
 * The channel answered `waitedNs` after it was armed: a spin that long would have caught the
 * completion without the channel and the loop. An adaptive budget becomes half as long again as
 * that wait when it is within the configured budget, and halves when it is not (a peer slower
 * than any allowed spin: spinning would only burn CPU).
 */
export const waited = (s: Spinner, waitedNs: number): void => {
  if (!s.adaptive) return
  if (waitedNs <= s.maxNs) s.budgetNs = Math.min(s.maxNs, Math.max(MIN_NS, Math.round(waitedNs * 1.5)))
  else missed(s)
}

/** A spin found a completion: an adaptive budget doubles back. */
export const found = (s: Spinner): void => {
  if (s.adaptive) s.budgetNs = Math.min(s.maxNs, Math.max(MIN_NS, s.budgetNs * 2))
}

/** A spin ran its budget out: an adaptive budget halves, to 0 below MIN_NS. */
export const missed = (s: Spinner): void => {
  if (!s.adaptive) return
  const half = Math.floor(s.budgetNs / 2)
  s.budgetNs = half < MIN_NS ? 0 : half
}

/**
 * The setting in force (`given`, or the default of Polling.current), checked: `use`d, or refused
 * with `refuse(detail)` before anything opens.
 */
export const resolve = <A, E, R, E2>(
  given: Polling.Polling | undefined,
  refuse: (detail: string) => E2,
  use: (setting: Polling.Polling) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | E2, R> =>
  Effect.flatMap(FiberRef.get(Polling.current), (fallback): Effect.Effect<A, E | E2, R> => {
    const setting = given ?? fallback
    const refused = problem(setting)
    return refused !== undefined ? Effect.fail(refuse(refused)) : use(setting)
  })
