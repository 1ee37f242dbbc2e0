/**
 * Three @effect/cluster runners, one per process, over RDMA on a simulated network shared by the
 * processes (SimulatedNetwork), with cluster's SQL storage in one SQLite file: the shards are split
 * among them, counters are called from every runner and each runner's calls are served by all
 * three, and each process stops with nothing left alive.
 */
import { SimulatedNetwork } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { fileURLToPath } from "node:url"
import { startProcess } from "../../testing/test/fixtures/serverProcess.js"
import { address, Count, tempDatabase } from "./fixtures/counter.js"

const fixture = fileURLToPath(new URL("./fixtures/runner-process.ts", import.meta.url))
const ports = [7611, 7612, 7613]
const counters = 30
const decodeCounts = Schema.decodeUnknownSync(Schema.parseJson(Schema.Array(Count)))

describe("@effect/cluster over RDMA: one runner per process", () => {
  it.live(
    "three runners split the shards; counters called from each are served by all three; nothing left alive",
    () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        const filename = yield* tempDatabase
        const runners = yield* Effect.forEach(ports, (port) => startProcess(fixture, [path, String(port), filename]))
        yield* Effect.forEach(runners, (runner) => runner.line(/^serving$/), { concurrency: "unbounded" })
        for (const runner of runners) runner.send(`settle ${runners.length}`)
        yield* Effect.forEach(runners, (runner) => runner.line(/^settled/), { concurrency: "unbounded" })

        for (const [i, runner] of runners.entries()) {
          runner.send(`call 0 ${counters} ${2 ** i}`)
          const counts = decodeCounts((yield* runner.line(/^called (.*)$/))[1])
          // Amounts 1, 2, 4 in turn: each value is the sum of every call so far, none lost or repeated.
          assert.deepStrictEqual(counts.map((c) => c.value), counts.map(() => 2 ** (i + 1) - 1))
          assert.deepStrictEqual(
            [...new Set(counts.map((c) => c.runner))].sort(),
            ports.map((port) => `${address}:${port}`)
          )
        }

        for (const runner of runners) runner.signal("SIGTERM")
        for (const runner of runners) {
          assert.strictEqual((yield* runner.line(/^live (\d+)$/))[1], "0", "nothing left alive in a runner process")
          assert.strictEqual(yield* runner.exited, 0)
        }
      }).pipe(Effect.scoped),
    180_000
  )
})
