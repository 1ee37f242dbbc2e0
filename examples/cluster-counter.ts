/**
 * A sharded counter service on @effect/cluster, its runners talking to each other over RDMA
 * (`RdmaCluster.layer` from @effect-rdma/cluster), its messages, runners and counters in SQL.
 *
 * Each counter is an entity: cluster places it on the runner that owns its shard, and a call made
 * on any runner is sent to that one (over RDMA when it is another runner). `Increment` is
 * persisted: cluster stores the message before sending it and delivers it at least once, even if
 * the owning runner dies and another takes its shard. The counter's value lives in the database,
 * not in the entity's memory, so it survives its shard moving; an increment delivered twice would
 * count twice (at least once, not exactly once: make a real handler idempotent, e.g. by message id).
 *
 * The program runs two runners in one process on the simulated driver, with SQLite in a temporary
 * file (one process owns it: for runners on several hosts, share a PostgreSQL database instead):
 * each runner increments the same counters, and it prints who served each call, and the totals.
 * It checks that every counter holds the sum of the increments, that both runners served calls and
 * some crossed from one runner to the other, and that nothing is left alive (the simulated driver's ledger); it exits 1 otherwise.
 *
 *   node --import tsx examples/cluster-counter.ts
 */
import { RdmaCluster } from "@effect-rdma/cluster"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { ClusterSchema, Entity, RunnerAddress } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { SqlClient } from "@effect/sql"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Context, Effect, Layer, Option, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const Counter = Entity.make("Counter", [
  Rpc.make("Increment", {
    payload: { amount: Schema.Number },
    success: Schema.Struct({ value: Schema.Number, servedBy: Schema.String })
  })
]).annotateRpcs(ClusterSchema.Persisted, true)

/** The handlers, on whichever runner holds the counter: the value is a row, updated in one statement. */
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const { entityId } = yield* Entity.CurrentAddress
  const runner = yield* Entity.CurrentRunnerAddress
  return {
    Increment: ({ payload: { amount } }) =>
      sql<{ value: number }>`
        INSERT INTO counters (id, value) VALUES (${entityId}, ${amount})
        ON CONFLICT (id) DO UPDATE SET value = value + ${amount} RETURNING value`.pipe(
        Effect.map(([row]) => ({ value: row!.value, servedBy: `${runner.host}:${runner.port}` })),
        Effect.orDie
      )
  }
}))

const address = SimulatedDriver.DEFAULT_ADDRESS
// 100 apart: each runner isolates its clients on the 64 ports after its own.
const ports = [7700, 7800]
const counters = ["apples", "pears", "plums", "figs", "limes", "kiwis", "dates", "grapes"]

/** One runner: Counter's handlers on cluster's runner over RDMA, with the runner's own SQLite client. */
const runner = (port: number, filename: string) =>
  CounterLive.pipe(
    Layer.provideMerge(RdmaCluster.layer({
      shardingConfig: {
        runnerAddress: Option.some(RunnerAddress.make(address, port)),
        shardsPerGroup: 16,
        refreshAssignmentsInterval: "200 millis",
        entityMessagePollInterval: "500 millis"
      }
    })),
    Layer.provideMerge(SqliteClient.layer({ filename }))
  )

const program = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "cluster-counter-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  const filename = path.join(dir, "counter.db")
  const sql = Context.get(yield* Layer.build(SqliteClient.layer({ filename })), SqlClient.SqlClient)
  yield* sql`CREATE TABLE IF NOT EXISTS counters (id TEXT PRIMARY KEY, value INTEGER NOT NULL)`

  const runners = yield* Effect.forEach(ports, (port) => Layer.build(runner(port, filename)))
  const served = new Set<string>()
  let crossed = 0
  for (const [i, context] of runners.entries()) {
    const counter = yield* Effect.provide(Counter.client, context)
    const answers = yield* Effect.forEach(counters, (id) => counter(id).Increment({ amount: i + 1 }), {
      concurrency: "unbounded"
    }).pipe(Effect.timeout("60 seconds"))
    for (const [j, { servedBy, value }] of answers.entries()) {
      served.add(servedBy)
      if (servedBy !== `${address}:${ports[i]}`) crossed++
      console.log(`runner ${ports[i]}: ${counters[j]} += ${i + 1} -> ${value} (served by ${servedBy})`)
    }
  }
  const rows = yield* sql<{ id: string; value: number }>`SELECT id, value FROM counters ORDER BY id`
  const expected = ports.reduce((sum, _, i) => sum + i + 1, 0)
  const wrong = rows.filter((row) => row.value !== expected)
  console.log(`${rows.length} counters, each at ${expected}: ${wrong.length === 0 ? "yes" : "no"}`)
  console.log(
    `served by ${served.size} of ${ports.length} runners; ${crossed} calls crossed to another runner over RDMA`
  )
  return wrong.length === 0 && rows.length === counters.length && served.size === ports.length && crossed > 0
})

Effect.runPromise(
  program.pipe(
    Effect.scoped,
    Ledger.checked,
    Effect.tap(() => Effect.sync(() => console.log("nothing left alive (the simulated driver's ledger)"))),
    Effect.provide(SimulatedDriver.layer)
  )
).then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.error(`cluster-counter failed: ${error}`)
    process.exit(1)
  }
)
