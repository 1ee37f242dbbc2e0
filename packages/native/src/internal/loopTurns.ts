/**
 * Fairness for the driver's synchronous paths. A completion that is already in the queue is
 * returned without a trip through the event loop (Soft-RoCE completes a loopback write inside the
 * post call), so a fiber posting and awaiting in a loop would otherwise never give the loop a
 * turn: every other wait of the process (another connection's ESTABLISHED, a request, a socket)
 * and every timer would stall until it stops, and a timeout armed before would then fire ahead of
 * the event that had long been ready.
 */
import * as Effect from "effect/Effect"

/** How long a run of synchronous answers may keep the event loop from its I/O phase, at least. */
export const LOOP_BUDGET_MS = 2

/**
 * The share of a run that its turn of the loop may cost. Where a turn itself is slow (an emulated
 * CPU: ~0.1 ms or more under qemu's TCG, against microseconds on hardware), a fixed 2 ms budget
 * would spend a tenth of the time turning the loop; the budget grows to keep turns to this share.
 */
export const TURN_SHARE = 0.05

/** The budget never grows beyond this, however slow turns are. */
export const MAX_LOOP_BUDGET_MS = 20

/** Turns per estimate of a turn's cost: the least of them, so that a turn that ran other work does not count. */
export const TURNS_PER_ESTIMATE = 8

/**
 * Calls of a run between two reads of the clock: a clock read costs about as much as a post, so
 * the run's start is noted at its CLOCK_EVERY-th call and its age checked every CLOCK_EVERY calls.
 * A run may so exceed the budget by CLOCK_EVERY calls (microseconds each on a host).
 */
export const CLOCK_EVERY = 16

/**
 * Watches for a run of synchronous answers that keeps the event loop from its I/O phase. A run is
 * the calls since the loop last turned: once it is CLOCK_EVERY calls long, its start is noted and
 * a setImmediate queued (it runs right after the I/O phase, so when it has run the loop has turned
 * and the run is over); once the run is older than the budget, a turn is due until then. The time
 * from "due" to that setImmediate is what a turn costs: the budget is LOOP_BUDGET_MS, or the
 * least turn of the last TURNS_PER_ESTIMATE over TURN_SHARE if that is longer (at most
 * MAX_LOOP_BUDGET_MS). Wall-clock time, not Effect's Clock: it measures how long the process's
 * event loop is really held, and a TestClock stands still through a synchronous run.
 */
export const makeLoopTurns = (now: () => number = () => performance.now()) => {
  let calls = 0
  let runStart = 0
  let overdue = false
  let overdueAt = 0
  let budget = LOOP_BUDGET_MS
  let turns = 0
  let leastTurn = Infinity
  const learn = (turnMs: number) => {
    leastTurn = Math.min(leastTurn, turnMs)
    if (++turns % TURNS_PER_ESTIMATE !== 0) return
    budget = Math.min(MAX_LOOP_BUDGET_MS, Math.max(LOOP_BUDGET_MS, leastTurn / TURN_SHARE))
    leastTurn = Infinity
  }
  const endRun = () => {
    if (overdue) learn(now() - overdueAt)
    calls = 0
    overdue = false
  }
  const yieldToLoop = Effect.async<void>((resume) => {
    const immediate = setImmediate(() => resume(Effect.void))
    return Effect.sync(() => clearImmediate(immediate))
  })
  /** Whether the event loop is due a turn before the caller goes on. */
  const due = (): boolean => {
    if (overdue) return true
    const n = ++calls
    if (n % CLOCK_EVERY !== 0) return false
    const at = now()
    if (n === CLOCK_EVERY) {
      runStart = at
      setImmediate(endRun)
      return false
    }
    if (at - runStart < budget) return false
    overdueAt = at
    return overdue = true
  }
  return {
    due,
    /** Nothing, or a turn of the event loop if it has not had one for too long. */
    fair: Effect.suspend(() => due() ? yieldToLoop : Effect.void),
    /** The budget in force, in milliseconds. */
    budget: (): number => budget
  }
}

export type LoopTurns = ReturnType<typeof makeLoopTurns>
