/**
 * Faults across the wire (vm/pair). The far side is the C peer (peer.c) on VM a; this side (VM b,
 * the library, through its public API) survives. Each test:
 *
 *   1. connects and keeps a stream of rpma_writes going, WINDOW of them in flight;
 *   2. injects the fault: the link cut (QMP set_link off on a's NIC), the peer process killed
 *      (SIGKILL), the peer's VM frozen (QMP stop), or a peer that never answers a disconnect;
 *   3. checks that every write in flight ends, each with a tagged error (or success), within
 *      PENDING_BOUND of the fault; then closes the connection's scope and checks that it closes
 *      within CLOSE_BOUND;
 *   4. repairs the fault (link on, cont, a new peer process) and checks that a reconnect loop
 *      built with Schedule re-establishes and resumes writing (data checked by reading it back);
 *   5. checks that the driver holds nothing but the survivor's own peer, then nothing at all.
 *
 * Every wait is bounded, so a hang is a failure with a message, never a stuck suite.
 */
import { Connection, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import { type Channel, check, fail, fault, log, PairFailure, seconds } from "./harness.js"

export interface FaultContext {
  readonly address: string
  readonly serverAddress: string
  readonly channel: Channel
  /** A line for the report (measurements). */
  readonly note: (line: string) => Effect.Effect<void>
}

/** The connection's timeout (Connection.Options.timeout) in every fault test. */
const TIMEOUT = Duration.seconds(5)
const TIMEOUT_S = Duration.toSeconds(TIMEOUT)

// A write posted just before the fault may wait its whole timeout; the watchdog looks every tenth of it; 1 s of slack for emulation.
const PENDING_BOUND_S = TIMEOUT_S * 1.1 + 1
/** The connection's scope must be closed this long after the close began. */
const CLOSE_BOUND_S = TIMEOUT_S + 2
/** The reconnect loop: one attempt every RETRY_EVERY, for at most RECONNECT_BOUND_S. */
const RETRY_EVERY = Duration.millis(500)
const RECONNECT_BOUND_S = 90
const WINDOW = 8
const SIZE = 4096
const TAGS = new Set(["CompletionError", "ConnectionClosedError"])

const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

/** The C peer's offer: one length byte, then its region's descriptor. */
const remoteOf = (conn: Connection.Connection) =>
  RemoteMr.fromDescriptor(conn.privateData.subarray(1, 1 + conn.privateData[0]!)).pipe(
    Effect.flatMap(RemoteMr.require(exposed))
  )

const spawnPeer = (ctx: FaultContext, port: number, mode: "answer" | "silent") =>
  Effect.gen(function*() {
    yield* ctx.channel.send({ spawnPeer: true, port, mode })
    const m = yield* ctx.channel.receive(60)
    if (m.spawned === null) return yield* fail(`the C peer did not start: ${m.error}`)
    yield* log(
      `C peer ${m.spawned} (${mode}) listening on ${ctx.serverAddress}:${port} after ${m.seconds.toFixed(2)} s`
    )
    return m.spawned as number
  })

export const killPeer = (ctx: FaultContext, pid: number) =>
  Effect.zipRight(ctx.channel.send({ killPeer: true, pid, signal: "SIGKILL" }), ctx.channel.receive(60))

interface Outcome {
  readonly i: number
  readonly tag: string
  readonly startedAt: number
  readonly endedAt: number
}

/** A stream of writes, WINDOW in flight; each worker stops at its first failure. */
const writeStream = (
  conn: Connection.Connection,
  remote: RemoteMr.RemoteMr<"WRITE_DST">,
  src: LocalMr.LocalMr<"WRITE_SRC">
) =>
  Effect.gen(function*() {
    const outcomes: Array<Outcome> = []
    const inFlight = new Map<number, number>()
    let next = 0
    let failed = false
    let stop = false
    const worker = Effect.suspend(() => {
      const i = next++
      const startedAt = performance.now()
      inFlight.set(i, startedAt)
      const offset = (i % 64) * SIZE
      return Connection.write(conn, { dst: remote, dstOffset: offset, src, srcOffset: offset, length: SIZE }).pipe(
        Effect.exit,
        Effect.map((exit) => {
          inFlight.delete(i)
          const tag = Exit.isSuccess(exit)
            ? "success"
            : exit.cause._tag === "Fail"
            ? String((exit.cause.error as { _tag?: string })._tag)
            : `defect: ${String(exit.cause)}`
          outcomes.push({ i, tag, startedAt, endedAt: performance.now() })
          if (tag !== "success") failed = true
          return tag === "success"
        })
      )
    }).pipe(Effect.repeat({ while: (ok) => ok && !stop }))
    const fiber = yield* Effect.fork(Effect.all(Array.from({ length: WINDOW }, () => worker), {
      concurrency: "unbounded",
      discard: true
    }))
    return {
      fiber,
      outcomes,
      inFlight,
      succeeded: () => outcomes.filter((o) => o.tag === "success").length,
      failed: () => failed,
      stop: () => void (stop = true)
    }
  })

/** Polls `condition` until it holds (returns the seconds that took), or fails after `timeoutS`. */
export const waitUntil = (what: string, condition: () => boolean, timeoutS: number) =>
  Effect.gen(function*() {
    const started = performance.now()
    while (!condition()) {
      if (seconds(started) > timeoutS) return yield* fail(`${what}: not within ${timeoutS} s`)
      yield* Effect.sleep("20 millis")
    }
    return seconds(started)
  })

/**
 * Closes a scope with a bound; if the bound passes, keeps waiting (up to `extraS`, while the
 * fault is repaired by `meanwhile`) to learn how long it really took. Returns the seconds it took
 * (Infinity if never) and whether the bound held.
 */
export const closeBounded = (scope: Scope.CloseableScope, boundS: number) =>
  Effect.gen(function*() {
    const started = performance.now()
    const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
    const within = yield* Fiber.await(closing).pipe(Effect.timeout(Duration.seconds(boundS)), Effect.option)
    return {
      closing,
      started,
      held: within._tag === "Some",
      seconds: within._tag === "Some" ? seconds(started) : undefined
    }
  })

/** The reconnect loop: connect, write, flush, read back; retried on a Schedule until it works. */
const reconnect = (ctx: FaultContext, peer: Peer.Peer, port: number) =>
  Effect.gen(function*() {
    let attempts = 0
    const started = performance.now()
    const session = Effect.scoped(Effect.gen(function*() {
      attempts++
      const conn = yield* Connection.connect(peer, ctx.serverAddress, port, { timeout: TIMEOUT })
      const remote = yield* remoteOf(conn)
      const src = yield* LocalMr.allocate(peer, SIZE, Usage.WRITE_SRC)
      const dst = yield* LocalMr.allocate(peer, SIZE, Usage.READ_DST)
      for (let i = 0; i < 100; i++) {
        src.memory[i] = (attempts + i) % 256
        yield* Connection.write(conn, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: SIZE })
      }
      yield* Connection.flush(conn, { dst: remote, dstOffset: 0, length: SIZE })
      yield* Connection.read(conn, { dst, dstOffset: 0, src: remote, srcOffset: 0, length: SIZE })
      yield* check(dst.memory.every((b, i) => b === src.memory[i]), "the data read back after reconnecting differs")
    })).pipe(
      Effect.tapError((e) =>
        log(`reconnect attempt ${attempts} failed: ${(e as { _tag?: string })._tag ?? e}: ${(e as Error).message}`)
      )
    )
    yield* session.pipe(
      Effect.retry(Schedule.spaced(RETRY_EVERY).pipe(Schedule.upTo(Duration.seconds(RECONNECT_BOUND_S)))),
      Effect.mapError((e) =>
        new PairFailure({
          message: `the reconnect loop did not re-establish within ${RECONNECT_BOUND_S} s: ${(e as Error).message}`
        })
      )
    )
    yield* ctx.note(`reconnected and resumed writing after ${attempts} attempt(s), ${seconds(started).toFixed(1)} s`)
  })

interface Scenario {
  readonly name: string
  readonly port: number
  readonly mode: "answer" | "silent"
  /** Injects the fault; returns a description. */
  readonly inject: (ctx: FaultContext, pid: number) => Effect.Effect<void, PairFailure>
  /** Repairs it; returns the pid of the C peer to reconnect to. */
  readonly repair: (ctx: FaultContext, pid: number) => Effect.Effect<number, PairFailure>
  /** Whether writes in flight are expected to fail (not for a peer that only ignores disconnects). */
  readonly writesFail: boolean
}

const scenario = (s: Scenario) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const errors: Array<string> = []
    const problem = (message: string) =>
      Effect.zipRight(Effect.sync(() => errors.push(message)), log(`problem: ${message}`))
    let pid = yield* spawnPeer(ctx, s.port, s.mode)

    yield* Effect.scoped(Effect.gen(function*() {
      // The survivor's own long-lived resources: its peer and source region.
      const peer = yield* Peer.make(ctx.address)
      const src = yield* LocalMr.allocate(peer, 64 * SIZE, Usage.WRITE_SRC)

      const scope = yield* Scope.make()
      const conn = yield* Connection.connect(peer, ctx.serverAddress, s.port, { timeout: TIMEOUT }).pipe(
        Scope.extend(scope)
      )
      const remote = yield* remoteOf(conn).pipe(Scope.extend(scope))
      const stream = yield* writeStream(conn, remote, src)
      yield* waitUntil("200 writes before the fault", () => stream.succeeded() >= 200 || stream.failed(), 60)
      yield* check(
        !stream.failed(),
        `a write failed before the fault: ${JSON.stringify(stream.outcomes.find((o) => o.tag !== "success"))}`
      )

      // The writes in flight as the fault is injected (a kill is asked of VM a over the channel,
      // so some may end before it lands: they are counted here all the same).
      const pendingAtFault = [...stream.inFlight.keys()]
      const faultAt = performance.now()
      yield* s.inject(ctx, pid)
      yield* log(`fault injected with ${pendingAtFault.length} writes in flight, ${stream.succeeded()} done`)

      if (s.writesFail) {
        // Every worker stops at its first failure: the stream ends when all have failed.
        const ended = yield* Fiber.await(stream.fiber).pipe(
          Effect.timeout(Duration.seconds(PENDING_BOUND_S + 30)),
          Effect.option
        )
        const tookS = seconds(faultAt)
        const failures = stream.outcomes.filter((o) => o.tag !== "success")
        const lastEnd = Math.max(...stream.outcomes.map((o) => o.endedAt))
        const pendingEnd = (lastEnd - faultAt) / 1000
        yield* ctx.note(
          `writes in flight at the fault: ${pendingAtFault.length}; failed: ${failures.length} (${
            [...new Set(failures.map((f) => f.tag))].join(", ")
          }); ` +
            (ended._tag === "Some"
              ? `all ended ${pendingEnd.toFixed(2)} s after the fault`
              : `still pending ${tookS.toFixed(1)} s after the fault`)
        )
        if (ended._tag === "None") {
          yield* problem(
            `writes still in flight ${tookS.toFixed(1)} s after the fault: ${
              [...stream.inFlight.keys()].length
            } of them`
          )
        } else {
          const untagged = failures.filter((f) => !TAGS.has(f.tag))
          if (untagged.length > 0) {
            yield* problem(`writes failed with untagged or unexpected errors: ${untagged.map((f) => f.tag).join(", ")}`)
          }
          if (pendingEnd > PENDING_BOUND_S) {
            yield* problem(
              `the writes in flight took ${
                pendingEnd.toFixed(2)
              } s to fail after the fault (bound: the connection's timeout, ${PENDING_BOUND_S} s)`
            )
          }
          for (const i of pendingAtFault) {
            const o = stream.outcomes.find((x) => x.i === i)
            if (o === undefined) yield* problem(`write ${i}, in flight at the fault, never ended`)
          }
        }
      } else {
        stream.stop()
        yield* Fiber.await(stream.fiber).pipe(Effect.timeout("30 seconds"))
        const failures = stream.outcomes.filter((o) => o.tag !== "success")
        if (failures.length > 0) {
          yield* problem(`writes to a peer that is still there failed: ${failures.map((f) => f.tag).join(", ")}`)
        }
      }

      const closed = yield* closeBounded(scope, CLOSE_BOUND_S)
      if (!closed.held) {
        yield* problem(
          `the connection's scope was still closing ${CLOSE_BOUND_S} s after the close began (bound: timeout ${TIMEOUT_S} s + 2 s)`
        )
      } else {
        yield* ctx.note(`the connection's scope closed in ${closed.seconds!.toFixed(2)} s`)
      }

      pid = yield* s.repair(ctx, pid)
      if (!closed.held) {
        const later = yield* Fiber.await(closed.closing).pipe(Effect.timeout("60 seconds"), Effect.option)
        yield* ctx.note(
          later._tag === "Some"
            ? `after the repair, the scope finished closing ${
              seconds(closed.started).toFixed(1)
            } s after the close began`
            : `the scope was still closing ${
              seconds(closed.started).toFixed(1)
            } s after the close began, after the repair too`
        )
      }

      yield* reconnect(ctx, peer, s.port).pipe(
        Effect.disconnect,
        Effect.timeoutFail({
          duration: Duration.seconds(RECONNECT_BOUND_S + 30),
          onTimeout: () =>
            new PairFailure({ message: `the reconnect loop was still running after ${RECONNECT_BOUND_S + 30} s` })
        }),
        Effect.catchAll((e) => problem(e.message))
      )
      const live = yield* driver.live
      if (live.connections !== 0 || live.connectionRequests !== 0) {
        yield* problem(`after the reconnect loop, the driver still holds ${JSON.stringify(live)}`)
      }
    }))

    yield* killPeer(ctx, pid)
    const live = yield* driver.live
    if (Object.values(live).some((n) => n !== 0)) yield* problem(`handles alive at the end: ${JSON.stringify(live)}`)
    if (errors.length > 0) return yield* fail(errors.join("\n"))
  })

export const faultTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown, RdmaDriver>
}> = [
  {
    name: "link cut in the middle of a stream of writes (set_link off on the peer's NIC), then back",
    run: scenario({
      name: "link",
      port: 17201,
      mode: "answer",
      writesFail: true,
      inject: () => Effect.asVoid(fault("link", "peer", "off")),
      repair: (_, pid) => Effect.as(fault("link", "peer", "on"), pid)
    })
  },
  {
    name: "peer process killed with SIGKILL in the middle of a stream of writes, then restarted",
    run: scenario({
      name: "kill",
      port: 17202,
      mode: "answer",
      writesFail: true,
      inject: (ctx, pid) => Effect.asVoid(killPeer(ctx, pid)),
      repair: (ctx) => spawnPeer(ctx, 17202, "answer")
    })
  },
  {
    name: "peer VM frozen (QMP stop) in the middle of a stream of writes, then resumed (cont)",
    run: scenario({
      name: "stop",
      port: 17203,
      mode: "answer",
      writesFail: true,
      inject: () => Effect.asVoid(fault("stop", "peer")),
      repair: (_, pid) => Effect.as(fault("cont", "peer"), pid)
    })
  },
  {
    name: "peer never answers a disconnect (a C peer that never calls rpma_conn_disconnect)",
    run: scenario({
      name: "silent",
      port: 17204,
      mode: "silent",
      writesFail: false,
      inject: () => Effect.void,
      repair: (_, pid) => Effect.succeed(pid)
    })
  }
]
