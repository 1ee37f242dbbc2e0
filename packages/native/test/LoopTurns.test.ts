import { describe, expect, it } from "@effect/vitest"
import {
  CLOCK_EVERY,
  LOOP_BUDGET_MS,
  makeLoopTurns,
  MAX_LOOP_BUDGET_MS,
  TURN_SHARE,
  TURNS_PER_ESTIMATE
} from "../src/internal/loopTurns.js"

/** A clock the test moves: each synchronous answer takes `perCallMs`, each turn of the loop `turnMs`. */
const harness = (perCallMs: number) => {
  let clock = 0
  const loop = makeLoopTurns(() => clock)
  /** Calls until a turn is due, then the turn (taking `turnMs`): the run's length in ms. */
  const run = async (turnMs: number): Promise<number> => {
    const start = clock
    let calls = 0
    while (!loop.due()) {
      clock += perCallMs
      if (++calls > 1_000_000) throw new Error("no turn was ever due")
    }
    const length = clock - start
    clock += turnMs
    // The caller yields to the loop; the driver's setImmediate (queued earlier) ends the run.
    await new Promise<void>((resolve) => setImmediate(resolve))
    return length
  }
  return { loop, run }
}

describe("the driver's loop turns", () => {
  it("quick turns: a run of synchronous answers gets a turn after the 2 ms budget", async () => {
    const { loop, run } = harness(0.01)
    for (let i = 0; i < 3 * TURNS_PER_ESTIMATE; i++) {
      const length = await run(0.001)
      expect(length).toBeGreaterThanOrEqual(LOOP_BUDGET_MS)
      // At most CLOCK_EVERY calls past the budget, after the CLOCK_EVERY calls before the run's start is noted.
      expect(length).toBeLessThanOrEqual(LOOP_BUDGET_MS + 2 * CLOCK_EVERY * 0.01 + 1e-9)
    }
    expect(loop.budget()).toBe(LOOP_BUDGET_MS)
  })

  it("slow turns (an emulated CPU): the budget grows so that turns stay a twentieth of the time, up to its cap", async () => {
    const { loop, run } = harness(0.01)
    for (let i = 0; i < TURNS_PER_ESTIMATE; i++) await run(0.5)
    expect(loop.budget()).toBeCloseTo(0.5 / TURN_SHARE, 6)
    // The next window of turns: each run now lasts the grown budget.
    for (let i = 0; i < TURNS_PER_ESTIMATE; i++) expect(await run(0.5)).toBeGreaterThanOrEqual(0.5 / TURN_SHARE)
    for (let i = 0; i < TURNS_PER_ESTIMATE; i++) await run(5)
    expect(loop.budget()).toBe(MAX_LOOP_BUDGET_MS)
    // Turns quick again: back to the floor at the next estimate.
    for (let i = 0; i < TURNS_PER_ESTIMATE; i++) await run(0.001)
    expect(loop.budget()).toBe(LOOP_BUDGET_MS)
  })

  it("a turn that ran other work (one slow turn among quick ones) does not stretch the budget", async () => {
    const { loop, run } = harness(0.01)
    for (let i = 0; i < TURNS_PER_ESTIMATE; i++) await run(i === 3 ? 50 : 0.001)
    expect(loop.budget()).toBe(LOOP_BUDGET_MS)
  })
})
