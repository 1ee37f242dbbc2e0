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
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as PubSub from "effect/PubSub"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { Connection, OperationError, State } from "../Connection.js"
import { ConnectionClosedError, ConnectionFailedError } from "../Connection.js"
import type { Completion, ConnConfig, ConnEvent, ConnHandle, ConnReqHandle, Driver, Signal, WorkRequest } from "../Driver.js"
import { WcOpcode } from "../Driver.js"
import type { LocalMr } from "../LocalMr.js"
import { ownerOf, type Peer } from "../Peer.js"
import * as DriverArguments from "../DriverArguments.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import { type Build, type Pending, PendingTable, runAll, Slots } from "./dataPath.js"
import * as Owner from "./owner.js"
import { release } from "./release.js"

/** @internal Where a connection goes, for its errors. */
export interface Where {
  readonly address: string
  readonly port: number
}

/**
 * Resumes once the event loop has run its I/O phase: setImmediate callbacks run right after it.
 * Node runs expired timers before it polls for I/O, so after the loop was held up (synchronous
 * work, a long GC, a stalled VM) a deadline fires ahead of an event that arrived well before it.
 */
const afterPendingIo: Effect.Effect<void> = Effect.async<void>((resume) => {
  const immediate = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(immediate))
})

/** The next event, or undefined once `timeoutMs` has passed (and what was ready by then was seen). */
const nextEventWithin = (
  driver: Driver,
  handle: ConnHandle,
  timeoutMs: number
): Effect.Effect<ConnEvent | undefined, RpmaError> =>
  Effect.raceFirst(
    driver.connNextEvent(handle),
    Effect.sleep(Duration.millis(timeoutMs)).pipe(Effect.zipRight(afterPendingIo), Effect.as(undefined))
  )

/**
 * @internal A wait inside a finalizer, really bounded. `Effect.timeout` cannot end what it times in
 * an uninterruptible region, and making that part interruptible is no better when the finalizer
 * runs because its fiber was interrupted: the pending interruption would end the finalizer there
 * and skip the rest of it. So the wait runs in a fiber of its own, interruptible, and this one
 * (still uninterruptible) awaits it.
 */
export const boundedWait = <A, E>(wait: Effect.Effect<A, E>, timeoutMs: number): Effect.Effect<void> =>
  Effect.flatMap(
    Effect.forkDaemon(Effect.interruptible(Effect.timeout(wait, Duration.millis(timeoutMs)))),
    Fiber.await
  ).pipe(Effect.asVoid)

/**
 * How long a connection the other side closed waits for its send-queue requests to complete by
 * themselves before its own disconnect flushes them: acknowledgements sent before the other side's
 * disconnect arrive within microseconds on a wire, milliseconds under emulation.
 */
const GRACE_MS = 200

/** What the C libraries would accept but a connection cannot live with (queues that lose completions, no timeout). */
const configProblem = (config: ConnConfig): string | undefined =>
  !(config.timeoutMs > 0 && config.timeoutMs <= 2 ** 31 - 1)
    ? `timeout ${config.timeoutMs} ms is not a duration between 1 ms and about 24 days`
    : DriverArguments.queueSizes(config)

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
 * @internal Receives posted on a request before it is connected (rpma_conn_req_recv): their table
 * becomes the connection's.
 */
export interface Prepared {
  readonly table: PendingTable<OperationError>
  /** The receive queue's entries, sized by the config the request was taken with (its queue pair's). */
  readonly recvSlots: Slots
}

/**
 * @internal The request was deleted, or its connection failed before it was established: its
 * receives fail, and their regions are let go (the queue pair is gone).
 */
export const failPrepared = (prepared: Prepared): Effect.Effect<void> =>
  Effect.suspend(() => {
    prepared.table.failAll((operation) => new ConnectionClosedError({ operation, reason: "CLOSED" }))
    return runAll(prepared.table.releaseHeld())
  })

/** @internal The opcode a request's completion carries, for completions that carry none. */
export const opcodeOf = (op: WorkRequest["op"]): number =>
  op === "write" || op === "atomicWrite"
    ? WcOpcode.RDMA_WRITE
    : op === "read" || op === "flush"
    ? WcOpcode.RDMA_READ
    : op === "send"
    ? WcOpcode.SEND
    : WcOpcode.RECV

const opOf = (operation: string): WorkRequest["op"] =>
  operation === "rpma_atomic_write" ? "atomicWrite" : operation.slice(5) as WorkRequest["op"]

/**
 * @internal Opens a connection from a request: `request` creates it (uninterruptibly), and the
 * result is scoped. Used for outgoing connections and for accepting incoming requests.
 */
export const open = (
  driver: Driver,
  peer: Peer,
  request: Effect.Effect<ConnReqHandle, RpmaError>,
  privateData: Uint8Array | undefined,
  where: Where,
  config: ConnConfig,
  prepared?: Prepared
): Effect.Effect<Connection, RpmaError | ConnectionFailedError, Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const refused = configProblem(config)
      if (refused !== undefined) {
        return yield* Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_cfg", refused))
      }
      const attempt: Attempt = { req: undefined, handle: undefined, established: false, close: undefined, closed: false }
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
        const connection = yield* establish(driver, attempt.handle, config, prepared)
        attempt.close = connection.close
        return connection.connection
      }).pipe(Effect.onError(() => close))
    })
  )

/**
 * Starts an established connection's event and completion fibers; returns it and its close.
 */
const establish = (
  driver: Driver,
  handle: ConnHandle,
  config: ConnConfig,
  prepared: Prepared | undefined
): Effect.Effect<{ readonly connection: Connection; readonly close: Effect.Effect<void> }, RpmaError> =>
  Effect.gen(function*() {
    const privateData = yield* driver.connPrivateData(handle)
    const table = prepared?.table ?? new PendingTable<OperationError>()
    const sendSlots = new Slots(config.sqSize)
    const recvSlots = prepared?.recvSlots ?? new Slots(config.rqSize)
    let state: State = "ESTABLISHED"
    let endCause: unknown = undefined
    const events = yield* PubSub.unbounded<ConnEvent>({ replay: 1 })
    const ended = yield* Deferred.make<void>()

    let ending = false
    const closedError = (reason: "CLOSED" | "LOST", cause: unknown) => (operation: string) =>
      new ConnectionClosedError({ operation, reason, cause })

    /**
     * The end, once. No new request is posted from here on. In the error state a queue pair flushes
     * every request it holds, so each pending operation gets its real outcome: a success whose
     * completion was still on its way (the other side received the message, then closed) is a
     * success, a flushed one a ConnectionClosedError. rpma_conn_disconnect puts the queue pair in
     * that state (and answers the other side's disconnect); what has no outcome by the deadline
     * fails all the same.
     */
    const end = (
      reason: "CLOSED" | "LOST",
      cause: unknown,
      options: {
        readonly disconnect: boolean
        readonly drainMs: number
        /** How long to let send-queue requests complete by themselves before the disconnect flushes them. */
        readonly graceMs?: number | undefined
      }
    ): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (ending) return Effect.void
        ending = true
        state = reason
        endCause = cause
        sendSlots.close()
        recvSlots.close()
        return Effect.all([
          // The other side's acknowledgements may still be on their way when its disconnect
          // arrives (they travel apart): a request it received must be reported as a success, and
          // the disconnect's error state would flush it first.
          options.graceMs !== undefined && options.graceMs > 0
            ? boundedWait(table.sendQueueDrained, options.graceMs)
            : Effect.void,
          options.disconnect ? Effect.ignore(driver.connDisconnect(handle)) : Effect.void,
          driver.pollCompletions(handle).pipe(
            Effect.map((ready) => table.dispatch(ready, closedError(reason, cause))),
            Effect.orElseSucceed(() => []),
            Effect.flatMap(runAll)
          ),
          options.drainMs > 0 ? boundedWait(table.drained, options.drainMs) : Effect.void,
          Effect.sync(() => table.failAll(closedError(reason, cause)))
        ], { discard: true })
      })
    const flushedAs = (operation: string) =>
      closedError(state === "LOST" ? "LOST" : "CLOSED", endCause)(operation)

    const completionFiber = yield* driver.nextCompletions(handle).pipe(
      Effect.flatMap((completions) =>
        runAll(table.dispatch(completions, state === "ESTABLISHED" ? undefined : flushedAs))
      ),
      Effect.forever,
      // The completion queue failing is the connection failing (and nothing will drain it).
      Effect.catchAll((cause) => end("LOST", cause, { disconnect: true, drainMs: 0 })),
      // Forked while the connection is being acquired (uninterruptibly): the loop itself must stay interruptible.
      Effect.interruptible,
      Effect.forkDaemon
    )

    const eventFiber = yield* driver.connNextEvent(handle).pipe(
      Effect.map((event) => ({ event, cause: undefined as unknown })),
      Effect.catchAll((cause) => Effect.succeed({ event: "LOST" as const, cause: cause as unknown })),
      Effect.tap(({ event }) => PubSub.publish(events, event)),
      Effect.repeat({ until: ({ event }) => event === "CLOSED" || event === "LOST" }),
      // rdma_cm: the side that started the disconnect sees CLOSED only once this side answers
      // (rdma_disconnect sends the reply); librpma's own examples disconnect after CLOSED too.
      Effect.flatMap(({ cause, event }) =>
        end(event === "LOST" ? "LOST" : "CLOSED", cause, {
          disconnect: true,
          drainMs: config.timeoutMs,
          graceMs: event === "LOST" ? 0 : Math.min(config.timeoutMs, GRACE_MS)
        })
      ),
      Effect.ensuring(Deferred.succeed(ended, undefined)),
      Effect.interruptible,
      Effect.forkDaemon
    )

    // A one-sided request (write, read, flush, atomic write) with no completion within the timeout
    // means the other side, or the path to it, is gone (a cut link, a frozen host: the transport
    // may keep retrying for far longer). Sends and receives wait on the other side's application. The
    // connection is then lost: what waits fails now, and the regions stay held until it is deleted.
    const watchdogFiber = yield* Effect.sleep(Duration.millis(Math.max(config.timeoutMs / 10, 1))).pipe(
      Effect.zipRight(Effect.suspend(() => {
        const waited = table.oldestWait(performance.now())
        return waited > config.timeoutMs
          ? end(
            "LOST",
            new Error(`no completion for ${Math.round(waited)} ms (timeout ${config.timeoutMs} ms): the other side does not answer`),
            { disconnect: true, drainMs: config.timeoutMs }
          )
          : Effect.void
      })),
      Effect.repeat({ until: () => state !== "ESTABLISHED" }),
      Effect.interruptible,
      Effect.forkDaemon
    )

    // Bounded as a whole by the timeout: the other side may never answer (a dead host, a peer that
    // never disconnects).
    const close: Effect.Effect<void> = Effect.gen(function*() {
      const deadline = performance.now() + config.timeoutMs
      if (state === "ESTABLISHED") {
        yield* release("rpma_conn_disconnect", "a connection", driver.connDisconnect(handle))
        yield* boundedWait(Deferred.await(ended), config.timeoutMs)
      }
      // If the other side never answered, this side's disconnect has flushed the queue pair all the same.
      yield* end("CLOSED", undefined, { disconnect: false, drainMs: Math.max(deadline - performance.now(), 1) })
      yield* Fiber.interrupt(watchdogFiber)
      yield* Fiber.interrupt(eventFiber)
      yield* Fiber.interrupt(completionFiber)
      // Whatever an interrupted end left waiting fails now (a no-op if nothing is pending).
      table.failAll(flushedAs)
      yield* release("rpma_conn_delete", "a connection", driver.connDelete(handle))
      yield* runAll(table.releaseHeld())
    })

    /**
     * Takes a slot and posts; the request is then in the table, holding its slot and regions until
     * its completion (or an implied one, for an unsignalled request) or the connection's end.
     */
    /** The completions already queued, read right after a post (nothing when the queue fails: the connection's end reports that). */
    const pollReady = Effect.orElseSucceed(driver.pollCompletions(handle), (): ReadonlyArray<Completion> => [])

    const submit = (
      operation: string,
      slots: Slots,
      regions: ReadonlyArray<LocalMr<any>>,
      build: Build,
      op: WorkRequest["op"],
      signal: Signal | undefined,
      restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
    ): Effect.Effect<Pending<OperationError>, OperationError> => {
      const afterSlot = (): Effect.Effect<Pending<OperationError>, OperationError> => {
        if (state !== "ESTABLISHED") {
          slots.give()
          return Effect.fail(new ConnectionClosedError({ operation, reason: state, cause: endCause }))
        }
        const sendQueue = slots === sendSlots
        // The request that takes the last free entry of the send queue is signalled whatever was
        // asked: otherwise a queue full of unsignalled requests would never give an entry back.
        const signalled = signal !== "onError" || slots.available <= 0
        const entry = table.add(operation, regions, slots, sendQueue, opcodeOf(op), signalled)
        const built = build(entry.id)
        const request = signal === undefined ? built : { ...built, completion: signalled ? "always" : "onError" } as WorkRequest
        return Effect.matchEffect(driver.post(handle, request), {
          onFailure: (error) => Effect.zipRight(runAll(table.unpost(entry)), Effect.fail(error)),
          // Poll first: Soft-RoCE (and a fast NIC) often completes the request by now, and
          // then the operation ends without suspending.
          onSuccess: () =>
            Effect.flatMap(pollReady, (ready) => {
              const deferred = ready.length === 0 ? [] : table.dispatch(ready)
              return deferred.length === 0 ? Effect.succeed(entry) : Effect.as(runAll(deferred), entry)
            })
        })
      }
      // A free slot is taken synchronously (measured: a quarter of a write's cost over the binding
      // went to taking it as an Effect); only a full queue waits, interruptibly.
      return slots.tryTake() ? afterSlot() : Effect.zipRight(restore(slots.take), Effect.suspend(afterSlot))
    }

    const post = (
      operation: string,
      slots: Slots,
      regions: ReadonlyArray<LocalMr<any>>,
      build: Build,
      op: WorkRequest["op"]
    ): Effect.Effect<Completion, OperationError> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(
          submit(operation, slots, regions, build, op, undefined, restore),
          (entry) => entry.outcome !== undefined ? entry.outcome : restore(table.await(entry))
        )
      )

    /** Many requests on one queue: posted as slots allow, one poll, then each outcome in order. */
    const postMany = (
      operation: string,
      slots: Slots,
      requests: ReadonlyArray<{ readonly regions: ReadonlyArray<LocalMr<any>>; readonly build: Build }>
    ): Effect.Effect<void, OperationError> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const posted: Array<ReturnType<typeof table.add>> = []
          let failure: OperationError | undefined
          for (const request of requests) {
            yield* restore(slots.take)
            if (state !== "ESTABLISHED") {
              slots.give()
              failure = new ConnectionClosedError({ operation, reason: state, cause: endCause })
              break
            }
            const entry = table.add(operation, request.regions, slots, true, WcOpcode.RDMA_WRITE)
            const result = yield* Effect.either(driver.post(handle, request.build(entry.id)))
            if (result._tag === "Left") {
              yield* runAll(table.unpost(entry))
              failure = result.left
              break
            }
            posted.push(entry)
          }
          const ready = yield* Effect.orElseSucceed(driver.pollCompletions(handle), () => [])
          if (ready.length > 0) yield* runAll(table.dispatch(ready))
          for (const entry of posted) {
            const outcome = yield* Effect.either(entry.outcome ?? restore(table.await(entry)))
            if (outcome._tag === "Left" && failure === undefined) failure = outcome.left
          }
          if (failure !== undefined) return yield* Effect.fail(failure)
        })
      )

    const connection: Connection = {
      handle,
      privateData,
      events: Stream.fromPubSub(events).pipe(Stream.takeUntil((e) => e === "CLOSED" || e === "LOST")),
      state: Effect.sync(() => state),
      post: (operation, kind, regions, build) =>
        post(operation, kind === "recv" ? recvSlots : sendSlots, regions, build, opOf(operation)),
      submit: (operation, op, regions, build, signal) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.map(
            submit(operation, op === "recv" ? recvSlots : sendSlots, regions, build, op, signal, restore),
            (entry) => table.await(entry)
          )
        ),
      postMany: (operation, requests) => postMany(operation, sendSlots, requests)
    }
    return { connection, close }
  })
