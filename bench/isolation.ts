/**
 * What isolating clients costs (issue 34): Listener.serve's default (a rendezvous, then a listener
 * and a Peer, so a protection domain, per client) against `isolation: "shared"` (every client
 * accepted on the listener's peer), on the same listener code in the same process, rounds
 * alternating between the two. Accept time: a client's Connection.connect, one client at a time,
 * from the request to the established connection it uses (isolated: two connections, the first
 * closed). Memory per client, with HELD clients connected at once (each server handler holding a
 * 4 KiB region of its Peer, as a server gives a client something), less before, over HELD: the
 * process's RSS; native memory in use from malloc (the addon, librpma, libibverbs: what a Peer and
 * a connection cost in user space, without the V8 heap's noise); and, on the device, the kernel's
 * unreclaimable slab (/proc/meminfo SUnreclaim: the protection domain, queue pair and completion
 * queue objects the verbs driver allocates). Client and server are both in this process (and this
 * kernel), so each figure holds both sides.
 *
 * In the Soft-RoCE VM (bench/device.sh) with RDMA_ADDRESS set: the native driver on rxe0. Without
 * it: the simulated driver, for a quick look on the host (not a device figure).
 *
 *   ISOLATION_SCALE=0.5 scales the client counts
 */
import { Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { SimulatedDriver } from "@effect-rdma/testing"
import { Effect, Exit, Schedule, Scope } from "effect"
import { readFileSync } from "node:fs"
import { printTable, type Row } from "./table.js"

const device = process.env.RDMA_ADDRESS
const address = device ?? SimulatedDriver.DEFAULT_ADDRESS
const scale = Number(process.env.ISOLATION_SCALE ?? "1")
const ROUNDS = 3
const CONNECTS = Math.max(5, Math.round(20 * scale))
const HELD = Math.max(4, Math.round(64 * scale))
const modes = ["shared", "perClient"] as const
type Mode = typeof modes[number]
const portOf: Record<Mode, number> = { shared: 7700, perClient: 7800 }

/** The server's handler: a 4 KiB region of the client's Peer, held until the client leaves. */
const hold = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    yield* LocalMr.allocate(yield* Peer.Peer, 4096, Usage.WRITE_DST)
    yield* Connection.awaitClosed(conn)
  }).pipe(Effect.catchAll(() => Effect.void))

const gc = () => (globalThis as { gc?: () => void }).gc?.()

/** Bytes in use from malloc (the addon's mallinfo2), or NaN where it cannot tell (the simulated driver). */
const mallocInUse: () => number = device === undefined
  ? () => Number.NaN
  : ((binding) => () => binding.mallocInUse() ?? Number.NaN)(Effect.runSync(RpmaBinding.load()))

/** The kernel's unreclaimable slab in bytes (SUnreclaim of /proc/meminfo), or NaN off the device. */
const kernelSlab = (): number => {
  if (device === undefined) return Number.NaN
  const line = /^SUnreclaim:\s+(\d+) kB$/m.exec(readFileSync("/proc/meminfo", "utf8"))
  return line === null ? Number.NaN : Number(line[1]) * 1024
}

interface Memory {
  readonly rss: number
  readonly malloc: number
  readonly slab: number
}

const memoryNow = (): Memory => {
  gc()
  return { rss: process.memoryUsage().rss, malloc: mallocInUse(), slab: kernelSlab() }
}

/** Waits (bounded) until the driver holds `n` connections: the server's side of a closed client is gone. */
const settle = (n: number) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    d.live.pipe(
      Effect.repeat({ until: (live) => live.connections <= n, schedule: Schedule.spaced("10 millis") }),
      Effect.timeout("60 seconds"),
      Effect.ignore
    ))

/** One round of `mode`: ms per connect (CONNECTS, one at a time), then bytes per held client. */
const round = (mode: Mode, client: Peer.Peer) =>
  Effect.scoped(Effect.gen(function*() {
    const listener = yield* Listener.make(yield* Peer.make(address), address, portOf[mode])
    yield* Effect.forkScoped(Listener.serve(listener, hold, { isolation: mode }))
    const options = { timeout: "30 seconds" } as const
    let t0 = performance.now()
    for (let i = 0; i < CONNECTS; i++) {
      yield* Effect.scoped(Connection.connect(client, address, listener.port, options))
    }
    const connectMs = (performance.now() - t0) / CONNECTS
    yield* settle(0)
    const before = memoryNow()
    const held = yield* Scope.make()
    t0 = performance.now()
    for (let i = 0; i < HELD; i++) {
      yield* Scope.extend(Connection.connect(client, address, listener.port, options), held)
    }
    const after = memoryNow()
    const perClient: Memory = {
      rss: (after.rss - before.rss) / HELD,
      malloc: (after.malloc - before.malloc) / HELD,
      slab: (after.slab - before.slab) / HELD
    }
    const peers = (yield* Effect.flatMap(Driver.RdmaDriver, (d) => d.live)).peers
    yield* Scope.close(held, Exit.void)
    yield* settle(0)
    return { connectMs, perClient, peers }
  }))

const program = Effect.gen(function*() {
  const client = yield* Peer.make(address)
  // Warm-up: the JIT (slow under TCG) and the device's first connections.
  for (const mode of modes) yield* round(mode, client)
  const zero: Memory = { rss: 0, malloc: 0, slab: 0 }
  const best: Record<Mode, { connectMs: number; perClient: Memory; peers: number }> = {
    shared: { connectMs: Infinity, perClient: zero, peers: 0 },
    perClient: { connectMs: Infinity, perClient: zero, peers: 0 }
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const mode of modes) {
      const m = yield* round(mode, client)
      const sum = best[mode].perClient
      best[mode] = {
        connectMs: Math.min(best[mode].connectMs, m.connectMs),
        // The mean of the rounds: freed memory is reused, so one round's growth may be 0.
        perClient: {
          rss: sum.rss + m.perClient.rss / ROUNDS,
          malloc: sum.malloc + m.perClient.malloc / ROUNDS,
          slab: sum.slab + m.perClient.slab / ROUNDS
        },
        peers: m.peers
      }
    }
    process.stderr.write(`isolation: round ${r + 1}/${ROUNDS}\n`)
  }
  const kib = (bytes: number) => Number.isNaN(bytes) ? "n/a" : `${(Math.max(0, bytes) / 1024).toFixed(1)} KiB`
  const rows: Array<Row> = [
    {
      what: `Accept a client: its Connection.connect, one at a time (ms, best of ${ROUNDS} rounds of ${CONNECTS})`,
      ours: `${best.perClient.connectMs.toFixed(1)} ms (perClient)`,
      baseline: `${best.shared.connectMs.toFixed(1)} ms (shared)`,
      ratio: best.perClient.connectMs / best.shared.connectMs,
      target: "report",
      met: undefined
    },
    ...([
      ["rss", `RSS`],
      ["malloc", "native memory from malloc"],
      ["slab", "kernel slab (SUnreclaim)"]
    ] as const).map(([key, name]): Row => ({
      what:
        `Memory per connected client, both sides in one process: ${name} (over ${HELD} clients, mean of ${ROUNDS} rounds)`,
      ours: `${kib(best.perClient.perClient[key])} (perClient; ${best.perClient.peers} peers alive)`,
      baseline: `${kib(best.shared.perClient[key])} (shared; ${best.shared.peers} peers alive)`,
      ratio: best.shared.perClient[key] > 0 ? best.perClient.perClient[key] / best.shared.perClient[key] : undefined,
      target: "report",
      met: undefined
    }))
  ]
  console.log(
    `\nIsolating clients: Listener.serve's default against isolation: "shared" (${
      device === undefined ? "simulated driver" : `native driver, ${device}`
    }, best of ${ROUNDS} rounds)\n`
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
