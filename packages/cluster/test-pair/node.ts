/**
 * One @effect/cluster runner in a process of its own, on the native driver, for the two-host suite
 * (packages/native/test-pair/cluster.ts starts one on each VM): serves Counter over RDMA on
 * `<address>:<port>`, its messages, runners and counters in the PostgreSQL database at
 * `<pg host>:<pg port>` (shared by both runners), with the addon at `<addon>`. Prints "serving",
 * then answers lines on its standard input:
 *
 * - `settle N`: waits until it holds its share of the shards among N runners, prints "settled N";
 * - `call FIRST COUNT AMOUNT [ROUNDS]`: adds AMOUNT to counters FIRST..FIRST+COUNT-1, ROUNDS times
 *   (default once), printing "round R" after each, then "called " and the last round's answers
 *   as JSON; "failed " and the cause if a call fails (no call is retried here).
 *
 * On SIGTERM it stops the runner, prints "live " and Driver.live as JSON, and exits 0 when nothing
 * is left alive, 1 otherwise.
 *
 *   node packages/cluster/test-pair/build/node.mjs <address> <port> <pg host> <pg port> <addon>
 */
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { ClusterSchema, Entity, RunnerAddress, ShardId, Sharding } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Cause, Deferred, Effect, Exit, Layer, Logger, LogLevel, Option, Queue, Schedule, Schema } from "effect"
import { createInterface } from "node:readline"
import * as NativeDriver from "../../native/src/NativeDriver.js"
import * as RpmaBinding from "../../native/src/RpmaBinding.js"
import { RdmaCluster } from "../src/index.js"

const [address, port, pgHost, pgPort, addon] = process.argv.slice(2) as [string, string, string, string, string]

const Count = Schema.Struct({ value: Schema.Number, runner: Schema.String })

const Counter = Entity.make("Counter", [
  Rpc.make("Increment", { payload: { amount: Schema.Number }, success: Count })
]).annotateRpcs(ClusterSchema.Persisted, true)

/** A counter's value is a row of the shared database, so it survives its shard moving. */
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const { entityId } = yield* Entity.CurrentAddress
  const runner = yield* Entity.CurrentRunnerAddress
  return {
    Increment: ({ payload }) =>
      sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO counters (id, value) VALUES (${entityId}, 0) ON CONFLICT (id) DO NOTHING`
        const [row] = yield* sql<{ value: number }>`
          UPDATE counters SET value = value + ${payload.amount} WHERE id = ${entityId} RETURNING value`
        return { value: Number(row!.value), runner: `${runner.host}:${runner.port}` }
      })).pipe(Effect.orDie)
  }
}))

const CountersTable = Layer.effectDiscard(Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => Effect.orDie(sql`CREATE TABLE IF NOT EXISTS counters (id TEXT PRIMARY KEY, value INTEGER NOT NULL)`)
))

const shardsPerGroup = 30

/**
 * Intervals for a runner under qemu's emulation (node 10-30x slower than on the host): a lock is
 * refreshed every 5 s and expires after 30 s (a refresh that overruns its interval makes cluster
 * force-release every shard the runner holds: at 2 s it did under emulation); assignments are
 * re-read and stored messages polled every second.
 */
const Runner = CounterLive.pipe(
  Layer.provideMerge(RdmaCluster.layer({
    shardingConfig: {
      runnerAddress: Option.some(RunnerAddress.make(address, Number(port))),
      shardsPerGroup,
      refreshAssignmentsInterval: "1 second",
      entityMessagePollInterval: "1 second",
      shardLockRefreshInterval: "5 seconds",
      shardLockExpiration: "30 seconds",
      runnerHealthCheckInterval: "5 seconds"
    }
  })),
  Layer.provide(CountersTable),
  Layer.provide(PgClient.layer({
    host: pgHost,
    port: Number(pgPort),
    username: "postgres",
    database: "postgres",
    connectTimeout: "30 seconds"
  }))
)

const heldShards = Effect.map(Sharding.Sharding, (sharding) => {
  let held = 0
  for (let id = 1; id <= shardsPerGroup; id++) if (sharding.hasShardId(ShardId.make("default", id))) held++
  return held
})

const say = (line: string) => Effect.sync(() => console.log(line))

const serving = Effect.gen(function*() {
  const terminated = yield* Deferred.make<void>()
  process.once("SIGTERM", () => Deferred.unsafeDone(terminated, Effect.void))
  const commands = yield* Queue.unbounded<string>()
  createInterface({ input: process.stdin }).on("line", (line) => Queue.unsafeOffer(commands, line))
  yield* Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(Runner)
    const counters = yield* Effect.provide(Counter.client, context)
    const answer = (line: string): Effect.Effect<void> => {
      const [command, ...args] = line.split(" ")
      if (command === "settle") {
        const runners = Number(args[0])
        return heldShards.pipe(
          Effect.repeat({
            schedule: Schedule.spaced("200 millis"),
            until: (held) => held === shardsPerGroup / runners
          }),
          Effect.provide(context),
          Effect.andThen(say(`settled ${runners}`))
        )
      }
      const [first, count, amount, rounds = 1] = args.map(Number) as [number, number, number, number?]
      const round = (r: number) =>
        Effect.forEach(
          Array.from({ length: count }, (_, i) => first + i),
          (i) => counters(`counter-${i}`).Increment({ amount }),
          { concurrency: 8 }
        ).pipe(Effect.tap(say(`round ${r}`)))
      return Effect.reduce(
        Array.from({ length: rounds }, (_, r) => r + 1),
        [] as ReadonlyArray<unknown>,
        (_, r) => round(r)
      ).pipe(
        Effect.matchCauseEffect({
          onSuccess: (counts) => say(`called ${JSON.stringify(counts)}`),
          onFailure: (cause) => say(`failed ${Cause.pretty(cause).split("\n").slice(0, 4).join(" | ")}`)
        })
      )
    }
    yield* Queue.take(commands).pipe(
      Effect.flatMap((line) => Effect.fork(answer(line))),
      Effect.forever,
      Effect.forkScoped
    )
    yield* say("serving")
    yield* Deferred.await(terminated)
  }))
})

const program = Effect.gen(function*() {
  const exit = yield* Effect.exit(serving)
  if (Exit.isFailure(exit)) yield* say(`failed ${Cause.pretty(exit.cause).split("\n").slice(0, 6).join(" | ")}`)
  const live = yield* Effect.flatMap(RdmaDriver, (d) => d.live)
  yield* say(`live ${JSON.stringify(live)}`)
  return Exit.isSuccess(exit) && Object.values(live).every((n) => n === 0)
}).pipe(
  Effect.provide(NativeDriver.layerWithBinding),
  Effect.provide(RpmaBinding.layerFromPath(addon)),
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning))
)

Effect.runPromise(program).then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.log(`failed ${String(error)}`)
    process.exit(1)
  }
)
