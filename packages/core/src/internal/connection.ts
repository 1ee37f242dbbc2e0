/**
 * A connection's life: from the request to the deletion, with every handle covered by a finalizer
 * from the moment it exists, and every wait of a release bounded by the connection's timeout.
 *
 * - The request (rpma_conn_req_new, which resolves the address and route within the timeout) is
 *   created uninterruptibly, with its release already registered: an interruption never leaves it
 *   to the garbage collector.
 * - rpma_conn_req_connect consumes the request, success or not (the Driver's contract).
 * - Waiting for ESTABLISHED is interruptible and bounded. If anything fails after the connection
 *   exists (not established in time, rejected, its private data unreadable), it is closed at once,
 *   not when the caller's scope ends.
 * - Closing: rpma_conn_disconnect, then a wait for CLOSED that is interruptible and so really
 *   bounded by the timeout (the other side may never answer: a dead host, a peer that never
 *   disconnects), then the completions already queued are delivered, the operations still waiting
 *   fail, and rpma_conn_delete. Regions of requests still posted are released only after that.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as PubSub from "effect/PubSub"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type * as Connection from "../Connection.js"
import { ConnectionClosedError, ConnectionFailedError, type OperationError } from "../ConnectionError.js"
import type { Driver, RdmaDriver } from "../Driver.js"
import type { ConnConfig, ConnEvent, ConnHandle, ConnReqHandle } from "../DriverModel.js"
import type { Peer } from "../Peer.js"
import type * as Polling from "../Polling.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import { privateDataRefusal, queueSizesProblem, readSettings, toConfig } from "./connectionConfig.js"
import { ConnectionImpl, impl as implOf } from "./connectionImpl.js"
import { PendingTable, runAll, Slots } from "./dataPath.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import * as Owner from "./owner.js"
import { ownerOf } from "./peer.js"
import * as polling from "./polling.js"
import { afterPendingIo, type Poster } from "./poster.js"
import { boundedWait, closedError, deadline, settle, startPoster, watchdog, watchEvents } from "./queueLife.js"
import { release } from "./release.js"
import * as rendezvousAnswer from "./rendezvousAnswer.js"
import { connectionKind, notAPeer, ownEffect } from "./resourceGuard.js"
import * as srq from "./srq.js"

type State = Connection.State

/** Where a connection goes, for its errors. */
export interface Where {
  readonly address: string
  readonly port: number
}

/**
 * The next event, or undefined once `timeoutMs` has passed (and what was ready by then was seen).
 * Each side of the race is interruptible on its own: the loser is interrupted when the other
 * ends, and an uninterruptible caller (an `acquireRelease` acquire, `ScopedRef.set`) would
 * otherwise wait for the sleep to run out after the event came.
 */
const nextEventWithin = (
  driver: Driver,
  handle: ConnHandle,
  timeoutMs: number
): Effect.Effect<ConnEvent | undefined, RpmaError> =>
  Effect.raceFirst(
    Effect.interruptible(driver.connNextEvent(handle)),
    Effect.interruptible(
      Effect.sleep(Duration.millis(timeoutMs)).pipe(Effect.zipRight(afterPendingIo), Effect.as(undefined))
    )
  )

/**
 * How long a connection the other side closed waits for its signalled send-queue requests to
 * complete by themselves before its own disconnect flushes them (table.sendQueueDrained; an
 * unsignalled one reports only a failure): acknowledgements sent before the other side's
 * disconnect arrive within microseconds on a wire, milliseconds under emulation.
 */
const GRACE_MS = 200

/** What the C libraries would accept but a connection cannot live with (queues that lose completions, no timeout). */
const configProblem = (config: ConnConfig): string | undefined =>
  !(config.timeoutMs > 0 && config.timeoutMs <= 2 ** 31 - 1)
    ? `timeout ${
      Number.isNaN(config.timeoutMs) ? "(not a duration, or a negative one)" : `${config.timeoutMs} ms`
    } is not a duration between 1 ms and about 24 days`
    : queueSizesProblem(config)

/** What one attempt has created so far: what its finalizer must release. */
interface Attempt {
  req: ConnReqHandle | undefined
  handle: ConnHandle | undefined
  established: boolean
  /** The connection's own close, once it runs its fibers. */
  close: Effect.Effect<void> | undefined
  closed: boolean
}

/**
 * Releases what an attempt holds, once (it runs when the attempt fails and again, as a no-op, when
 * the scope closes). Never longer than the timeout, plus the native calls themselves.
 */
const closeAttempt = (
  driver: Driver,
  peer: Peer,
  attempt: Attempt,
  config: ConnConfig,
  prepared: Prepared | undefined
): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (attempt.closed) return Effect.void
    attempt.closed = true
    const steps: Array<Effect.Effect<unknown>> = []
    if (attempt.req !== undefined) {
      steps.push(release("rpma_conn_req_delete", "a connection request", driver.connReqDelete(attempt.req)))
    }
    if (attempt.close !== undefined) {
      steps.push(attempt.close)
    } else if (attempt.handle !== undefined) {
      const handle = attempt.handle
      if (attempt.established) {
        // The other side learns of the end from the disconnect; its answer, if any, within the timeout.
        steps.push(release("rpma_conn_disconnect", "a connection", driver.connDisconnect(handle)))
        steps.push(boundedWait(driver.connNextEvent(handle), config.timeoutMs))
      }
      steps.push(release("rpma_conn_delete", "a connection", driver.connDelete(handle)))
    }
    if (prepared !== undefined && attempt.close === undefined) steps.push(failPrepared(prepared))
    steps.push(Owner.drop(ownerOf(peer)))
    return Effect.forEach(steps, (step) => step, { discard: true })
  })

/**
 * Receives posted on a request before it is connected (rpma_conn_req_recv), through a
 * kernel of the request's own: their table becomes the connection's.
 */
export interface Prepared {
  readonly table: PendingTable<OperationError>
  /** The receive queue's entries, sized by the config the request was taken with (its queue pair's). */
  readonly recvSlots: Slots
  /** Posts on the request; reads no completions (they arrive on the connection's queue). */
  readonly kernel: Poster
}

/** No send queue: a connection request takes receives only. */
const NO_SEND_SLOTS = new Slots(0)

/**
 * What receives posted on request `req` before it is answered need: refused with
 * `refusal` once it is.
 */
export const prepare = (
  driver: Driver,
  req: ConnReqHandle,
  config: ConnConfig,
  refusal: (operation: string) => OperationError | undefined
): Effect.Effect<Prepared> =>
  Effect.suspend(() => {
    const table = new PendingTable<OperationError>()
    const recvSlots = new Slots(config.rqSize)
    return Effect.map(
      startPoster(() => ({
        driver,
        queue: req,
        completions: undefined,
        table,
        sendSlots: NO_SEND_SLOTS,
        recvSlots,
        refusal,
        flushed: () => undefined,
        // A request has no completion queue to fail.
        lost: () => {}
      })),
      (kernel) => ({ table, recvSlots, kernel })
    )
  })

/**
 * The request was deleted, or its connection failed before it was established: its
 * receives fail, and their regions are let go (the queue pair is gone).
 */
export const failPrepared = (prepared: Prepared): Effect.Effect<void> =>
  Effect.suspend(() => {
    prepared.table.failAll((operation) => new ConnectionClosedError({ operation, reason: "CLOSED" }))
    return runAll(prepared.table.releaseHeld())
  })

/**
 * Opens a connection from a request: `request` creates it (uninterruptibly), and the
 * result is scoped. Used for outgoing connections and for accepting incoming requests.
 */
export const open = (
  driver: Driver,
  peer: Peer,
  request: Effect.Effect<ConnReqHandle, RpmaError>,
  privateData: Uint8Array | undefined,
  where: Where,
  config: ConnConfig,
  pollingSetting: Polling.Polling,
  prepared?: Prepared
): Effect.Effect<Connection.Connection, RpmaError | ConnectionFailedError, Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const refused = configProblem(config)
      if (refused !== undefined) {
        return yield* Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_cfg", refused))
      }
      const attempt: Attempt = {
        req: undefined,
        handle: undefined,
        established: false,
        close: undefined,
        closed: false
      }
      const close = closeAttempt(driver, peer, attempt, config, prepared)
      Owner.retain(ownerOf(peer))
      yield* Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, close))
      return yield* Effect.gen(function*() {
        attempt.req = yield* request
        const req = attempt.req
        attempt.req = undefined // consumed, success or not
        attempt.handle = yield* driver.connReqConnect(req, privateData)
        const event = yield* restore(nextEventWithin(driver, attempt.handle, config.timeoutMs))
        if (event !== "ESTABLISHED") {
          return yield* Effect.fail(new ConnectionFailedError({ ...where, event: event ?? "TIMEOUT" }))
        }
        attempt.established = true
        const connection = yield* establish(driver, peer, attempt.handle, config, pollingSetting, prepared)
        attempt.close = connection.close
        return connection.connection
      }).pipe(Effect.onError(() => close))
    })
  )

/**
 * Starts an established connection's event fiber and watchdog, and its poster (internal/poster.ts:
 * posting, and the completion channel armed with a callback while requests are outstanding);
 * returns it and its close.
 */
const establish = (
  driver: Driver,
  peer: Peer,
  handle: ConnHandle,
  config: ConnConfig,
  pollingSetting: Polling.Polling,
  prepared: Prepared | undefined
): Effect.Effect<{ readonly connection: Connection.Connection; readonly close: Effect.Effect<void> }, RpmaError> =>
  Effect.gen(function*() {
    const privateData = yield* driver.connPrivateData(handle)
    const table = prepared?.table ?? new PendingTable<OperationError>()
    const sendSlots = new Slots(config.sqSize)
    const recvSlots = prepared?.recvSlots ?? new Slots(config.rqSize)
    let state: State = "Connected"
    let endCause: unknown = undefined
    // Each state as it is entered, the last one replayed to a new subscriber.
    const states = yield* PubSub.unbounded<State>({ replay: 1 })
    const final = yield* Deferred.make<State>()
    const enter = (next: State) => {
      state = next
      states.unsafeOffer(next)
      if (next === "Closed" || next === "Lost") Deferred.unsafeDone(final, Exit.succeed(next))
    }
    enter("Connected")
    const ended = yield* Deferred.make<void>()
    // What the completion channel's callbacks forked: interrupted by the close.
    const forked: Array<Fiber.RuntimeFiber<void>> = []

    let ending = false
    /** rpma_conn_disconnect was called: it is called once, whoever ends the connection. */
    let disconnected = false
    const disconnectOnce = (
      how: (call: Effect.Effect<void, RpmaError>) => Effect.Effect<unknown>
    ): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (disconnected) return Effect.void
        disconnected = true
        return Effect.asVoid(how(driver.connDisconnect(handle)))
      })
    const flushedAs = (operation: string, unsignalled?: boolean) =>
      closedError(state === "Lost" ? "LOST" : "CLOSED", endCause)(operation, unsignalled)
    // Posting goes on while the close is under way, as before it.
    const open = () => state === "Connected" || state === "Closing"

    // A shared receive queue without a receive CQ: its receives that this connection's messages
    // consume complete on this connection's CQs, and this kernel reads them for it.
    const shared = srq.completingOn(config.srq)
    const poster: Poster = yield* startPoster((fork) => ({
      driver,
      polling: polling.spinner(pollingSetting),
      queue: handle,
      completions: handle,
      shared,
      table,
      sendSlots,
      recvSlots,
      refusal: (operation) => open() ? undefined : flushedAs(operation),
      flushed: () => open() ? undefined : flushedAs,
      lost: (cause) => {
        forked.push(fork(end("LOST", cause, { disconnect: true, drainMs: 0 })))
      }
    }))

    /**
     * The end, once. No new request is posted from here on. In the error state a queue pair flushes
     * every request it holds, so each pending operation gets its real outcome: a success whose
     * completion was still on its way (the other side received the message, then closed) is a
     * success, a flushed one a ConnectionClosedError. rpma_conn_disconnect puts the queue pair in
     * that state (and answers the other side's disconnect); what has no outcome by the deadline
     * fails all the same. The drain waits only for what reports by itself (table.drained): an
     * unsignalled request that already succeeded reports nothing, ever, so it is not waited for,
     * and fails with its outcome unknown.
     */
    const end = (
      reason: "CLOSED" | "LOST",
      cause: unknown,
      options: {
        readonly disconnect: boolean
        /** How long to wait for what reports by itself; 0: not at all. */
        readonly drainMs: number
        /** How long to let send-queue requests complete by themselves before the disconnect flushes them. */
        readonly graceMs?: number | undefined
      }
    ): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (ending) return Effect.void
        ending = true
        endCause = cause
        enter(reason === "LOST" ? "Lost" : "Closed")
        sendSlots.close()
        recvSlots.close()
        return Effect.all([
          // The other side's acknowledgements may still be on their way when its disconnect
          // arrives (they travel apart): a request it received must be reported as a success, and
          // the disconnect's error state would flush it first.
          options.graceMs !== undefined && options.graceMs > 0
            ? boundedWait(table.sendQueueDrained, options.graceMs)
            : Effect.void,
          options.disconnect ? disconnectOnce(Effect.ignore) : Effect.void,
          settle({
            poster,
            table,
            poll: driver.pollCompletions(handle),
            failedAs: closedError(reason, cause),
            drainMs: options.drainMs > 0 ? options.drainMs : undefined
          })
        ], { discard: true })
      })

    // rdma_cm: the side that started the disconnect sees CLOSED only once this side answers
    // (rdma_disconnect sends the reply); librpma's own examples disconnect after CLOSED too.
    const eventFiber = yield* watchEvents({
      next: driver.connNextEvent(handle),
      isLast: (event) => event === "CLOSED" || event === "LOST",
      onLast: (event) =>
        end(event === "LOST" ? "LOST" : "CLOSED", undefined, {
          disconnect: true,
          drainMs: config.timeoutMs,
          graceMs: event === "LOST" ? 0 : Math.min(config.timeoutMs, GRACE_MS)
        }),
      onFailure: (cause) => end("LOST", cause, { disconnect: true, drainMs: config.timeoutMs, graceMs: 0 }),
      andThen: Deferred.succeed(ended, undefined)
    })

    // Lost once a one-sided request waits past the timeout: what waits fails now, and the regions
    // stay held until the connection is deleted.
    const watchdogFiber = yield* watchdog({
      table,
      timeoutMs: config.timeoutMs,
      watching: open,
      lost: (cause) => end("LOST", cause, { disconnect: true, drainMs: config.timeoutMs })
    })

    shared?.readBy(poster)
    // Receives posted before the connection was accepted (or on its shared receive queue) wait on its channel too.
    poster.ensureArmed()

    // Bounded as a whole by the timeout: the other side may never answer (a dead host, a peer that
    // never disconnects). On Effect's Clock, as its waits are: a TestClock drives the whole close.
    const closeOnce: Effect.Effect<void> = Effect.gen(function*() {
      const bound = yield* deadline(config.timeoutMs)
      if (state === "Connected") {
        enter("Closing")
        yield* disconnectOnce((call) => release("rpma_conn_disconnect", "a connection", call))
        yield* boundedWait(Deferred.await(ended), config.timeoutMs)
      }
      // If the other side never answered, this side's disconnect has flushed the queue pair all the same.
      yield* end("CLOSED", undefined, {
        disconnect: false,
        drainMs: yield* bound.remainingMs
      })
      yield* Fiber.interrupt(watchdogFiber)
      yield* Fiber.interrupt(eventFiber)
      yield* Fiber.interruptAll(forked)
      // Nothing watches the channel from here on (no libuv handle left behind).
      poster.stop()
      shared?.unread(poster)
      // Whatever an interrupted end left waiting fails now (a no-op if nothing is pending).
      table.failAll(flushedAs)
      yield* release("rpma_conn_delete", "a connection", driver.connDelete(handle))
      yield* runAll(table.releaseHeld())
    })
    // Run once, to its end, in a fiber of its own: a caller interrupted part-way (a timeout around
    // Connection.close) stops waiting, not closing, and every later caller (the scope's finalizer
    // among them) waits for that same close. Cut short, it would leave the connection, its channel
    // and its peer alive, with nothing left to delete them.
    let closed: Deferred.Deferred<void> | undefined
    const close: Effect.Effect<void> = Effect.suspend(() => {
      if (closed !== undefined) return Deferred.await(closed)
      const done = Deferred.unsafeMake<void>(FiberId.none)
      closed = done
      return Effect.uninterruptibleMask((restore) =>
        Effect.zipRight(Effect.forkDaemon(Effect.intoDeferred(closeOnce, done)), restore(Deferred.await(done)))
      )
    })

    const connection = new ConnectionImpl(
      handle,
      privateData,
      Effect.sync(() => state),
      Stream.fromPubSub(states).pipe(Stream.takeUntil((s) => s === "Closed" || s === "Lost")),
      Deferred.await(final),
      close,
      poster,
      peer
    )
    return { connection, close }
  })

/** A polling setting refused as the driver refuses its budget, before anything opens. */
export const pollingRefusal = (detail: string): RpmaError =>
  fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_cfg", detail)

/** One connection to `address`:`port`, whatever the server answers with. */
type Connect = (
  peer: Peer,
  address: string,
  port: number,
  options?: Connection.Options
) => Effect.Effect<Connection.Connection, RpmaError | ConnectionFailedError, RdmaDriver | Scope.Scope>

export const connectDirect: Connect = (peer, address, port, given) =>
  Effect.flatMap(instrument.driver, (driver) => {
    const notPeer = notAPeer("rpma_conn_req_new", peer)
    if (notPeer !== undefined) return Effect.fail(notPeer)
    const read = readSettings(given, "rpma_conn_req_new")
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    const config = toConfig(options)
    // Refused before the request is made: the driver would refuse it and leave the request alive.
    const refused = privateDataRefusal(options?.privateData, "connect")
    if (refused !== undefined) return Effect.fail(refused)
    return polling.resolve(options?.polling, pollingRefusal, (setting) =>
      Effect.zipRight(
        srq.usedBy(options?.sharedReceiveQueue),
        open(
          driver,
          peer,
          driver.connReqNew(handles.peer(peer), address, port, config),
          options?.privateData,
          { address, port },
          config,
          setting
        )
      ))
  })

/**
 * Connects, and follows a rendezvous answer (an isolating server's: the port of a listener of this
 * client's own and a one-time token) once: that first connection is closed and the one made there
 * returned. Only once, and only to the same address, so a server can send a client nowhere else.
 */
export const connect: Connect = (peer, address, port, given) =>
  Effect.gen(function*() {
    const options = yield* readSettings(given, "rpma_conn_req_new")
    const first = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const conn = yield* Scope.extend(connectDirect(peer, address, port, options), first)
    const answer = rendezvousAnswer.decode(conn.privateData)
    if (answer === undefined) return conn
    // Uninterruptible: a scope closed part-way is marked closed with its later finalizers unrun.
    yield* Effect.uninterruptible(Scope.close(first, Exit.void))
    return yield* connectDirect(peer, address, answer.port, { ...options, privateData: answer.privateData })
  })

// The connection's own Effects, read from it when they run: given something that is not a
// connection, they die saying so, when they run, never while they are being made.
export const close = (conn: Connection.Connection): Effect.Effect<void> =>
  Effect.suspend(() => ownEffect("Connection.close", connectionKind, conn, (c) => implOf(c).close))

export const awaitClosed = (conn: Connection.Connection): Effect.Effect<Connection.State> =>
  Effect.suspend(() => ownEffect("Connection.awaitClosed", connectionKind, conn, (c) => implOf(c).awaitClosed))

export const state = (conn: Connection.Connection): Effect.Effect<Connection.State> =>
  Effect.suspend(() => ownEffect("Connection.state", connectionKind, conn, (c) => implOf(c).state))

export const changes = (conn: Connection.Connection): Stream.Stream<Connection.State> =>
  Stream.unwrap(
    Effect.suspend(() =>
      ownEffect("Connection.changes", connectionKind, conn, (c) => Effect.succeed(implOf(c).changes))
    )
  )
