/**
 * Two @effect/cluster runners in one process over RDMA on the simulated driver, with cluster's SQL
 * message and runner storage in a SQLite file: every counter is reachable from both runners, the
 * shards are split between them (so calls cross from one to the other over RDMA), and nothing is
 * left alive once they stop.
 */
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { address, Counter, runner, settled, tempDatabase } from "./fixtures/counter.js"

const ids = Array.from({ length: 24 }, (_, i) => `counter-${i}`)

describe("@effect/cluster over RDMA: two runners in one process", () => {
  it.live(
    "entities are called from both runners, shards split between them, nothing left alive",
    () =>
      Effect.gen(function*() {
        const filename = yield* tempDatabase
        yield* Effect.gen(function*() {
          const runners = [yield* Layer.build(runner(7601, filename)), yield* Layer.build(runner(7701, filename))]
          for (const context of runners) yield* Effect.provide(settled(runners.length), context)
          for (const [i, context] of runners.entries()) {
            const counters = yield* Effect.provide(Counter.client, context)
            const counts = yield* Effect.forEach(ids, (id) => counters(id).Increment({ amount: i + 1 }), {
              concurrency: 8
            }).pipe(Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error("no answer in 60 s") }))
            // The first runner added 1 to each counter, the second 2: each value shows both calls arrived.
            assert.deepStrictEqual(counts.map((c) => c.value), ids.map(() => i === 0 ? 1 : 3))
            // Each runner's calls were served by both: half of them crossed to the other over RDMA.
            assert.deepStrictEqual([...new Set(counts.map((c) => c.runner))].sort(), [
              `${address}:7601`,
              `${address}:7701`
            ])
          }
        }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer))
      }).pipe(Effect.scoped),
    120_000
  )
})
