/**
 * The data path of one connection: send and receive slots, the table of posted requests, and the
 * dispatch of their completions. An operation is one `Effect.async` whose resume sits in the table
 * and is called by the dispatch directly: no Deferred, no fiber per operation.
 *
 * What a posted request holds cannot be given back early: the device may read or write its regions
 * until the request completes or its connection is deleted. So a request keeps its slot and its
 * regions (their deregistration is deferred, internal/owner.ts) until one of those happens, even
 * when the fiber that posted it stops waiting: an interrupted operation leaves at once, with its
 * outcome unknown, and never leaves memory the device may still reach unregistered.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { type Completion, WcOpcode, type WorkRequest } from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import { CompletionError } from "../RdmaError.js"
import { ById } from "./byId.js"
import { IdQueue } from "./idQueue.js"
import * as instrument from "./instrument.js"
import { ownerOf } from "./localMr.js"
import * as Owner from "./owner.js"

/** What an operation ends with: its completion, or why it failed. */
export type Outcome<E> = Exit.Exit<Completion, E>

interface Waiter {
  granted: boolean
  resume: () => void
}

/**
 * A queue's free entries, as a counter with a waiter queue (not a Semaphore: a slot is
 * taken and given back once per operation, on the hot path).
 */
export class Slots {
  private free: number
  private readonly waiters: Array<Waiter> = []
  /** Once the connection has ended, every waiter is let through (to fail) and slots stop counting. */
  private open = true
  constructor(readonly size: number) {
    this.free = size
  }

  /** A slot if one is free now (or the connection has ended): the hot path, without an Effect. */
  tryTake(): boolean {
    if (this.free > 0 || !this.open) {
      this.free--
      return true
    }
    return false
  }

  /** Up to `wanted` free slots at once (a batch's window): how many were taken. */
  tryTakeUpTo(wanted: number): number {
    const taken = this.open ? Math.min(wanted, Math.max(this.free, 0)) : wanted
    this.free -= taken
    return taken
  }

  /**
   * Calls `granted` once a slot is handed over (taken on the caller's behalf). Returns the cancel:
   * true if the slot had been granted (the caller then owns it).
   */
  onFree(granted: () => void): () => boolean {
    const waiter: Waiter = { granted: false, resume: granted }
    this.waiters.push(waiter)
    return () => {
      const i = this.waiters.indexOf(waiter)
      if (i >= 0) this.waiters.splice(i, 1)
      return waiter.granted
    }
  }

  /** A slot, now or when one is given back. Interruptible while it waits. */
  readonly take: Effect.Effect<void> = Effect.suspend(() => {
    if (this.tryTake()) return Effect.void
    const waiter: Waiter = { granted: false, resume: () => {} }
    return Effect.async<void>((resume) => {
      waiter.resume = () => resume(Effect.void)
      this.waiters.push(waiter)
      return Effect.sync(() => {
        const i = this.waiters.indexOf(waiter)
        if (i >= 0) this.waiters.splice(i, 1)
      })
    }).pipe(
      // Granted, then interrupted before it could be used: pass it on.
      Effect.onInterrupt(() => Effect.sync(() => waiter.granted && this.give()))
    )
  })

  /** Free entries now (for a request that must be signalled when it takes the last one). */
  get available(): number {
    return this.free
  }

  give(): void {
    // Once per request: shift() on the (usually) empty array is a builtin's call.
    if (this.waiters.length === 0) {
      this.free++
      return
    }
    const next = this.waiters.shift()!
    next.granted = true
    next.resume()
  }

  /** The connection ended: wake every waiter (each then sees the state and fails). */
  close(): void {
    this.open = false
    for (const waiter of this.waiters.splice(0)) {
      waiter.granted = true
      waiter.resume()
    }
  }
}

/** A posted request, as its operation sees it. */
export interface Pending<E> {
  readonly id: number
  readonly operation: string
  /** The owners of the regions it holds, looked up once (a WeakMap lookup each) when it is added. */
  readonly regions: ReadonlyArray<Owner.Owner>
  readonly slots: Slots
  /** The watchdog's tick when it was posted, for a signalled send-queue request; undefined otherwise. */
  readonly postedAt: number | undefined
  /** On the send queue: completes in order with the other send-queue requests. */
  readonly sendQueue: boolean
  /** Produces a completion on success (RPMA_F_COMPLETION_ALWAYS). */
  readonly signalled: boolean
  /** The opcode of its completion, for a completion that carries none (an error, an implied success). */
  readonly opcode: number
  /** The waiting operation's resume; undefined before it waits and once the outcome is delivered. */
  resume: ((outcome: Outcome<E>) => void) | undefined
  /**
   * A batch's plain callback, with the failure if the request failed: a batch's requests are never
   * awaited, so no outcome is made or kept for them.
   */
  settled: ((failure: E | undefined) => void) | undefined
  /** Awaited by an operation that returns nothing: a success settles it with `void` (no Exit per completion). */
  voided: boolean
  /** The outcome, when it arrived before the operation waited. */
  outcome: Outcome<E> | undefined
}

const WR_FLUSH_ERR = 5
/** The success of an unsignalled request settled by a later one, where nothing reads its fields. */
const EARLIER: Completion = { id: 0, status: 0, byteLength: 0, opcode: 0, flags: 0 }

/** A signalled send-queue request: one the device completes by itself, which the watchdog times. */
const isTimed = (entry: Pending<any>): boolean => entry.postedAt !== undefined

/** A request that reports its outcome, whatever it is: a receive, or a signalled send-queue request. */
const reports = (entry: Pending<any>): boolean => entry.signalled

/** The owners of `regions`, for {@link PendingTable.add}: a batch looks them up once. */
export const ownersOf = (regions: ReadonlyArray<LocalMr<any>>): ReadonlyArray<Owner.Owner> =>
  regions.length === 0 ? NO_OWNERS : regions.map(ownerOf)

/** The owners of a request's regions, looked up already (a WeakMap lookup each). */
export interface Owners {
  readonly owners: ReadonlyArray<Owner.Owner>
}

/** What a request holds: its regions, or their owners. */
export type Regions = ReadonlyArray<LocalMr<any>> | Owners

/**
 * The owners of one region, looked up again only when the region changes: for an
 * operation's Effect, which reads its region anew on every run but mostly finds the same one.
 */
export const ownersOfOne = (): (region: LocalMr<any>) => Owners => {
  let last: LocalMr<any> | undefined
  let owners: Owners = { owners: NO_OWNERS }
  return (region) => {
    if (region !== last) {
      owners = { owners: [ownerOf(region)] }
      last = region
    }
    return owners
  }
}

const NO_OWNERS: ReadonlyArray<Owner.Owner> = []

const dropAll = (owners: ReadonlyArray<Owner.Owner>, into: Array<Effect.Effect<void>>): void => {
  for (const owner of owners) {
    const deferred = Owner.dropUnsafe(owner)
    if (deferred !== undefined) into.push(deferred)
  }
}

export const runAll = (effects: ReadonlyArray<Effect.Effect<void>>): Effect.Effect<void> =>
  effects.length === 0 ? Effect.void : Effect.forEach(effects, (e) => e, { discard: true })

/** The requests posted on one connection. */
export class PendingTable<E> {
  private readonly pending = new ById<Pending<E>>()
  /** Requests whose operation was failed when the connection ended: they hold their regions until deleted. */
  private readonly held = new Map<number, ReadonlyArray<Owner.Owner>>()
  /**
   * Send-queue requests not yet completed, in posting order. A reliable connection completes its
   * send queue in order: when a request completes, every unsignalled one posted before it has
   * succeeded (a failed one would have produced a completion, and flushed what follows).
   */
  private readonly sendOrder = new IdQueue()
  /**
   * Advanced by the connection's watchdog once a period: a request is stamped with it when posted,
   * so the hot path reads no clock.
   */
  tick = 0
  private readonly drainedWaiters: Array<{ readonly sendQueueOnly: boolean; readonly resume: () => void }> = []

  private isDrained(sendQueueOnly: boolean): boolean {
    return !this.pending.some(sendQueueOnly ? isTimed : reports)
  }

  private notifyIfDrained(): void {
    if (this.drainedWaiters.length === 0) return
    for (const waiter of this.drainedWaiters.slice()) {
      if (!this.isDrained(waiter.sendQueueOnly)) continue
      this.drainedWaiters.splice(this.drainedWaiters.indexOf(waiter), 1)
      waiter.resume()
    }
  }

  private whenDrained(sendQueueOnly: boolean): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      if (this.isDrained(sendQueueOnly)) return resume(Effect.void)
      const waiter = { sendQueueOnly, resume: () => resume(Effect.void) }
      this.drainedWaiters.push(waiter)
      return Effect.sync(() => {
        const i = this.drainedWaiters.indexOf(waiter)
        if (i >= 0) this.drainedWaiters.splice(i, 1)
      })
    })
  }

  /**
   * Succeeds once every request that will report by itself has: the signalled ones and the
   * receives (a connection in the error state flushes what it has not executed). An unsignalled
   * request still pending then is one that no later request's completion settled: it may have
   * succeeded, which reports nothing, ever, or not run yet, which the error state reports with a
   * flush completion that may come later. Neither is waited for ({@link failAll} says its outcome
   * is unknown); a flush completion that comes after releases its regions.
   */
  readonly drained: Effect.Effect<void> = this.whenDrained(false)

  /**
   * Succeeds once no signalled send-queue request is pending: what the device completes by itself
   * (receives wait for messages, unsignalled requests report only failures).
   */
  readonly sendQueueDrained: Effect.Effect<void> = this.whenDrained(true)

  /**
   * Registers a request about to be posted, with its regions held and its slot counted. `regions`
   * may be their owners already ({@link ownersOf}, once for a batch).
   */
  add(
    operation: string,
    regions: Regions,
    slots: Slots,
    sendQueue: boolean,
    opcode: number,
    signalled = true
  ): Pending<E> {
    const id = this.pending.nextId()
    const owners = "owners" in regions ? regions.owners : ownersOf(regions)
    for (const owner of owners) Owner.retain(owner)
    // An unsignalled request may never produce a completion: the watchdog does not wait for it.
    const postedAt = sendQueue && signalled ? this.tick : undefined
    const entry: Pending<E> = {
      id,
      operation,
      regions: owners,
      slots,
      postedAt,
      sendQueue,
      signalled,
      opcode,
      resume: undefined,
      settled: undefined,
      voided: false,
      outcome: undefined
    }
    this.pending.add(entry)
    if (sendQueue) this.sendOrder.push(id)
    return entry
  }

  /** The post itself failed: nothing was posted. Returns the releases that were waiting for it. */
  unpost(entry: Pending<E>): Array<Effect.Effect<void>> {
    if (entry.sendQueue && this.sendOrder.last() === entry.id) this.sendOrder.pop()
    this.pending.delete(entry)
    entry.slots.give()
    const deferred: Array<Effect.Effect<void>> = []
    dropAll(entry.regions, deferred)
    this.notifyIfDrained()
    return deferred
  }

  /**
   * Waits for the outcome of a posted request; interruptible (the request keeps what it holds).
   * The entry, not its id: the dispatch may have settled (and removed) it already. An entry marked
   * `voided` succeeds with `void` (the operations that return nothing, without an `Effect.asVoid`
   * each).
   *
   * No canceller (it would cost a second Effect per wait): an interrupted fiber's resume is
   * already spent, so a later call of it does nothing, and it is dropped with the entry.
   *
   * `complete` makes what the operation returns from the completion, in the same step (an
   * `Effect.map` would add two steps of the fiber to every operation). It runs in the dispatch, so
   * it must not throw.
   */
  await(entry: Pending<E>): Effect.Effect<Completion, E>
  await<A>(entry: Pending<E>, complete: ((c: Completion) => A) | undefined): Effect.Effect<A, E>
  await(entry: Pending<E>, complete?: (c: Completion) => unknown): Effect.Effect<unknown, E> {
    const ready = entry.outcome
    if (ready !== undefined) return completed(ready, complete)
    return Effect.async<unknown, E>((resume) => {
      // Settled between the check above and now (the fiber yielded in between): at once.
      if (entry.outcome !== undefined) return resume(completed(entry.outcome, complete))
      entry.resume = complete === undefined ? resume : (outcome) => resume(completed(outcome, complete))
    })
  }

  /**
   * One wait for two requests (a send and the receive of its answer, {@link Poster.exchange}):
   * `complete(answer)` once both succeeded, or the first failure to arrive (a failing request's
   * error state flushes the other after it, so the first names the cause). Interruptible, without
   * a canceller, as {@link await}.
   */
  awaitBoth<A>(sent: Pending<E>, answer: Pending<E>, complete: (c: Completion) => A): Effect.Effect<A, E> {
    const decided = (): Exit.Exit<A, E> | undefined => {
      const first = sent.outcome
      const second = answer.outcome
      if (first !== undefined && first._tag === "Failure") return first as Exit.Exit<never, E>
      if (second !== undefined && second._tag === "Failure") return second as Exit.Exit<never, E>
      return first !== undefined && second !== undefined ? Exit.succeed(complete(second.value)) : undefined
    }
    const now = decided()
    if (now !== undefined) return now
    return Effect.async<A, E>((resume) => {
      const settled = (): void => {
        const outcome = decided()
        if (outcome === undefined) return
        sent.resume = undefined
        answer.resume = undefined
        resume(outcome)
      }
      sent.resume = settled
      answer.resume = settled
      // Settled between the check above and now (the fiber yielded in between).
      settled()
    })
  }

  /** Kept on the entry too: a posted request's outcome may be awaited after it came, or again. */
  private settle(entry: Pending<E>, completion: Completion | undefined, failure: E | undefined): void {
    if (failure !== undefined) {
      instrument.operationFailedUnsafe(entry.operation, (failure as { readonly _tag: string })._tag)
    }
    const settled = entry.settled
    if (settled !== undefined) {
      entry.settled = undefined
      return settled(failure)
    }
    const outcome: Outcome<E> = failure !== undefined
      ? Exit.fail(failure)
      : entry.voided
      ? VOID
      : Exit.succeed(completion!)
    entry.outcome = outcome
    const resume = entry.resume
    entry.resume = undefined
    if (resume !== undefined) resume(outcome)
  }

  /**
   * Hands completions to their operations. Returns the releases that were waiting for them
   * (regions whose scope closed while a request used them), for the caller to run. Once the
   * connection has ended, a request flushed by its error state (IBV_WC_WR_FLUSH_ERR) fails with
   * `flushed(operation)`: the end, not the request, is why it did not run. The releases are
   * added to `deferred` when given.
   */
  dispatch(
    completions: ReadonlyArray<Completion>,
    flushed?: (operation: string) => E,
    deferred: Array<Effect.Effect<void>> = []
  ): Array<Effect.Effect<void>> {
    for (const c of completions) {
      const entry = this.pending.get(c.id)
      if (entry === undefined) {
        const regions = this.held.get(c.id)
        if (regions !== undefined) {
          this.held.delete(c.id)
          dropAll(regions, deferred)
        }
        continue
      }
      if (entry.sendQueue) this.settleEarlier(entry, deferred)
      this.finish(entry, c, deferred, flushed)
    }
    this.notifyIfDrained()
    return deferred
  }

  private finish(
    entry: Pending<E>,
    c: Completion,
    deferred: Array<Effect.Effect<void>>,
    flushed?: (operation: string) => E
  ): void {
    this.pending.delete(entry)
    entry.slots.give()
    dropAll(entry.regions, deferred)
    if (c.status === 0) return this.settle(entry, c, undefined)
    const failure = c.status === WR_FLUSH_ERR && flushed !== undefined
      ? flushed(entry.operation)
      : new CompletionError({ operation: entry.operation, status: c.status }) as E
    this.settle(entry, c, failure)
  }

  /** `entry` completed: the send-queue requests posted before it (unsignalled ones) succeeded. */
  private settleEarlier(entry: Pending<E>, deferred: Array<Effect.Effect<void>>): void {
    // The common case: nothing unsignalled before it.
    if (this.sendOrder.first() === entry.id) {
      this.sendOrder.dropFirst(1)
      return
    }
    const at = this.sendOrder.indexOf(entry.id)
    if (at < 0) return
    // Taken out before any is settled: settling one may post, which pushes onto the queue.
    const earlier = this.sendOrder.firstOnes(at)
    this.sendOrder.dropFirst(at + 1)
    for (const id of earlier) {
      const before = this.pending.get(id)
      if (before === undefined) continue
      // Only an operation that answers its completion sees one: a batch's request (settled) or a
      // void one succeeds without it, so those share one instead of one made a request.
      const c = before.settled !== undefined || before.voided
        ? EARLIER
        : { id: before.id, status: 0, byteLength: 0, opcode: before.opcode, flags: 0 }
      this.finish(before, c, deferred)
    }
  }

  /**
   * The connection ended: every operation still waiting fails with `failure(operation,
   * unsignalled)` (`unsignalled`: a request that reports only a failure, whose outcome is unknown).
   * Their requests keep their regions until a late completion or {@link releaseHeld}.
   */
  failAll(failure: (operation: string, unsignalled: boolean) => E): void {
    for (const entry of this.pending.values()) {
      this.held.set(entry.id, entry.regions)
      const error = failure(entry.operation, !entry.signalled)
      this.settle(entry, undefined, error)
    }
    this.pending.clear()
    this.sendOrder.clear()
    this.oldestTimed = undefined
    this.notifyIfDrained()
  }

  /** The connection is deleted: the device no longer reaches any region of its requests. */
  releaseHeld(): Array<Effect.Effect<void>> {
    const deferred: Array<Effect.Effect<void>> = []
    for (const regions of this.held.values()) dropAll(regions, deferred)
    this.held.clear()
    return deferred
  }

  /**
   * How many ticks the oldest one-sided request (write, read, flush, atomic write) has waited for
   * its completion (0 if none waits): those complete without the other side's application, so a
   * long wait means the path or the host is gone. Receives wait for messages and sends for the
   * other side to post a receive (receiver-not-ready retries): neither is counted.
   */
  oldestWait(): number {
    let oldest = this.oldestTimed
    if (oldest === undefined || this.pending.get(oldest.id) !== oldest) {
      // The send order, not the table: its requests are in posting order, so the first timed one
      // is the oldest, and what comes before it (sends, unsignalled requests) leaves the order
      // when it completes, so each is skipped once while a timed request waits behind it.
      oldest = undefined
      for (let i = 0; i < this.sendOrder.length; i++) {
        const entry = this.pending.get(this.sendOrder.at(i))
        if (entry !== undefined && entry.postedAt !== undefined && entry.opcode !== WcOpcode.SEND) {
          oldest = entry
          break
        }
      }
      this.oldestTimed = oldest
    }
    return oldest === undefined ? 0 : this.tick - oldest.postedAt!
  }

  /** The request {@link oldestWait} found last: still the oldest while it waits (later ones are younger). */
  private oldestTimed: Pending<E> | undefined = undefined

  get size(): number {
    return this.pending.size
  }
}

const VOID: Exit.Exit<any> = Exit.void

/** An outcome as its operation returns it: a completion made into what `complete` makes of it. */
const completed = <E>(outcome: Outcome<E>, complete: ((c: Completion) => unknown) | undefined): Exit.Exit<unknown, E> =>
  complete === undefined || outcome._tag === "Failure" ? outcome : Exit.succeed(complete(outcome.value))

/** The request a work request needs, built with its id (librpma's, or an endpoint's `R`). */
export type Build<R = WorkRequest> = (id: number) => R
