/**
 * Soak: the example service's traffic (connect, register, write + flush + read, close) for a fixed
 * number of cycles, with random faults and interruptions injected, in one long-lived process, as
 * a service would run. It ends by checking that nothing is alive but the server's own resources,
 * then nothing at all, and that the resident set stayed flat.
 *
 *   pnpm soak --cycles 2000            # simulated driver, faults and interruptions
 *   pnpm soak --native --address <ip>  # a device (no planned faults; interruptions only)
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { SimulatedDriver } from "@effect-rdma/testing"
import { Effect, Exit, Fiber, Layer, Random, Stream } from "effect"
import { parseArgs } from "node:util"

const { values: args } = parseArgs({
  // `pnpm example -- --flag` passes its "--" along: drop it.
  args: process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === "--")),
  options: {
    native: { type: "boolean", default: false },
    address: { type: "string", default: SimulatedDriver.DEFAULT_ADDRESS },
    cycles: { type: "string", default: "500" },
    seed: { type: "string", default: "42" },
    "max-growth-mib": { type: "string", default: "16" }
  }
})
const cycles = Number(args.cycles)
const port = 7600

const usage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

const faults: ReadonlyArray<SimulatedDriver.Fault> = [
  { operation: "rpma_mr_reg", nth: 1, code: -100002 },
  { operation: "rpma_mr_reg", nth: 2, code: -100003 },
  { operation: "rpma_write", nth: 2, completionStatus: 10 },
  { operation: "rpma_read", nth: 1, completionStatus: 12 },
  { operation: "rpma_write", nth: 3, loseConnection: true },
  { operation: "rpma_conn_req_new", nth: 1, code: -100002 },
  { operation: "rpma_mr_remote_from_descriptor", nth: 1, code: -100003 }
]

/** One client session against the long-lived server. */
const session = (server: { readonly descriptor: Uint8Array }, records: number) =>
  Effect.scoped(Effect.gen(function*() {
    const peer = yield* Peer.make(args.address)
    const log = yield* RemoteMr.fromDescriptor(server.descriptor).pipe(Effect.flatMap(RemoteMr.require(usage)))
    const conn = yield* Connection.connect(peer, args.address, port)
    const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
    const dst = yield* LocalMr.allocate(peer, 4096, Usage.READ_DST)
    for (let i = 0; i < records; i++) {
      src.memory[0] = i
      yield* Connection.write(conn, { dst: log, dstOffset: (i % 64) * 64, src, srcOffset: 0, length: 64 })
      yield* Connection.flush(conn, { dst: log, dstOffset: (i % 64) * 64, length: 64 })
    }
    yield* Connection.read(conn, { dst, dstOffset: 0, src: log, srcOffset: 0, length: 4096 })
  }))

const main = (plan: ((fault: SimulatedDriver.Fault) => Effect.Effect<void>) | undefined) =>
  Effect.gen(function*() {
    const driver = yield* Driver.RdmaDriver
    const serverPeer = yield* Peer.make(args.address)
    const log = yield* LocalMr.allocate(serverPeer, 4096, usage)
    const endpoint = yield* Listener.make(serverPeer, args.address, port)
    // The server accepts every request and holds each connection until its client goes.
    yield* Listener.requests(endpoint).pipe(
      Stream.runForEach((req) =>
        Effect.forkDaemon(
          Effect.scoped(Effect.flatMap(Listener.accept(req), (c) => Connection.awaitClosed(c))).pipe(Effect.ignore)
        )
      ),
      Effect.forkScoped
    )
    const server = { descriptor: yield* LocalMr.descriptor(log) }
    const outcomes = { ok: 0, failed: 0, interrupted: 0 }
    const rss: Array<number> = []
    for (let n = 1; n <= cycles; n++) {
      if (plan !== undefined && (yield* Random.nextIntBetween(0, 4)) === 0) {
        yield* plan(faults[yield* Random.nextIntBetween(0, faults.length)]!)
      }
      const fiber = yield* Effect.fork(session(server, yield* Random.nextIntBetween(1, 16)))
      if ((yield* Random.nextIntBetween(0, 5)) === 0) {
        for (let i = yield* Random.nextIntBetween(0, 40); i > 0; i--) yield* Effect.yieldNow()
        yield* Fiber.interrupt(fiber)
      }
      const exit = yield* Fiber.await(fiber)
      if (Exit.isSuccess(exit)) outcomes.ok++
      else if (Exit.isInterrupted(exit)) outcomes.interrupted++
      else outcomes.failed++
      if (n % Math.max(1, Math.floor(cycles / 10)) === 0) {
        globalThis.gc?.()
        rss.push(process.memoryUsage().rss)
        const live = yield* driver.live
        console.log(
          `cycle ${n}/${cycles}: ${outcomes.ok} ok, ${outcomes.failed} failed, ${outcomes.interrupted} interrupted; ` +
            `live regions ${live.localRegions}, connections ${live.connections}; rss ${
              (rss.at(-1)! / 2 ** 20).toFixed(1)
            } MiB`
        )
      }
    }
    return { outcomes, rss }
  })

const nativeLayer: Layer.Layer<Driver.RdmaDriver, unknown> = Layer.unwrapEffect(
  Effect.promise(() => import("@effect-rdma/native" as string)).pipe(
    Effect.map((m: { NativeDriver: { layer: Layer.Layer<Driver.RdmaDriver, unknown> } }) => m.NativeDriver.layer)
  )
)

const program = (plan: ((fault: SimulatedDriver.Fault) => Effect.Effect<void>) | undefined) =>
  Effect.gen(function*() {
    const { outcomes, rss } = yield* Effect.scoped(main(plan))
    const driver = yield* Driver.RdmaDriver
    // Let the server's per-connection fibers see their clients go.
    yield* Effect.sleep("50 millis")
    const live = yield* driver.live
    const alive = Object.values(live).reduce((a, b) => a + b, 0)
    // Flat: compare the last sample with the one a fifth of the way in (after warm-up).
    const warm = rss[Math.floor(rss.length / 5)] ?? rss[0]!
    const growth = (rss.at(-1)! - warm) / 2 ** 20
    console.log(
      `soak done: ${cycles} cycles (${outcomes.ok} ok, ${outcomes.failed} failed, ${outcomes.interrupted} interrupted); ` +
        `live handles at the end: ${alive}; resident set growth after warm-up: ${growth.toFixed(2)} MiB`
    )
    if (alive !== 0) return yield* Effect.dieMessage(`handles still alive: ${JSON.stringify(live)}`)
    if (growth > Number(args["max-growth-mib"])) return yield* Effect.dieMessage("the resident set kept growing")
  }).pipe(Effect.withRandom(Random.make(args.seed)))

const run: Effect.Effect<void, unknown> = args.native
  ? program(undefined).pipe(Effect.provide(nativeLayer))
  : Effect.flatMap(SimulatedDriver.SimulationControl, (control) => program(control.fail)).pipe(
    Effect.provide(SimulatedDriver.layerWith({ devices: [args.address] }))
  )

Effect.runPromise(run).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
