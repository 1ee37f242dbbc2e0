/**
 * The posting kernel: every request core posts goes through it, on any queue (a connection's
 * queue pair, a shared receive queue, an incoming connection request), and every completion it
 * reads comes back through it. It knows queues and work requests, not librpma: a queue is the
 * handle it posts on and the one it arms for completions, through the calls of {@link QueueCalls}
 * (librpma's {@link Driver.postMany} / {@link Driver.armCompletions}, or librdmacm's
 * {@link Driver.cmPostMany} / {@link Driver.cmArmCompletions} on an endpoint), so both connection
 * managers post through the same kernel. No fiber per queue and none per operation:
 *
 * - An operation is one synchronous block (slot, table entry, the driver's post and poll, the
 *   dispatch of what the poll found), so nothing can interrupt it between the post and the
 *   bookkeeping: uninterruptible by construction, without a mask. When the completion was already
 *   queued, the operation ends there without suspending; otherwise it waits in one `Effect.async`
 *   whose resume sits in the pending table.
 * - While requests are outstanding, the driver's completion channel is armed with
 *   {@link onReady}: it dispatches what arrived (resuming those waits directly) and re-arms while
 *   the table is not empty. Nothing watches the channel of an idle queue.
 * - A batch posts as many requests as the send queue has free entries in one driver call, and
 *   posts more as entries free up (a sliding window), with one `Effect.async` for the whole batch.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import type { OperationError } from "../ConnectionError.js"
import type {
  CmEpHandle,
  CmWorkRequest,
  Completion,
  CompletionQueue,
  CompletionsReady,
  PostOutcome,
  PostQueue,
  Signal,
  SpinOutcome,
  WorkRequest
} from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import * as Tracing from "../Tracing.js"
import {
  type Build,
  type Owners,
  ownersOf,
  type Pending,
  type PendingTable,
  type Regions,
  runAll,
  type Slots
} from "./dataPath.js"
import * as instrument from "./instrument.js"
import type { OperationSpec } from "./operationTable.js"
import type { Owner } from "./owner.js"
import * as polling from "./polling.js"

/** The queue requests `R` are posted on: librpma's, or an endpoint of librdmacm's verbs API. */
export type QueueOf<R> = R extends CmWorkRequest ? CmEpHandle : PostQueue
/** Where the completions of requests `R` are read. */
export type CompletionsOf<R> = R extends CmWorkRequest ? CmEpHandle : CompletionQueue

/**
 * The driver's calls for the queues of requests `R`. The Driver itself is librpma's
 * (postMany / armCompletions); an endpoint passes cmPostMany / cmArmCompletions.
 */
export interface QueueCalls<R> {
  /** The driver's name, for spans. */
  readonly name: string
  readonly postMany: (queue: QueueOf<R>, requests: ReadonlyArray<R>) => PostOutcome<OperationError>
  readonly armCompletions: (queue: CompletionsOf<R>, onReady: CompletionsReady<OperationError>) => () => void
  /** The driver's bounded busy-poll, if it has one (a polling queue without it waits). */
  readonly spinCompletions?: ((queue: CompletionsOf<R>, budgetNs: number) => SpinOutcome<OperationError>) | undefined
}

/** What the kernel needs of the queue it posts on (librpma's by default). */
export interface Link<R = WorkRequest> {
  /** The calls that post on `queue` and arm `completions`: the Driver for librpma's queues. */
  readonly driver: QueueCalls<R>
  /** Where requests are posted. */
  readonly queue: QueueOf<R>
  /**
   * Where their completions are read; undefined when nothing can be read yet (a connection
   * request's receives complete on the connection it becomes, whose kernel takes the table over).
   */
  readonly completions: CompletionsOf<R> | undefined
  readonly table: PendingTable<OperationError>
  readonly sendSlots: Slots
  readonly recvSlots: Slots
  /** Why nothing may be posted any more, or undefined while the queue takes requests. */
  readonly refusal: (operation: string) => OperationError | undefined
  /** How a flushed request fails once the queue has ended; undefined while it lives. */
  readonly flushed: () => ((operation: string) => OperationError) | undefined
  /** The completion queue failed: the queue is lost. */
  readonly lost: (cause: unknown) => void
  /** Runs what a callback cannot return: releases deferred until a request completed. */
  readonly run: (effect: Effect.Effect<void>) => void
  /**
   * The kernel of a shared receive queue without a completion queue of its own, whose receives
   * complete on this queue's (librpma's 08srq modes m and r): the completions that name a queue
   * pair are its, and this queue's channel stays armed while it has receives outstanding.
   */
  readonly shared?: Poster<R> | undefined
  /** Busy-polls before arming the channel (Polling.ts); undefined: arms at once. */
  readonly polling?: polling.Spinner | undefined
}

/**
 * Resumes once the event loop has run its I/O phase: setImmediate callbacks run right
 * after it. What a driver's turn asks for (PostOutcome.turnDue); also what a deadline waits for:
 * Node runs expired timers before it polls for I/O, so after the loop was held up (synchronous
 * work, a long GC, a stalled VM) a deadline fires ahead of an event that arrived well before it.
 */
export const afterPendingIo: Effect.Effect<void> = Effect.async<void>((resume) => {
  const immediate = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(immediate))
})

/**
 * A batch to post: `count` requests of one operation, all holding `regions` (or their
 * owners, looked up already).
 */
export interface BatchRequests<R = WorkRequest> {
  readonly spec: OperationSpec
  readonly count: number
  readonly regions: ReadonlyArray<LocalMr<any>> | Owners
  /** Request `index` of the batch, with its id and when it produces a completion. */
  readonly build: (index: number, id: number, completion: Signal) => R
}

/** One request of an exchange ({@link Poster.exchange}): what it is, what it holds, how it is built. */
export interface Exchanged<R> {
  readonly spec: OperationSpec
  /** Its regions, or their owners. */
  readonly owners: Regions
  readonly build: Build<R>
}

type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
const identity: Restore = (effect) => effect

/**
 * The wait mode of a post: await the completion (succeeding with it, or with nothing),
 * or do not wait and succeed with the entry. A number, not a closure per operation.
 */
export type Then = typeof AWAIT | typeof AWAIT_VOID | typeof SUBMIT
export const AWAIT = 0
export const AWAIT_VOID = 1
export const SUBMIT = 2

const push = (into: Array<Effect.Effect<void>>, effects: ReadonlyArray<Effect.Effect<void>>) => {
  for (const e of effects) into.push(e)
}

/** A batch in flight: its window slides as its requests complete. */
interface Batch<R> {
  readonly requests: BatchRequests<R>
  /** The owners of its regions, looked up once for all its requests. */
  readonly owners: { readonly owners: ReadonlyArray<Owner> }
  next: number
  inFlight: number
  /** A slot granted while the batch had none (the queue was full): used by the next pump. */
  reserved: number
  failure: OperationError | undefined
  /** Its fiber left (interrupted): post nothing more. */
  stopped: boolean
  pumping: boolean
  queued: boolean
  /** The driver asked for a turn of the event loop: pumping resumes after it. */
  turnDue: boolean
  cancelSlotWait: (() => boolean) | undefined
  /** The batch's wait, once its fiber waits. */
  resume: ((effect: Effect.Effect<void, OperationError>) => void) | undefined
  /** Its settlement, once done, if nobody waited yet. */
  done: Effect.Effect<void, OperationError> | undefined
  /** Per-operation telemetry: its requests and bytes are counted. */
  readonly counted: boolean
  readonly settled: (failure: OperationError | undefined) => void
}

/** The kernel of one queue: librpma's by default, an endpoint's with librdmacm's types. */
export class Poster<R = WorkRequest> {
  private disarm: (() => void) | undefined = undefined
  /** The channel failed, or the connection is being deleted: never armed again. */
  private stopped = false
  private readonly wakeups: Array<Batch<R>> = []
  private wakeScheduled = false
  /** In a dispatch that resumes the woken batches right after it: a wake needs no microtask. */
  private dispatching = false

  /** With no completions of its own: the kernels whose queues read them (see {@link Link.shared}). */
  private readonly readers = new Set<Poster<R>>()

  constructor(private readonly link: Link<R>) {}

  /** `reader` reads this kernel's completions from its queue (it names this one as its `shared`), until {@link unread}. */
  readBy(reader: Poster<R>): void {
    this.readers.add(reader)
  }

  unread(reader: Poster<R>): void {
    this.readers.delete(reader)
  }

  /** Arms the completion channel if requests are outstanding and it is not armed. */
  ensureArmed(): void {
    const { completions } = this.link
    if (completions === undefined) {
      // Its requests complete on other queues: theirs are armed.
      for (const reader of this.readers) reader.ensureArmed()
      return
    }
    if (this.disarm !== undefined || this.stopped) return
    if (!this.outstanding()) return
    // Completions dispatched by a spin come back here: the spin decides once it is over.
    if (this.spinning) return
    if (this.link.polling !== undefined) {
      if (this.spin(completions, this.link.polling)) return
      // Real time, not Effect's Clock: a spin bounds how long the event loop is held, and a
      // TestClock stands still through it (docs/api-1.0.md, "the one exception is polling").
      this.armedAt = performance.now()
    }
    this.disarm = this.link.driver.armCompletions(completions, this.onReady)
  }

  /**
   * When the channel was last armed (polling only): what {@link polling.waited} learns from.
   * Polling reads the monotonic clock, not Effect's Clock, on purpose: it bounds a synchronous
   * busy-poll (how long one wake-up holds the event loop) and learns how long the device took,
   * both real time that no TestClock can advance during a synchronous loop; no wait, timeout or
   * retry depends on it.
   */
  private armedAt = 0

  private outstanding(): boolean {
    return this.link.table.size > 0 || (this.link.shared !== undefined && this.link.shared.link.table.size > 0)
  }

  private spinning = false

  /**
   * Busy-polls before the channel is armed, for the spinner's budget in all (one wake-up never
   * holds the event loop longer): each spin that finds completions dispatches them, and the next
   * spins for what is left of the budget. True when nothing is left to arm for (everything
   * completed, the queue failed or was stopped).
   */
  private spin(completions: CompletionsOf<R>, spinner: polling.Spinner): boolean {
    const spinCompletions = this.link.driver.spinCompletions
    if (spinCompletions === undefined || spinner.budgetNs === 0) return false
    const deadline = performance.now() + spinner.budgetNs / 1e6
    this.spinning = true
    try {
      for (let budgetNs = spinner.budgetNs; budgetNs > 0;) {
        const outcome = spinCompletions(completions, budgetNs)
        if (Exit.isFailure(outcome)) {
          this.stopped = true
          this.link.lost(Cause.squash(outcome.cause))
          return true
        }
        if (outcome.value.length === 0) {
          polling.missed(spinner)
          return false
        }
        polling.found(spinner)
        const deferred = this.dispatch(outcome.value, this.link.flushed())
        if (deferred.length > 0) this.link.run(runAll(deferred))
        if (this.stopped || this.disarm !== undefined || !this.outstanding()) return true
        budgetNs = Math.min(spinner.budgetNs, Math.floor((deadline - performance.now()) * 1e6))
      }
      return false
    } finally {
      this.spinning = false
    }
  }

  /** The queue is about to be deleted: the channel is disarmed and stays so. */
  stop(): void {
    this.stopped = true
    const disarm = this.disarm
    this.disarm = undefined
    if (disarm !== undefined) disarm()
  }

  private readonly onReady = (ready: Exit.Exit<ReadonlyArray<Completion>, unknown>): void => {
    this.disarm = undefined
    if (this.stopped) return
    if (Exit.isFailure(ready)) {
      // The completion queue failing is the connection failing (and nothing will drain it).
      this.stopped = true
      return this.link.lost(Cause.squash(ready.cause))
    }
    // How long the channel took tells an adaptive budget what a spin would have caught.
    if (this.link.polling !== undefined) polling.waited(this.link.polling, (performance.now() - this.armedAt) * 1e6)
    const deferred = this.dispatch(ready.value, this.link.flushed())
    if (deferred.length > 0) this.link.run(runAll(deferred))
  }

  /**
   * Completions read by the channel, or elsewhere (the connection's end polls the queue): their
   * operations resumed, the batches pumped, the channel armed again if requests remain. Returns
   * the releases that were waiting for them.
   */
  dispatch(
    ready: ReadonlyArray<Completion>,
    flushed?: (operation: string) => OperationError
  ): Array<Effect.Effect<void>> {
    this.dispatching = true
    const deferred: Array<Effect.Effect<void>> = []
    try {
      this.link.table.dispatch(this.own(ready, deferred), flushed, deferred)
    } finally {
      this.dispatching = false
    }
    this.resumeBatches()
    this.ensureArmed()
    return deferred
  }

  /**
   * The completions of this queue's own requests; those of the shared receive queue's receives
   * (they name a queue pair) are dispatched to its kernel, their releases added to `deferred`.
   */
  private own(ready: ReadonlyArray<Completion>, deferred: Array<Effect.Effect<void>>): ReadonlyArray<Completion> {
    const shared = this.link.shared
    if (shared === undefined) return ready
    const own: Array<Completion> = []
    const theirs: Array<Completion> = []
    for (const c of ready) (c.qpNum === undefined ? own : theirs).push(c)
    if (theirs.length > 0) push(deferred, shared.dispatch(theirs, shared.link.flushed()))
    return own
  }

  /** What one driver call found: its completions dispatched, a failing queue reported. */
  private absorb(outcome: PostOutcome<OperationError>, deferred: Array<Effect.Effect<void>>): void {
    if (outcome.ready.length > 0) {
      this.link.table.dispatch(this.own(outcome.ready, deferred), this.link.flushed(), deferred)
    }
    if (outcome.queueError !== undefined && !this.stopped) {
      this.stopped = true
      this.link.lost(outcome.queueError)
    }
  }

  /**
   * The one entry to post a request: takes a slot of the operation's queue (synchronously when one
   * is free; only a full queue waits, interruptibly), posts what `build` makes with the entry's
   * id, and goes on as `then` says (the completion, nothing, or the entry). Called inside the
   * operation's own `withFiberRuntime` (so that an operation is one Effect op before it posts):
   * re-running that Effect posts again. `signal` only for send-queue requests posted without
   * waiting.
   *
   * `E` is the operation's own error union (Connection.TransferError, ...): the kernel fails a
   * request only with the queue's end, the completion's status, or the driver's refusal of the
   * post, which librpma's post functions limit to RPMA_E_INVAL and RPMA_E_PROVIDER.
   *
   * `complete` makes what the operation succeeds with, in the same step as the post or the wait
   * (an `Effect.map` adds two steps of the fiber): from the completion ({@link AWAIT}; it runs in
   * the dispatch, so it must not throw) or from the entry ({@link SUBMIT}: the ticket).
   */
  start<E = OperationError>(
    fiber: Fiber.RuntimeFiber<any, any>,
    spec: OperationSpec,
    regions: Regions,
    build: Build<R>,
    signal: Signal | undefined,
    then: Then,
    complete?: (value: any) => unknown
  ): Effect.Effect<any, E> {
    const slots = spec.queue === "send" ? this.link.sendSlots : this.link.recvSlots
    const perOperation = fiber.getFiberRef(Tracing.perOperation)
    // Traced, a receive's bytes are counted from its completion, before `complete` makes it over.
    const counting = perOperation && spec.queue === "recv" && then === AWAIT
    const made = counting ? undefined : complete
    const effect = slots.tryTake()
      ? this.posted(spec, slots, regions, build, signal, then, identity, perOperation, made)
      : Effect.uninterruptibleMask((restore) =>
        Effect.zipRight(
          restore(slots.take),
          Effect.suspend(() => this.posted(spec, slots, regions, build, signal, then, restore, perOperation, made))
        )
      )
    if (!perOperation) return effect as Effect.Effect<any, E>
    if (!counting) return traced(effect, this.link.driver.name, spec, build) as Effect.Effect<any, E>
    // A receive's bytes are known when it completes.
    const counted = Effect.tap(
      effect,
      (c: Completion) => Effect.sync(() => instrument.receivedUnsafe(spec.name, c.byteLength))
    )
    return traced(
      complete === undefined ? counted : Effect.map(counted, complete),
      this.link.driver.name,
      spec,
      build
    ) as Effect.Effect<any, E>
  }

  /** Its slot taken: posts, and what follows (the wait, or the entry). */
  private posted(
    spec: OperationSpec,
    slots: Slots,
    regions: Regions,
    build: Build<R>,
    signal: Signal | undefined,
    then: Then,
    restore: Restore,
    /** Per-operation telemetry: the request and its bytes are counted. */
    counted: boolean,
    complete: ((value: any) => unknown) | undefined
  ): Effect.Effect<any, OperationError> {
    const refused = this.link.refusal(spec.name)
    if (refused !== undefined) {
      slots.give()
      instrument.operationFailedUnsafe(spec.name, refused._tag)
      return Effect.fail(refused)
    }
    // Releases that waited for a completion are rare: the kernel's one list collects them.
    const deferred = this.releases
    const { table } = this.link
    // The request that takes the last free entry of the send queue is signalled whatever was
    // asked: otherwise a queue full of unsignalled requests would never give an entry back.
    const signalled = signal !== "onError" || slots.available <= 0
    const entry = table.add(spec.name, regions, slots, spec.queue === "send", spec.opcode, signalled)
    entry.voided = then === AWAIT_VOID
    const request = build(entry.id)
    // Set on the fresh request, not spread into a copy: a spread followed by another property
    // makes V8 build a new hidden class on every post.
    if (signal !== undefined) (request as { completion?: Signal }).completion = signalled ? "always" : "onError"
    const outcome = this.link.driver.postMany(this.link.queue, [request])
    let result: Effect.Effect<unknown, OperationError>
    if (outcome.posted === 0) {
      push(deferred, table.unpost(entry))
      instrument.operationFailedUnsafe(spec.name, (outcome.error as { readonly _tag: string })._tag)
      result = Effect.fail(outcome.error!)
    } else {
      if (counted) instrument.postedUnsafe(spec.name, 1, instrument.requestBytes(request as instrument.CountedRequest))
      this.absorb(outcome, deferred)
      result = then === SUBMIT
        ? Effect.succeed(complete === undefined ? entry : complete(entry))
        : restore(table.await(entry, complete))
      if (outcome.turnDue) result = Effect.zipRight(afterPendingIo, result)
    }
    this.resumeBatches()
    this.ensureArmed()
    // Releases that waited for a completion run whatever happens to the operation.
    return deferred.length === 0 ? result : Effect.zipRight(Effect.uninterruptible(runAll(deferred.splice(0))), result)
  }

  /** Filled and emptied within one synchronous post. */
  private readonly releases: Array<Effect.Effect<void>> = []

  /**
   * A receive and a send-queue request in one driver call, the receive first (so an answer to the
   * send cannot arrive before there is a receive for it): the request/response round trip of
   * CmEndpoint.call and .reply, with one post instead of two. Both are signalled. `then`:
   * {@link AWAIT}: one wait for both, succeeding with `complete(answer)` once both succeeded, or
   * failing with the first failure to arrive (a failed request's error state flushes the other,
   * after); {@link SUBMIT}: a wait for the send alone, succeeding with `complete(receive's entry)`.
   *
   * A refused send after a posted receive fails the operation; the receive stays posted (the device
   * may fill it) and holds its regions until a message completes it or the queue ends.
   */
  exchange<E = OperationError>(
    fiber: Fiber.RuntimeFiber<any, any>,
    recv: Exchanged<R>,
    send: Exchanged<R>,
    then: typeof AWAIT | typeof SUBMIT,
    complete: (value: any) => unknown
  ): Effect.Effect<any, E> {
    const counted = fiber.getFiberRef(Tracing.perOperation)
    // Traced, the answer's bytes are counted as it completes (in the dispatch: this cannot throw).
    const made = counted && then === AWAIT
      ? (c: Completion) => {
        instrument.receivedUnsafe(recv.spec.name, c.byteLength)
        return complete(c)
      }
      : complete
    const { recvSlots, sendSlots } = this.link
    let effect: Effect.Effect<any, OperationError> | undefined
    if (recvSlots.tryTake()) {
      if (sendSlots.tryTake()) effect = this.exchanged(recv, send, then, made, identity, counted)
      else recvSlots.give()
    }
    // A full queue: both entries taken (interruptibly), the receive's given back if the send's wait is interrupted.
    effect ??= Effect.uninterruptibleMask((restore) =>
      Effect.zipRight(
        restore(recvSlots.take),
        Effect.zipRight(
          Effect.onInterrupt(restore(sendSlots.take), () => Effect.sync(() => recvSlots.give())),
          Effect.suspend(() => this.exchanged(recv, send, then, made, restore, counted))
        )
      )
    )
    if (!counted) return effect as Effect.Effect<any, E>
    return traced(effect, this.link.driver.name, send.spec, send.build, "exchange") as Effect.Effect<any, E>
  }

  /** Both slots taken: posts the pair, and what follows. */
  private exchanged(
    recv: Exchanged<R>,
    send: Exchanged<R>,
    then: typeof AWAIT | typeof SUBMIT,
    complete: (value: any) => unknown,
    restore: Restore,
    counted: boolean
  ): Effect.Effect<any, OperationError> {
    const { recvSlots, sendSlots, table } = this.link
    const refused = this.link.refusal(send.spec.name)
    if (refused !== undefined) {
      recvSlots.give()
      sendSlots.give()
      instrument.operationFailedUnsafe(send.spec.name, refused._tag)
      return Effect.fail(refused)
    }
    const deferred = this.releases
    const answer = table.add(recv.spec.name, recv.owners, recvSlots, false, recv.spec.opcode)
    const sent = table.add(send.spec.name, send.owners, sendSlots, true, send.spec.opcode)
    sent.voided = true
    const sendRequest = send.build(sent.id)
    const outcome = this.link.driver.postMany(this.link.queue, [recv.build(answer.id), sendRequest])
    let result: Effect.Effect<unknown, OperationError>
    if (outcome.posted < 2) {
      // Nothing, or the receive alone, was posted: what was not gives its slot back, the send first.
      push(deferred, table.unpost(sent))
      if (outcome.posted === 0) push(deferred, table.unpost(answer))
      const failed = outcome.posted === 0 ? recv.spec.name : send.spec.name
      instrument.operationFailedUnsafe(failed, (outcome.error as { readonly _tag: string })._tag)
      this.absorb(outcome, deferred)
      result = Effect.fail(outcome.error!)
    } else {
      if (counted) {
        instrument.postedUnsafe(recv.spec.name, 1, 0)
        instrument.postedUnsafe(send.spec.name, 1, instrument.requestBytes(sendRequest as instrument.CountedRequest))
      }
      this.absorb(outcome, deferred)
      // The send's void outcome made into the receive's ticket, in the same step.
      result = then === SUBMIT
        ? restore(table.await(sent, () => complete(answer)))
        : restore(table.awaitBoth(sent, answer, complete))
      if (outcome.turnDue) result = Effect.zipRight(afterPendingIo, result)
    }
    this.resumeBatches()
    this.ensureArmed()
    return deferred.length === 0 ? result : Effect.zipRight(Effect.uninterruptible(runAll(deferred.splice(0))), result)
  }

  /**
   * The outcome of a request posted with {@link SUBMIT}, as `complete` makes it (see
   * {@link PendingTable.await}): may be awaited any number of times.
   */
  await<A, E = OperationError>(entry: Pending<OperationError>, complete: (c: Completion) => A): Effect.Effect<A, E> {
    return this.link.table.await(entry, complete) as Effect.Effect<A, any>
  }

  /**
   * Many requests on one queue, the first failure reported once every posted one has its outcome
   * (nothing more is posted after a failure). One driver call per window, one wait per batch.
   */
  postBatch<E = OperationError>(requests: BatchRequests<R>): Effect.Effect<void, E> {
    // One Effect op before it posts, as before tracing: the span's only when tracing is on.
    return Effect.withFiberRuntime((fiber): Effect.Effect<void, any> =>
      fiber.getFiberRef(Tracing.perOperation)
        ? tracedBatch(Effect.suspend(() => this.batch(requests, true)), this.link.driver.name, requests)
        : this.batch(requests, false)
    )
  }

  /** Posts the batch's first window now, and returns its wait. */
  private batch(requests: BatchRequests<R>, counted: boolean): Effect.Effect<void, OperationError> {
    if (requests.count === 0) return Effect.void
    const { regions } = requests
    const batch: Batch<R> = {
      requests,
      owners: "owners" in regions ? regions : { owners: ownersOf(regions) },
      next: 0,
      inFlight: 0,
      reserved: 0,
      failure: undefined,
      stopped: false,
      pumping: false,
      queued: false,
      turnDue: false,
      cancelSlotWait: undefined,
      resume: undefined,
      done: undefined,
      counted,
      settled: (failure) => {
        batch.inFlight--
        if (failure !== undefined && batch.failure === undefined) batch.failure = failure
        this.wake(batch)
      }
    }
    const deferred: Array<Effect.Effect<void>> = []
    this.pump(batch, deferred)
    this.resumeBatches()
    this.ensureArmed()
    const wait = batch.done ?? Effect.async<void, OperationError>((resume) => {
      if (batch.done !== undefined) return resume(batch.done)
      batch.resume = resume
      return Effect.sync(() => this.abandon(batch))
    })
    return deferred.length === 0 ? wait : Effect.zipRight(Effect.uninterruptible(runAll(deferred)), wait)
  }

  /** Posts what the window allows; settles the batch when nothing is left. */
  private pump(batch: Batch<R>, deferred: Array<Effect.Effect<void>>): void {
    if (batch.pumping || batch.stopped || batch.done !== undefined) return
    batch.pumping = true
    const { count: total, spec } = batch.requests
    const operation = spec.name
    const sendQueue = spec.queue === "send"
    const slots = sendQueue ? this.link.sendSlots : this.link.recvSlots
    while (batch.failure === undefined && batch.next < total && !batch.turnDue) {
      const refused = this.link.refusal(operation)
      if (refused !== undefined) {
        batch.failure = refused
        instrument.operationFailedUnsafe(operation, refused._tag)
        break
      }
      const wanted = total - batch.next
      const reserved = Math.min(batch.reserved, wanted)
      batch.reserved -= reserved
      const count = reserved + slots.tryTakeUpTo(wanted - reserved)
      if (count === 0) {
        // A full queue and nothing of ours in flight to free an entry: wait for one.
        if (batch.inFlight === 0 && batch.cancelSlotWait === undefined) {
          batch.cancelSlotWait = slots.onFree(() => {
            batch.cancelSlotWait = undefined
            batch.reserved++
            this.wake(batch)
          })
        }
        break
      }
      this.postWindow(batch, count, deferred)
    }
    batch.pumping = false
    if (batch.inFlight === 0 && !batch.turnDue && (batch.failure !== undefined || batch.next >= total)) {
      this.giveBack(batch)
      const done = batch.failure === undefined ? Effect.void : Effect.fail(batch.failure)
      batch.done = done
      const resume = batch.resume
      batch.resume = undefined
      if (resume !== undefined) resume(done)
    }
  }

  /**
   * Posts the batch's next `count` requests (their slots taken) in one driver call and absorbs
   * what it answered. Its own method, not the body of pump's loop: a batch of many windows runs
   * that loop for long, and V8 optimizes a function by its calls (a long-running loop only by
   * on-stack replacement, which it may never do), so the per-request work runs optimized.
   */
  private postWindow(batch: Batch<R>, count: number, deferred: Array<Effect.Effect<void>>): void {
    const { table } = this.link
    const { build, spec } = batch.requests
    const operation = spec.name
    const sendQueue = spec.queue === "send"
    const slots = sendQueue ? this.link.sendSlots : this.link.recvSlots
    const entries: Array<Pending<OperationError>> = []
    const built: Array<R> = []
    // Selective signalling: one completion per half queue, and for the last request of each
    // post, so that what is in flight always ends in a request that reports. A completion
    // settles the unsignalled requests before it (the send queue completes in order); a failed
    // one reports itself, and an ending connection flushes every request, signalled or not.
    const every = sendQueue ? Math.max(1, slots.size >> 1) : 1
    for (let i = 0; i < count; i++) {
      const index = batch.next + i
      const signalled = i === count - 1 || index % every === every - 1
      const entry = table.add(operation, batch.owners, slots, sendQueue, spec.opcode, signalled)
      entry.settled = batch.settled
      entries.push(entry)
      built.push(build(index, entry.id, signalled ? "always" : "onError"))
    }
    const outcome = this.link.driver.postMany(this.link.queue, built)
    // What was not posted gives its slot back, latest first (the send order is a stack's end).
    for (let i = count - 1; i >= outcome.posted; i--) {
      entries[i]!.settled = undefined
      push(deferred, table.unpost(entries[i]!))
    }
    // A post refused part-way may leave unsignalled requests last in flight: on a live
    // connection their success would never be reported, so the batch stops counting them (it
    // fails with the refusal); they keep their regions until a later completion or the end.
    let unreported = 0
    for (let i = outcome.posted - 1; i >= 0 && outcome.posted < count && !entries[i]!.signalled; i--) {
      entries[i]!.settled = undefined
      unreported++
    }
    batch.next += count
    batch.inFlight += outcome.posted - unreported
    if (batch.counted && outcome.posted > 0) {
      instrument.postedUnsafe(
        operation,
        outcome.posted,
        instrument.requestsBytes(built as ReadonlyArray<instrument.CountedRequest>, outcome.posted)
      )
    }
    if (outcome.error !== undefined) {
      instrument.operationFailedUnsafe(operation, (outcome.error as { readonly _tag: string })._tag)
      if (batch.failure === undefined) batch.failure = outcome.error
    }
    this.absorb(outcome, deferred)
    if (outcome.turnDue) {
      batch.turnDue = true
      this.link.run(Effect.zipRight(
        afterPendingIo,
        Effect.sync(() => {
          batch.turnDue = false
          this.wake(batch)
        })
      ))
    }
  }

  /** The batch's fiber left: nothing more is posted; what is in flight keeps what it holds. */
  private abandon(batch: Batch<R>): void {
    batch.stopped = true
    batch.resume = undefined
    this.giveBack(batch)
  }

  /** The slots a batch holds without a request in them (granted, not yet used) go back. */
  private giveBack(batch: Batch<R>): void {
    const cancel = batch.cancelSlotWait
    batch.cancelSlotWait = undefined
    const slots = batch.requests.spec.queue === "send" ? this.link.sendSlots : this.link.recvSlots
    if (cancel !== undefined && cancel()) slots.give()
    for (; batch.reserved > 0; batch.reserved--) slots.give()
  }

  /** A batch has something to do (an outcome, a slot): pumped after the current dispatch. */
  private wake(batch: Batch<R>): void {
    // While it pumps, its own loop sees what changed (the entries freed, the failure).
    if (batch.pumping || batch.queued || batch.stopped || batch.done !== undefined) return
    batch.queued = true
    this.wakeups.push(batch)
    // A slot given back outside a dispatch (an unposted request, an interrupted wait) has no
    // caller to pump the batch: a microtask does (a dispatch's caller pumps it right after).
    if (!this.wakeScheduled && !this.dispatching) {
      this.wakeScheduled = true
      queueMicrotask(() => {
        this.wakeScheduled = false
        this.resumeBatches()
        this.ensureArmed()
      })
    }
  }

  private resumeBatches(): void {
    if (this.wakeups.length === 0) return
    const deferred: Array<Effect.Effect<void>> = []
    for (let batch = this.wakeups.shift(); batch !== undefined; batch = this.wakeups.shift()) {
      batch.queued = false
      if (!batch.pumping) this.pump(batch, deferred)
    }
    if (deferred.length > 0) this.link.run(runAll(deferred))
  }
}

/** Spans are named as the library's post calls are: librpma's, or librdmacm's (an endpoint's). */
const spanName = (spec: OperationSpec): string => spec.name.startsWith("rpma_") ? "rpma_post" : "rdma_post"

/**
 * With per-operation tracing on (Tracing.ts): the operation in a span named as the library's post
 * calls are, librpma's (`rpma_post`) or librdmacm's (`rdma_post`, an endpoint's requests).
 */
const traced = <A, E>(
  effect: Effect.Effect<A, E>,
  driver: string,
  spec: OperationSpec,
  build: Build<unknown>,
  op: string = spec.op
): Effect.Effect<A, E> => {
  let size: unknown = 8
  try {
    const request = build(0) as {
      readonly length?: unknown
      readonly segments?: ReadonlyArray<{ readonly length: number }>
    }
    size = request.length ?? request.segments?.reduce((sum, segment) => sum + segment.length, 0) ?? 8
  } catch {
    // The request is built again when posted; its size is only an attribute.
  }
  return Effect.withSpan(effect, spanName(spec), {
    attributes: { "rdma.driver": driver, "rdma.op": op, "rdma.size": size },
    captureStackTrace: false
  })
}

/** With per-operation tracing on: a batch in one span, with its count of requests and of bytes. */
const tracedBatch = <A, E>(
  effect: Effect.Effect<A, E>,
  driver: string,
  requests: BatchRequests<any>
): Effect.Effect<A, E> => {
  let size = 0
  try {
    for (let i = 0; i < requests.count; i++) {
      size += instrument.requestBytes(requests.build(i, 0, "onError") as instrument.CountedRequest)
    }
  } catch {
    // Built again when posted; the size is only an attribute.
  }
  return Effect.withSpan(effect, spanName(requests.spec), {
    attributes: {
      "rdma.driver": driver,
      "rdma.op": requests.spec.op,
      "rdma.size": size,
      "rdma.operation.batch.size": requests.count
    },
    captureStackTrace: false
  })
}
