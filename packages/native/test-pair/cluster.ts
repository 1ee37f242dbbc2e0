/**
 * @effect/cluster across two hosts (vm/pair): two runners of @effect-rdma/cluster, one per VM, each
 * a process of its own (packages/cluster/test-pair/node.ts, bundled), their runner-to-runner
 * protocols over RDMA on the wire, cluster's message and runner storage (and the counters) in one
 * PostgreSQL database in VM a (postgres.ts) that the runner on VM b reaches over TCP on the same
 * wire. The agent starts, kills and stops the runner on a (`{ cluster: ... }` requests); this side
 * runs the one on b. One test, in phases, each with its bound:
 *
 * 1. counters called from each runner, served by both (calls cross the wire both ways);
 * 2. the link cut for CUT_S and repaired: calls from both runners answered within RESUME_BOUND_S
 *    of the repair, each counter incremented exactly once per call;
 * 3. the runner on a SIGKILLed while b calls, left down: b takes over a's shards and every call of
 *    b is answered, by b, within TAKEOVER_BOUND_S of the kill (the messages b stored for a's shards
 *    meanwhile are delivered there); then a restarted: a holding its shards again within
 *    SETTLE_BOUND_S, no increment lost; a counter counts an increment twice only as cluster's
 *    at-least-once rule allows: at most once per time its shard left a runner mid-handler (a's
 *    shards: the kill, b handing them back to the restarted a; any runner's: a force release when
 *    its lock storage turned unhealthy, which it logs);
 * 4. both runners stopped (SIGTERM): Driver.live zero in each process.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { resolveAddon } from "../src/internal/load.js"
import type { FaultContext } from "./faults.js"
import { type Channel, check, fail, fault, log, type Message, PairFailure, seconds } from "./harness.js"
import { PG_PORT, startPostgres, stopPostgres } from "./postgres.js"

/** The runner process, bundled by scripts/test-pair beside its source. */
const nodeScript = fileURLToPath(new URL("../../../cluster/test-pair/build/node.mjs", import.meta.url))

const PORT_A = 17501
const PORT_B = 17502
const COUNTERS = 20
const KILL_ROUNDS = 8

/** How long a runner process may take to start serving under emulation (node, bundle, layers, PostgreSQL). */
const START_S = 180
/** The link is down this long: longer than the channels' keepalive + timeout (5 + 5 s), so they are lost. */
const CUT_S = 12
/**
 * After the repair: the RDMA connections lost in the cut are dialled again on the next message, and
 * b's PostgreSQL connections (TCP) resume at their next retransmission, which after a 12 s cut may
 * come up to ~13 s later; then each call is stored, sent and answered, under emulation (measured:
 * 12.5-19.6 s).
 */
const RESUME_BOUND_S = 90
/**
 * After the kill, a left down: b's health check finds a gone, b's share becomes every shard, and it
 * acquires a's once a's locks expire (shardLockExpiration, 30 s), then delivers the messages it
 * stored for them meanwhile; b's rounds then end.
 */
const TAKEOVER_BOUND_S = 240
/** Both runners holding their share of the shards (15 of 30 each). */
const SETTLE_BOUND_S = 90

const Counts = Schema.parseJson(Schema.Array(Schema.Struct({ value: Schema.Number, runner: Schema.String })))
const decodeCounts = Schema.decodeUnknown(Counts)

// ---------------------------------------------------------------------------------------------
// A runner process, on either VM.

interface RunnerProcess {
  readonly name: string
  readonly child: ChildProcess
  /** The next line matching `pattern` (earlier ones skipped), within `seconds`; fails if the process ends. */
  readonly line: (pattern: RegExp, seconds: number) => Effect.Effect<RegExpExecArray, PairFailure>
  readonly send: (line: string) => void
  readonly exited: Promise<number | string>
  /**
   * How often it logged "Shard lock storage is unhealthy": a shard lock refresh that did not finish
   * within shardLockRefreshInterval, after which cluster force-releases every shard the runner
   * holds, interrupting the handlers running there (their persisted messages are delivered again).
   */
  readonly unhealthy: () => number
}

const startRunner = (name: string, args: ReadonlyArray<string>): RunnerProcess => {
  const child = spawn(process.execPath, ["--enable-source-maps", nodeScript, ...args], {
    stdio: ["pipe", "pipe", "pipe"]
  })
  child.stdin!.on("error", () => {})
  const lines: Array<string> = []
  let wake = () => {}
  let stderr = ""
  let unhealthy = 0
  createLines(child.stdout!, (line) => {
    if (line.includes("Shard lock storage is unhealthy")) unhealthy++
    console.log(`${name}| ${line.length > 200 ? line.slice(0, 200) + "..." : line}`)
    lines.push(line)
    wake()
  })
  createLines(child.stderr!, (line) => {
    console.log(`${name}! ${line}`)
    stderr = (stderr + "\n" + line).slice(-2000)
  })
  const exited = new Promise<number | string>((resolve) =>
    child.on("exit", (code, signal) => {
      console.log(`${name}| exited (${signal ?? code})`)
      resolve(code ?? signal ?? "unknown")
      wake()
    })
  )
  const line = (pattern: RegExp, seconds: number) =>
    Effect.async<RegExpExecArray, PairFailure>((resume) => {
      const look = () => {
        while (lines.length > 0) {
          const found = pattern.exec(lines.shift()!)
          if (found !== null) {
            wake = () => {}
            return resume(Effect.succeed(found))
          }
        }
        if (child.exitCode !== null || child.signalCode !== null) {
          wake = () => {}
          resume(fail(`runner ${name} ended (${child.signalCode ?? child.exitCode}) before ${pattern}: ${stderr}`))
        }
      }
      wake = look
      look()
      return Effect.sync(() => (wake = () => {}))
    }).pipe(
      Effect.timeoutFail({
        duration: Duration.seconds(seconds),
        onTimeout: () => new PairFailure({ message: `runner ${name}: no ${pattern} within ${seconds} s` })
      })
    )
  return { name, child, line, send: (text) => void child.stdin!.write(text + "\n"), exited, unhealthy: () => unhealthy }
}

const createLines = (stream: NodeJS.ReadableStream, onLine: (line: string) => void) => {
  let buffer = ""
  stream.setEncoding("utf8")
  stream.on("data", (chunk: string) => {
    buffer += chunk
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      onLine(buffer.slice(0, i))
      buffer = buffer.slice(i + 1)
    }
  })
}

const runnerArgs = (address: string, port: number, pgHost: string) => [
  address,
  String(port),
  pgHost,
  String(PG_PORT),
  resolveAddon()
]

/** Starts a runner and waits until it serves; a "failed" line fails it. */
const started = (runner: RunnerProcess) =>
  Effect.gen(function*() {
    const from = performance.now()
    const m = yield* runner.line(/^(serving|failed.*)$/, START_S)
    if (m[1] !== "serving") return yield* fail(`runner ${runner.name} did not start: ${m[1]}`)
    return seconds(from)
  })

/** Waits for the answer to a command sent earlier: `called <json>` (decoded) or `failed <cause>` (a failure). */
const answered = (runner: RunnerProcess, command: string, bound: number) =>
  Effect.gen(function*() {
    const m = yield* runner.line(/^(called|failed) (.*)$/, bound)
    if (m[1] === "failed") return yield* fail(`runner ${runner.name}: "${command}" failed: ${m[2]}`)
    return yield* Effect.mapError(
      decodeCounts(m[2]),
      (e) => new PairFailure({ message: `runner ${runner.name}: answers not understood: ${e.message}` })
    )
  })

/** Sends a command, and waits for its answer. */
const call = (runner: RunnerProcess, command: string, bound: number) =>
  Effect.zipRight(Effect.sync(() => runner.send(command)), answered(runner, command, bound))

/** SIGTERM; the runner prints what its driver still holds and exits. */
const stopped = (runner: RunnerProcess) =>
  Effect.gen(function*() {
    runner.child.kill("SIGTERM")
    const m = yield* runner.line(/^live (.*)$/, 120)
    const code = yield* Effect.promise(() => runner.exited)
    return { live: JSON.parse(m[1]!) as Record<string, number>, code }
  })

const killed = (runner: RunnerProcess) =>
  Effect.gen(function*() {
    if (runner.child.exitCode !== null || runner.child.signalCode !== null) {
      return yield* Effect.promise(() => runner.exited)
    }
    runner.child.kill("SIGKILL")
    return yield* Effect.promise(() => runner.exited)
  })

// ---------------------------------------------------------------------------------------------
// VM a: the agent runs PostgreSQL and the runner on a, as the test on b asks.

let runnerA: RunnerProcess | undefined

/** Answers the runner's `{ cluster: ... }` requests, one answer each (`{ clusterDone: true, ok, ... }`). */
export const clusterRequest = (channel: Channel, address: string, m: Message): Effect.Effect<void> =>
  Effect.gen(function*() {
    const answer = (fields: Message) =>
      channel.send({ clusterDone: m.cluster, ok: true, unhealthy: runnerA?.unhealthy() ?? 0, ...fields })
    const request: Effect.Effect<Message, PairFailure> = Effect.gen(function*() {
      switch (m.cluster) {
        case "postgres":
          return { seconds: yield* startPostgres(address) }
        case "start": {
          if (runnerA !== undefined && runnerA.child.exitCode === null && runnerA.child.signalCode === null) {
            return yield* fail("the runner on a is already running")
          }
          runnerA = startRunner("runner a", runnerArgs(address, PORT_A, address))
          return { seconds: yield* started(runnerA) }
        }
        case "settle": {
          if (runnerA === undefined) return yield* fail("no runner on a")
          runnerA.send(`settle ${m.runners}`)
          const from = performance.now()
          yield* runnerA.line(/^settled/, m.seconds)
          return { seconds: seconds(from) }
        }
        case "call": {
          if (runnerA === undefined) return yield* fail("no runner on a")
          const from = performance.now()
          const counts = yield* call(runnerA, m.command, m.seconds)
          return { counts, seconds: seconds(from) }
        }
        case "kill":
          if (runnerA === undefined) return yield* fail("no runner on a")
          return { exited: yield* killed(runnerA) }
        case "stop": {
          if (runnerA === undefined) return yield* fail("no runner on a")
          const runner = runnerA
          runnerA = undefined
          return yield* stopped(runner)
        }
        case "cleanup":
          if (runnerA !== undefined) yield* killed(runnerA)
          runnerA = undefined
          yield* stopPostgres
          return {}
        default:
          return yield* fail(`unknown cluster request ${JSON.stringify(m.cluster)}`)
      }
    })
    yield* request.pipe(
      Effect.flatMap(answer),
      Effect.catchAll((e) => channel.send({ clusterDone: m.cluster, ok: false, error: e.message }))
    )
  })

/** What the agent does at its end: nothing of the suite left running. */
export const clusterCleanup: Effect.Effect<void> = Effect.gen(function*() {
  if (runnerA !== undefined) yield* killed(runnerA)
  runnerA = undefined
  yield* stopPostgres
})

// ---------------------------------------------------------------------------------------------
// VM b: the test.

const ask = (channel: Channel, request: Message, bound: number) =>
  Effect.gen(function*() {
    yield* channel.send(request)
    const m = yield* channel.receive(bound + 30)
    if (m.clusterDone !== request.cluster) {
      return yield* fail(`asked a for ${request.cluster}, got ${JSON.stringify(m).slice(0, 300)}`)
    }
    if (m.ok !== true) return yield* fail(`on a, ${request.cluster}: ${m.error}`)
    return m
  })

type Count = { readonly value: number; readonly runner: string }

const runnersOf = (counts: ReadonlyArray<Count>) => [...new Set(counts.map((c) => c.runner))].sort()

const scenario = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { channel } = ctx
    const addressA = `${ctx.serverAddress}:${PORT_A}`
    const addressB = `${ctx.address}:${PORT_B}`
    const both = [addressA, addressB].sort()

    const pg = yield* ask(channel, { cluster: "postgres" }, 120)
    yield* ctx.note(`PostgreSQL on a accepting connections after ${Number(pg.seconds).toFixed(1)} s`)
    // One after the other: cluster's storage makes its tables at start-up, and two concurrent
    // CREATE TABLE IF NOT EXISTS can collide in PostgreSQL's catalogue.
    const startA = yield* ask(channel, { cluster: "start" }, START_S)
    const b = startRunner("runner b", runnerArgs(ctx.address, PORT_B, ctx.serverAddress))
    yield* Effect.addFinalizer(() => Effect.asVoid(killed(b)))
    const startB = yield* started(b)
    yield* ctx.note(`runners serving: a after ${Number(startA.seconds).toFixed(1)} s, b after ${startB.toFixed(1)} s`)

    const settle = Effect.gen(function*() {
      const from = performance.now()
      b.send("settle 2")
      yield* Effect.all([
        ask(channel, { cluster: "settle", runners: 2, seconds: SETTLE_BOUND_S }, SETTLE_BOUND_S),
        b.line(/^settled/, SETTLE_BOUND_S)
      ], { concurrency: "unbounded" })
      return seconds(from)
    })
    yield* ctx.note(`shards split 15/15 after ${(yield* settle).toFixed(1)} s`)

    // 1. Calls from each runner, served by both.
    const callA = (command: string, bound: number) =>
      Effect.map(
        ask(channel, { cluster: "call", command, seconds: bound }, bound),
        (m) => m.counts as ReadonlyArray<Count>
      )
    const fromA = yield* callA(`call 0 ${COUNTERS} 1`, 120)
    yield* check(fromA.every((c) => c.value === 1), `a's first calls: values ${fromA.map((c) => c.value)}, not all 1`)
    yield* check(
      JSON.stringify(runnersOf(fromA)) === JSON.stringify(both),
      `a's calls were served by ${runnersOf(fromA)}, not both`
    )
    const fromB = yield* call(b, `call 0 ${COUNTERS} 2`, 120)
    yield* check(fromB.every((c) => c.value === 3), `b's calls: values ${fromB.map((c) => c.value)}, not all 3`)
    yield* check(
      JSON.stringify(runnersOf(fromB)) === JSON.stringify(both),
      `b's calls were served by ${runnersOf(fromB)}, not both`
    )
    const crossed = fromB.filter((c) => c.runner === addressA).length
    yield* ctx.note(`calls from a and from b answered by both runners (${crossed} of b's ${COUNTERS} by a)`)
    yield* log(`cluster: calls from both runners answered`)

    // 2. The link cut and repaired.
    yield* fault("link", "peer", "off")
    yield* log(`cluster: link cut for ${CUT_S} s`)
    yield* Effect.sleep(Duration.seconds(CUT_S))
    yield* fault("link", "peer", "on")
    const repairedAt = performance.now()
    const [afterA, afterB] = yield* Effect.all([
      Effect.zip(callA(`call 0 ${COUNTERS} 8`, RESUME_BOUND_S), Effect.sync(() => seconds(repairedAt))),
      Effect.zip(call(b, `call 0 ${COUNTERS} 4`, RESUME_BOUND_S), Effect.sync(() => seconds(repairedAt)))
    ], { concurrency: "unbounded" })
    yield* ctx.note(
      `after a ${CUT_S} s cut: a's calls answered ${afterA[1].toFixed(1)} s after the repair, b's ${
        afterB[1].toFixed(1)
      } s (bound ${RESUME_BOUND_S} s)`
    )
    yield* check(
      Math.max(afterA[1], afterB[1]) <= RESUME_BOUND_S,
      `calls answered ${Math.max(afterA[1], afterB[1]).toFixed(1)} s after the repair, over ${RESUME_BOUND_S} s`
    )
    // 3 + 8 from a and 4 from b, in either order: the later answer of each counter is 15.
    const latest = afterA[0].map((c, i) => Math.max(c.value, afterB[0][i]!.value))
    yield* check(latest.every((v) => v === 15), `after the cut, counters at ${latest}, not 15 (lost or repeated)`)
    yield* ctx.note(`shards split again ${(yield* settle).toFixed(1)} s after the calls`)

    // 3. The runner on a killed mid-traffic: b takes over its shards; then a restarted.
    const before = yield* call(b, `call 0 ${COUNTERS} 0`, 60)
    yield* check(before.every((c) => c.value === 15), `before the kill, counters at ${before.map((c) => c.value)}`)
    const ownedByA = before.map((c) => c.runner === addressA)
    const unhealthyB = b.unhealthy()
    const rounds = `call 0 ${COUNTERS} 1 ${KILL_ROUNDS}`
    b.send(rounds)
    yield* b.line(/^round 2$/, 120)
    const exited = yield* ask(channel, { cluster: "kill" }, 30)
    const killedAt = performance.now()
    yield* log(`cluster: runner a killed (${exited.exited}) while b calls`)
    yield* check(exited.exited === "SIGKILL", `the runner on a ended with ${exited.exited}, not SIGKILL`)
    const lastRound = yield* answered(b, rounds, TAKEOVER_BOUND_S)
    const takeoverS = seconds(killedAt)
    yield* ctx.note(
      `a down: every call of b answered ${
        takeoverS.toFixed(1)
      } s after the kill (bound ${TAKEOVER_BOUND_S} s), the last round served by ${runnersOf(lastRound)}`
    )
    yield* check(takeoverS <= TAKEOVER_BOUND_S, `b's calls answered ${takeoverS.toFixed(1)} s after the kill`)
    yield* check(
      JSON.stringify(runnersOf(lastRound)) === JSON.stringify([addressB]),
      `with a down, b's last round was served by ${runnersOf(lastRound)}, not by b alone: a's shards not taken over`
    )
    const restartedAt = performance.now()
    yield* ask(channel, { cluster: "start" }, START_S)
    yield* ctx.note(`runner a restarted: serving after ${seconds(restartedAt).toFixed(1)} s`)
    const backS = yield* settle
    yield* ctx.note(`a holds its shards again ${seconds(restartedAt).toFixed(1)} s after its restart began`)
    yield* check(backS <= SETTLE_BOUND_S, `the shards split again ${backS.toFixed(1)} s after a served`)
    const afterAnswer = yield* ask(channel, { cluster: "call", command: `call 0 ${COUNTERS} 0`, seconds: 120 }, 120)
    const after = afterAnswer.counts as ReadonlyArray<Count>
    const expected = 15 + KILL_ROUNDS
    const excess = after.map((c) => c.value - expected)
    // Cluster's at-least-once rule: a persisted message is delivered again when its handler did not
    // save its reply, which happens where a runner stops holding the shard mid-handler: a's shards at
    // the kill and when b hands them back to the restarted a (a move each), and any runner's shards
    // each time its holder's lock storage turned unhealthy (under emulation a refresh can overrun its
    // interval; b held a's shards for a while).
    const forceReleasesA = Number(afterAnswer.unhealthy)
    const forceReleasesB = b.unhealthy() - unhealthyB
    const allowed = ownedByA.map((ofA) => ofA ? 2 + forceReleasesA + forceReleasesB : forceReleasesB)
    yield* ctx.note(
      `after the kill: ${excess.filter((e) => e > 0).length} of ${COUNTERS} counters (${
        ownedByA.filter(Boolean).length
      } of a's shards) counted an increment twice: excess ${excess}; lock storage unhealthy on the restarted a ${forceReleasesA}x, on b ${forceReleasesB}x`
    )
    yield* check(
      excess.every((e) => e >= 0),
      `increments lost: counters at ${after.map((c) => c.value)}, ${expected} sent`
    )
    yield* check(
      excess.every((e, i) => e <= allowed[i]!),
      `duplicates beyond cluster's rule: excess ${excess}, allowed ${allowed} (a's shards: 2 moves + ${forceReleasesA} + ${forceReleasesB} force releases; b's: ${forceReleasesB})`
    )
    yield* check(
      after.every((c, i) => (c.runner === addressA) === ownedByA[i]),
      `a's shards did not come back to it: served by ${after.map((c) => c.runner)}`
    )

    // 4. Both stopped: nothing left alive in either process.
    const stoppedA = yield* ask(channel, { cluster: "stop" }, 120)
    const stoppedB = yield* stopped(b)
    yield* ctx.note(`stopped: live on a ${JSON.stringify(stoppedA.live)}, on b ${JSON.stringify(stoppedB.live)}`)
    const total = (live: Record<string, number>) => Object.values(live).reduce((x, y) => x + y, 0)
    yield* check(total(stoppedA.live) === 0 && stoppedA.code === 0, `runner a at its stop: ${JSON.stringify(stoppedA)}`)
    yield* check(total(stoppedB.live) === 0 && stoppedB.code === 0, `runner b at its stop: ${JSON.stringify(stoppedB)}`)
  }).pipe(
    Effect.scoped,
    // Whatever happened: nothing of the suite left running on a.
    Effect.ensuring(
      Effect.gen(function*() {
        yield* fault("link", "peer", "on").pipe(Effect.ignore)
        yield* ask(ctx.channel, { cluster: "cleanup" }, 90).pipe(Effect.ignore)
      })
    )
  )

export const clusterTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown>
  /** The test's own bound in the runner: runners started twice under emulation, and every phase's bound. */
  readonly seconds: number
}> = [
  {
    name:
      "@effect/cluster: two runners over RDMA, storage in PostgreSQL on a: calls both ways, the link cut and repaired, a runner killed, its shards taken over, and restarted",
    run: scenario,
    seconds: 900
  }
]
