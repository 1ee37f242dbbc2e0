/**
 * A replicated append-only log over RDMA: the README's main job.
 *
 * A log server registers a region for its log, listens for RDMA connections, and hands the
 * region's descriptor to clients over verified TLS, with a token that admits the connection: a
 * request without it is rejected (anyone can reach the RDMA port; only the TLS client learned the
 * token). A client appends records straight into the
 * server's memory with rpma_write, makes each one visible with rpma_flush, and reads batches back
 * with rpma_read to check them. Nothing on the server's CPU runs per record. Both sides release
 * everything with their scopes; on the simulated driver the leak ledger proves it.
 *
 *   pnpm example                                   # simulated fabric, no setup
 *   pnpm example --records 20000                # more traffic
 *   pnpm example --native --address 192.168.77.1  # a real RDMA device (e.g. Soft-RoCE)
 */
import {
  Admission,
  Connection,
  DescriptorExchange,
  Listener,
  LocalMr,
  Peer,
  RdmaMetrics,
  RemoteMr,
  Tracing,
  Usage
} from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Console, Effect, Fiber, Layer, Metric } from "effect"
import { randomBytes } from "node:crypto"
import { readFileSync } from "node:fs"
import { parseArgs } from "node:util"

const { values: args } = parseArgs({
  // `pnpm example -- --flag` passes its "--" along: drop it.
  args: process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === "--")),
  options: {
    native: { type: "boolean", default: false },
    address: { type: "string", default: SimulatedDriver.DEFAULT_ADDRESS },
    port: { type: "string", default: "7471" },
    records: { type: "string", default: "5000" },
    "record-size": { type: "string", default: "64" },
    batch: { type: "string", default: "100" }
  }
})
const records = Number(args.records)
const recordSize = Number(args["record-size"])
const batch = Number(args.batch)
const rdmaPort = Number(args.port)

const pem = (name: string) => readFileSync(new URL(`../fixtures/tls/${name}.pem`, import.meta.url), "utf8")
/** The client's certificate, which the server verifies (against the same test CA), and the CA it trusts. */
const clientTls = { key: pem("client-key"), cert: pem("client"), ca: pem("ca") }

/** The log's layout: record i at i * recordSize: a u32 sequence number, a u32 checksum, then payload. */
const encodeRecord = (into: Uint8Array, at: number, seq: number) => {
  const view = new DataView(into.buffer, into.byteOffset + at, recordSize)
  let sum = 0
  for (let i = 8; i < recordSize; i++) {
    const byte = (seq * 31 + i * 7) & 0xff
    into[at + i] = byte
    sum = (sum + byte) >>> 0
  }
  view.setUint32(0, seq, true)
  view.setUint32(4, sum, true)
}

const checkRecord = (from: Uint8Array, at: number, seq: number): boolean => {
  const view = new DataView(from.buffer, from.byteOffset + at, recordSize)
  let sum = 0
  for (let i = 8; i < recordSize; i++) sum = (sum + from[at + i]!) >>> 0
  return view.getUint32(0, true) === seq && view.getUint32(4, true) === sum
}

const logUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

/** The server: a registered log region, an RDMA endpoint, and the TLS exchange that describes them. */
const server = Effect.gen(function*() {
  const peer = yield* Peer.make(args.address)
  const log = yield* LocalMr.allocate(peer, records * recordSize, logUsage)
  const endpoint = yield* Listener.make(peer, args.address, rdmaPort)
  const token = new Uint8Array(randomBytes(16))
  const exchange = yield* DescriptorExchange.serve({
    host: "127.0.0.1",
    port: 0,
    tls: { key: pem("server-key"), cert: pem("server"), ca: pem("ca") },
    offer: {
      rdma: { address: args.address, port: endpoint.port },
      regions: { log: yield* LocalMr.descriptor(log) },
      config: { records, recordSize },
      token
    }
  })
  // Serve one client: admit it by its token (once) and hold the connection until the client closes it.
  const admission = yield* Admission.make(token, { singleUse: true })
  const serving = yield* Effect.fork(
    Effect.scoped(
      Listener.next(endpoint).pipe(
        Effect.flatMap((req) => Listener.accept(req, { admission })),
        Effect.flatMap((conn) => Connection.awaitClosed(conn))
      )
    )
  )
  return { log, exchangePort: exchange.port, serving }
})

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!

/** The client: fetch the offer over TLS, connect, append every record, read each batch back. */
const client = (exchangePort: number) =>
  Effect.gen(function*() {
    const offer = yield* DescriptorExchange.fetch({ host: "127.0.0.1", port: exchangePort, tls: clientTls })
    const peer = yield* Peer.make(args.address)
    const log = yield* RemoteMr.fromDescriptor(offer.regions.log!).pipe(Effect.flatMap(RemoteMr.require(logUsage)))
    const conn = yield* Connection.connect(peer, offer.rdma.address, offer.rdma.port, {
      privateData: offer.token === undefined ? undefined : yield* Admission.privateData(offer.token)
    })
    const staging = yield* LocalMr.allocate(peer, batch * recordSize, Usage.WRITE_SRC)
    const readBack = yield* LocalMr.allocate(peer, batch * recordSize, Usage.READ_DST)

    const latencies: Array<number> = []
    let mismatches = 0
    const started = performance.now()
    for (let first = 0; first < records; first += batch) {
      const count = Math.min(batch, records - first)
      for (let i = 0; i < count; i++) {
        const seq = first + i
        const slot = i * recordSize
        encodeRecord(staging.memory, slot, seq)
        const t0 = performance.now()
        yield* Connection.write(conn, {
          dst: log,
          dstOffset: seq * recordSize,
          src: staging,
          srcOffset: slot,
          length: recordSize
        })
        yield* Connection.flush(conn, { dst: log, dstOffset: seq * recordSize, length: recordSize })
        latencies.push(performance.now() - t0)
      }
      yield* Connection.read(conn, {
        dst: readBack,
        dstOffset: 0,
        src: log,
        srcOffset: first * recordSize,
        length: count * recordSize
      })
      for (let i = 0; i < count; i++) if (!checkRecord(readBack.memory, i * recordSize, first + i)) mismatches++
      const done = first + count
      if (done % Math.max(batch, Math.floor(records / 10 / batch) * batch) === 0 || done === records) {
        yield* Console.log(`  appended ${done}/${records} records`)
      }
    }
    const seconds = (performance.now() - started) / 1000
    latencies.sort((a, b) => a - b)
    return { seconds, mismatches, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99) }
  })

const main = Effect.gen(function*() {
  const driver = yield* Driver.RdmaDriver
  yield* Console.log(
    `replicated log on the ${driver.name} driver at ${args.address}: ${records} records of ${recordSize} bytes`
  )
  const { exchangePort, log, serving } = yield* server
  const result = yield* Effect.scoped(client(exchangePort))
  yield* Fiber.join(serving)
  // The server checks its own memory: every record must be there, in order.
  let stored = 0
  for (let seq = 0; seq < records; seq++) if (checkRecord(log.memory, seq * recordSize, seq)) stored++
  const live = yield* driver.live
  const metric = <A>(m: Metric.Metric<any, any, A>) => Metric.value(m)
  const registrations = (yield* metric(Metric.tagged(RdmaMetrics.registrations, "operation", "rpma_mr_reg"))).count
  const registered = (yield* metric(RdmaMetrics.registeredBytes)).value
  const regions = (yield* metric(RdmaMetrics.liveRegions)).value
  const releaseFailures = (yield* metric(RdmaMetrics.releaseFailures)).count
  const latency = yield* metric(Metric.tagged(RdmaMetrics.registrationDuration, "operation", "rpma_mr_reg"))
  yield* Console.log(
    [
      "summary:",
      `  records appended    ${records} (${((records * recordSize) / 1024).toFixed(1)} KiB)`,
      `  throughput          ${Math.round(records / result.seconds)} records/s`,
      `  write+flush latency p50 ${(result.p50 * 1000).toFixed(1)} µs, p99 ${(result.p99 * 1000).toFixed(1)} µs`,
      `  read-back mismatches ${result.mismatches}`,
      `  records on server   ${stored}/${records}`,
      `  client handles left ${live.connections} connections, ${live.remoteRegions} remote regions`,
      "metrics:",
      `  rpma_mr_reg calls   ${registrations}, mean ${
        ((latency.sum * 1000) / Math.max(1, latency.count)).toFixed(3)
      } ms each`,
      `  live now            ${regions} regions, ${registered} bytes registered (the server's log)`,
      `  release failures    ${releaseFailures}`
    ].join("\n")
  )
  if (result.mismatches > 0 || stored !== records) {
    return yield* Effect.dieMessage("the log does not hold what was written")
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

const program: Effect.Effect<void, unknown> = args.native
  ? Effect.scoped(main).pipe(Effect.provide(nativeLayer))
  : Effect.scoped(main).pipe(
    Effect.zipRight(Effect.flatMap(Ledger.live, (live) => Console.log(`  live resources at exit ${live.length}`))),
    Effect.zipRight(Ledger.assertEmpty),
    Effect.provide(SimulatedDriver.layerWith({ devices: [args.address] }))
  )

// The summary prints the mean registration time: per-operation timing is off by default (Tracing).
Effect.runPromise(program.pipe(Tracing.withPerOperation)).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
