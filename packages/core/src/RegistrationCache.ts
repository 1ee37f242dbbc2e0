/**
 * A registration cache: registering the same memory with the same usage again, while a cached
 * registration is alive, reuses it instead of pinning the pages a second time. Entries are
 * reference-counted: one is deregistered when it has had no user for `idleTimeToLive`, when the
 * cache's scope closes, or when the memory itself is released by {@link Memory.allocate}'s scope;
 * never while a user holds it. Closing the cache waits (at most `closeTimeout`) for the regions
 * still in use; one still held then is deregistered when its last user is done.
 * A hit is plain JavaScript (a map lookup and a count): {@link RegistrationCache.use} then opens no
 * scope and adds no finalizer, which is most of what a scoped hit costs.
 *
 * Entries are keyed by the ArrayBuffer object, never by address: memory released and then
 * reallocated at the same address is a new ArrayBuffer, so a stale registration is never served.
 *
 * @since 0.1.0
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import { dual } from "effect/Function"
import * as Option from "effect/Option"
import type { Pipeable } from "effect/Pipeable"
import * as Scope from "effect/Scope"
import type { RdmaDriver } from "./Driver.js"
import { readOnce, unreadableDetail } from "./internal/optionsOnce.js"
import * as pins from "./internal/pins.js"
import { PipeableBase } from "./internal/resource.js"
import { notAUse, notTheResource, ownEffect } from "./internal/resourceGuard.js"
import * as LocalMr from "./LocalMr.js"
import * as Memory from "./Memory.js"
import type { Peer } from "./Peer.js"
import * as RdmaError from "./RdmaError.js"
import { MemoryRefusedError, type RpmaError } from "./RdmaError.js"
import type { Flag, Usage } from "./Usage.js"

/**
 * @since 1.0.0
 * @category type ids
 */
export const TypeId: unique symbol = Symbol.for("@effect-rdma/core/RegistrationCache") as never

/**
 * @since 1.0.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * A cache of registrations of one peer. Its operations are also module functions
 * ({@link register}, {@link use}, {@link size}), data-first or data-last.
 *
 * @since 0.1.0
 * @category models
 */
export interface RegistrationCache extends Pipeable {
  readonly [TypeId]: TypeId
  readonly peer: Peer
  /** Like {@link LocalMr.register}, reusing a live registration of the same memory and usage. */
  readonly register: <F extends Flag>(
    memory: Uint8Array,
    usage: Usage<F>
  ) => Effect.Effect<LocalMr.LocalMr<F>, RpmaError | MemoryRefusedError, Scope.Scope>
  /**
   * Like {@link LocalMr.use}: runs `f` with a cached registration of `memory` (made if there is
   * none), without a Scope. The region is the cache's: it stays registered after `f` ends.
   *
   * @since 1.0.0
   */
  readonly use: <F extends Flag, A, E, R>(
    memory: Uint8Array,
    usage: Usage<F>,
    f: (mr: LocalMr.LocalMr<F>) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | RpmaError | MemoryRefusedError, R>
  /** How many registrations the cache holds now (in use, idle or being made). */
  readonly size: Effect.Effect<number>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How long an unused registration is kept. Default 30 seconds. */
  readonly idleTimeToLive?: Duration.DurationInput | undefined
  /**
   * How long closing the cache waits for the users of its regions to be done. Default 10 seconds.
   * A region still in use then stays registered until its last user is done (never deregistered
   * under a user), and the close logs a warning that says how many there were.
   *
   * @since 1.0.0
   */
  readonly closeTimeout?: Duration.DurationInput | undefined
}

/**
 * An option {@link make} cannot use: a duration that is not one (or negative), or a `closeTimeout`
 * that is infinite (closing must end). The class is {@link RdmaError.InvalidOptionsError}, with
 * `module: "RegistrationCache"`.
 *
 * @since 1.0.0
 * @category errors
 */
export const InvalidOptionsError: typeof RdmaError.InvalidOptionsError = RdmaError.InvalidOptionsError

/**
 * @since 1.0.0
 * @category errors
 */
export type InvalidOptionsError = RdmaError.InvalidOptionsError

const durationOption = (
  option: "idleTimeToLive" | "closeTimeout",
  value: Duration.DurationInput,
  finite: boolean
): Effect.Effect<Duration.Duration, InvalidOptionsError> => {
  const decoded = typeof value === "number" && !(value >= 0) ? Option.none() : Duration.decodeUnknown(value)
  if (Option.isNone(decoded)) {
    return Effect.fail(
      new InvalidOptionsError({
        module: "RegistrationCache",
        option,
        detail: `is not a duration (${String(value)}): give e.g. "30 seconds" or milliseconds`
      })
    )
  }
  if (finite && !Duration.isFinite(decoded.value)) {
    return Effect.fail(
      new InvalidOptionsError({
        module: "RegistrationCache",
        option,
        detail: "is infinite: closing must end, give it a bound"
      })
    )
  }
  return Effect.succeed(decoded.value)
}

type Failure = RpmaError | MemoryRefusedError

interface Entry {
  readonly buffer: ArrayBufferLike
  readonly key: string
  /**
   * The registration's own scope (made once the entry is in the map): closing it deregisters. Not a
   * child of the cache's scope, which would deregister it under its users when the cache closes.
   */
  scope: Scope.CloseableScope | undefined
  /** Set once registered; until then, callers wait on `made`. */
  mr: LocalMr.LocalMr<any> | undefined
  readonly made: Deferred.Deferred<LocalMr.LocalMr<any>, Failure>
  users: number
  /** When it expires if still unused (ms, the Clock's); meaningful while `users` is 0. */
  expiresAt: number
  /** Whether an idle timer is running for it. */
  timer: boolean
  /** Out of the map (expired, memory released or the cache closed): closed when its last user goes. */
  gone: boolean
}

/** The cache's implementation: its operations are closures over its state; `pipe` on the prototype. */
class RegistrationCacheImpl extends PipeableBase implements RegistrationCache {
  readonly [TypeId]: TypeId = TypeId
  constructor(
    readonly peer: Peer,
    readonly register: RegistrationCache["register"],
    readonly use: RegistrationCache["use"],
    readonly size: Effect.Effect<number>
  ) {
    super()
  }
}

/**
 * @since 1.0.0
 * @category guards
 */
export const isRegistrationCache = (u: unknown): u is RegistrationCache => u instanceof RegistrationCacheImpl

/**
 * A cache of registrations with `peer`, emptied when the scope closes. Fails with
 * {@link InvalidOptionsError} for an option it cannot use.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  peer: Peer,
  given?: Options
): Effect.Effect<RegistrationCache, InvalidOptionsError, RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const read = readOnce(given, { idleTimeToLive: true, closeTimeout: true })
    if (Either.isLeft(read)) {
      return yield* new InvalidOptionsError({
        module: "RegistrationCache",
        option: read.left.key,
        detail: unreadableDetail(read.left)
      })
    }
    const options = read.right
    const ttl = Duration.toMillis(
      yield* durationOption("idleTimeToLive", options?.idleTimeToLive ?? "30 seconds", false)
    )
    const closeTimeout = yield* durationOption("closeTimeout", options?.closeTimeout ?? "10 seconds", true)
    const scope = yield* Effect.scope
    const context = yield* Effect.context<RdmaDriver>()
    // By buffer, then by offset, length and usage: never by address (see above).
    const entries = new Map<ArrayBufferLike, Map<string, Entry>>()
    const owners = new WeakMap<LocalMr.LocalMr<any>, Entry>()
    // Every entry whose scope is still open, in the map or out of it: what closing waits for.
    const live = new Set<Entry>()
    let closed = false
    // Completed (once closing) when the last live entry is closed.
    const drained = Deferred.unsafeMake<void>(FiberId.none)

    const remove = (entry: Entry): void => {
      entry.gone = true
      const byKey = entries.get(entry.buffer)
      if (byKey?.get(entry.key) !== entry) return
      byKey.delete(entry.key)
      if (byKey.size === 0) entries.delete(entry.buffer)
    }
    const close = (entry: Entry): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (!live.delete(entry)) return Effect.void
        if (closed && live.size === 0) Deferred.unsafeDone(drained, Exit.void)
        return entry.scope === undefined ? Effect.void : Scope.close(entry.scope, Exit.void)
      })

    // Registers into `entry`, already in the map (so that a second caller waits for this one); a
    // failure is never cached (the entry goes, its waiters fail). The cache closing while a
    // registration runs (a large one, on a worker) waits for it, then the region is deregistered
    // and its callers interrupted: a closed cache hands out nothing.
    const create = (memory: Uint8Array, usage: number, entry: Entry) =>
      Scope.make(ExecutionStrategy.sequential).pipe(
        Effect.flatMap((own) => {
          entry.scope = own
          return LocalMr.register(peer, memory, usage as Usage<any>).pipe(Scope.extend(own), Effect.provide(context))
        }),
        Effect.filterOrElse(() => !closed, () => Effect.interrupt),
        Effect.matchCauseEffect({
          onFailure: (cause) => {
            remove(entry)
            return Deferred.failCause(entry.made, cause).pipe(
              Effect.zipRight(close(entry)),
              Effect.zipRight(Effect.failCause(cause))
            )
          },
          onSuccess: (mr) => {
            entry.mr = mr
            owners.set(mr, entry)
            return Effect.as(Deferred.succeed(entry.made, mr), mr)
          }
        })
      )

    /** A user of the registration of `memory` for `usage`: a hit is plain JavaScript. */
    const acquire = (given: Uint8Array, usage: number): Effect.Effect<LocalMr.LocalMr<any>, Failure> =>
      Effect.suspend(() => {
        if (closed) return Effect.interrupt
        // Refused before its getters are read (a Proxy's may throw); keyed by its real view.
        const memory = Memory.admit(given)
        if (memory instanceof MemoryRefusedError) return Effect.fail(memory)
        let byKey = entries.get(memory.buffer)
        if (byKey === undefined) entries.set(memory.buffer, byKey = new Map())
        const key = `${memory.byteOffset}:${memory.byteLength}:${usage}`
        const entry = byKey.get(key)
        if (entry === undefined) {
          const made: Entry = {
            buffer: memory.buffer,
            key,
            scope: undefined,
            mr: undefined,
            made: Deferred.unsafeMake(FiberId.none),
            users: 1,
            expiresAt: 0,
            timer: false,
            gone: false
          }
          byKey.set(key, made)
          live.add(made)
          return create(memory, usage, made)
        }
        entry.users++
        if (entry.mr !== undefined) return Effect.succeed(entry.mr)
        // Being registered by another fiber: wait for it (its failure is ours, and we hold nothing).
        return Effect.tapErrorCause(Deferred.await(entry.made), () => Effect.sync(() => entry.users--))
      })

    /** A user is done: an unused entry expires after `ttl`, or at once if it is already out. */
    const release = (mr: LocalMr.LocalMr<any>): Effect.Effect<void> =>
      Effect.clockWith((clock) => {
        const entry = owners.get(mr)!
        if (--entry.users > 0) return Effect.void
        if (entry.gone) return close(entry)
        entry.expiresAt = clock.unsafeCurrentTimeMillis() + ttl
        if (entry.timer) return Effect.void
        entry.timer = true
        // Interruptible although forked from a finalizer: the cache's scope interrupts it.
        return Effect.asVoid(Effect.forkIn(Effect.interruptible(idle(entry)), scope))
      })

    // Sleeps until the entry's expiry (pushed back by every use), then deregisters it if unused.
    const idle = (entry: Entry): Effect.Effect<void> =>
      Effect.clockWith((clock) => {
        const now = clock.unsafeCurrentTimeMillis()
        if (entry.users > 0 || entry.gone) {
          entry.timer = false
          return Effect.void
        }
        if (now < entry.expiresAt) return Effect.zipRight(Effect.sleep(entry.expiresAt - now), idle(entry))
        entry.timer = false
        remove(entry)
        return close(entry)
      })

    // Memory released by its owner: its entries go now, or when their last user does.
    const dropBuffer = (buffer: ArrayBufferLike) =>
      Effect.suspend(() => {
        const byKey = entries.get(buffer)
        if (byKey === undefined) return Effect.void
        const dropped = Array.from(byKey.values())
        for (const entry of dropped) remove(entry)
        return Effect.forEach(dropped, (entry) => (entry.users === 0 ? close(entry) : Effect.void), { discard: true })
      })
    // Waits for the users still holding regions, at most `closeTimeout`: the timer is a fiber of
    // its own and interruptible, so the wait (a finalizer's, uninterruptible) ends either way. A
    // region still held then stays registered: its last user's release deregisters it.
    const awaitUsers = Effect.suspend(() => {
      if (live.size === 0) return Effect.void
      const timeUp = Effect.interruptible(
        Effect.zipRight(Effect.sleep(closeTimeout), Deferred.done(drained, Exit.void))
      )
      return Effect.forkDaemon(timeUp).pipe(
        Effect.tap(() => Deferred.await(drained)),
        Effect.flatMap(Fiber.interrupt),
        Effect.zipRight(Effect.suspend(() =>
          live.size === 0 ? Effect.void : Effect.logWarning(
            `RegistrationCache closed with ${live.size} ${live.size === 1 ? "region" : "regions"} still in use ` +
              `after ${Duration.format(closeTimeout)}: each is deregistered when its last user is done`
          )
        ))
      )
    })
    yield* Effect.acquireRelease(Effect.sync(() => pins.onMemoryRelease(dropBuffer)), (remove) => Effect.sync(remove))
    // Closing: nothing new is served; an unused region is deregistered now, one in use when its
    // last user is done (a request in flight keeps its region until it completes, as always).
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        for (const byKey of entries.values()) for (const entry of byKey.values()) entry.gone = true
        entries.clear()
        if (live.size === 0) return Effect.void
        const unused = Array.from(live).filter((entry) => entry.users === 0)
        return Effect.zipRight(Effect.forEach(unused, close, { discard: true }), awaitUsers)
      })
    )

    return new RegistrationCacheImpl(
      peer,
      <F extends Flag>(memory: Uint8Array, usage: Usage<F>) =>
        Effect.acquireRelease(acquire(memory, usage), release) as Effect.Effect<
          LocalMr.LocalMr<F>,
          Failure,
          Scope.Scope
        >,
      <F extends Flag, A, E, R>(
        memory: Uint8Array,
        usage: Usage<F>,
        f: (mr: LocalMr.LocalMr<F>) => Effect.Effect<A, E, R>
      ) => {
        const refused = notAUse("rpma_mr_reg", f)
        return refused === undefined
          ? Effect.acquireUseRelease(
            acquire(memory, usage),
            f as (mr: LocalMr.LocalMr<any>) => Effect.Effect<A, E, R>,
            release
          )
          : Effect.fail(refused)
      },
      Effect.sync(() => {
        let n = 0
        for (const byKey of entries.values()) n += byKey.size
        return n
      })
    )
  })

/**
 * `cache.register` as a function: like `LocalMr.register`, reusing a live registration of the
 * same memory and usage.
 *
 * @since 1.0.0
 * @category operations
 */
export const register: {
  <F extends Flag>(
    memory: Uint8Array,
    usage: Usage<F>
  ): (self: RegistrationCache) => Effect.Effect<LocalMr.LocalMr<F>, RpmaError | MemoryRefusedError, Scope.Scope>
  <F extends Flag>(
    self: RegistrationCache,
    memory: Uint8Array,
    usage: Usage<F>
  ): Effect.Effect<LocalMr.LocalMr<F>, RpmaError | MemoryRefusedError, Scope.Scope>
} = dual(
  3,
  <F extends Flag>(self: RegistrationCache, memory: Uint8Array, usage: Usage<F>) => {
    const refused = notACache(self)
    return refused === undefined ? self.register(memory, usage) : Effect.fail(refused)
  }
)

/**
 * `cache.use` as a function: runs `f` with a cached registration of `memory`, without a Scope.
 *
 * @since 1.0.0
 * @category operations
 */
export const use: {
  <F extends Flag, A, E, R>(
    memory: Uint8Array,
    usage: Usage<F>,
    f: (mr: LocalMr.LocalMr<F>) => Effect.Effect<A, E, R>
  ): (self: RegistrationCache) => Effect.Effect<A, E | RpmaError | MemoryRefusedError, R>
  <F extends Flag, A, E, R>(
    self: RegistrationCache,
    memory: Uint8Array,
    usage: Usage<F>,
    f: (mr: LocalMr.LocalMr<F>) => Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | RpmaError | MemoryRefusedError, R>
} = dual(
  4,
  <F extends Flag, A, E, R>(
    self: RegistrationCache,
    memory: Uint8Array,
    usage: Usage<F>,
    f: (mr: LocalMr.LocalMr<F>) => Effect.Effect<A, E, R>
  ) => {
    const refused = notACache(self)
    return refused === undefined ? self.use(memory, usage, f) : Effect.fail(refused)
  }
)

/**
 * How many registrations the cache holds now (in use, idle or being made).
 *
 * @since 1.0.0
 * @category getters
 */
export const size = (self: RegistrationCache): Effect.Effect<number> =>
  ownEffect("RegistrationCache.size", cacheKind, self, (cache) => cache.size)

const cacheKind = { is: isRegistrationCache, what: "a RegistrationCache (RegistrationCache.make)" }

/** Anything but a cache where one goes: refused as the registration it would have made. */
const notACache = (value: unknown) =>
  notTheResource("rpma_mr_reg", `cache must be ${cacheKind.what}`, cacheKind.is, value)
