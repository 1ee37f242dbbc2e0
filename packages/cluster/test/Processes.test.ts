/**
 * Three @effect/cluster runners, one per process, over RDMA on a simulated network shared by the
 * processes (SimulatedNetwork), with cluster's SQL storage in one SQLite file: the shards are split
 * among them, counters are called from every runner and each runner's calls are served by all
 * three, and each process stops with nothing left alive. Then a runner SIGKILLed while the other
 * two call: its shards are taken over, every call is answered, no increment is lost.
 */
import { SimulatedNetwork } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { fileURLToPath } from "node:url"
import { type ServerProcess, startProcess } from "../../testing/test/fixtures/serverProcess.js"
import { address, Count, tempDatabase } from "./fixtures/counter.js"

const fixture = fileURLToPath(new URL("./fixtures/runner-process.ts", import.meta.url))
// 100 apart: a runner isolates its clients on the 64 ports after its own (Listener.serve's default).
const ports = [7611, 7711, 7811]
const counters = 30
/** Bounds on a hang, scaled as vitest's own timeouts are (vitest.shared.ts sets TEST_SLOWDOWN). */
const slowdown = Math.max(1, Number(process.env.TEST_SLOWDOWN ?? 1) || 1)
const rounds = 10
const decodeCounts = Schema.decodeUnknownSync(Schema.parseJson(Schema.Array(Count)))

/** Three runner processes on a new network and database, each holding its third of the shards. */
const startRunners = Effect.gen(function*() {
  const path = yield* SimulatedNetwork.serve()
  const filename = yield* tempDatabase
  const runners = yield* Effect.forEach(ports, (port) => startProcess(fixture, [path, String(port), filename]))
  yield* Effect.forEach(runners, (runner) => runner.line(/^serving$/), { concurrency: "unbounded" })
  yield* settle(runners)
  return runners
})

const settle = (runners: ReadonlyArray<ServerProcess>) => {
  for (const runner of runners) runner.send(`settle ${runners.length}`)
  return Effect.forEach(runners, (runner) => runner.line(/^settled/), { concurrency: "unbounded", discard: true })
}

/** Stops each runner with SIGTERM: each must leave nothing alive and exit 0. */
const stop = (runners: ReadonlyArray<ServerProcess>) =>
  Effect.gen(function*() {
    for (const runner of runners) runner.signal("SIGTERM")
    for (const runner of runners) {
      const live = (yield* runner.line(/^live (\d+)$/))[1]
      assert.strictEqual(live, "0", `nothing left alive in a runner process; its stderr: ${runner.stderr()}`)
      assert.strictEqual(yield* runner.exited, 0)
    }
  })

describe("@effect/cluster over RDMA: one runner per process", () => {
  it.live(
    "three runners split the shards; counters called from each are served by all three; nothing left alive",
    () =>
      Effect.gen(function*() {
        const runners = yield* startRunners

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

        yield* stop(runners)
      }).pipe(Effect.scoped),
    180_000 * slowdown
  )

  it.live(
    "a runner SIGKILLed mid-traffic: its shards are taken over, every call answered, no increment lost",
    () =>
      Effect.gen(function*() {
        const [a, b, killed] = (yield* startRunners) as [ServerProcess, ServerProcess, ServerProcess]
        a.send(`call 0 ${counters} 1 ${rounds}`)
        b.send(`call 0 ${counters} 2 ${rounds}`)
        yield* a.line(/^round 2$/)
        killed.kill()
        assert.strictEqual(yield* killed.exited, "SIGKILL")
        // Every call of both is answered, the last rounds by the two left.
        for (const runner of [a, b]) {
          const counts = decodeCounts((yield* runner.line(/^called (.*)$/))[1])
          assert.strictEqual(counts.length, counters)
        }
        yield* settle([a, b])
        a.send(`call 0 ${counters} 0`)
        const counts = decodeCounts((yield* a.line(/^called (.*)$/))[1])
        assert.deepStrictEqual(
          [...new Set(counts.map((c) => c.runner))].sort(),
          ports.slice(0, 2).map((port) => `${address}:${port}`)
        )
        // At least once: none lost; a persisted increment in flight at the kill may count twice.
        const sent = rounds * (1 + 2)
        for (const c of counts) assert.isAtLeast(c.value, sent)
        yield* stop([a, b])
      }).pipe(Effect.scoped),
    240_000 * slowdown
  )
})
