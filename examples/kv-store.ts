/**
 * A replicated key-value store over RDMA, on RdmaClient: what a long-running service looks like.
 *
 * The server registers a table of fixed-size slots, listens for RDMA connections and offers the
 * table's descriptor and an admission token over verified TLS. It serves every client in a fiber of
 * its own, and outlives any of them: a client that dies without a word (its connection Lost) ends
 * only its own fiber. A client is an `RdmaClient`: it fetches the offer, connects with the token,
 * and reconnects on loss with a Schedule, fetching the offer again. PUT writes a key's slot and
 * flushes it (rpma_write + rpma_flush: visible on the server when PUT returns), GET reads the slot
 * back (rpma_read); nothing runs on the server's CPU per request. A slot holds one key: the key
 * hashes to it, and a GET of a key another key replaced finds nothing (a cache's semantics).
 *
 * The program runs a server and clients in one process: client A stores keys; client B is killed
 * mid-stream (on the simulated driver its connection is lost as if its host vanished; with
 * --native, a child process is SIGKILLed); the server keeps serving, A's reads still see its keys.
 * Then the process sends itself SIGINT (or waits for yours, with --serve), and everything is
 * released: on the simulated driver the leak ledger proves it, on the native one the driver's
 * live handles.
 *
 *   node --import tsx examples/kv-store.ts                                  # simulated fabric
 *   node --import tsx examples/kv-store.ts --native --address 192.168.77.1  # a device (Soft-RoCE)
 *   node --import tsx examples/kv-store.ts --serve                          # serve until Ctrl-C
 */
import {
  Admission,
  Connection,
  DescriptorExchange,
  Listener,
  LocalMr,
  Peer,
  RdmaClient,
  RdmaMetrics,
  Tracing,
  Usage
} from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Console, Deferred, Effect, Layer, Metric, Ref, Schedule, Stream } from "effect"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { readFileSync } from "node:fs"
import { parseArgs } from "node:util"

const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === "--")),
  options: {
    native: { type: "boolean", default: false },
    address: { type: "string", default: SimulatedDriver.DEFAULT_ADDRESS },
    port: { type: "string", default: "7481" },
    keys: { type: "string", default: "200" },
    serve: { type: "boolean", default: false },
    // Internal: the client process that the --native run kills (its exchange port).
    "victim-of": { type: "string" }
  }
})
const rdmaPort = Number(args.port)
const keyCount = Number(args.keys)

const pem = (name: string) => readFileSync(new URL(`../fixtures/tls/${name}.pem`, import.meta.url), "utf8")
/** The client's certificate, which the server verifies (against the same test CA), and the CA it trusts. */
const clientTls = { key: pem("client-key"), cert: pem("client"), ca: pem("ca") }

// The table: SLOTS slots of SLOT bytes: u16 key length, u16 value length, then key and value.
const SLOTS = 1024
const SLOT = 256
const MAX_ENTRY = SLOT - 4
const storeUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
const regions = { store: storeUsage }
type Store = RdmaClient.RdmaClient<typeof regions>

const slotOf = (key: Uint8Array): number => {
  let hash = 0x811c9dc5 // FNV-1a
  for (const byte of key) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0
  return hash % SLOTS
}

/** The server: the table, an RDMA endpoint that serves every client, and the TLS offer. */
const server = Effect.gen(function*() {
  const peer = yield* Peer.make(args.address)
  const table = yield* LocalMr.allocate(peer, SLOTS * SLOT, storeUsage)
  const listener = yield* Listener.make(peer, args.address, rdmaPort)
  const token = new Uint8Array(randomBytes(16))
  // Not single-use: clients reconnect with the token their offer carried. Its budget bounds how
  // often a peer that holds it may connect (a guesser whose connection ended cannot retry at will).
  const admission = yield* Admission.make(token, { singleUse: false, uses: 20, window: "10 seconds" })
  const exchange = yield* DescriptorExchange.serve({
    host: "127.0.0.1",
    port: 0,
    tls: { key: pem("server-key"), cert: pem("server"), ca: pem("ca") },
    offer: {
      rdma: { address: args.address, port: listener.port },
      regions: { store: yield* LocalMr.descriptor(table) },
      config: { slots: SLOTS, slotSize: SLOT },
      token
    }
  })
  const ended = yield* Ref.make<Array<string>>([])
  // Each client in a fiber of its own, until its connection ends however it ends; a refused
  // request (a wrong token) is rejected and the server goes on. The table is every client's, so
  // the clients share its protection domain ("shared"): one admitted client reaches all of it,
  // and any other region registered with this peer whose rkey it guesses.
  yield* Listener.serve(
    listener,
    (conn) => Effect.flatMap(Connection.awaitClosed(conn), (last) => Ref.update(ended, (all) => [...all, last])),
    { admission, isolation: "shared" }
  ).pipe(Effect.forkScoped)
  return { table, exchangePort: exchange.port, ended: Ref.get(ended) }
})

/** A client of the store: an RdmaClient over the offer fetched from the exchange. */
const storeClient = (peer: Peer.Peer, exchangePort: number) =>
  RdmaClient.make({
    peer,
    offer: DescriptorExchange.fetch({ host: "127.0.0.1", port: exchangePort, tls: clientTls, timeout: "5 seconds" }),
    regions,
    reconnect: Schedule.exponential("20 millis").pipe(
      Schedule.union(Schedule.spaced("1 second")),
      Schedule.upTo("30 seconds")
    ),
    whileDisconnected: { wait: "5 seconds" },
    connection: { timeout: "5 seconds" }
  })

/** PUT and GET over one client, with its staging regions. */
const kv = (client: Store, peer: Peer.Peer) =>
  Effect.gen(function*() {
    const staging = yield* LocalMr.allocate(peer, SLOT, Usage.WRITE_SRC)
    const readBack = yield* LocalMr.allocate(peer, SLOT, Usage.READ_DST)
    const encoder = new TextEncoder()
    const put = (key: string, value: string) =>
      Effect.suspend(() => {
        const k = encoder.encode(key)
        const v = encoder.encode(value)
        if (k.length + v.length > MAX_ENTRY) return Effect.dieMessage(`an entry of at most ${MAX_ENTRY} bytes`)
        const view = new DataView(staging.memory.buffer, staging.memory.byteOffset, 4)
        view.setUint16(0, k.length, true)
        view.setUint16(2, v.length, true)
        staging.memory.set(k, 4)
        staging.memory.set(v, 4 + k.length)
        const at = slotOf(k) * SLOT
        const length = 4 + k.length + v.length
        return RdmaClient.write(client, { dst: "store", dstOffset: at, src: staging, length }).pipe(
          Effect.zipRight(RdmaClient.flush(client, { dst: "store", dstOffset: at, length }))
        )
      })
    const get = (key: string) =>
      Effect.suspend(() => {
        const k = encoder.encode(key)
        return RdmaClient.read(client, { dst: readBack, src: "store", srcOffset: slotOf(k) * SLOT, length: SLOT }).pipe(
          Effect.map(() => {
            const view = new DataView(readBack.memory.buffer, readBack.memory.byteOffset, 4)
            const keyLength = view.getUint16(0, true)
            const valueLength = view.getUint16(2, true)
            const stored = readBack.memory.subarray(4, 4 + keyLength)
            if (keyLength !== k.length || !stored.every((b, i) => b === k[i])) return undefined
            return new TextDecoder().decode(readBack.memory.subarray(4 + keyLength, 4 + keyLength + valueLength))
          })
        )
      })
    return { put, get }
  })

const waitConnected = (client: Store) =>
  client.changes.pipe(Stream.filter((s) => s._tag === "Connected"), Stream.runHead, Effect.timeout("30 seconds"))

/** Client B, killed mid-stream: its connection is lost without a disconnect. */
const killedClient = (exchangePort: number, driver: Driver.Driver) =>
  driver.name === "simulated"
    ? Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(args.address)
      const client = yield* storeClient(peer, exchangePort)
      yield* waitConnected(client)
      const { put } = yield* kv(client, peer)
      yield* put("b:0", "before the crash")
      // Its host vanishes: the next write finds the connection lost, as the server does.
      const simulation = yield* Effect.serviceOption(SimulatedDriver.SimulationControl)
      if (simulation._tag === "Some") {
        yield* simulation.value.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      }
      const lost = yield* Effect.flip(put("b:1", "never stored"))
      yield* Console.log(`  client B: killed (${lost._tag})`)
    }))
    : Effect.async<void>((resume) => {
      // A child process that connects and writes until SIGKILL, which ends it without a disconnect:
      // this program again, started as this one was (with tsx, or bundled: scripts/bundle-vm.mjs).
      const child = spawn(process.execPath, [
        ...process.execArgv,
        process.argv[1]!,
        "--native",
        "--address",
        args.address,
        "--victim-of",
        String(exchangePort)
      ], { stdio: ["ignore", "pipe", "inherit"] })
      child.stdout.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("connected")) child.kill("SIGKILL")
      })
      child.once("exit", (_code, signal) => {
        console.log(`  client B: a child process, killed (${signal})`)
        resume(Effect.void)
      })
      return Effect.sync(() => child.kill("SIGKILL"))
    })

/** The --victim-of process: connect, say so, and write until killed. */
const victim = (exchangePort: number) =>
  Effect.scoped(Effect.gen(function*() {
    const peer = yield* Peer.make(args.address)
    const client = yield* storeClient(peer, exchangePort)
    yield* waitConnected(client)
    const { put } = yield* kv(client, peer)
    yield* Console.log("connected")
    for (let i = 0;; i++) yield* put(`b:${i % 8}`, "until killed")
  }))

const main = Effect.gen(function*() {
  const driver = yield* Driver.RdmaDriver
  yield* Console.log(`key-value store on the ${driver.name} driver at ${args.address}`)
  const { ended, exchangePort, table } = yield* server

  // Client A: stores keys, and keeps its client (and connection) across what follows.
  const peerA = yield* Peer.make(args.address)
  const clientA = yield* storeClient(peerA, exchangePort)
  yield* waitConnected(clientA)
  const a = yield* kv(clientA, peerA)
  for (let i = 0; i < keyCount; i++) yield* a.put(`key:${i}`, `value ${i}`)
  yield* Console.log(`  client A: ${keyCount} PUTs, each written and flushed`)

  yield* killedClient(exchangePort, driver)
  // The server saw B end, and serves on.
  yield* Effect.repeat(ended, { until: (all) => all.length > 0, schedule: Schedule.spaced("20 millis") }).pipe(
    Effect.timeout("30 seconds")
  )
  yield* Console.log(`  server: client B's connection ended (${(yield* ended).join(", ")}); still serving`)

  // A's own link drops (on the simulated driver): the GET in flight fails with the connection's
  // error, the client reconnects with a fresh offer, and the GETs after it wait for that.
  const simulation = yield* Effect.serviceOption(SimulatedDriver.SimulationControl)
  if (simulation._tag === "Some") {
    yield* simulation.value.fail({ operation: "rpma_read", nth: 1, loseConnection: true })
    const lost = yield* Effect.flip(a.get("key:0"))
    yield* Console.log(`  client A: its link dropped (${lost._tag}); reconnecting`)
    yield* waitConnected(clientA)
  }

  let found = 0
  for (let i = 0; i < keyCount; i++) if ((yield* a.get(`key:${i}`)) === `value ${i}`) found++
  // A key whose slot a later key took is gone: count what the table itself holds.
  const expected = new Set(Array.from({ length: keyCount }, (_, i) =>
    slotOf(new TextEncoder().encode(`key:${i}`)))).size
  yield* Console.log(`  client A: ${found} GETs found their value (${expected} distinct slots)`)
  const reconnects = (yield* Metric.value(RdmaMetrics.clientReconnects)).count
  const operations = (yield* Metric.value(RdmaMetrics.operations)).count
  const bytes = (yield* Metric.value(RdmaMetrics.operationBytes)).count
  yield* Console.log(`  metrics: ${operations} requests, ${bytes} bytes, ${reconnects} reconnect attempts`)
  if (found < expected || table.memory.every((b) => b === 0)) {
    return yield* Effect.dieMessage("the store does not hold what was written")
  }
})

/** The native driver is imported only when asked for, so the example runs where it was never built. */
const nativeLayer: Layer.Layer<Driver.RdmaDriver, unknown> = Layer.unwrapEffect(
  Effect.promise(() => import("@effect-rdma/native" as string)).pipe(
    Effect.map((native: { NativeDriver: { layer: Layer.Layer<Driver.RdmaDriver, unknown> } }) =>
      native.NativeDriver.layer
    )
  )
)

/** Runs until SIGINT (sent by itself when the demo is done, unless --serve), then releases everything. */
const untilSigint = <A, E, R>(work: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const interrupted = yield* Deferred.make<void>()
    const onSigint = () => Deferred.unsafeDone(interrupted, Effect.void)
    process.once("SIGINT", onSigint)
    yield* Effect.addFinalizer(() => Effect.sync(() => process.off("SIGINT", onSigint)))
    yield* work
    if (!args.serve) process.kill(process.pid, "SIGINT")
    else yield* Console.log("  serving: Ctrl-C to stop")
    yield* Deferred.await(interrupted)
    yield* Console.log("  SIGINT: shutting down")
  })

const leaks = Effect.gen(function*() {
  const driver = yield* Driver.RdmaDriver
  const live = yield* driver.live
  const left = Object.values(live).reduce((sum, n) => sum + n, 0)
  yield* Console.log(`  live handles at exit ${left}`)
  if (left > 0) return yield* Effect.dieMessage(`handles left: ${JSON.stringify(live)}`)
})

const program: Effect.Effect<void, unknown> = args["victim-of"] !== undefined
  ? victim(Number(args["victim-of"])).pipe(Effect.provide(nativeLayer))
  : args.native
  ? Effect.scoped(untilSigint(main)).pipe(Effect.zipRight(leaks), Effect.provide(nativeLayer))
  : Effect.scoped(untilSigint(main)).pipe(
    Effect.zipRight(leaks),
    Effect.zipRight(Ledger.assertEmpty),
    Effect.provide(SimulatedDriver.layerWith({ devices: [args.address] }))
  )

// Per-operation telemetry on: a span per request, and the request and byte counters the summary prints.
Effect.runPromise(program.pipe(Tracing.withPerOperation)).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
