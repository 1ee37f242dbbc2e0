/**
 * Host benchmarks of the hot path: the real NativeDriver (makeDriver) over a zero-cost fake of the
 * addon (bench/fake.ts), so that what is measured is core and the driver, never a device. Each of
 * our rows has a baseline measured the same way in the same process: the same driver calls in a
 * bare Effect, or the binding called from plain JavaScript.
 *
 * `hostRows` (timed) and `setup` (every bench, which bench/instructions.ts runs under callgrind).
 * Both run from a bundle of bench/host-main.ts (bench/bundle.ts), as compiled JavaScript: under
 * tsx, every function expression is wrapped in esbuild's `__name` helper (keepNames), which adds
 * an Object.defineProperty per closure created and so inflates exactly the per-operation closures
 * of the hot path; users run the tsc output, which has none.
 */
import { Connection, Descriptor, LocalMr, Peer, RegistrationCache, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { Effect, Layer } from "effect"
import { anyError } from "./anyError.js"
import * as Fake from "./fake.js"
import { type Row } from "./table.js"

/** One measured thing: `run(n)` does it `n` times. */
export interface Bench {
  readonly run: (n: number) => Effect.Effect<void, unknown>
  /** Operations per `run(1)` (a batch counts its writes). */
  readonly perRun: number
}

export const BATCH = 16
const address = "192.168.77.1"

/** Every bench, built over one fake binding, one peer and one connection in the caller's scope. */
export const setup = anyError(Effect.gen(function*() {
  const fake = Fake.make()
  const binding = fake.binding
  const layer = NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding)))
  const context = yield* Layer.build(layer)
  return yield* Effect.provide(benchesWith(fake), context)
}))

const benchesWith = (fake: Fake.Fake) =>
  Effect.gen(function*() {
    const binding = fake.binding
    const driver = yield* Driver.RdmaDriver
    const peer = yield* Peer.make(address)
    const memory = new Uint8Array(4096)
    const usage = Usage.WRITE_DST
    const conn = yield* Connection.connect(peer, address, 7000, { sendQueueSize: 64 })
    const dst = yield* RemoteMr.fromDescriptor(
      Descriptor.encode({ address: 0x7f0000001000n, length: 1n << 20n, rkey: 0x1234, usage: 0x1f })
    ).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
    const src = yield* LocalMr.register(peer, new Uint8Array(65536), Usage.WRITE_SRC)
    const cache = yield* RegistrationCache.make(peer)
    // The binding's own connection, for the raw rows: no driver, no Effect.
    const raw = binding.connReqConnect({}, undefined)
    const spans = Array.from({ length: BATCH }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
    const mode = (m: Fake.Fake["mode"]) => Effect.sync(() => (fake.mode = m))

    const loop = <E, R>(body: Effect.Effect<unknown, E, R>) => (n: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < n; i++) yield* body
      })
    const sync = (body: () => void) => (n: number) =>
      Effect.sync(() => {
        for (let i = 0; i < n; i++) body()
      })
    const inMode = (m: Fake.Fake["mode"], run: (n: number) => Effect.Effect<void, unknown>) => (n: number) =>
      Effect.zipRight(mode(m), run(n))
    const request = (id: number, slot: number) => ({
      op: "write" as const,
      id,
      dst: Driver.handleOf(dst),
      dstOffset: slot * 64,
      src: Driver.handleOf(src),
      srcOffset: slot * 64,
      length: 64
    })
    let rawId = 1

    /** `count` writes, `window` in flight, from plain callbacks: post, poll, else wait for the callback. */
    const callbacks = (count: number, window: number) =>
      Effect.async<void, unknown>((resume) => {
        let posted = 0
        let completed = 0
        const pump = (error: unknown, waited: ReadonlyArray<RpmaBinding.WaitedCompletion> | undefined) => {
          if (error !== undefined && error !== null) return resume(Effect.fail(error))
          let list = waited
          for (;;) {
            if (list !== undefined) completed += list.length
            if (completed >= count) return resume(Effect.void)
            while (posted < count && posted - completed < window) binding.post(raw, request(rawId++, posted++ % BATCH))
            list = binding.pollCompletions(raw)
            if (list.length === 0) return void binding.waitCompletions(raw, pump)
          }
        }
        pump(undefined, undefined)
      })

    const benches: Record<
      string,
      { readonly perRun: number; readonly run: (n: number) => Effect.Effect<void, unknown, Driver.RdmaDriver> }
    > = {
      // Registration
      "reg.bare": {
        perRun: 1,
        run: loop(Effect.scoped(Effect.acquireRelease(driver.mrReg(Driver.handleOf(peer), memory, usage), (mr) =>
          Effect.orDie(driver.mrDereg(mr.handle)))))
      },
      "reg.scoped": { perRun: 1, run: loop(Effect.scoped(LocalMr.register(peer, memory, usage))) },
      "use.bare": {
        perRun: 1,
        run: loop(
          Effect.acquireUseRelease(driver.mrReg(Driver.handleOf(peer), memory, usage), () =>
            Effect.void, (mr) =>
            Effect.orDie(driver.mrDereg(mr.handle)))
        )
      },
      // The floor under `use` when the driver answers synchronously: its `now` forms in a bare acquireUseRelease.
      "use.bareNow": {
        perRun: 1,
        run: loop(
          Effect.acquireUseRelease(
            Effect.suspend(() =>
              driver.mrReg.now!(Driver.handleOf(peer), memory, usage)!
            ),
            () =>
              Effect.void,
            (mr) => Effect.orDie(Effect.suspend(() => driver.mrDereg.now!(mr.handle)!))
          )
        )
      },
      "use": { perRun: 1, run: loop(LocalMr.use(peer, memory, usage, () => Effect.void)) },
      // Registration-cache hits (the first run registers; every later one hits)
      "cache.scoped": { perRun: 1, run: loop(Effect.scoped(cache.register(memory, usage))) },
      "cache.use": { perRun: 1, run: loop(cache.use(memory, usage, () => Effect.void)) },
      // One write, completion queued at post time
      "write.raw": {
        perRun: 1,
        run: inMode(
          "queued",
          sync(() => {
            binding.post(raw, request(rawId++, 0))
            binding.pollCompletions(raw)
          })
        )
      },
      "loop.void": { perRun: 1, run: loop(Effect.void) },
      "write.driver": {
        perRun: 1,
        run: inMode(
          "queued",
          loop(Effect.zipRight(
            Effect.sync(() => driver.postMany(raw as Driver.Model.ConnHandle, [request(rawId++, 0)])),
            driver.pollCompletions(raw as Driver.Model.ConnHandle)
          ))
        )
      },
      "write.postMany": {
        perRun: 1,
        run: inMode("queued", sync(() => void driver.postMany(raw as Driver.Model.ConnHandle, [request(rawId++, 0)])))
      },
      "write.queued": {
        perRun: 1,
        run: inMode("queued", loop(Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64 })))
      },
      // One write, completion on a later loop turn
      "write.callback": { perRun: 1, run: inMode("later", (n) => callbacks(n, 1)) },
      "write.later": {
        perRun: 1,
        run: inMode("later", loop(Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64 })))
      },
      // 16 in flight
      "batch.raw": { perRun: BATCH, run: inMode("queued", (n) => callbacks(n * BATCH, BATCH)) },
      "batch.queued": {
        perRun: BATCH,
        run: inMode("queued", loop(Connection.writeMany(conn, spans.map((span) => ({ dst, src, ...span })))))
      },
      "batch.callback": { perRun: BATCH, run: inMode("later", (n) => callbacks(n * BATCH, BATCH)) },
      "batch.later": {
        perRun: BATCH,
        run: inMode("later", loop(Connection.writeMany(conn, spans.map((span) => ({ dst, src, ...span })))))
      },
      "batch.forEach": {
        perRun: BATCH,
        run: inMode(
          "later",
          loop(Effect.forEach(spans, (s) =>
            Connection.write(conn, { dst, dstOffset: s.dstOffset, src, srcOffset: s.srcOffset, length: 64 }), {
            concurrency: BATCH,
            discard: true
          }))
        )
      }
    }
    // The driver for every run, provided once per run (not per operation).
    const context = yield* Effect.context<Driver.RdmaDriver>()
    const provided: Record<string, Bench> = {}
    for (const [name, b] of Object.entries(benches)) {
      provided[name] = {
        perRun: b.perRun,
        run: (n) =>
          Effect.provide(b.run(n), context)
      }
    }
    return provided
  })

/** Best mean µs per operation over `rounds` runs of `n`, after a warm-up of `n`. */
const microseconds = (bench: Bench, n: number, rounds = 5) =>
  Effect.gen(function*() {
    yield* bench.run(n)
    let best = Infinity
    for (let r = 0; r < rounds; r++) {
      const t0 = performance.now()
      yield* bench.run(n)
      best = Math.min(best, ((performance.now() - t0) * 1000) / (n * bench.perRun))
    }
    return best
  })

/** How many runs of each bench, timed or under callgrind. */
export const iterations: Record<string, number> = {
  "reg.bare": 20_000,
  "reg.scoped": 20_000,
  "use.bare": 20_000,
  "use.bareNow": 20_000,
  "use": 20_000,
  "cache.scoped": 20_000,
  "cache.use": 20_000,
  "write.raw": 50_000,
  "loop.void": 50_000,
  "write.driver": 20_000,
  "write.postMany": 50_000,
  "write.queued": 20_000,
  "write.callback": 5_000,
  "write.later": 5_000,
  "batch.raw": 2_000,
  "batch.queued": 2_000,
  "batch.callback": 2_000,
  "batch.later": 2_000,
  "batch.forEach": 1_000
}

/** The host rows, each ratio from the same run. */
export const hostRows: Effect.Effect<{ rows: Array<Row>; us: Record<string, number> }, unknown> = Effect.scoped(
  Effect.gen(function*() {
    const benches = yield* setup
    const us: Record<string, number> = {}
    for (const [name, bench] of Object.entries(benches)) us[name] = yield* microseconds(bench, iterations[name]!)
    const t = (x: number) => `${x.toFixed(2)} µs`
    const u = us as Record<string, number>
    /** A row that explains another: `ours` against `base`, no target. */
    const breakdown = (what: string, ours: string, base: string): Row => ({
      what,
      ours: t(u[ours]!),
      baseline: t(u[base]!),
      ratio: u[ours]! / u[base]!,
      target: "",
      met: undefined
    })
    const rows: Array<Row> = [
      {
        what: "host: scoped registration, LocalMr.register (NativeDriver over the fake binding)",
        ours: t(u["reg.scoped"]!),
        baseline: `${t(u["reg.bare"]!)} (rpma_mr_reg + rpma_mr_dereg in a bare acquireRelease)`,
        ratio: u["reg.scoped"]! / u["reg.bare"]!,
        target: "≤ 1.2×",
        met: u["reg.scoped"]! / u["reg.bare"]! <= 1.2
      },
      {
        what: "host: scope-free registration, LocalMr.use",
        ours: t(u["use"]!),
        baseline: `${t(u["use.bare"]!)} (the same calls in a bare acquireUseRelease)`,
        ratio: u["use"]! / u["use.bare"]!,
        target: "≤ 1.2×",
        met: u["use"]! / u["use.bare"]! <= 1.2
      },
      breakdown(
        "  breakdown: LocalMr.use over the driver's synchronous mrReg.now + mrDereg.now in a bare acquireUseRelease",
        "use",
        "use.bareNow"
      ),
      {
        what: "host: registration-cache hit, scoped (cache.register)",
        ours: t(u["cache.scoped"]!),
        baseline: `${t(u["reg.scoped"]!)} (uncached LocalMr.register)`,
        ratio: u["cache.scoped"]! / u["reg.scoped"]!,
        target: "",
        met: undefined
      },
      {
        what: "host: registration-cache hit, scope-free (cache.use)",
        ours: t(u["cache.use"]!),
        baseline: `${t(u["use"]!)} (uncached LocalMr.use)`,
        ratio: u["cache.use"]! / u["use"]!,
        target: "",
        met: undefined
      },
      {
        what: "host: Connection.write 64 B, completion queued at post time (µs over the raw call)",
        ours: `${t(u["write.queued"]!)} (+${t(u["write.queued"]! - u["write.raw"]!)})`,
        baseline: `${t(u["write.raw"]!)} (binding.post + pollCompletions from JS)`,
        ratio: u["write.queued"]! / u["write.raw"]!,
        target: "≤ +2 µs (and ≤ +20k instructions)",
        met: u["write.queued"]! - u["write.raw"]! <= 2
      },
      breakdown("  breakdown: the driver's postMany + pollCompletions, in a loop", "write.driver", "write.raw"),
      breakdown(
        "  breakdown: the driver's postMany (post + poll, synchronous) from JS, in a loop",
        "write.postMany",
        "write.raw"
      ),
      {
        what: "  breakdown: the loop alone (yield* Effect.void)",
        ours: t(u["loop.void"]!),
        baseline: "",
        ratio: undefined,
        target: "",
        met: undefined
      },
      {
        what: "host: Connection.write 64 B, completion on a later loop turn",
        ours: t(u["write.later"]!),
        baseline: `${t(u["write.callback"]!)} (binding from JS callbacks: post, poll, wait callback)`,
        ratio: u["write.later"]! / u["write.callback"]!,
        target: "≤ 2.5×",
        met: u["write.later"]! / u["write.callback"]! <= 2.5
      },
      {
        what: `host: Connection.writeMany, ${BATCH} in flight, completions queued (per write)`,
        ours: t(u["batch.queued"]!),
        baseline: `${t(u["batch.raw"]!)} (binding from JS, ${BATCH} posts + poll)`,
        ratio: u["batch.queued"]! / u["batch.raw"]!,
        target: "≤ 1 µs per write",
        met: u["batch.queued"]! <= 1
      },
      {
        what: `host: Connection.writeMany, ${BATCH} in flight, completions on a later turn (per write)`,
        ours: t(u["batch.later"]!),
        baseline: `${t(u["batch.callback"]!)} (binding from JS callbacks, window ${BATCH})`,
        ratio: u["batch.later"]! / u["batch.callback"]!,
        target: "≤ 1 µs per write",
        met: u["batch.later"]! <= 1
      },
      {
        what: `  breakdown: ${BATCH} Connection.write in Effect.forEach (concurrency ${BATCH}), later turn (per write)`,
        ours: t(u["batch.forEach"]!),
        baseline: t(u["batch.callback"]!),
        ratio: u["batch.forEach"]! / u["batch.callback"]!,
        target: "",
        met: undefined
      }
    ]
    return { rows, us }
  })
)

// ---- as a program: every bench under callgrind (bench/instructions.ts) ----

/** Runs of each bench under callgrind, after as many to warm up (bench/host-main.ts). */
export const callgrindRuns: Record<string, number> = {
  "reg.bare": 2000,
  "reg.scoped": 2000,
  "use.bare": 2000,
  "use.bareNow": 2000,
  "use": 2000,
  "cache.scoped": 2000,
  "cache.use": 2000,
  "write.raw": 10_000,
  "loop.void": 10_000,
  "write.driver": 10_000,
  "write.postMany": 10_000,
  "write.queued": 10_000,
  "write.callback": 5_000,
  "write.later": 5_000,
  "batch.raw": 1_000,
  "batch.queued": 1_000,
  "batch.callback": 1_000,
  "batch.later": 1_000,
  "batch.forEach": 100,
  "cm.pingpong": 2000,
  "cm.call": 2000,
  "cm.callbacks": 2000
}
