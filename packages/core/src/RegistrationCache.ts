/**
 * A registration cache: registering the same memory with the same usage again, while a cached
 * registration is alive, reuses it instead of pinning the pages a second time. Entries are
 * reference-counted (Effect's RcMap): one is deregistered when its last user's scope closes and it
 * then stays idle for `idleTimeToLive`, when the cache's scope closes, or when the memory itself
 * is released by {@link Memory.allocate}'s scope.
 *
 * Entries are keyed by the ArrayBuffer object, never by address: memory released and then
 * reallocated at the same address is a new ArrayBuffer, so a stale registration is never served.
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Equal from "effect/Equal"
import * as Hash from "effect/Hash"
import * as RcMap from "effect/RcMap"
import type * as Scope from "effect/Scope"
import type { RdmaDriver } from "./Driver.js"
import * as pins from "./internal/pins.js"
import * as LocalMr from "./LocalMr.js"
import type { Peer } from "./Peer.js"
import type { MemoryRefusedError, RpmaError } from "./RdmaError.js"
import type { Flag, Usage } from "./Usage.js"

class Key implements Equal.Equal {
  constructor(readonly memory: Uint8Array, readonly usage: number) {}
  [Equal.symbol](that: unknown): boolean {
    return that instanceof Key && that.memory.buffer === this.memory.buffer &&
      that.memory.byteOffset === this.memory.byteOffset && that.memory.byteLength === this.memory.byteLength &&
      that.usage === this.usage
  }
  [Hash.symbol](): number {
    return Hash.cached(
      this,
      Hash.combine(Hash.hash(this.memory.buffer))(
        Hash.combine(Hash.number(this.memory.byteOffset))(Hash.combine(Hash.number(this.memory.byteLength))(this.usage))
      )
    )
  }
}

/**
 * @since 0.1.0
 * @category models
 */
export interface RegistrationCache {
  readonly peer: Peer
  /** Like {@link LocalMr.register}, reusing a live registration of the same memory and usage. */
  readonly register: <F extends Flag>(
    memory: Uint8Array,
    usage: Usage<F>
  ) => Effect.Effect<LocalMr.LocalMr<F>, RpmaError | MemoryRefusedError, Scope.Scope>
  /** How many registrations the cache holds now (in use or idle). */
  readonly size: Effect.Effect<number>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How long an unused registration is kept. Default 30 seconds. */
  readonly idleTimeToLive?: Duration.DurationInput | undefined
}

/**
 * A cache of registrations with `peer`, emptied when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  peer: Peer,
  options?: Options
): Effect.Effect<RegistrationCache, never, RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const map = yield* RcMap.make({
      lookup: (key: Key) => LocalMr.register(peer, key.memory, key.usage as Usage<any>),
      idleTimeToLive: options?.idleTimeToLive ?? "30 seconds"
    })
    const dropBuffer = (buffer: ArrayBufferLike) =>
      Effect.flatMap(RcMap.keys(map), (keys) =>
        Effect.forEach(keys, (key) => (key.memory.buffer === buffer ? RcMap.invalidate(map, key) : Effect.void), {
          discard: true
        }))
    yield* Effect.acquireRelease(Effect.sync(() => pins.onMemoryRelease(dropBuffer)), (remove) => Effect.sync(remove))
    return {
      peer,
      register: <F extends Flag>(memory: Uint8Array, usage: Usage<F>) => {
        const key = new Key(memory, usage)
        // RcMap keeps a failed lookup's outcome for as long as the entry lives: never serve a failure.
        return RcMap.get(map, key).pipe(Effect.tapError(() => RcMap.invalidate(map, key))) as Effect.Effect<
          LocalMr.LocalMr<F>,
          RpmaError | MemoryRefusedError,
          Scope.Scope
        >
      },
      size: Effect.map(RcMap.keys(map), (keys) => keys.length)
    }
  })
