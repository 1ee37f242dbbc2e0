/**
 * RdmaClient across two hosts (vm/pair): a server process on VM a (client-server.ts, started,
 * killed and stopped by the agent), two reconnecting clients on VM b, one failing operations at
 * once while disconnected and one waiting a bounded time. Each test:
 *
 *   1. connects both clients (the offer fetched over DescriptorExchange's TLS) and keeps a stream
 *      of operations going on each (write, flush, read, in turn, WORKERS at a time);
 *   2. injects a fault: the link cut (set_link off on a's NIC), the server process killed
 *      (SIGKILL), or a's VM frozen (QMP stop); holds it until each client has seen an operation
 *      fail for want of a connection;
 *   3. repairs it (link on, the server started again with a new region, cont), and waits for both
 *      clients to be connected again and to have completed operations on the new connection;
 *   4. checks that every operation ended with a result or a tagged error within its bound, that
 *      each client's state stream went Connected → Reconnecting → Connected, and Closed when its
 *      scope closed; and that Driver.live is zero on b and, once the server has stopped, on a.
 *
 * Every wait is bounded, so a hang is a failure with a message, never a stuck suite.
 */
import { Connection, DescriptorExchange, Listener, LocalMr, Peer, RdmaClient, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { type FaultContext, waitUntil } from "./faults.js"
import { type Channel, fail, fault, log, type Message, PairFailure, seconds } from "./harness.js"

// What the server process (client-server.ts) and the clients share.
export const STORE_SIZE = 64 * 1024
export const storeUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
/** The repository's test certificates (fixtures/tls), read from the checkout's root (where vm/pair runs). */
export const pem = (name: string) => readFileSync(`fixtures/tls/${name}.pem`, "utf8")

/** The connections' timeout, on both sides: bounds an operation on a dead connection, and a close. */
export const TIMEOUT = Duration.seconds(5)
const TIMEOUT_S = Duration.toSeconds(TIMEOUT)
/** The waiting client's bound while disconnected. */
const WAIT = Duration.seconds(2)
const WAIT_S = Duration.toSeconds(WAIT)
/**
 * An operation on a connection ends within its timeout, which the watchdog (ticking every tenth of
 * it, a request stamped with the tick before its post) sees up to two ticks late, and 1 s of
 * emulation slack. Measured across the two VMs: at most 5.9-6.9 s.
 */
const ON_CONNECTION_S = TIMEOUT_S * 1.2 + 1
/** "At once" under TCG: an event loop shared with the other workers. */
const AT_ONCE_S = 1
/** The client's state leaves Connected within an operation's bound and one poll after the fault. */
const NOTICE_S = ON_CONNECTION_S + 1
const RECONNECT_BOUND_S = 90
const CLOSE_BOUND_S = TIMEOUT_S + 2
const WORKERS = 3
const SPAN = 64
const TAGS = new Set(["success", "CompletionError", "ConnectionClosedError", "NotConnectedError"])

type Mode = "fail" | "wait"
type Kind = "write" | "flush" | "read"
const KINDS: ReadonlyArray<Kind> = ["write", "flush", "read"]

interface Outcome {
  readonly kind: Kind
  readonly tag: string
  readonly startedAt: number
  readonly endedAt: number
}

/**
 * The server, in the caller's scope: a region, every connection on `rdmaPort` accepted (each
 * served until it ends), the region's descriptor offered over DescriptorExchange on `offerPort`.
 */
export const serveClients = (address: string, ports: Ports) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const store = yield* LocalMr.allocate(peer, STORE_SIZE, storeUsage)
    const endpoint = yield* Listener.make(peer, address, ports.rdmaPort)
    // Each client in a fiber of its own until its connection ends; a failed accept is logged, not fatal.
    yield* Effect.forkScoped(Effect.forever(
      Listener.next(endpoint, { timeout: TIMEOUT }).pipe(
        Effect.flatMap((request) =>
          Effect.forkScoped(
            Effect.scoped(
              Effect.flatMap(Listener.accept(request, { timeout: TIMEOUT }), (conn) => Connection.awaitClosed(conn))
            ).pipe(Effect.catchAll((e) => log(`accept failed: ${e._tag}: ${e.message}`)))
          )
        )
      )
    ))
    yield* DescriptorExchange.serve({
      host: address,
      port: ports.offerPort,
      tls: { key: pem("server-key"), cert: pem("server"), ca: pem("ca") },
      offer: {
        rdma: { address, port: ports.rdmaPort },
        regions: { store: yield* LocalMr.descriptor(store) },
        config: {}
      }
    })
  })

// ---------------------------------------------------------------------------------------------
// VM a: the agent's side. The server is a child process, so that a kill is a real one.

let server: ChildProcess | undefined

const serverProgram = () => fileURLToPath(new URL("./client-server.mjs", import.meta.url))

/** Answers the runner's `{ clientServer: "start" | "kill" | "stop" }` (one answer each, always). */
export const clientServerRequest = (channel: Channel, address: string, m: Message): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    const answer = (message: Message) => {
      Effect.runSync(channel.send(message))
      resume(Effect.void)
    }
    const child = server
    if (m.clientServer === "start") {
      if (child !== undefined) {
        return answer({ clientServerStarted: null, error: "a server process is already running" })
      }
      const started = performance.now()
      const c = spawn(process.execPath, [
        "--enable-source-maps",
        serverProgram(),
        address,
        String(m.rdmaPort),
        String(m.offerPort)
      ], {
        stdio: ["pipe", "pipe", "inherit"]
      })
      server = c
      let answered = false
      const once = (message: Message) => {
        if (answered) return
        answered = true
        clearTimeout(timer)
        answer(message)
      }
      const timer = setTimeout(() => {
        c.kill("SIGKILL")
        once({ clientServerStarted: null, error: "the server process did not say ready within 90 s" })
      }, 90_000)
      createInterface({ input: c.stdout! }).on("line", (line) => {
        console.log(`client-server ${c.pid}: ${line}`)
        if (line === "ready") once({ clientServerStarted: c.pid, seconds: seconds(started) })
      })
      c.on("exit", (code, signal) => {
        console.log(`client-server ${c.pid}: exited (${signal ?? code})`)
        if (server === c) server = undefined
        once({
          clientServerStarted: null,
          error: `the server process exited with ${signal ?? code} before it was ready`
        })
      })
    } else if (m.clientServer === "kill") {
      if (child === undefined) return answer({ clientServerKilled: false })
      child.once("exit", () => answer({ clientServerKilled: true }))
      child.kill("SIGKILL")
    } else if (m.clientServer === "stop") {
      if (child === undefined) return answer({ clientServerStopped: false, error: "no server process is running" })
      let live: unknown = undefined
      createInterface({ input: child.stdout! }).on("line", (line) => {
        if (line.startsWith("live ")) live = JSON.parse(line.slice(5))
      })
      const timer = setTimeout(() => child.kill("SIGKILL"), 90_000)
      child.once("exit", (code, signal) => {
        clearTimeout(timer)
        answer({ clientServerStopped: true, live, exit: signal ?? code })
      })
      child.stdin!.end("stop\n")
    } else {
      answer({ error: `unknown clientServer request ${JSON.stringify(m.clientServer)}` })
    }
  })

// ---------------------------------------------------------------------------------------------
// VM b: the runner's side.

const ask = (ctx: FaultContext, request: Message, seconds: number) =>
  Effect.zipRight(ctx.channel.send(request), ctx.channel.receive(seconds))

const startServer = (ctx: FaultContext, ports: Ports) =>
  Effect.gen(function*() {
    const m = yield* ask(ctx, { clientServer: "start", ...ports }, 120)
    if (m.clientServerStarted === null || m.clientServerStarted === undefined) {
      return yield* fail(`the server process did not start: ${m.error}`)
    }
    yield* log(`client-server ${m.clientServerStarted} ready on ${ctx.serverAddress} after ${m.seconds.toFixed(2)} s`)
  })

interface Ports {
  readonly rdmaPort: number
  readonly offerPort: number
}

interface ClientUnderTest {
  readonly mode: Mode
  readonly client: RdmaClient.RdmaClient<{ readonly store: typeof storeUsage }>
  readonly states: Array<{ readonly tag: RdmaClient.State["_tag"]; readonly at: number }>
  readonly outcomes: Array<Outcome>
}

const makeClient = (ctx: FaultContext, peer: Peer.Peer, ports: Ports, mode: Mode) =>
  Effect.gen(function*() {
    const client = yield* RdmaClient.make({
      peer,
      // The certificate names localhost: checked against that name, not the address.
      offer: DescriptorExchange.fetch({
        host: ctx.serverAddress,
        port: ports.offerPort,
        tls: { key: pem("client-key"), cert: pem("client"), ca: pem("ca"), servername: "localhost" },
        timeout: "3 seconds"
      }),
      regions: { store: storeUsage },
      reconnect: Schedule.spaced("500 millis"),
      whileDisconnected: mode === "fail" ? "fail" : { wait: WAIT },
      connection: { timeout: TIMEOUT },
      pollMillis: 250
    })
    const states: ClientUnderTest["states"] = []
    yield* Effect.forkScoped(Stream.runForEach(client.changes, (s) =>
      Effect.sync(() =>
        void states.push({ tag: s._tag, at: performance.now() })
      )))
    const c: ClientUnderTest = { mode, client, states, outcomes: [] }
    return c
  })

/** WORKERS fibers, each an endless round of write, flush, read of its own span, until `stop`. */
const workload = (c: ClientUnderTest, peer: Peer.Peer) =>
  Effect.gen(function*() {
    const src = yield* LocalMr.allocate(peer, WORKERS * SPAN, Usage.WRITE_SRC)
    const dst = yield* LocalMr.allocate(peer, WORKERS * SPAN, Usage.READ_DST)
    let stop = false
    const worker = (w: number) =>
      Effect.gen(function*() {
        const at = w * SPAN
        for (let n = 0; !stop; n++) {
          const kind = KINDS[n % KINDS.length]!
          src.memory[at] = n % 256
          const op = kind === "write"
            ? RdmaClient.write(c.client, { dst: "store", dstOffset: at, src, srcOffset: at, length: SPAN })
            : kind === "flush"
            ? RdmaClient.flush(c.client, { dst: "store", dstOffset: at, length: SPAN })
            : RdmaClient.read(c.client, { dst, dstOffset: at, src: "store", srcOffset: at, length: SPAN })
          const startedAt = performance.now()
          const exit = yield* Effect.exit(op)
          const tag = Exit.isSuccess(exit)
            ? "success"
            : exit.cause._tag === "Fail"
            ? exit.cause.error._tag
            : `defect or interruption: ${String(exit.cause).slice(0, 200)}`
          c.outcomes.push({ kind, tag, startedAt, endedAt: performance.now() })
          // A pause, longer after a failure: a client failing at once must not spin.
          yield* Effect.sleep(tag === "success" ? "10 millis" : "100 millis")
        }
      })
    const fiber = yield* Effect.forkScoped(Effect.all(Array.from({ length: WORKERS }, (_, w) => worker(w)), {
      concurrency: "unbounded",
      discard: true
    }))
    return { fiber, stop: () => void (stop = true) }
  })

const stateAfter = (c: ClientUnderTest, tag: RdmaClient.State["_tag"], after: number) =>
  c.states.find((s) => s.tag === tag && s.at >= after)

/** Each outcome's check: an expected tag, within the bound of its client's mode. */
const checkOutcomes = (c: ClientUnderTest): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const bound = c.mode === "fail" ? ON_CONNECTION_S : WAIT_S + ON_CONNECTION_S
  for (const o of c.outcomes) {
    const tookS = (o.endedAt - o.startedAt) / 1000
    const what = `${c.mode} client: a ${o.kind} ended with ${o.tag} after ${tookS.toFixed(2)} s`
    if (!TAGS.has(o.tag)) problems.push(`${what}: not a result or an expected tagged error`)
    else if (tookS > bound) problems.push(`${what}: over its bound of ${bound} s`)
    else if (o.tag === "NotConnectedError" && c.mode === "fail" && tookS > AT_ONCE_S) {
      problems.push(`${what}: a client that fails at once took over ${AT_ONCE_S} s`)
    } else if (o.tag === "NotConnectedError" && c.mode === "wait" && tookS < WAIT_S - 0.1) {
      problems.push(`${what}: before its wait of ${WAIT_S} s had passed`)
    }
  }
  return problems
}

const summary = (c: ClientUnderTest, from: number, to: number) => {
  const counts = new Map<string, number>()
  let longest = 0
  for (const o of c.outcomes) {
    if (o.startedAt < from || o.startedAt > to) continue
    counts.set(o.tag, (counts.get(o.tag) ?? 0) + 1)
    longest = Math.max(longest, (o.endedAt - o.startedAt) / 1000)
  }
  return `${[...counts].map(([tag, n]) => `${n} ${tag}`).join(", ")}; longest ${longest.toFixed(2)} s`
}

const liveTotal = (live: unknown) =>
  typeof live === "object" && live !== null ? Object.values(live).reduce((a: number, b) => a + Number(b), 0) : NaN

interface Scenario {
  readonly ports: Ports
  readonly inject: (ctx: FaultContext) => Effect.Effect<void, PairFailure>
  readonly repair: (ctx: FaultContext) => Effect.Effect<void, PairFailure>
}

const scenario = (s: Scenario) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const problems: Array<string> = []
    const problem = (message: string) =>
      Effect.zipRight(Effect.sync(() => problems.push(message)), log(`problem: ${message}`))
    yield* startServer(ctx, s.ports)

    yield* Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(ctx.address)
      const clientScope = yield* Scope.make()
      const clients = yield* Effect.all([
        makeClient(ctx, peer, s.ports, "fail"),
        makeClient(ctx, peer, s.ports, "wait")
      ]).pipe(
        Scope.extend(clientScope)
      )
      const connected = yield* waitUntil(
        "both clients connected",
        () => clients.every((c) => stateAfter(c, "Connected", 0)),
        60
      )
      yield* ctx.note(`both clients connected in ${connected.toFixed(2)} s`)
      const loads = yield* Effect.all(clients.map((c) => workload(c, peer))).pipe(Scope.extend(clientScope))
      const successes = (c: ClientUnderTest, after: number) =>
        c.outcomes.filter((o) => o.tag === "success" && o.startedAt >= after).length
      yield* waitUntil(
        "30 operations on each client before the fault",
        () => clients.every((c) => successes(c, 0) >= 30),
        60
      )

      const faultAt = performance.now()
      yield* s.inject(ctx)
      for (const c of clients) {
        const noticed = yield* Effect.either(
          waitUntil(
            `the ${c.mode} client leaving Connected after the fault`,
            () => stateAfter(c, "Reconnecting", faultAt) !== undefined,
            NOTICE_S
          )
        )
        if (noticed._tag === "Left") yield* problem(noticed.left.message)
        else {
          // From the fault, not from this wait's start (the other client's wait came first).
          const afterS = (stateAfter(c, "Reconnecting", faultAt)!.at - faultAt) / 1000
          yield* ctx.note(`${c.mode} client: Reconnecting ${afterS.toFixed(2)} s after the fault`)
          if (afterS > NOTICE_S) {
            yield* problem(
              `the ${c.mode} client said Reconnecting ${afterS.toFixed(2)} s after the fault, over ${NOTICE_S} s`
            )
          }
        }
      }
      // Held until each client has failed an operation for want of a connection.
      const held = yield* Effect.either(waitUntil(
        "a NotConnectedError on each client during the fault",
        () => clients.every((c) => c.outcomes.some((o) => o.tag === "NotConnectedError" && o.startedAt >= faultAt)),
        30
      ))
      if (held._tag === "Left") yield* problem(held.left.message)

      const repairAt = performance.now()
      yield* s.repair(ctx)
      for (const c of clients) {
        const back = yield* Effect.either(
          waitUntil(
            `the ${c.mode} client connected again after the repair`,
            () => stateAfter(c, "Connected", repairAt) !== undefined,
            RECONNECT_BOUND_S
          )
        )
        if (back._tag === "Left") yield* problem(back.left.message)
      }
      const resumed = yield* Effect.either(
        waitUntil(
          "10 operations on each client after the repair",
          () => clients.every((c) => successes(c, repairAt) >= 10),
          60
        )
      )
      if (resumed._tag === "Left") yield* problem(resumed.left.message)
      for (const c of clients) {
        const back = stateAfter(c, "Connected", repairAt)
        yield* ctx.note(
          `${c.mode} client: ${
            back === undefined
              ? "never connected again"
              : `Connected ${((back.at - repairAt) / 1000).toFixed(2)} s after the repair`
          }; during the fault: ${summary(c, faultAt, repairAt)}; states ${c.states.map((x) => x.tag).join(" → ")}`
        )
      }

      // The operations stop; each ends within its bound.
      for (const l of loads) l.stop()
      const joined = yield* Effect.all(loads.map((l) => Fiber.await(l.fiber))).pipe(
        Effect.timeout(Duration.seconds(WAIT_S + ON_CONNECTION_S + 5)),
        Effect.option
      )
      if (joined._tag === "None") yield* problem("an operation was still running after the workload stopped")
      for (const c of clients) for (const p of checkOutcomes(c)) yield* problem(p)
      yield* ctx.note(
        clients.map((c) => `${c.mode} client: ${c.outcomes.length} operations (${summary(c, 0, Infinity)})`).join("; ")
      )

      // The clients' scope closes within its bound, and they say Closed.
      const closeAt = performance.now()
      const closed = yield* Scope.close(clientScope, Exit.void).pipe(
        Effect.timeout(Duration.seconds(CLOSE_BOUND_S)),
        Effect.option
      )
      if (closed._tag === "None") yield* problem(`the clients' scope was still closing after ${CLOSE_BOUND_S} s`)
      else yield* ctx.note(`the clients closed in ${seconds(closeAt).toFixed(2)} s`)
      for (const c of clients) {
        const last = (yield* c.client.state)._tag
        if (last !== "Closed") yield* problem(`the ${c.mode} client's state after its scope closed: ${last}`)
        const tags = c.states.map((x) => x.tag)
        const lost = tags.indexOf("Reconnecting", tags.indexOf("Connected"))
        if (!(tags[0] === "Connecting" && lost > 0 && tags.indexOf("Connected", lost) > lost)) {
          yield* problem(
            `the ${c.mode} client's states did not go Connected → Reconnecting → Connected: ${tags.join(" → ")}`
          )
        }
      }
    }))

    const stopped = yield* ask(ctx, { clientServer: "stop" }, 120)
    const liveB = yield* driver.live
    if (liveTotal(liveB) !== 0) yield* problem(`handles alive on b at the end: ${JSON.stringify(liveB)}`)
    if (stopped.clientServerStopped !== true || liveTotal(stopped.live) !== 0 || stopped.exit !== 0) {
      yield* problem(
        `the server process on a: ${JSON.stringify(stopped)} (expected it stopped with exit 0 and nothing alive)`
      )
    } else {
      yield* ctx.note(`the server process stopped with nothing alive: ${JSON.stringify(stopped.live)}`)
    }
    if (problems.length > 0) return yield* Effect.fail(new PairFailure({ message: problems.join("\n") }))
  })

export const clientTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown, RdmaDriver>
}> = [
  {
    name: "RdmaClient: link cut (set_link off on the server's NIC) under a stream of operations, then back",
    run: scenario({
      ports: { rdmaPort: 17501, offerPort: 17511 },
      inject: () => Effect.asVoid(fault("link", "peer", "off")),
      repair: () => Effect.asVoid(fault("link", "peer", "on"))
    })
  },
  {
    name: "RdmaClient: server process killed (SIGKILL) under a stream of operations, then restarted with a new region",
    run: scenario({
      ports: { rdmaPort: 17502, offerPort: 17512 },
      inject: (ctx) =>
        Effect.flatMap(
          ask(ctx, { clientServer: "kill" }, 60),
          (m) =>
            m.clientServerKilled === true
              ? Effect.void
              : fail(`the server process was not killed: ${JSON.stringify(m)}`)
        ),
      repair: (ctx) => startServer(ctx, { rdmaPort: 17502, offerPort: 17512 })
    })
  },
  {
    name: "RdmaClient: server VM frozen (QMP stop) under a stream of operations, then resumed (cont)",
    run: scenario({
      ports: { rdmaPort: 17503, offerPort: 17513 },
      inject: () => Effect.asVoid(fault("stop", "peer")),
      repair: () => Effect.asVoid(fault("cont", "peer"))
    })
  }
]
