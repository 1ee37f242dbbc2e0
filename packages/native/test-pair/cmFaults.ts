/**
 * Faults across the wire on librdmacm's endpoints (vm/pair), through the public CmEndpoint API;
 * faults.ts is the same for librpma's connections. The far side is the C peer cm_peer.c on VM a,
 * on librdmacm's verbs API; this side (VM b) survives. Every wait is checked to end with a tagged
 * error within its bound, and the driver to hold nothing afterwards (Driver.live all 0):
 *
 *   data path (link cut, peer killed, peer frozen): writes, reads and send/recv ping-pongs in
 *     flight when the fault lands all end within the bound (the watchdog: a read or a write with
 *     no completion within the timeout ends the endpoint, and what waits with it); the endpoint's
 *     scope (rdma_disconnect, the bounded drain) closes within its bound; a connect while the
 *     fault lasts fails with RdmaCmError within the bound; repaired, a Schedule reconnects and the
 *     bytes written are read back;
 *   disconnect (a peer that never answers one): the scope closes within its bound;
 *   accept (the connecting C client cut off, killed or frozen after its request came): the accept
 *     fails within the bound, with ClientGoneError when the client's CM said it has gone (killed:
 *     its kernel destroys its identifier) or RdmaCmError (no word: ETIMEDOUT); repaired, a new
 *     client's request is accepted;
 *   an interruption storm over connect, accept and posts across the two hosts: 0 alive after.
 *
 * A receive alone has no bound (it waits on the other side's application); it ends with the
 * endpoint, which a read or a write in flight ends when the other side is gone.
 */
import { CmEndpoint, CmListener, RemoteKey } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import { closeBounded, type FaultContext, killPeer, waitUntil } from "./faults.js"
import { check, fail, fault, log, PairFailure, seconds } from "./harness.js"

const TIMEOUT_MS = 5000
/** An operation in flight at the fault: the timeout, the watchdog's tenth, 1 s of slack for emulation (as faults.ts). */
const BOUND_S = (TIMEOUT_MS / 1000) * 1.1 + 1
/** The endpoint's scope: the timeout of the drain, and 2 s. */
const CLOSE_BOUND_S = TIMEOUT_MS / 1000 + 2
const RECONNECT_BOUND_S = 90
const SIZE = 4096
/**
 * How an operation in flight may end: the endpoint lost, a completion's error, or (a killed peer's
 * regions go before its queue pair) the other side's device refusing the key of a region it no
 * longer has.
 */
const TAGS = new Set(["CompletionError", "ConnectionClosedError", "RemoteKeyRefusedError"])
const options: CmEndpoint.Options = {
  timeout: Duration.millis(TIMEOUT_MS),
  maxSendWr: 16,
  maxRecvWr: 16,
  maxSendSge: 1,
  maxRecvSge: 1
}

type Mode = "answer" | "silent" | "client"

const spawnPeer = (ctx: FaultContext, port: number, mode: Mode) =>
  Effect.gen(function*() {
    yield* ctx.channel.send({ spawnPeer: true, program: "cm", port, mode })
    const m = yield* ctx.channel.receive(60)
    if (m.spawned === null) return yield* fail(`the C peer (cm_peer ${mode}) did not start: ${m.error}`)
    yield* log(`cm_peer ${m.spawned} (${mode}) ready after ${m.seconds.toFixed(2)} s`)
    return m.spawned as number
  })

/** An outcome's tag; an RdmaCmError's with its errno ("RdmaCmError ETIMEDOUT"). */
const describe = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "success"
  if (Cause.isInterruptedOnly(exit.cause)) return "interrupted"
  const failure = Cause.failureOption(exit.cause)
  if (failure._tag === "None") return `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`
  const e = failure.value as { _tag?: string; errnoName?: string; message?: string }
  return e._tag === "RdmaCmError" ? `RdmaCmError ${e.errnoName} (${e.message})` : String(e._tag)
}
/** The tag alone. */
const tagOf = (exit: Exit.Exit<unknown, unknown>) => describe(exit).split(" ")[0]!

/** Runs `effect` within `boundS`; how long it took and its outcome's tag ("hung" past the bound + 30 s). */
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>, boundS: number) =>
  Effect.gen(function*() {
    const started = performance.now()
    const exit = yield* Effect.exit(effect.pipe(Effect.timeout(Duration.seconds(boundS + 30))))
    const outcome =
      Exit.isFailure(exit) && exit.cause._tag === "Fail" && (exit.cause.error as any)._tag === "TimeoutException"
        ? "hung"
        : describe(exit)
    return { tag: outcome.split(" ")[0]!, outcome, seconds: seconds(started), exit }
  })

/** The peer's two keys (write, then read) from the acceptance's private data. */
const keysOf = (ep: CmEndpoint.CmEndpoint) =>
  Effect.all([
    RemoteKey.decode(ep.privateData.subarray(0, 24)).pipe(Effect.flatMap(RemoteKey.require("write"))),
    RemoteKey.decode(ep.privateData.subarray(24, 48)).pipe(Effect.flatMap(RemoteKey.require("read")))
  ])

interface Outcome {
  readonly kind: string
  readonly tag: string
  readonly endedAt: number
}

/** Writes, reads and (with an answering peer) send/recv ping-pongs, each kind in its own loops; each loop stops at its first failure. */
const traffic = (ep: CmEndpoint.CmEndpoint, local: CmEndpoint.MessageRegion, pings: boolean) =>
  Effect.gen(function*() {
    const [writable, readable] = yield* keysOf(ep)
    const outcomes: Array<Outcome> = []
    const inFlight = new Set<string>()
    let stop = false
    let n = 0
    const loop = (kind: string, op: Effect.Effect<unknown, unknown>) =>
      Effect.suspend(() => {
        const id = `${kind}#${n++}`
        inFlight.add(id)
        return Effect.exit(op).pipe(Effect.map((exit) => {
          inFlight.delete(id)
          const tag = tagOf(exit)
          outcomes.push({ kind, tag, endedAt: performance.now() })
          return tag === "success"
        }))
      }).pipe(Effect.repeat({ while: (ok) => ok && !stop }))
    const at = (slot: number) => slot * SIZE
    const write = (slot: number) =>
      CmEndpoint.write(ep, { src: local, srcOffset: at(slot), dst: writable, dstOffset: at(slot), length: SIZE })
    const read = (slot: number) =>
      CmEndpoint.read(ep, { dst: local, dstOffset: at(slot), src: readable, srcOffset: at(slot), length: SIZE })
    const ping = (slot: number) =>
      Effect.gen(function*() {
        local.memory.set(Uint8Array.of(slot, n & 255, 7), at(slot))
        const reply = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: local, offset: at(slot + 1), length: 64 }] })
        yield* CmEndpoint.send(ep, { src: local, offset: at(slot), length: 64 })
        const wc = yield* reply.completion
        yield* check(
          wc.byteLength === 64 && local.memory[at(slot + 1)] === slot && local.memory[at(slot + 1) + 2] === 7,
          `the echo of a 64-byte message came back as ${wc.byteLength} bytes, or other bytes`
        )
      })
    const loops = [loop("write", write(0)), loop("write", write(1)), loop("read", read(2)), loop("read", read(3))]
    if (pings) loops.push(loop("send/recv", ping(4)))
    const fiber = yield* Effect.fork(Effect.all(loops, { concurrency: "unbounded", discard: true }))
    const count = (kind: string) => outcomes.filter((o) => o.kind === kind && o.tag === "success").length
    return { fiber, outcomes, inFlight, count, stop: () => void (stop = true) }
  })

/**
 * Watches this process's event loop: a 50 ms tick's lateness beyond its period is time the VM (or
 * the process) stood still. `stop` ends it and gives the longest such stall, in seconds.
 */
const lagMonitor = Effect.gen(function*() {
  let longest = 0
  const fiber = yield* Effect.fork(Effect.forever(Effect.gen(function*() {
    const before = performance.now()
    yield* Effect.sleep("50 millis")
    longest = Math.max(longest, performance.now() - before - 50)
  })))
  return { stop: Effect.map(Fiber.interrupt(fiber), () => longest / 1000) }
})

/** Everything the driver holds, all 0 or a problem. */
const nothingAlive = (problem: (message: string) => Effect.Effect<void>, when: string) =>
  Effect.flatMap(RdmaDriver, (d) => d.live).pipe(
    Effect.flatMap((live) =>
      Object.values(live).some((n) => n !== 0) ? problem(`handles alive ${when}: ${JSON.stringify(live)}`) : Effect.void
    )
  )

/** Connect, write, read back, one ping; retried on a Schedule until it works. */
const reconnect = (ctx: FaultContext, port: number) =>
  Effect.gen(function*() {
    let attempts = 0
    const started = performance.now()
    const session = Effect.scoped(Effect.gen(function*() {
      attempts++
      const ep = yield* CmEndpoint.connect(ctx.serverAddress, port, options)
      const [writable, readable] = yield* keysOf(ep)
      const local = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4 * SIZE))
      for (let i = 0; i < SIZE; i++) local.memory[i] = (attempts * 31 + i) % 251
      yield* CmEndpoint.write(ep, { src: local, dst: writable, dstOffset: 8 * SIZE, length: SIZE })
      yield* CmEndpoint.read(ep, { dst: local, dstOffset: SIZE, src: readable, srcOffset: 8 * SIZE, length: SIZE })
      yield* check(
        local.memory.subarray(SIZE, 2 * SIZE).every((b, i) => b === local.memory[i]),
        "the bytes read back after reconnecting differ"
      )
      const reply = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: local, offset: 3 * SIZE, length: 64 }] })
      yield* CmEndpoint.send(ep, { src: local, offset: 0, length: 64 })
      yield* check((yield* reply.completion).byteLength === 64, "the echo after reconnecting")
    })).pipe(
      Effect.tapError((e) =>
        log(`reconnect attempt ${attempts}: ${(e as { _tag?: string })._tag ?? "error"}: ${(e as Error).message}`)
      )
    )
    yield* session.pipe(
      Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo(Duration.seconds(RECONNECT_BOUND_S)))),
      Effect.mapError((e) =>
        new PairFailure({ message: `no reconnect within ${RECONNECT_BOUND_S} s: ${(e as Error).message}` })
      )
    )
    yield* ctx.note(
      `reconnected, wrote, read back and pinged after ${attempts} attempt(s), ${seconds(started).toFixed(1)} s`
    )
  })

interface Fault {
  readonly inject: (ctx: FaultContext, pid: number) => Effect.Effect<void, PairFailure>
  /** Repairs it; the pid of the C peer afterwards. */
  readonly repair: (ctx: FaultContext, pid: number, port: number, mode: Mode) => Effect.Effect<number, PairFailure>
}

const faults: Record<"link" | "kill" | "stop", Fault> = {
  link: {
    inject: () => Effect.asVoid(fault("link", "peer", "off")),
    repair: (_, pid) => Effect.as(fault("link", "peer", "on"), pid)
  },
  kill: {
    inject: (ctx, pid) => Effect.asVoid(killPeer(ctx, pid)),
    repair: (ctx, _, port, mode) => spawnPeer(ctx, port, mode)
  },
  stop: {
    inject: () => Effect.asVoid(fault("stop", "peer")),
    repair: (_, pid) => Effect.as(fault("cont", "peer"), pid)
  }
}

/** Collects problems; fails with all of them at the end. */
const problems = () => {
  const errors: Array<string> = []
  return {
    errors,
    problem: (message: string) => Effect.zipRight(Effect.sync(() => errors.push(message)), log(`problem: ${message}`)),
    verdict: Effect.suspend(() => errors.length > 0 ? fail(errors.join("\n")) : Effect.void)
  }
}

/** The data path under a fault (or, `fault` undefined, a peer that never answers a disconnect). */
const dataPath = (port: number, faultName: keyof typeof faults | undefined) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { problem, verdict } = problems()
    const mode: Mode = faultName === undefined ? "silent" : "answer"
    let pid = yield* spawnPeer(ctx, port, mode)
    // The endpoint's own scope, closed by the test (and by the outer one if a step fails first).
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const ep = yield* CmEndpoint.connect(ctx.serverAddress, port, options).pipe(Scope.extend(scope))
    const local = yield* CmEndpoint.registerMessages(ep, new Uint8Array(8 * SIZE)).pipe(Scope.extend(scope))
    const t = yield* traffic(ep, local, mode === "answer")
    const warm = () =>
      t.count("write") >= 100 && t.count("read") >= 100 && (mode !== "answer" || t.count("send/recv") >= 20)
    yield* waitUntil(
      "100 writes, 100 reads and 20 pings before the fault",
      () => warm() || t.outcomes.some((o) => o.tag !== "success"),
      90
    )
    yield* check(
      t.outcomes.every((o) => o.tag === "success"),
      `an operation failed before the fault: ${JSON.stringify(t.outcomes.find((o) => o.tag !== "success"))}`
    )

    if (faultName !== undefined) {
      const pending = [...t.inFlight]
      const lag = yield* lagMonitor
      const faultAt = performance.now()
      yield* faults[faultName].inject(ctx, pid)
      yield* log(`fault ${faultName} injected with ${pending.length} operations in flight (${pending.join(" ")})`)
      const ended = yield* Fiber.await(t.fiber).pipe(Effect.timeout(Duration.seconds(BOUND_S + 30)), Effect.option)
      const stalledS = yield* lag.stop
      const failures = t.outcomes.filter((o) => o.tag !== "success")
      const firstS = (Math.min(...failures.map((o) => o.endedAt)) - faultAt) / 1000
      const lastS = (Math.max(...t.outcomes.map((o) => o.endedAt)) - faultAt) / 1000
      // This VM's own stalls (an emulated CPU on a loaded host) are not the library's lateness.
      const boundS = BOUND_S + stalledS
      yield* ctx.note(
        `in flight at the fault: ${pending.length}; failed: ${failures.length} (${
          [...new Set(failures.map((f) => `${f.kind} ${f.tag}`))].join(", ")
        }); ${
          ended._tag === "Some"
            ? `the first ended ${firstS.toFixed(2)} s, the last ${lastS.toFixed(2)} s after the fault`
            : "some still waiting"
        }; this VM's longest stall meanwhile ${stalledS.toFixed(2)} s`
      )
      if (ended._tag === "None") {
        yield* problem(`operations still waiting ${BOUND_S + 30} s after the fault: ${[...t.inFlight].join(" ")}`)
      } else {
        const untagged = failures.filter((f) => !TAGS.has(f.tag))
        if (untagged.length > 0) {
          yield* problem(
            `operations failed untagged or unexpected: ${untagged.map((f) => `${f.kind} ${f.tag}`).join(", ")}`
          )
        }
        if (lastS > boundS) {
          yield* problem(
            `the operations in flight took ${lastS.toFixed(2)} s to end (bound ${BOUND_S} s + ${
              stalledS.toFixed(2)
            } s of stalls)`
          )
        }
        if (failures.length === 0) yield* problem("no operation failed after the fault")
      }
    } else {
      t.stop()
      yield* Fiber.await(t.fiber).pipe(Effect.timeout("30 seconds"))
      const failures = t.outcomes.filter((o) => o.tag !== "success")
      if (failures.length > 0) {
        yield* problem(`operations on a peer that is still there failed: ${failures.map((f) => f.tag).join(", ")}`)
      }
    }

    // The disconnect: rdma_disconnect, the bounded drain, the regions, the endpoint.
    const closed = yield* closeBounded(scope, CLOSE_BOUND_S)
    if (!closed.held) yield* problem(`the endpoint's scope was still closing after ${CLOSE_BOUND_S} s`)
    else yield* ctx.note(`the endpoint's scope (disconnect, drain, release) closed in ${closed.seconds!.toFixed(2)} s`)

    if (faultName !== undefined) {
      // A connect while the fault lasts.
      const connect = yield* timed(Effect.scoped(CmEndpoint.connect(ctx.serverAddress, port, options)), BOUND_S)
      yield* ctx.note(`a connect during the fault: ${connect.outcome} after ${connect.seconds.toFixed(2)} s`)
      if (connect.tag !== "RdmaCmError") {
        yield* problem(`a connect during the fault ended with ${connect.tag}, not RdmaCmError`)
      } else if (connect.seconds > BOUND_S) {
        yield* problem(`a connect during the fault took ${connect.seconds.toFixed(2)} s (bound ${BOUND_S} s)`)
      }
      pid = yield* faults[faultName].repair(ctx, pid, port, mode)
      if (!closed.held) yield* Fiber.await(closed.closing).pipe(Effect.timeout("60 seconds"), Effect.ignore)
      yield* reconnect(ctx, port).pipe(
        Effect.timeoutFail({
          duration: Duration.seconds(RECONNECT_BOUND_S + 30),
          onTimeout: () => new PairFailure({ message: "the reconnect loop hung" })
        }),
        Effect.catchAll((e) => problem(e.message))
      )
    }
    yield* killPeer(ctx, pid)
    yield* nothingAlive(problem, "at the end")
    yield* verdict
  }).pipe(Effect.scoped)

/** An accept whose client is cut off, killed or frozen after its request came; then a fresh client's request accepted. */
const acceptWait = (port: number, faultName: keyof typeof faults) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { problem, verdict } = problems()
    yield* Effect.scoped(Effect.gen(function*() {
      const listener = yield* CmListener.make(ctx.address, port, options)
      let pid = yield* spawnPeer(ctx, port, "client")
      const answer = yield* timed(
        Effect.scoped(Effect.gen(function*() {
          const request = yield* CmListener.next(listener).pipe(
            Effect.timeoutFail({
              duration: "30 seconds",
              onTimeout: () => new PairFailure({ message: "no request from cm_peer client in 30 s" })
            })
          )
          yield* faults[faultName].inject(ctx, pid)
          const accept = yield* timed(CmListener.accept(request), BOUND_S)
          yield* ctx.note(`an accept after the fault: ${accept.outcome} after ${accept.seconds.toFixed(2)} s`)
          if (accept.tag !== "RdmaCmError" && accept.tag !== "ClientGoneError") {
            yield* problem(`the accept ended with ${accept.tag}, not RdmaCmError or ClientGoneError`)
          } else if (accept.seconds > BOUND_S) {
            yield* problem(`the accept took ${accept.seconds.toFixed(2)} s (bound ${BOUND_S} s)`)
          }
        })),
        CLOSE_BOUND_S + 60
      )
      if (answer.tag !== "success") yield* problem(`the request's scope: ${answer.tag}`)
      pid = yield* faults[faultName].repair(ctx, pid, port, "client")
      if (faultName !== "kill") {
        // The client that was cut off or frozen gives up on its own; a new one connects.
        yield* killPeer(ctx, pid)
        pid = yield* spawnPeer(ctx, port, "client")
      }
      const fresh = yield* timed(
        Effect.scoped(Effect.gen(function*() {
          const request = yield* CmListener.next(listener).pipe(Effect.timeout("30 seconds"))
          yield* CmListener.accept(request)
        })),
        60
      )
      yield* ctx.note(`after the repair, a new client's request: ${fresh.tag} in ${fresh.seconds.toFixed(2)} s`)
      if (fresh.tag !== "success") yield* problem(`after the repair, a new client's request: ${fresh.tag}`)
      yield* killPeer(ctx, pid)
    }))
    yield* nothingAlive(problem, "at the end")
    yield* verdict
  })

/** Round i of n's delay before its interruption: from 0 to `maxMs`, evenly, so that every stage is hit. */
const sweep = (i: number, n: number, maxMs: number) => Math.round((i * maxMs) / Math.max(n - 1, 1))

/**
 * Connects and posts (`rounds` times, against the C peer), then accepts (`acceptRounds` times, of C
 * clients), each interrupted after a delay swept from 0 up, across the two hosts; every
 * interruption ends within the close bound, and the driver holds nothing after each storm.
 */
const storm = (port: number, rounds: number, acceptRounds: number) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const { problem, verdict } = problems()
    const pid = yield* spawnPeer(ctx, port, "answer")
    const outcomes: Record<string, number> = {}
    // Where each round was when it was interrupted (or how it had ended).
    let stage = ""
    const round = (work: Effect.Effect<unknown, unknown, RdmaDriver>, delayMs: number) =>
      Effect.gen(function*() {
        stage = "starting"
        const fiber = yield* Effect.fork(work)
        yield* Effect.sleep(Duration.millis(delayMs))
        const at = stage
        const exit = yield* Fiber.interrupt(fiber).pipe(
          Effect.timeout(Duration.seconds(CLOSE_BOUND_S + 2)),
          Effect.option
        )
        const tag = exit._tag === "None" ? "interrupt hung" : `${describe(exit.value)} while ${at}`
        outcomes[tag] = (outcomes[tag] ?? 0) + 1
        if (tag.startsWith("defect")) yield* problem(`a round ended with ${tag}`)
        if (exit._tag === "None") yield* problem(`an interruption did not end within ${CLOSE_BOUND_S + 2} s`)
      })
    // Connect (and post) against the C peer: interrupted while connecting, or mid-traffic.
    for (let i = 0; i < rounds; i++) {
      const work = Effect.scoped(Effect.gen(function*() {
        stage = "connecting"
        const ep = yield* CmEndpoint.connect(ctx.serverAddress, port, options)
        stage = "registering"
        const local = yield* CmEndpoint.registerMessages(ep, new Uint8Array(8 * SIZE))
        stage = "posting"
        const t = yield* traffic(ep, local, true)
        yield* Fiber.join(t.fiber)
      }))
      yield* round(work, sweep(i, rounds, 250))
    }
    yield* nothingAlive(problem, "after the connect/post storm")
    // Accept: this side listens, a cm_peer client connects; interrupted while waiting, accepting or
    // accepted. A listener each round: a request left by an interrupted wait would be the next
    // round's, from a client already killed.
    for (let i = 0; i < acceptRounds; i++) {
      yield* Effect.scoped(Effect.gen(function*() {
        const listener = yield* CmListener.make(ctx.address, port + 1, options)
        const client = yield* spawnPeer(ctx, port + 1, "client")
        const work = Effect.scoped(Effect.gen(function*() {
          stage = "waiting for a request"
          const request = yield* CmListener.next(listener)
          const local = yield* CmEndpoint.registerMessages(request, new Uint8Array(SIZE))
          yield* CmEndpoint.postRecv(request, { segments: [{ mr: local }] })
          stage = "accepting"
          yield* CmListener.accept(request)
          stage = "accepted"
          yield* Effect.never
        }))
        yield* round(work, sweep(i, acceptRounds, 300))
        yield* killPeer(ctx, client)
      }))
    }
    yield* ctx.note(
      `${rounds} connect/post rounds and ${acceptRounds} accept rounds, interrupted: ${JSON.stringify(outcomes)}`
    )
    yield* killPeer(ctx, pid)
    yield* nothingAlive(problem, "after the accept storm")
    yield* verdict
  })

export const cmFaultTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown, RdmaDriver>
}> = [
  { name: "cm endpoint fault: link cut under writes, reads and send/recv, then back", run: dataPath(17211, "link") },
  {
    name: "cm endpoint fault: peer killed (SIGKILL) under writes, reads and send/recv, then restarted",
    run: dataPath(17212, "kill")
  },
  {
    name: "cm endpoint fault: peer VM frozen (QMP stop) under writes, reads and send/recv, then resumed",
    run: dataPath(17213, "stop")
  },
  {
    name: "cm endpoint fault: a peer that never answers a disconnect; the scope closes within its bound",
    run: dataPath(17214, undefined)
  },
  { name: "cm endpoint fault: accept after the client's link is cut", run: acceptWait(17215, "link") },
  { name: "cm endpoint fault: accept after the client is killed", run: acceptWait(17216, "kill") },
  { name: "cm endpoint fault: accept after the client's VM is frozen", run: acceptWait(17217, "stop") },
  {
    name: "cm endpoint fault: interruption storm over connect, accept and posts across two hosts",
    run: storm(17218, 24, 12)
  }
]
