// Issue 34, item 2: a listener keeps accepting after any number of clients interrupted at any
// stage. CLIENT_STORM_SESSIONS (default 500) client sessions are each interrupted at a stage drawn
// at random: before their connect request, after it (the server has taken the request), during
// the server's accept, after their first post, or their connect interrupted while their endpoint is
// kept open (the server's accept then waits until its bound); then a good client connects within its normal
// timeout and is answered, and the driver's live objects are back to the listener alone. Both
// listeners: librdmacm's (CmListener.serve) and librpma's (Listener.serve).
//   RDMA_ADDRESS=... CLIENT_STORM_SESSIONS=100 vitest run --config vitest.device.config.ts test-device/ListenerStorm.test.ts
import { CmEndpoint, CmListener, Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
import { type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as TestServices from "effect/TestServices"
import * as NativeDriver from "../src/NativeDriver.js"
import { address, nothingAlive } from "./support.js"

const setting = process.env.CLIENT_STORM_SESSIONS ?? "500"
const SESSIONS = Number(setting)
if (!Number.isSafeInteger(SESSIONS) || SESSIONS <= 0) {
  throw new Error(
    `CLIENT_STORM_SESSIONS is how many client sessions to interrupt, a positive integer, not '${setting}'`
  )
}
const slowdown = Number(process.env.DEVICE_TEST_SLOWDOWN ?? "1")
/** The timeout of every endpoint and connection, client's and server's: the issue's 3 s (STORM_TIMEOUT_MS). */
const TIMEOUT_MS = Number(process.env.STORM_TIMEOUT_MS ?? 3_000)
/** A bound on a hang: each session takes at most its waits for a stage, and the good client its own. */
const testTimeout = SESSIONS * 3 * TIMEOUT_MS + 120_000 * slowdown

const STAGES = [
  "before the request",
  "after the request",
  "during the accept",
  "after the first post",
  // Its connect interrupted once the server has its request, its endpoint kept open (in a scope of
  // the caller's, as CmEndpoint.establish allows): the server's accept waits until its bound.
  "connect interrupted, endpoint kept"
] as const
type Stage = typeof STAGES[number]
const RPMA_PORT = 18470
/** librpma's connect is one step: interrupted, it keeps no endpoint. */
const RPMA_STAGES = STAGES.filter((stage) => stage !== "connect interrupted, endpoint kept")

/** Where a session has got to: the stages a client or its server handler signals. */
interface Marks {
  readonly requested: Deferred.Deferred<void>
  readonly accepting: Deferred.Deferred<void>
  readonly posted: Deferred.Deferred<void>
}

/** Each session's marks, by its number (carried in its private data, so the server can signal too). */
const sessions = new Map<number, Marks>()
const marksOf = (session: number): Marks | undefined => sessions.get(session)
const sessionOf = (privateData: Uint8Array): number =>
  privateData.byteLength >= 4 ? new DataView(privateData.buffer, privateData.byteOffset).getUint32(0, true) : -1
const tag = (session: number) => {
  const data = new Uint8Array(4)
  new DataView(data.buffer).setUint32(0, session, true)
  return data
}
const mark = (session: number, which: keyof Marks) =>
  Effect.suspend(() => {
    const marks = marksOf(session)
    return marks === undefined ? Effect.void : Deferred.succeed(marks[which], undefined)
  })

const awaitedMark: Record<Stage, keyof Marks | undefined> = {
  "before the request": undefined,
  "after the request": "requested",
  "during the accept": "accepting",
  "after the first post": "posted",
  "connect interrupted, endpoint kept": "requested"
}

/**
 * The storm: each session forked, then interrupted once it reaches the stage drawn for it (or ends
 * on its own), after a random number of yields. Returns how many sessions each stage had.
 */
const storm = <R>(
  stages: ReadonlyArray<Stage>,
  session: (n: number, stage: Stage) => Effect.Effect<unknown, unknown, R>
) =>
  Effect.gen(function*() {
    const tally = new Map<Stage, number>(stages.map((stage) => [stage, 0]))
    for (let n = 1; n <= SESSIONS; n++) {
      const marks: Marks = {
        requested: yield* Deferred.make<void>(),
        accepting: yield* Deferred.make<void>(),
        posted: yield* Deferred.make<void>()
      }
      sessions.set(n, marks)
      const stage = stages[yield* Random.nextIntBetween(0, stages.length)]!
      tally.set(stage, tally.get(stage)! + 1)
      const fiber = yield* Effect.fork(session(n, stage))
      const waitFor = awaitedMark[stage]
      if (waitFor !== undefined) {
        // Bounded: a session that never gets there (refused, timed out) is interrupted all the same.
        yield* Effect.raceFirst(Deferred.await(marks[waitFor]), Effect.asVoid(Fiber.await(fiber))).pipe(
          Effect.timeout(TIMEOUT_MS * 2),
          Effect.ignore
        )
      }
      // The kept endpoint's connect is interrupted at once: before the server's accept answers it.
      const yields = stage === "connect interrupted, endpoint kept" ? 0 : yield* Random.nextIntBetween(0, 50)
      for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
      yield* Fiber.interrupt(fiber)
      sessions.delete(n)
    }
    return tally
  })

/** Waits (bounded) until only `expected` is alive; fails with what is alive otherwise. */
const settlesTo = (expected: Model.LiveHandles) =>
  Effect.flatMap(RdmaDriver, (driver) =>
    driver.live.pipe(
      Effect.repeat({
        until: (live) => JSON.stringify(live) === JSON.stringify(expected),
        schedule: Schedule.spaced("50 millis")
      }),
      Effect.timeout(TIMEOUT_MS * 3),
      Effect.catchTag("TimeoutException", () => Effect.void),
      Effect.zipRight(driver.live),
      Effect.tap((live) => Effect.sync(() => assert.deepStrictEqual(live, expected, "alive after the storm")))
    ))

/** The server is still serving: else its end (a handler's failure ends `serve`) fails the test. */
const serving = (server: Fiber.RuntimeFiber<never, unknown>) => {
  const ended = server.unsafePoll()
  assert.isNull(ended, `the server ended during the storm: ${ended === null ? "" : String(ended)}`)
}

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const value = yield* effect
    return [value, (yield* Clock.currentTimeMillis) - started] as const
  })

/** After a client's first post: its echo checked; then it stays (until interrupted) or returns its connect's time. */
const echoed = <E>(
  session: number,
  answer: Effect.Effect<{ readonly byteLength: number }, E>,
  inbox: Uint8Array,
  stay: boolean,
  connectMs: number
) =>
  Effect.gen(function*() {
    yield* mark(session, "posted")
    const { byteLength } = yield* answer
    assert.strictEqual(sessionOf(inbox.subarray(0, byteLength)), session, "the echo")
    if (stay) yield* Effect.never
    return connectMs
  })

// ---- librdmacm: CmListener.serve ----

/** The server's handler: echoes each message, marking when it took the request and when it accepts. */
const echo = (request: CmEndpoint.CmEndpoint) =>
  Effect.gen(function*() {
    const session = sessionOf(request.privateData)
    yield* mark(session, "requested")
    const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
    const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
    let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
    yield* mark(session, "accepting")
    const ep = yield* CmListener.accept(request)
    for (;;) {
      const { byteLength } = yield* next.completion
      next = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
      outbox.memory.set(inbox.memory.subarray(0, byteLength))
      yield* CmEndpoint.send(ep, { src: outbox, length: byteLength })
    }
  }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))

/**
 * One client: connects, sends one message and waits for its echo; then stays, until interrupted.
 * Its endpoint lives in `kept` when given (closed after the storm), else in a scope of its own.
 */
const cmClient = (port: number, session: number, stay: boolean, kept?: Scope.Scope) =>
  Effect.scoped(Effect.gen(function*() {
    const making = CmEndpoint.make(address, port, { timeout: TIMEOUT_MS })
    const ep = yield* kept === undefined ? making : Scope.extend(making, kept)
    const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(64))
    const outbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(64))
    const answer = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
    const [, connectMs] = yield* timed(CmEndpoint.establish(ep, { privateData: tag(session) }))
    outbox.memory.set(tag(session))
    yield* CmEndpoint.send(ep, { src: outbox, length: 4 })
    return yield* echoed(session, answer.completion, inbox.memory, stay, connectMs)
  }))

// ---- librpma: Listener.serve ----

/** The server's handler: echoes each message on its connection (the request is taken and accepted by serve). */
const rpmaEcho = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    const peer = yield* Peer.Peer
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 64, Usage.SEND)
    for (;;) {
      const { byteLength } = yield* Connection.recv(conn, { dst: inbox })
      outbox.memory.set(inbox.memory.subarray(0, byteLength))
      yield* Connection.send(conn, { src: outbox, length: byteLength })
    }
  }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))

const rpmaClient = (peer: Peer.Peer, port: number, session: number, stay: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 64, Usage.SEND)
    // librpma's connect is one step and its server accepts in `serve`, out of the handler's sight:
    // the request and the accept are both under way from here, and the storm's random yields
    // after this mark spread the interruptions over them.
    yield* mark(session, "requested")
    yield* mark(session, "accepting")
    const [conn, connectMs] = yield* timed(Connection.connect(peer, address, port, { timeout: TIMEOUT_MS }))
    outbox.memory.set(tag(session))
    const answer = yield* Connection.postRecv(conn, { dst: inbox })
    yield* Connection.send(conn, { src: outbox, length: 4 })
    return yield* echoed(session, answer.completion, inbox.memory, stay, connectMs)
  }))

layer(NativeDriver.layer, { timeout: testTimeout })("on a device", (it) => {
  describe("a listener outlives interrupted clients", () => {
    it.scoped(
      `CmListener.serve: ${SESSIONS} clients interrupted at random stages, then a good client is answered in time`,
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const listener = yield* CmListener.make(address, 0, { timeout: TIMEOUT_MS })
          const server = yield* Effect.forkScoped(CmListener.serve(listener, echo))
          const [, before] = yield* timed(cmClient(listener.port, 0, false))
          const kept = yield* Scope.make()
          const tally = yield* storm(
            STAGES,
            (n, stage) =>
              cmClient(listener.port, n, true, stage === "connect interrupted, endpoint kept" ? kept : undefined)
          )
          serving(server)
          const connectMs = yield* cmClient(listener.port, SESSIONS + 1, false)
          console.log(
            `CmListener storm: ${SESSIONS} sessions interrupted (${
              [...tally].map(([stage, n]) => `${n} ${stage}`).join(", ")
            }); a good client then connected in ${connectMs} ms (a whole session before the storm: ${before} ms)`
          )
          yield* Scope.close(kept, Exit.void)
          yield* settlesTo({ ...nothingAlive, cmListeners: 1 })
        })),
      { timeout: testTimeout }
    )

    it.scoped(
      `Listener.serve (librpma): ${SESSIONS} clients interrupted at random stages, then a good client is answered in time`,
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const serverPeer = yield* Peer.make(address)
          // librpma cannot report a port the system chose: a fixed one, no other device test's.
          const listener = yield* Listener.make(serverPeer, address, RPMA_PORT)
          const server = yield* Effect.forkScoped(
            Listener.serve(listener, rpmaEcho, { timeout: TIMEOUT_MS }).pipe(
              Effect.provideService(Peer.Peer, serverPeer)
            )
          )
          const clientPeer = yield* Peer.make(address)
          const [, before] = yield* timed(rpmaClient(clientPeer, listener.port, 0, false))
          const tally = yield* storm(RPMA_STAGES, (n) => rpmaClient(clientPeer, listener.port, n, true))
          serving(server)
          const connectMs = yield* rpmaClient(clientPeer, listener.port, SESSIONS + 1, false)
          console.log(
            `Listener storm: ${SESSIONS} sessions interrupted (${
              [...tally].map(([stage, n]) => `${n} ${stage}`).join(", ")
            }); a good client then connected in ${connectMs} ms (a whole session before the storm: ${before} ms)`
          )
          // The two peers and the listener; every connection and request released.
          yield* settlesTo({ ...nothingAlive, peers: 2, endpoints: 1 })
        })),
      { timeout: testTimeout }
    )
  })
})
