/**
 * The write benchmarks, run inside the Soft-RoCE VM (bench/device.sh): rpma_write latency (one
 * write at a time, each awaited) and bandwidth (a window of W writes in flight) through
 * Connection.write on the native driver, against the C program bench/c/write_bench.c. Both
 * connect a client to a server in the same process over the one device address, with the same
 * queue sizes, sizes and write counts. Ours, the breakdown rows and a run of the C program go
 * round after round (best of 5), each on its own connection, after one unmeasured pass over
 * everything; connection events and progress go to stderr.
 *
 * Breakdown rows say where the time goes, on a second connection made with the driver alone:
 * the addon called straight from JavaScript callbacks (no Effect: the floor for any wrapper over
 * this addon), the driver's own calls (postMany + armCompletions, without Connection's
 * bookkeeping). Bandwidth goes through the batch path, Connection.writeMany (issue 12).
 *
 * Beside each row, the CPU the process spent per write in its best round (process.cpuUsage; the C
 * program reports its own, getrusage over its rounds): under TCG a JavaScript row's CPU per write is
 * about its time per write, where C's is what the device leaves it.
 *
 *   WRITE_SCALE=0.1 (scales every write count), WRITE_BENCH (the C program's path),
 *   WRITE_ONLY=bandwidth:ours,latency (run only these contenders, of one part or of both: a
 *   profile of one row), WRITE_SIZES=64 (only these sizes)
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { Cause, Effect, Layer, Stream } from "effect"
import { execFileSync } from "node:child_process"
import { postOne } from "./driverCalls.js"
import { rawConnection } from "./raw.js"
import { printTable, type Row } from "./table.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: run this inside the VM (bench/device.sh)")
const cProgram = process.env.WRITE_BENCH ?? "bench/.build/write_bench"
/** Scales every write count (WRITE_SCALE=0.1 for a quick look). */
const scale = Number(process.env.WRITE_SCALE ?? "1")
/** The contenders to run (all when unset): `part` (latency, bandwidth), `name`, or `part:name`. */
const only = process.env.WRITE_ONLY?.split(",")
const runs = (part: string, name: string) =>
  only === undefined || only.includes(name) || only.includes(part) || only.includes(`${part}:${name}`)
const pick = <K extends string, V>(part: string, contenders: Record<K, V>): Record<K, V> =>
  Object.fromEntries(Object.entries(contenders).filter(([name]) => runs(part, name))) as Record<K, V>
const onlySizes = process.env.WRITE_SIZES?.split(",").map(Number)

/** Writes in flight for the bandwidth runs: the send queue size, on both sides. */
const W = 16
const MAX_SIZE = 65536
/**
 * Warm-up before each measured run: at least WARMUP writes and WARMUP_MS of them. Under TCG the JIT
 * needs thousands of calls and seconds (its compiler shares the one vCPU) before a path is
 * optimised: with 300 writes, the first row measured (64 B, ours) came out slower than 4 KiB.
 */
const WARMUP = 300
const WARMUP_MS = Number(process.env.WRITE_WARMUP_MS ?? "3000")
const ROUNDS = 5
const [oursPort, rawPort] = [7481, 7482]

const sizes: ReadonlyArray<readonly [bytes: number, label: string, latencyWrites: number, bandwidthWrites: number]> = [
  [64, "64 B", 1000, 4000],
  [4096, "4 KiB", 1000, 4000],
  [65536, "64 KiB", 300, 1000]
].map(([bytes, label, n, m]) =>
  [
    bytes as number,
    label as string,
    Math.max(10, Math.round((n as number) * scale)),
    Math.max(1, Math.round(((m as number) * scale) / W)) * W
  ] as const
).filter(([bytes]) => onlySizes === undefined || onlySizes.includes(bytes))

interface Figures {
  /** Mean µs per write, one in flight. */
  readonly latencyUs: number
  /** 10^6 bytes per second, W in flight. */
  readonly bandwidthMBps: number
  /** The process's CPU per write (user + system µs), one in flight and W in flight. */
  readonly latencyCpuUs: number
  readonly bandwidthCpuUs: number
}

// ---- timing ----

/** Runs `run` in stretches of `n` until both WARMUP writes and WARMUP_MS have passed. */
const warmUp = (n: number, run: (n: number) => Effect.Effect<void, unknown>) =>
  Effect.gen(function*() {
    const t0 = performance.now()
    for (let done = 0; done < WARMUP || performance.now() - t0 < WARMUP_MS; done += n) yield* run(n)
  })

/** A contender's best round: µs per write, and the process's CPU per write in that round. */
interface Best {
  readonly us: number
  readonly cpuUs: number
}

/**
 * Every contender warmed up, then ROUNDS rounds of `n` writes each, in turn: the best µs per write
 * of each, with its CPU per write. Interleaved, so that a change of load on the shared host (the
 * VM's one vCPU is a host thread) reaches all of them alike instead of whichever ran during it.
 * `selfTimed` contenders (the C program, which warms itself up) report their own figures.
 */
const interleaved = <K extends string, S extends string>(
  n: number,
  contenders: Record<K, (n: number) => Effect.Effect<void, unknown>>,
  selfTimed: Record<S, (n: number) => Best>
) =>
  Effect.gen(function*() {
    const names = Object.keys(contenders) as Array<K>
    for (const name of names) yield* warmUp(Math.min(n, WARMUP), contenders[name])
    const best: Partial<Record<K | S, Best>> = {}
    const keep = (name: K | S, round: Best) => {
      const kept = best[name]
      if (kept === undefined || round.us < kept.us) best[name] = round
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of names) {
        const cpu = process.cpuUsage()
        const t0 = performance.now()
        yield* contenders[name](n)
        const us = ((performance.now() - t0) * 1000) / n
        const used = process.cpuUsage(cpu)
        keep(name, { us, cpuUs: (used.user + used.system) / n })
      }
      for (const name of Object.keys(selfTimed) as Array<S>) keep(name, selfTimed[name](n))
    }
    return best
  })

/** A best round's figure, NaN for a contender not run (WRITE_ONLY). */
const usOf = (best: Best | undefined) => best?.us ?? NaN
const cpuOf = (best: Best | undefined) => best?.cpuUs ?? NaN

// ---- the C baseline ----

/** Each run of the C program listens on a port of its own (a port is not reused within a boot). */
let cPort = 7500

/** One run of the C program at one size (best of its 3 rounds after its own warm-up). */
const cRun = (bytes: number, latencyWrites: number, bandwidthWrites: number): Figures => {
  const out = execFileSync(cProgram, [address, String(cPort++), `${bytes}:${latencyWrites}:${bandwidthWrites}`], {
    encoding: "utf8"
  })
  const [, , , latencyUs, , bandwidthMBps, , latencyCpuUs, , bandwidthCpuUs] = out.trim().split(" ")
  return {
    latencyUs: Number(latencyUs),
    bandwidthMBps: Number(bandwidthMBps),
    latencyCpuUs: Number(latencyCpuUs),
    bandwidthCpuUs: Number(bandwidthCpuUs)
  }
}

// ---- a connection through the driver alone, for the breakdown ----

const rawConfig: Driver.Model.ConnConfig = {
  timeoutMs: 5000,
  sqSize: W,
  rqSize: 64,
  cqSize: W + 64,
  directWriteToPmem: false
}

const writeRequest = (
  id: number,
  dst: RemoteMr.RemoteMr,
  src: LocalMr.LocalMr<any>,
  slot: number,
  size: number
): Driver.Model.WorkRequest => ({
  op: "write",
  id,
  dst: Driver.handleOf(dst),
  dstOffset: slot * size,
  src: Driver.handleOf(src),
  srcOffset: slot * size,
  length: size
})

/** The first failed completion of `list`, as an error. */
const failed = (list: ReadonlyArray<RpmaBinding.WaitedCompletion>): Error | undefined => {
  const bad = list.find((c) => c.status !== 0)
  return bad === undefined ? undefined : new Error(`completion status ${bad.status}`)
}

/**
 * `count` writes, `window` in flight, through the addon alone, no Effect anywhere: post, take what
 * the queue holds already (pollCompletions), else wait on the completion channel with a
 * callback (waitCompletions): what the driver does, minus its Effects.
 */
const addonWrites = (
  binding: RpmaBinding.Binding,
  conn: Driver.Model.ConnHandle,
  dst: RemoteMr.RemoteMr,
  src: LocalMr.LocalMr<any>,
  size: number,
  count: number,
  window: number
) =>
  Effect.async<void, unknown>((resume) => {
    let posted = 0
    let completed = 0
    const pump = (error: unknown, waited: ReadonlyArray<RpmaBinding.WaitedCompletion> | undefined) => {
      if (error !== undefined && error !== null) return resume(Effect.fail(error))
      let list = waited
      for (;;) {
        if (list !== undefined) {
          const error = failed(list)
          if (error !== undefined) return resume(Effect.fail(error))
          completed += list.length
        }
        if (completed >= count) return resume(Effect.void)
        while (posted < count && posted - completed < window) {
          binding.post(conn, writeRequest(posted, dst, src, posted++ % W, size))
        }
        list = binding.pollCompletions(conn)
        if (list.length === 0) return void binding.waitCompletions(conn, pump)
      }
    }
    pump(undefined, undefined)
  })

/** Writes of {@link asyncWrites} whose completion the poll right after the post found. */
const pollFirst = { queued: 0, waited: 0 }

/**
 * `count` writes one at a time, each one Effect: post and poll from JavaScript, and when the
 * completion is not queued yet, one `Effect.async` resumed from the wait callback. The floor the
 * issue names for an idiomatic Effect wrapper of this addon (no table, no slots, no checks).
 */
const asyncWrites = (
  binding: RpmaBinding.Binding,
  conn: Driver.Model.ConnHandle,
  dst: RemoteMr.RemoteMr,
  src: LocalMr.LocalMr<any>,
  size: number,
  count: number
) => {
  const checked = (list: ReadonlyArray<RpmaBinding.WaitedCompletion>) => {
    const error = failed(list)
    return error === undefined ? Effect.void : Effect.fail(error)
  }
  const one = (i: number) =>
    Effect.suspend(() => {
      binding.post(conn, writeRequest(i, dst, src, 0, size))
      const list = binding.pollCompletions(conn)
      if (list.length > 0) {
        pollFirst.queued++
        return checked(list)
      }
      pollFirst.waited++
      return Effect.async<void, unknown>((resume) => {
        binding.waitCompletions(conn, (error, waited) =>
          resume(error !== undefined && error !== null ? Effect.fail(error) : checked(waited ?? [])))
      })
    })
  return Effect.gen(function*() {
    for (let i = 0; i < count; i++) yield* one(i)
  })
}

/** `count` writes one at a time through the driver's calls: postMany (in a span, as core's per-operation tracing does, or bare), then the completion. */
const driverWrites = (
  driver: Driver.Driver,
  conn: Driver.Model.ConnHandle,
  dst: RemoteMr.RemoteMr,
  src: LocalMr.LocalMr<any>,
  size: number,
  count: number,
  span: boolean
) =>
  Effect.gen(function*() {
    for (let i = 0; i < count; i++) {
      const wr = writeRequest(i, dst, src, 0, size)
      // What per-operation tracing wraps every post in (packages/core/src/internal/poster.ts).
      const completions = yield* span
        ? Effect.withSpan(postOne(driver, conn, wr), "rpma_post", {
          attributes: { "rdma.driver": driver.name, "rdma.op": wr.op, "rdma.size": size },
          captureStackTrace: false
        })
        : postOne(driver, conn, wr)
      if (completions.some((c) => c.status !== 0)) return yield* Effect.dieMessage("a write failed")
    }
  })

// ---- the benchmark ----

const regionUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

const program = Effect.gen(function*() {
  const driver = yield* Driver.RdmaDriver
  const binding = yield* RpmaBinding.RpmaBinding

  // The server: a region and an endpoint; each connection is held until the client closes it.
  const started = performance.now()
  const log = (line: string) =>
    Effect.sync(() => console.error(`[write ${((performance.now() - started) / 1000).toFixed(1)} s] ${line}`))
  const peer = yield* Peer.make(address)
  const region = yield* LocalMr.allocate(peer, W * MAX_SIZE, regionUsage)
  const endpoint = yield* Listener.make(peer, address, oursPort)
  yield* Listener.requests(endpoint).pipe(
    Stream.runForEach((req) =>
      Effect.scoped(
        Effect.flatMap(Listener.accept(req), (conn) =>
          Stream.runForEach(Connection.changes(conn), (state) => log(`server connection: ${state}`)))
      ).pipe(
        Effect.catchAllCause((cause) =>
          log(`server connection failed: ${Cause.pretty(cause)}`)
        ),
        Effect.fork
      )
    ),
    Effect.forkScoped
  )

  // The client: the descriptor goes through memory (same process), then a connection per measurement.
  const dst = yield* LocalMr.descriptor(region).pipe(
    Effect.flatMap((bytes) => RemoteMr.fromDescriptor(bytes)),
    Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
  )
  const src = yield* LocalMr.allocate(peer, W * MAX_SIZE, Usage.WRITE_SRC)
  src.memory.fill(0xa5)

  const conn = yield* Connection.connect(peer, address, oursPort, { sendQueueSize: W })
  yield* Effect.forkScoped(Stream.runForEach(Connection.changes(conn), (state) => log(`client connection: ${state}`)))
  const raw = yield* rawConnection(driver, peer, address, rawPort, rawConfig)

  const ours = new Map<number, Figures>()
  const addon = new Map<number, Figures>()
  const driverLatency = new Map<number, number>()
  const asyncLatency = new Map<number, number>()
  const c = new Map<number, Figures>()

  const latencyContenders = (bytes: number) => ({
    ours: (k: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < k; i++) {
          yield* Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: bytes })
        }
      }),
    addon: (k: number) => addonWrites(binding, raw, dst, src, bytes, k, 1),
    async: (k: number) => asyncWrites(binding, raw, dst, src, bytes, k),
    driver: (k: number) => driverWrites(driver, raw, dst, src, bytes, k, false)
  })
  // The batch path: one writeMany of all k writes, each to its slot of W; its window slides (a
  // request is posted as each one completes, as the C program and the addon row do), where a
  // writeMany per W writes would drain the queue at every batch's end.
  const bandwidthContenders = (bytes: number) => {
    const spansOf = (k: number) =>
      Array.from({ length: k }, (_, i) => ({ dstOffset: (i % W) * bytes, srcOffset: (i % W) * bytes, length: bytes }))
    const spans = new Map<number, ReturnType<typeof spansOf>>()
    return {
      ours: (k: number) =>
        Effect.suspend(() => {
          if (!spans.has(k)) spans.set(k, spansOf(k))
          return Connection.writeMany(conn, spans.get(k)!.map((span) => ({ dst, src, ...span })))
        }),
      addon: (k: number) => addonWrites(binding, raw, dst, src, bytes, k, W)
    }
  }
  // A first pass over everything, unmeasured: the first size measured still came out slowest
  // (2-4x the addon at 64 B against 1.1-1.9x at 4 KiB in the same runs) while the JIT settled.
  for (const [bytes] of sizes) {
    const all = [
      ...Object.values(pick("latency", latencyContenders(bytes))),
      ...Object.values(pick("bandwidth", bandwidthContenders(bytes)))
    ]
    for (const run of all) {
      yield* warmUp(WARMUP, run)
    }
  }
  yield* log("warmed up")
  pollFirst.queued = pollFirst.waited = 0

  for (const [bytes, , n, m] of sizes) {
    const latency = yield* interleaved(
      n,
      pick("latency", latencyContenders(bytes)),
      pick("latency", {
        c: (k: number) => {
          const f = cRun(bytes, k, W)
          return { us: f.latencyUs, cpuUs: f.latencyCpuUs }
        }
      })
    )
    yield* log(`latency ${bytes} B, µs per write: ${JSON.stringify(latency)}`)
    yield* log(
      `completion queued at the poll right after the post in ${pollFirst.queued} of ${
        pollFirst.queued + pollFirst.waited
      } writes`
    )
    pollFirst.queued = pollFirst.waited = 0
    const bandwidth = yield* interleaved(
      m,
      pick("bandwidth", bandwidthContenders(bytes)),
      pick("bandwidth", {
        c: (k: number) => {
          const f = cRun(bytes, 10, k)
          return { us: bytes / f.bandwidthMBps, cpuUs: f.bandwidthCpuUs }
        }
      })
    )
    yield* log(`bandwidth ${bytes} B, µs per write: ${JSON.stringify(bandwidth)}`)
    // µs per write to 10^6 bytes per second.
    const figures = (name: "ours" | "addon" | "c"): Figures => ({
      latencyUs: usOf(latency[name]),
      bandwidthMBps: bytes / usOf(bandwidth[name]),
      latencyCpuUs: cpuOf(latency[name]),
      bandwidthCpuUs: cpuOf(bandwidth[name])
    })
    ours.set(bytes, figures("ours"))
    addon.set(bytes, figures("addon"))
    driverLatency.set(bytes, usOf(latency.driver))
    asyncLatency.set(bytes, usOf(latency.async))
    c.set(bytes, figures("c"))
  }

  const rows: Array<Row> = []
  const us = (x: number) => `${x.toFixed(1)} µs`
  const mbps = (x: number) => `${x.toFixed(2)} MB/s`
  const cpu = (x: number) => `CPU ${x.toFixed(1)} µs/write`
  for (const [bytes, label] of sizes) {
    const o = ours.get(bytes)!
    const b = c.get(bytes)!
    const a = addon.get(bytes)!
    const d = driverLatency.get(bytes) ?? NaN
    // Issue 12: 64 B latency <= 1.5x the addon called from JS callbacks (under TCG the addon's own
    // floor is already ~2x C, so C is printed as a second baseline, informative).
    const latencyTarget = bytes === 64 ? 1.5 : undefined
    // Issue 35: 16 in flight, at least 0.95x C's bandwidth at 64 KiB and 0.6x at 64 B.
    const bandwidthTarget = bytes === 65536 ? 0.95 : bytes === 64 ? 0.6 : undefined
    rows.push({
      what: `Connection.write latency ${label}`,
      ours: `${us(o.latencyUs)} (${cpu(o.latencyCpuUs)})`,
      baseline: `${us(a.latencyUs)} (the addon from JS callbacks, no Effect; ${cpu(a.latencyCpuUs)})`,
      ratio: o.latencyUs / a.latencyUs,
      target: latencyTarget === undefined ? "informative" : `≤ ${latencyTarget}×`,
      met: latencyTarget === undefined ? undefined : o.latencyUs / a.latencyUs <= latencyTarget
    })
    rows.push({
      what: `  against C: Connection.write latency ${label}`,
      ours: us(o.latencyUs),
      baseline: `${us(b.latencyUs)} (C: rpma_write + rpma_cq_wait + rpma_cq_get_wc; ${cpu(b.latencyCpuUs)})`,
      ratio: o.latencyUs / b.latencyUs,
      target: "",
      met: undefined
    })
    rows.push({
      what: `  breakdown: latency ${label}, addon from JS callbacks (no Effect)`,
      ours: us(a.latencyUs),
      baseline: us(b.latencyUs),
      ratio: a.latencyUs / b.latencyUs,
      target: "",
      met: undefined
    })
    const f = asyncLatency.get(bytes) ?? NaN
    rows.push({
      what: `  floor: latency ${label}, one Effect.async per write over the addon (post, poll, wait callback)`,
      ours: us(f),
      baseline: `${us(a.latencyUs)} (the addon from JS callbacks)`,
      ratio: f / a.latencyUs,
      target: "",
      met: undefined
    })
    rows.push({
      what: `  breakdown: latency ${label}, driver calls (postMany + armCompletions)`,
      ours: us(d),
      baseline: us(b.latencyUs),
      ratio: d / b.latencyUs,
      target: "",
      met: undefined
    })
    rows.push({
      what: `Connection.writeMany bandwidth ${label}, ${W} in flight`,
      ours: `${mbps(o.bandwidthMBps)} (${cpu(o.bandwidthCpuUs)})`,
      baseline: `${mbps(b.bandwidthMBps)} (C: window of ${W}; ${cpu(b.bandwidthCpuUs)})`,
      ratio: b.bandwidthMBps / o.bandwidthMBps,
      target: bandwidthTarget === undefined
        ? "informative"
        : `≥ ${bandwidthTarget}× of C (ratio ≤ ${(1 / bandwidthTarget).toFixed(2)}×)`,
      met: bandwidthTarget === undefined ? undefined : o.bandwidthMBps / b.bandwidthMBps >= bandwidthTarget
    })
    rows.push({
      what: `  breakdown: bandwidth ${label}, addon from JS callbacks (no Effect)`,
      ours: `${mbps(a.bandwidthMBps)} (${cpu(a.bandwidthCpuUs)})`,
      baseline: mbps(b.bandwidthMBps),
      ratio: b.bandwidthMBps / a.bandwidthMBps,
      target: "",
      met: undefined
    })
  }
  return rows
})

const layer = Layer.provideMerge(NativeDriver.layerWithBinding, RpmaBinding.layer)
printTable(await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(layer))))
