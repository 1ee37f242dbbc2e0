/**
 * RdmaClient over librdmacm (`transport: "cm"`) and RdmaStream on its endpoint, across two hosts
 * (vm/pair). VM a (the agent) serves with a CmListener and an admission: each admitted request gets
 * a 1 MiB region registered for writes (`x`) and a 64 KiB ring registered once each way (`ring`,
 * `head`), their keys in the acceptance's private data (RdmaClient.acceptData), and a reader on the
 * ring (RdmaStream.readRing). VM b (the runner):
 *
 *   1. connects an RdmaClient (transport "cm", the token in its offer) and, inside withEndpoint,
 *      streams 1 MiB into `x` (RdmaStream.writeRange) and 256 KiB through the ring
 *      (RdmaStream.writeRing, wrapping it four times); a asks its memory and checks every byte;
 *   2. has a's server stopped (its scope closed: the endpoint disconnected, the listener and every
 *      region gone, Driver.live zero on a) and started again with new memory and new keys; waits
 *      for the client to go Reconnecting and Connected again, and streams both again with other
 *      bytes, checked the same way;
 *   3. checks that a client with a wrong token is refused with the admission's reason (the
 *      rejection's private data, across the wire);
 *   4. closes the client (its state Closed), and checks Driver.live zero on b and, once the server
 *      has stopped, on a.
 *
 * Every wait is bounded, so a hang is a failure with a message.
 */
import { Admission, CmEndpoint, CmListener, RdmaClient, RdmaStream, RemoteKey, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { FaultContext } from "./faults.js"
import { waitUntil } from "./faults.js"
import { type Channel, check, describeCause, fail, log, type Message, PairFailure, seconds } from "./harness.js"

const RANGE = 1024 * 1024
const RING_DATA = 64 * 1024
const RING_BYTES = 256 * 1024
const CHUNK = 64 * 1024
const TOKEN = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
/** The endpoints' timeout on both sides: bounds a connect, an operation on a dead endpoint, a close. */
const TIMEOUT = Duration.seconds(10)
const TIMEOUT_S = Duration.toSeconds(TIMEOUT)
const RECONNECT_BOUND_S = 90

/** Round `seed`'s bytes: not periodic within a ring's length, different in every round. */
const pattern = (seed: number, length: number) => {
  const bytes = new Uint8Array(length)
  for (let i = 0; i < length; i++) bytes[i] = (i * 7 + (i >>> 8) * 13 + seed * 101) & 0xff
  return bytes
}

/** Where `got` first differs from `want`, or -1. */
const firstDifference = (got: Uint8Array, want: Uint8Array) => {
  if (got.byteLength < want.byteLength) return got.byteLength
  for (let i = 0; i < want.byteLength; i++) if (got[i] !== want[i]) return i
  return -1
}

const liveTotal = (live: unknown) =>
  typeof live === "object" && live !== null ? Object.values(live).reduce((a: number, b) => a + Number(b), 0) : NaN

// ---------------------------------------------------------------------------------------------
// VM a: the agent serves while the runner asks it to.

interface Session {
  readonly x: Uint8Array
  readonly ring: Array<Uint8Array>
  ringBytes: number
}

let serving: Scope.CloseableScope | undefined
/** The endpoint accepted last (one client at a time here). */
let session: Session | undefined
let sessions = 0

const serveOn = (address: string, port: number, scope: Scope.Scope) =>
  Effect.gen(function*() {
    const admission = yield* Admission.make(new Uint8Array(TOKEN), { uses: 100 })
    const listener = yield* CmListener.make(address, port, { timeout: TIMEOUT }).pipe(Scope.extend(scope))
    const handler = (request: CmEndpoint.CmEndpoint) =>
      Effect.gen(function*() {
        const s: Session = { x: new Uint8Array(RANGE), ring: [], ringBytes: 0 }
        const x = yield* CmEndpoint.registerWrite(request, s.x)
        const ringMemory = new Uint8Array(RdmaStream.RING_HEADER + RING_DATA)
        const ring = yield* CmEndpoint.registerWrite(request, ringMemory)
        const head = yield* CmEndpoint.registerRead(request, ringMemory)
        const privateData = yield* RdmaClient.acceptData({
          x: RemoteKey.make(x),
          ring: RemoteKey.make(ring),
          head: RemoteKey.make(head)
        })
        // The ring's reader, until the endpoint's scope closes.
        yield* Effect.forkScoped(Stream.runForEach(RdmaStream.readRing(ring, { pollInterval: "5 millis" }), (piece) =>
          Effect.sync(() => {
            s.ring.push(piece)
            s.ringBytes += piece.byteLength
          })))
        const endpoint = yield* CmListener.accept(request, { privateData })
        session = s
        sessions++
        yield* log(`cm client: accepted session ${sessions}`)
        yield* CmEndpoint.awaitClosed(endpoint)
        yield* log(`cm client: session ${sessions} ended`)
      }).pipe(Effect.catchAll((e) => log(`cm client: a session failed: ${e._tag}: ${e.message}`)))
    yield* Effect.forkIn(
      CmListener.serve(listener, handler, { admission }).pipe(
        Effect.catchAllCause((cause) =>
          log(`cm client: the server stopped: ${describeCause(cause)}`)
        )
      ),
      scope
    )
  })

/** Checks the session's memory against round `seed`'s bytes: the range's, and the ring's (waited for). */
const checkSession = (m: Message) =>
  Effect.gen(function*() {
    const s = session
    if (s === undefined) return yield* fail("no session was accepted")
    const wantRange = pattern(m.seed, m.range)
    const at = firstDifference(s.x.subarray(0, m.range), wantRange)
    yield* check(at < 0, `the range's byte ${at} of ${m.range} is ${s.x[at]}, not ${wantRange[at]}`)
    // The ring's reader polls its tail word: what the writer wrote may still be on its way out.
    yield* waitUntil(`${m.ring} bytes off the ring (${s.ringBytes} so far)`, () => s.ringBytes >= m.ring, 30)
    const got = new Uint8Array(Buffer.concat(s.ring))
    yield* check(got.byteLength === m.ring, `the ring gave ${got.byteLength} bytes, not ${m.ring}`)
    const ringAt = firstDifference(got, pattern(m.seed + 100, m.ring))
    yield* check(ringAt < 0, `the ring's byte ${ringAt} of ${m.ring} differs`)
  })

/** Answers the runner's `{ cmClient: "serve" | "check" | "stop" }` (one answer each, always). */
export const cmClientRequest = (
  channel: Channel,
  address: string,
  m: Message
): Effect.Effect<void, never, RdmaDriver> =>
  Effect.gen(function*() {
    if (m.cmClient === "serve") {
      if (serving !== undefined) return yield* channel.send({ cmServing: false, error: "already serving" })
      const scope = yield* Scope.make()
      const started = yield* Effect.exit(serveOn(address, m.port, scope))
      if (Exit.isFailure(started)) {
        yield* Scope.close(scope, Exit.void)
        return yield* channel.send({ cmServing: false, error: describeCause(started.cause) })
      }
      serving = scope
      session = undefined
      yield* log(`cm client: serving on ${address}:${m.port}`)
      return yield* channel.send({ cmServing: true })
    }
    if (m.cmClient === "check") {
      const checked = yield* Effect.exit(checkSession(m))
      return yield* channel.send({
        cmChecked: Exit.isSuccess(checked),
        error: Exit.isFailure(checked) ? describeCause(checked.cause) : undefined
      })
    }
    if (m.cmClient === "stop") {
      const scope = serving
      serving = undefined
      session = undefined
      const started = performance.now()
      const closed = scope === undefined
        ? Exit.void
        : yield* Effect.exit(Scope.close(scope, Exit.void).pipe(Effect.timeout(Duration.seconds(TIMEOUT_S + 5))))
      const live = yield* Effect.flatMap(RdmaDriver, (d) => d.live)
      return yield* channel.send({
        cmStopped: scope !== undefined,
        seconds: seconds(started),
        error: Exit.isFailure(closed) ? describeCause(closed.cause) : undefined,
        live
      })
    }
    yield* channel.send({ error: `unknown cmClient request ${JSON.stringify(m.cmClient)}` })
  })

// ---------------------------------------------------------------------------------------------
// VM b: the runner's side.

const ask = (ctx: FaultContext, request: Message, seconds: number) =>
  Effect.zipRight(ctx.channel.send(request), ctx.channel.receive(seconds))

const regions = { x: Usage.WRITE_DST, ring: Usage.WRITE_DST, head: Usage.READ_SRC }

const serve = (ctx: FaultContext, port: number) =>
  Effect.flatMap(
    ask(ctx, { cmClient: "serve", port }, 60),
    (m) => m.cmServing === true ? Effect.void : fail(`the server on a did not start: ${m.error}`)
  )

/** Stops a's server; fails unless it stopped with nothing alive there. */
const stop = (ctx: FaultContext) =>
  Effect.gen(function*() {
    const m = yield* ask(ctx, { cmClient: "stop" }, 60)
    yield* check(
      m.cmStopped === true && m.error === undefined && liveTotal(m.live) === 0,
      `the server on a: ${JSON.stringify(m)} (expected it stopped with nothing alive)`
    )
    return m.seconds as number
  })

const cmClient = (port: number) => (ctx: FaultContext) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    yield* serve(ctx, port)
    const offer = (token: ReadonlyArray<number>) =>
      Effect.succeed<RdmaClient.Offer>({
        rdma: { address: ctx.serverAddress, port },
        regions: {},
        config: {},
        token: new Uint8Array(token)
      })
    // The client's own scope, closed by the test (and by the outer one if a step fails first).
    const clientScope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const states: Array<{ readonly tag: RdmaClient.State["_tag"]; readonly at: number }> = []
    const client = yield* Effect.gen(function*() {
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: offer(TOKEN),
        regions,
        reconnect: Schedule.spaced("500 millis"),
        endpoint: { timeout: TIMEOUT },
        pollMillis: 250
      })
      yield* Effect.forkScoped(Stream.runForEach(client.changes, (s) =>
        Effect.sync(() =>
          void states.push({ tag: s._tag, at: performance.now() })
        )))
      return client
    }).pipe(Scope.extend(clientScope))
    const stateAfter = (tag: RdmaClient.State["_tag"], after: number) =>
      states.find((s) =>
        s.tag === tag && s.at >= after
      )

    /** Streams round `seed` through both Sinks on the current endpoint; a checks what arrived. */
    const round = (seed: number) =>
      Effect.gen(function*() {
        const started = performance.now()
        const chunks = (bytes: Uint8Array) =>
          Stream.fromIterable(
            Array.from({ length: bytes.byteLength / CHUNK }, (_, i) => bytes.subarray(i * CHUNK, (i + 1) * CHUNK))
          )
        const [range, rangeS, ring, ringS] = yield* RdmaClient.withEndpoint(client, (ep, keys) =>
          Effect.gen(function*() {
            const range = yield* Stream.run(chunks(pattern(seed, RANGE)), RdmaStream.writeRange(ep, { dst: keys.x }))
            const rangeS = seconds(started)
            const ring = yield* Stream.run(
              chunks(pattern(seed + 100, RING_BYTES)),
              RdmaStream.writeRing(ep, { ring: keys.ring, head: keys.head, stagingSize: 16 * 1024 })
            )
            return [range, rangeS, ring, seconds(started) - rangeS] as const
          }))
        yield* check(range === RANGE && ring === RING_BYTES, `the Sinks wrote ${range} and ${ring} bytes`)
        const checked = yield* ask(ctx, { cmClient: "check", seed, range: RANGE, ring: RING_BYTES }, 60)
        if (checked.cmChecked !== true) return yield* fail(`round ${seed} on a: ${checked.error}`)
        const mibS = (bytes: number, s: number) => `${(bytes / 1024 / 1024 / s).toFixed(1)} MiB/s`
        yield* ctx.note(
          `round ${seed}: 1 MiB by writeRange in ${rangeS.toFixed(2)} s (${mibS(RANGE, rangeS)}), ` +
            `256 KiB through the 64 KiB ring in ${ringS.toFixed(2)} s (${
              mibS(RING_BYTES, ringS)
            }); every byte checked on a`
        )
      })

    const connected = yield* waitUntil("the client connected", () => stateAfter("Connected", 0) !== undefined, 60)
    yield* ctx.note(`connected in ${connected.toFixed(2)} s`)
    yield* round(1)

    // The server restarted: its scope closed (endpoint, listener, regions), then a new one.
    const stoppedAt = performance.now()
    const stopS = yield* stop(ctx)
    yield* waitUntil(
      "the client Reconnecting after the server stopped",
      () => stateAfter("Reconnecting", stoppedAt) !== undefined,
      TIMEOUT_S * 2
    )
    const noticed = (stateAfter("Reconnecting", stoppedAt)!.at - stoppedAt) / 1000
    yield* serve(ctx, port)
    const restartedAt = performance.now()
    const back = yield* waitUntil(
      "the client Connected to the restarted server",
      () => stateAfter("Connected", restartedAt) !== undefined,
      RECONNECT_BOUND_S
    )
    yield* ctx.note(
      `the server stopped in ${stopS.toFixed(2)} s with nothing alive on a; the client Reconnecting ${
        noticed.toFixed(2)
      } s after the stop was asked; Connected ${back.toFixed(2)} s after the restart`
    )
    yield* round(2)

    // A wrong token: refused, with the admission's reason.
    const refusal = yield* Effect.scoped(Effect.gen(function*() {
      const wrong = yield* RdmaClient.make({
        transport: "cm",
        offer: offer([9, 9, 9]),
        regions,
        reconnect: Schedule.spaced("500 millis"),
        endpoint: { timeout: TIMEOUT }
      })
      return yield* wrong.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting"),
        Stream.runHead,
        Effect.timeoutFail({
          duration: "60 seconds",
          onTimeout: () => new PairFailure({ message: "the wrong token's client never said Reconnecting" })
        })
      )
    }))
    const lastError = refusal._tag === "Some" && refusal.value._tag === "Reconnecting"
      ? refusal.value.lastError as { _tag?: string; reason?: string }
      : undefined
    yield* check(
      lastError?._tag === "AdmissionRejectedError" && lastError.reason === "WrongToken",
      `the wrong token's client: ${JSON.stringify(lastError)}, not AdmissionRejectedError WrongToken`
    )
    yield* ctx.note("a wrong token: AdmissionRejectedError (WrongToken), the reason from a's rejection")

    const closedAt = performance.now()
    yield* Scope.close(clientScope, Exit.void).pipe(
      Effect.timeoutFail({
        duration: Duration.seconds(TIMEOUT_S + 5),
        onTimeout: () => new PairFailure({ message: `the client's scope was still closing after ${TIMEOUT_S + 5} s` })
      })
    )
    const last = (yield* client.state)._tag
    yield* check(last === "Closed", `the client's state after its scope closed: ${last}`)
    const tags = states.map((s) => s.tag)
    const lost = tags.indexOf("Reconnecting", tags.indexOf("Connected"))
    yield* check(
      tags.indexOf("Connected") >= 0 && lost > 0 && tags.indexOf("Connected", lost) > lost,
      `the client's states did not go Connected → Reconnecting → Connected: ${tags.join(" → ")}`
    )
    yield* ctx.note(`the client closed in ${seconds(closedAt).toFixed(2)} s; states ${tags.join(" → ")}`)
    const liveB = yield* driver.live
    yield* check(liveTotal(liveB) === 0, `handles alive on b at the end: ${JSON.stringify(liveB)}`)
    yield* stop(ctx)
    yield* ctx.note("Driver.live zero on both hosts at the end")
  }).pipe(
    Effect.scoped,
    // A failed step leaves a's server to be stopped all the same.
    Effect.tapError(() => Effect.ignore(ask(ctx, { cmClient: "stop" }, 60)))
  )

export const cmClientTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown, RdmaDriver>
  readonly seconds?: number
}> = [
  {
    name:
      "RdmaClient over librdmacm: 1 MiB by RdmaStream.writeRange and 256 KiB by writeRing inside withEndpoint, checked on the server; server restarted, client reconnects and writes again; a wrong token refused; nothing alive",
    run: cmClient(17601),
    seconds: 400
  }
]
