/**
 * An @effect/cluster entity call across two runners over RDMA (`RdmaCluster.layer`) against the
 * same call across two runners of cluster's socket runner over TCP (`NodeClusterSocket.layer` on
 * the loopback), in the same process and the same rounds (issue 33): round-trip latency (one call
 * at a time) and throughput (CONCURRENCY calls in flight). Each pair is a cluster of its own, its
 * runners and shard locks in a SQLite file of its own (@effect/sql-sqlite-node in a temporary
 * directory, as the cluster tests use). Every call is made on runner A to a counter entity whose
 * shard runner B holds, so each crosses the transport: A's sharding sends it to B's server, B's
 * entity answers, the reply comes back. The entity's messages are not persisted (a persisted one
 * is stored before it is sent, and the round trip would time SQLite, not the wire). Both use
 * msgpack. Rounds alternate between the two (median of ROUNDS), after a warm-up of each.
 *
 * In the Soft-RoCE VM (bench/device.sh) with RDMA_ADDRESS set: the native driver on rxe0. Without
 * it: the simulated driver, for a quick look on the host (not a device figure).
 *
 * Floors, in the same run: C's bare 64 B ping-pong over each transport (bench/floors.ts, as
 * bench/rpc.ts prints them; CLUSTER_FLOORS=0 skips them). A call's message is a little larger
 * than 64 B (cluster's envelope: the entity's address, request id, headers).
 *
 *   CLUSTER_SCALE=0.1 scales the call count
 */
import { RdmaCluster } from "@effect-rdma/cluster"
import type { RdmaDriver } from "@effect-rdma/core/Driver"
import { NativeDriver } from "@effect-rdma/native"
import { SimulatedDriver } from "@effect-rdma/testing"
import { Entity, EntityId, RunnerAddress, ShardId, Sharding } from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { Rpc } from "@effect/rpc"
import { SqliteClient } from "@effect/sql-sqlite-node"
import { Context, Effect, Layer, Option, Schedule, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { cFloors, type Figures, floorRows } from "./floors.js"
import { printTable, type Row } from "./table.js"

const device = process.env.RDMA_ADDRESS
const address = device ?? SimulatedDriver.DEFAULT_ADDRESS
const scale = Number(process.env.CLUSTER_SCALE ?? "1")
const ROUNDS = 5
const CONCURRENCY = 16
const calls = Math.max(20, Math.round(1000 * scale))
// RDMA runners 100 apart: each isolates its clients on the 64 ports after its own.
const rdmaPorts = [7500, 7600] as const
const tcpPorts = [7700, 7701] as const
const shardsPerGroup = 16

const Counter = Entity.make("Counter", [
  Rpc.make("Increment", {
    payload: { amount: Schema.Number },
    success: Schema.Struct({ value: Schema.Number, runner: Schema.String })
  })
])

/** A counter in the entity's memory; the answer names the runner that holds it. */
const CounterLive = Counter.toLayer(Effect.gen(function*() {
  const runner = yield* Entity.CurrentRunnerAddress
  const servedBy = `${runner.host}:${runner.port}`
  let value = 0
  return {
    Increment: ({ payload }) => Effect.sync(() => ({ value: value += payload.amount, runner: servedBy }))
  }
}))

const shardingConfig = (host: string, port: number) => ({
  runnerAddress: Option.some(RunnerAddress.make(host, port)),
  shardsPerGroup,
  refreshAssignmentsInterval: "500 millis" as const
})

const rdmaRunner = (port: number, filename: string) =>
  CounterLive.pipe(
    Layer.provideMerge(RdmaCluster.layer({ shardingConfig: shardingConfig(address, port) })),
    Layer.provide(SqliteClient.layer({ filename }))
  )
const tcpRunner = (port: number, filename: string) =>
  CounterLive.pipe(
    Layer.provideMerge(NodeClusterSocket.layer({ shardingConfig: shardingConfig("127.0.0.1", port) })),
    Layer.provide(SqliteClient.layer({ filename }))
  )

type Runner = Layer.Layer<Sharding.Sharding, unknown, RdmaDriver>

/** How many of the group's shards a runner holds now. */
const heldShards = (sharding: Sharding.Sharding["Type"]) => {
  let held = 0
  for (let id = 1; id <= shardsPerGroup; id++) if (sharding.hasShardId(ShardId.make("default", id))) held++
  return held
}

/**
 * Builds runners A and B of one cluster, waits (bounded) until each holds half the shards, and
 * answers a call from A to a counter on B.
 */
const pair = (
  name: string,
  runners: readonly [Runner, Runner]
) =>
  Effect.gen(function*() {
    const [a, b] = yield* Effect.forEach(runners, (runner) => Layer.build(runner))
    const [shardingA, shardingB] = [Context.get(a!, Sharding.Sharding), Context.get(b!, Sharding.Sharding)]
    yield* Effect.sync(() => [heldShards(shardingA), heldShards(shardingB)]).pipe(
      Effect.repeat({
        schedule: Schedule.spaced("200 millis"),
        until: ([heldA, heldB]) => heldA === shardsPerGroup / 2 && heldB === shardsPerGroup / 2
      }),
      Effect.timeoutFail({
        duration: "180 seconds",
        onTimeout: () => new Error(`${name}: the shards were not split between the two runners within 180 s`)
      })
    )
    let n = 0
    while (shardingA.hasShardId(shardingA.getShardId(EntityId.make(`counter-${n}`), "default"))) n++
    if (!shardingB.hasShardId(shardingB.getShardId(EntityId.make(`counter-${n}`), "default"))) {
      return yield* Effect.fail(new Error(`${name}: neither runner holds counter-${n}'s shard`))
    }
    const counter = (yield* Effect.provide(Counter.client, a!))(`counter-${n}`)
    const call = counter.Increment({ amount: 1 })
    const first = yield* call.pipe(Effect.timeout("60 seconds"))
    process.stderr.write(`cluster ${name}: counter-${n} served by ${first.runner}\n`)
    return { call, servedBy: first.runner }
  })

/** µs per call, one at a time; calls per second, CONCURRENCY at a time. */
const measure = (call: Effect.Effect<unknown, unknown>) =>
  Effect.gen(function*() {
    let t0 = performance.now()
    for (let i = 0; i < calls; i++) yield* call
    const latencyUs = ((performance.now() - t0) * 1000) / calls
    t0 = performance.now()
    yield* Effect.forEach(Array.from({ length: calls }), () => call, { concurrency: CONCURRENCY, discard: true })
    const callsPerSecond = calls / ((performance.now() - t0) / 1000)
    return { latencyUs, callsPerSecond }
  })

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((x, y) => x - y)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

const program = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "cluster-bench-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  const rdmaDb = nodePath.join(dir, "rdma.db")
  const tcpDb = nodePath.join(dir, "tcp.db")
  const sides = [
    ["rdma", yield* pair("rdma", [rdmaRunner(rdmaPorts[0], rdmaDb), rdmaRunner(rdmaPorts[1], rdmaDb)])],
    ["tcp", yield* pair("tcp", [tcpRunner(tcpPorts[0], tcpDb), tcpRunner(tcpPorts[1], tcpDb)])]
  ] as const
  for (const [name, side] of sides) {
    const expected = name === "rdma" ? `${address}:${rdmaPorts[1]}` : `127.0.0.1:${tcpPorts[1]}`
    if (side.servedBy !== expected) {
      return yield* Effect.fail(new Error(`${name}: the counter was served by ${side.servedBy}, not ${expected}`))
    }
  }
  const floors = process.env.CLUSTER_FLOORS === "0" ? {} : cFloors("cluster", device, [[64, calls]])
  // Warm-up: the JIT (slow under TCG), both clusters' connections and entities.
  for (const [, side] of sides) yield* measure(side.call)
  const rounds = { rdma: [] as Array<Figures>, tcp: [] as Array<Figures> }
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, side] of sides) rounds[name].push(yield* measure(side.call))
    process.stderr.write(`cluster: round ${round + 1}/${ROUNDS}\n`)
  }
  const [rdma, tcp] = [rounds.rdma, rounds.tcp].map((figures): Figures => ({
    latencyUs: median(figures.map((f) => f.latencyUs)),
    callsPerSecond: median(figures.map((f) => f.callsPerSecond))
  })) as [Figures, Figures]
  const rows: Array<Row> = [
    {
      what: "Entity call round trip, runner A to B (µs per call, one at a time)",
      ours: `${rdma.latencyUs.toFixed(1)} µs`,
      baseline: `${tcp.latencyUs.toFixed(1)} µs (socket runner, TCP)`,
      ratio: rdma.latencyUs / tcp.latencyUs,
      target: "≤ 1× (report)",
      met: rdma.latencyUs <= tcp.latencyUs
    },
    {
      what: `Entity call throughput, runner A to B (${CONCURRENCY} in flight)`,
      ours: `${Math.round(rdma.callsPerSecond)} calls/s`,
      baseline: `${Math.round(tcp.callsPerSecond)} calls/s (socket runner, TCP)`,
      ratio: tcp.callsPerSecond / rdma.callsPerSecond,
      target: "≤ 1× (report)",
      met: rdma.callsPerSecond >= tcp.callsPerSecond
    },
    ...floorRows({ what: "entity call", label: "64 B", concurrency: CONCURRENCY, floors, bytes: 64, rdma, tcp })
  ]
  console.log(
    `\n@effect/cluster entity calls over RdmaCluster against NodeClusterSocket (${
      device === undefined ? "simulated driver" : `native driver, ${device}`
    }, msgpack, ${calls} calls a round, median of ${ROUNDS} rounds)\n`
  )
  printTable(rows)
})

const DriverLive = device === undefined ? SimulatedDriver.layer : NativeDriver.layer
Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(DriverLive))).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
