/**
 * Polling where it pays (issue 35), run inside the Soft-RoCE VM (bench/device.sh polling): the
 * latency rows, waiting against polling, each against C in the same boot, with the process's CPU
 * per operation and the event loop's delay while it runs (monitorEventLoopDelay, p99 and max):
 *
 *   librpma  Connection.write 64 B, one in flight (C: bench/c/write_bench.c, rpma_cq_wait)
 *   cm       CmEndpoint.call 64 B ping-pong against a CmEndpoint.reply echo, in another process
 *            (waiting; this program run with POLLING_ROLE=echo) and in this one, and against C's
 *            echo in another process (bench/c/cm_bench.c `serve`: a peer that answers in C's time)
 *            (C: bench/c/cm_bench.c, a server thread)
 *
 * Settings: "off" (arm and wait), { budget: 100 µs } (a fixed spin), "adaptive". Rounds are
 * interleaved; each row is judged by the median over rounds of its ratio to C in the same round.
 *
 *   POLLING_SCALE=0.2 (scales every count), POLLING_ROUNDS=5, POLLING_PARTS=write,pingpong,remote,fast
 */
import {
  CmEndpoint,
  CmListener,
  Connection,
  Listener,
  LocalMr,
  Memory,
  Peer,
  Polling,
  RemoteMr,
  Usage
} from "@effect-rdma/core"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { Cause, Effect, Layer, Stream } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { options as cmOptions, oursCallPingPong, oursPair } from "./cmPairs.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: run this inside the VM (bench/device.sh)")
const scale = Number(process.env.POLLING_SCALE ?? "1")
const ROUNDS = Number(process.env.POLLING_ROUNDS ?? "5")
const writes = Math.max(20, Math.round(1000 * scale))
const trips = Math.max(20, Math.round(500 * scale))
const W = 16

const SETTINGS: ReadonlyArray<readonly [string, Polling.Polling]> = [
  ["waiting", "off"],
  ["polling 100 µs", { budget: "100 micros" }],
  ["adaptive", "adaptive"]
]

const log = (line: string) => Effect.sync(() => console.error(`[polling] ${line}`))

/** One measured run: µs per operation, CPU µs per operation, the loop's delay p99 and max (ms). */
interface Measured {
  readonly us: number
  readonly cpuUs: number
  readonly p99Ms: number
  readonly maxMs: number
}

const measure = (n: number, run: Effect.Effect<void, unknown>): Effect.Effect<Measured, unknown> =>
  Effect.suspend(() => {
    const delay = monitorEventLoopDelay({ resolution: 1 })
    delay.enable()
    const cpu = process.cpuUsage()
    const t0 = performance.now()
    return Effect.map(run, () => {
      const us = ((performance.now() - t0) * 1000) / n
      const used = process.cpuUsage(cpu)
      delay.disable()
      return {
        us,
        cpuUs: (used.user + used.system) / n,
        p99Ms: delay.percentile(99) / 1e6,
        maxMs: delay.max / 1e6
      }
    })
  })

/** C's figure and CPU µs per unit (its own process: cpu from its rusage line where it prints one). */
let cPort = 7900
const cWrite = (k: number): Measured => {
  const out = execFileSync(process.env.WRITE_BENCH ?? "bench/.build/write_bench", [
    address,
    String(cPort++),
    `64:${k}:${W}`
  ], { encoding: "utf8" }).trim().split(" ")
  return { us: Number(out[3]), cpuUs: NaN, p99Ms: NaN, maxMs: NaN }
}
const cPingPong = (k: number): Measured => {
  const out = execFileSync(process.env.CM_BENCH ?? "bench/.build/cm_bench", [
    address,
    String(cPort++),
    `pingpong:64:${k}`
  ], { encoding: "utf8" }).trim().split(" ")
  return { us: Number(out[3]), cpuUs: Number(out[5]), p99Ms: NaN, maxMs: NaN }
}

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

/** Interleaved rounds of every setting and C; per setting: median of each figure, median ratio to C. */
const rounds = (
  n: number,
  contenders: ReadonlyArray<readonly [string, (k: number) => Effect.Effect<void, unknown>]>,
  c: (k: number) => Measured
) =>
  Effect.gen(function*() {
    for (const [, run] of contenders) yield* run(Math.max(10, Math.round(n / 4)))
    const seen = new Map<string, Array<Measured & { ratio: number }>>()
    const cs: Array<Measured> = []
    for (let round = 0; round < ROUNDS; round++) {
      const cFigure = c(n)
      cs.push(cFigure)
      for (const [name, run] of contenders) {
        const m = yield* measure(n, run(n))
        const list = seen.get(name) ?? []
        list.push({ ...m, ratio: m.us / cFigure.us })
        seen.set(name, list)
      }
    }
    const c50 = { us: median(cs.map((x) => x.us)), cpuUs: median(cs.map((x) => x.cpuUs)) }
    const rows = [...seen].map(([name, list]) => ({
      name,
      us: median(list.map((x) => x.us)),
      cpuUs: median(list.map((x) => x.cpuUs)),
      p99Ms: median(list.map((x) => x.p99Ms)),
      maxMs: Math.max(...list.map((x) => x.maxMs)),
      ratio: median(list.map((x) => x.ratio))
    }))
    return { c: c50, rows }
  })

const print = (what: string, target: number, result: Effect.Effect.Success<ReturnType<typeof rounds>>) => {
  console.log(
    `\n${what}: C ${result.c.us.toFixed(1)} µs` +
      (Number.isNaN(result.c.cpuUs) ? "" : ` (CPU ${result.c.cpuUs.toFixed(1)} µs/op)`)
  )
  console.log("| setting | µs per op | ours / C (median of rounds) | target | CPU µs per op | loop delay p99 / max |")
  console.log("| --- | --- | --- | --- | --- | --- |")
  for (const r of result.rows) {
    console.log(
      `| ${r.name} | ${r.us.toFixed(1)} | ${r.ratio.toFixed(2)}× | ≤ ${target}× ${
        r.ratio <= target ? "met" : "not met"
      } | ${r.cpuUs.toFixed(1)} | ${r.p99Ms.toFixed(2)} / ${r.maxMs.toFixed(2)} ms |`
    )
  }
}

const program = (parts: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const region = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.READ_SRC))
    const listener = yield* Listener.make(peer, address, 7881)
    yield* Listener.requests(listener).pipe(
      Stream.runForEach((req) =>
        Effect.scoped(Effect.zipRight(Listener.accept(req), Effect.never)).pipe(
          Effect.catchAllCause((cause) => log(`server connection failed: ${Cause.pretty(cause)}`)),
          Effect.fork
        )
      ),
      Effect.forkScoped
    )
    const dst = yield* LocalMr.descriptor(region).pipe(
      Effect.flatMap((bytes) => RemoteMr.fromDescriptor(bytes)),
      Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
    )
    const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
    const writers = yield* Effect.forEach(SETTINGS, ([name, polling]) =>
      Effect.map(
        Connection.connect(peer, address, 7881, { sendQueueSize: W, polling }),
        (conn) =>
          [name, (k: number) =>
            Effect.gen(function*() {
              for (let i = 0; i < k; i++) {
                yield* Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64 })
              }
            })] as const
      ))
    yield* log(`writes: ${writes} per round, ${ROUNDS} rounds`)
    if (parts.includes("write")) {
      print("librpma Connection.write 64 B latency", 2, yield* rounds(writes, writers, cWrite))
    }
    if (!parts.includes("pingpong")) return

    const pairs = yield* Effect.forEach(SETTINGS, ([name, polling]) =>
      Effect.map(
        Effect.locally(oursPair(address), Polling.current, polling),
        (pair) => [name, (k: number) => oursCallPingPong(pair, k)] as const
      ))
    yield* log(`round trips: ${trips} per round, ${ROUNDS} rounds`)
    print("CmEndpoint.call 64 B ping-pong, echo in this process", 3, yield* rounds(trips, pairs, cPingPong))
  })

const ECHO_PORT = 7882

/** The echo process: every request accepted, each message echoed with CmEndpoint.reply, waiting. */
const echo = Effect.gen(function*() {
  const listener = yield* CmListener.make(address, ECHO_PORT, cmOptions)
  console.log("listening")
  yield* CmListener.requests(listener).pipe(
    Stream.runForEach((request) =>
      Effect.scoped(Effect.gen(function*() {
        const messages = yield* CmEndpoint.registerMessages(request, yield* Memory.allocate(128))
        let posted = yield* CmEndpoint.postRecv(request, { segments: [{ mr: messages, offset: 0, length: 64 }] })
        yield* CmListener.accept(request)
        for (let slot = 0;; slot = 1 - slot) {
          const message = yield* posted.completion
          posted = yield* CmEndpoint.reply(request, {
            recv: { dst: messages, offset: (1 - slot) * 64, length: 64 },
            send: { src: messages, offset: slot * 64, length: message.byteLength }
          })
        }
      })).pipe(Effect.catchAllCause(() => Effect.void), Effect.fork)
    )
  )
})

/** An echo process (`command` with `args`), started, and its "listening" awaited (bounded). */
const startEcho = (command: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = process.env) =>
  Effect.acquireRelease(
    Effect.async<ReturnType<typeof spawn>, Error>((resume) => {
      const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "inherit"] })
      const timer = setTimeout(
        () => resume(Effect.fail(new Error(`the echo process (${command}) did not listen within 60 s`))),
        60_000
      )
      child.stdout!.on("data", (data: Buffer) => {
        if (data.toString().includes("listening")) {
          clearTimeout(timer)
          resume(Effect.succeed(child))
        }
      })
    }),
    (child) => Effect.sync(() => child.kill())
  )

/** A client endpoint to the echo process at `port` under `polling`. */
const remotePair = (polling: Polling.Polling, port = ECHO_PORT) =>
  Effect.gen(function*() {
    const client = yield* CmEndpoint.make(address, port, { ...cmOptions, polling })
    const local = yield* CmEndpoint.registerMessages(client, yield* Memory.allocate(64 + 16 * 65536 + 64))
    yield* CmEndpoint.establish(client)
    return { client, local }
  })

const crossProcess = Effect.gen(function*() {
  yield* startEcho(process.execPath, [process.argv[1]!], { ...process.env, POLLING_ROLE: "echo" })
  const pairs = yield* Effect.forEach(
    SETTINGS,
    ([name, polling]) =>
      Effect.map(remotePair(polling), (pair) => [name, (k: number) => oursCallPingPong(pair, k)] as const)
  )
  print("CmEndpoint.call 64 B ping-pong, echo in another process (waiting)", 3, yield* rounds(trips, pairs, cPingPong))
})

/**
 * The same client against C's echo (cm_bench.c's server alone, blocking in rdma_get_recv_comp) in
 * another process, one per setting (it serves one client): a peer that answers in C's time, where
 * a spin can catch the answer. What polling buys our side of a round trip.
 */
const againstC = Effect.gen(function*() {
  const pairs = yield* Effect.forEach(SETTINGS, ([name, polling], i) =>
    Effect.gen(function*() {
      const port = ECHO_PORT + 10 + i
      yield* startEcho(process.env.CM_BENCH ?? "bench/.build/cm_bench", [address, String(port), "serve"])
      const pair = yield* remotePair(polling, port)
      return [name, (k: number) => oursCallPingPong(pair, k)] as const
    }))
  print(
    "CmEndpoint.call 64 B ping-pong, C's echo in another process (blocking waits)",
    3,
    yield* rounds(trips, pairs, cPingPong)
  )
})

const layer = Layer.provideMerge(NativeDriver.layerWithBinding, RpmaBinding.layer)
if (process.env.POLLING_ROLE === "echo") {
  await Effect.runPromise(Effect.scoped(echo).pipe(Effect.provide(layer)))
} else {
  const parts = process.env.POLLING_PARTS?.split(",") ?? ["write", "pingpong", "remote", "fast"]
  await Effect.runPromise(
    Effect.scoped(Effect.gen(function*() {
      if (parts.includes("fast")) yield* Effect.scoped(againstC)
      if (parts.includes("remote")) yield* crossProcess
      if (parts.includes("write") || parts.includes("pingpong")) yield* program(parts)
    })).pipe(Effect.provide(layer))
  )
}
