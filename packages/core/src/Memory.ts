/**
 * Memory to register: a page-aligned allocation the library owns for the life of a Scope, or a
 * caller's Uint8Array, checked so that nothing unrelated is exposed to the device.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import { RdmaDriver } from "./Driver.js"
import * as pins from "./internal/pins.js"
import * as checks from "./DriverArguments.js"
import * as instrument from "./internal/instrument.js"
import { release } from "./internal/release.js"
import { MemoryRefusedError, type RpmaError } from "./RdmaError.js"

/**
 * Checks that a caller's bytes can be registered: a Uint8Array, not detached, and not a slice of
 * Node's shared Buffer pool (registering such a slice would let the remote peer reach whatever
 * else lives in the pool). A size of 0 is left to the driver, which refuses it as librpma does
 * (RPMA_E_INVAL).
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (memory: unknown): Either.Either<Uint8Array, MemoryRefusedError> => {
  // Not instanceof: a Proxy passes it and then throws from every getter.
  if (!checks.isUint8Array(memory)) {
    return Either.left(new MemoryRefusedError({ reason: "NotBytes", byteLength: 0 }))
  }
  if (checks.isShared(memory)) {
    return Either.left(new MemoryRefusedError({ reason: "SharedMemory", byteLength: memory.byteLength }))
  }
  if (isDetached(memory)) return Either.left(new MemoryRefusedError({ reason: "Detached", byteLength: 0 }))
  if (checks.isResizable(memory)) {
    return Either.left(new MemoryRefusedError({ reason: "Resizable", byteLength: memory.byteLength }))
  }
  if (isPoolSlice(memory)) {
    return Either.left(new MemoryRefusedError({ reason: "SharedBufferPool", byteLength: memory.byteLength }))
  }
  return Either.right(memory)
}

/**
 * Whether the view's ArrayBuffer has been detached (transferred or released).
 *
 * @since 0.1.0
 * @category predicates
 */
export const isDetached = (memory: Uint8Array): boolean => checks.isUint8Array(memory) && checks.isDetached(memory)

/**
 * Whether a Buffer is a slice of a larger ArrayBuffer that Node shares between unrelated Buffers
 * (Buffer.allocUnsafe, Buffer.from, Buffer.concat below `Buffer.poolSize >>> 1` bytes).
 *
 * @since 0.1.0
 * @category predicates
 */
export const isPoolSlice = (memory: Uint8Array): boolean => {
  if (!checks.isUint8Array(memory) || checks.isShared(memory)) return false
  notePool()
  const buffer = memory.buffer as ArrayBuffer
  // Any view, not only a Buffer: `new Uint8Array(buf.buffer, ...)` reaches the same pool bytes.
  if (pools.has(buffer)) return true
  // A pool made before this module saw it: a Buffer slice of a buffer of a pool's size.
  return Buffer.isBuffer(memory) && memory.byteLength < buffer.byteLength && poolSizes.has(buffer.byteLength)
}

// Node's pool is internal: learn each one by asking for a byte of it, and remember every
// Buffer.poolSize seen, so that a pool made before Buffer.poolSize changed is still recognised.
const pools = new WeakSet<ArrayBuffer>()
const poolSizes = new Set<number>([8192])
const notePool = () => {
  poolSizes.add(Buffer.poolSize)
  const probe = Buffer.allocUnsafe(1)
  if (probe.byteLength < probe.buffer.byteLength) pools.add(probe.buffer as ArrayBuffer)
}
notePool()

/**
 * Allocates `size` bytes of page-aligned, zeroed memory owned by the driver, given back when the
 * scope closes. If a registration over it failed to release, the memory is kept instead: the
 * device may still point at it.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
 *
 * const program = Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const memory = yield* Memory.allocate(1 << 20)
 *   return yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
 * })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const allocate = (size: number): Effect.Effect<Uint8Array, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.acquireRelease(
      driver.allocate(size),
      (memory) =>
        // Cached registrations over this memory go first: a cache must never outlive what it covers.
        Effect.forEach(pins.memoryReleaseHooks(), (hook) => hook(memory.buffer), { discard: true }).pipe(
          Effect.zipRight(Effect.suspend(() =>
            pins.isReachableByDevice(memory)
              ? Effect.logWarning(`kept ${memory.byteLength} bytes alive: a registration over them is still live`)
              : release("free", `${memory.byteLength} bytes`, driver.free(memory))
          ))
        )
    ))
