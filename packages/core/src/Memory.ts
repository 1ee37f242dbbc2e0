/**
 * Memory to register: a page-aligned allocation the library owns for the life of a Scope, or a
 * caller's Uint8Array, checked so that nothing unrelated is exposed to the device.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import type { RdmaDriver } from "./Driver.js"
import * as checks from "./DriverArguments.js"
import type { MapFileRequest } from "./DriverModel.js"
import * as instrument from "./internal/instrument.js"
import { type Keys, readOnce, unreadableWords } from "./internal/optionsOnce.js"
import * as pins from "./internal/pins.js"
import { release } from "./internal/release.js"
import { type MapFileError, mapFileError, MemoryRefusedError, type RpmaError } from "./RdmaError.js"

/**
 * Checks that a caller's bytes can be registered: a Uint8Array, not detached, and not a slice of
 * Node's shared Buffer pool (registering such a slice would let the remote peer reach whatever
 * else lives in the pool). A size of 0 is left to the driver, which refuses it as librpma does
 * (RPMA_E_INVAL). Answers the memory's real view: the memory itself, or, when its `buffer`,
 * `byteOffset` or `byteLength` are not the engine's own (a subclass's getters), a plain Uint8Array
 * over the same bytes, so that what is registered is what the memory holds.
 *
 * @since 0.1.0
 * @category validation
 */
export const validate = (memory: unknown): Either.Either<Uint8Array, MemoryRefusedError> => {
  const admitted = admit(memory)
  return admitted instanceof MemoryRefusedError ? Either.left(admitted) : Either.right(admitted)
}

/**
 * @internal {@link validate} as a plain value: the memory's real view, or the refusal. Each check
 * once (every registration runs it), none through the memory's own getters.
 */
export const admit = (memory: unknown): Uint8Array | MemoryRefusedError => {
  // Not instanceof: a Proxy passes it and then throws from every getter.
  if (!checks.isUint8Array(memory)) return new MemoryRefusedError({ reason: "NotBytes", byteLength: 0 })
  const byteLength = checks.byteLengthOf(memory)
  if (checks.isShared(memory)) return new MemoryRefusedError({ reason: "SharedMemory", byteLength })
  if (checks.isDetached(memory)) return new MemoryRefusedError({ reason: "Detached", byteLength: 0 })
  if (checks.isResizable(memory)) return new MemoryRefusedError({ reason: "Resizable", byteLength })
  const view = checks.realView(memory)
  if (inPool(view, memory)) return new MemoryRefusedError({ reason: "SharedBufferPool", byteLength })
  return view
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
export const isPoolSlice = (memory: Uint8Array): boolean =>
  checks.isUint8Array(memory) && !checks.isShared(memory) && !checks.isDetached(memory) &&
  inPool(checks.realView(memory), memory)

// isPoolSlice of a real Uint8Array over a non-shared, attached buffer: `memory` is its real view,
// `given` what the caller passed (a Buffer subclass's real view is a plain Uint8Array).
const inPool = (memory: Uint8Array, given: Uint8Array): boolean => {
  const buffer = memory.buffer as ArrayBuffer
  // A pool is Buffer.poolSize bytes, or a pool's length seen (now or when it was made): no other
  // buffer needs the probe.
  if (buffer.byteLength !== Buffer.poolSize && !poolSizes.has(buffer.byteLength)) return false
  notePool()
  // Any view, not only a Buffer: `new Uint8Array(buf.buffer, ...)` reaches the same pool bytes.
  if (pools.has(buffer)) return true
  // A pool made before this module saw it: a Buffer slice of a buffer of a pool's size.
  return isBuffer(given) && memory.byteLength < buffer.byteLength && poolSizes.has(buffer.byteLength)
}

// Buffer.isBuffer walks the prototype chain, where a Proxy may throw: such memory is taken for a
// Buffer, and so refused when over a buffer of a pool's size.
const isBuffer = (memory: Uint8Array): boolean => {
  try {
    return Buffer.isBuffer(memory)
  } catch {
    return true
  }
}

// Node's pool is internal: learn each one by asking for a byte of it, and remember every
// Buffer.poolSize seen, so that a pool made before Buffer.poolSize changed is still recognised,
// and every pool's own length (Node 26: 65600 bytes for a poolSize of 65536).
const pools = new WeakSet<ArrayBuffer>()
const poolSizes = new Set<number>([8192])
const notePool = () => {
  poolSizes.add(Buffer.poolSize)
  const probe = Buffer.allocUnsafe(1)
  if (probe.byteLength < probe.buffer.byteLength) {
    pools.add(probe.buffer as ArrayBuffer)
    poolSizes.add(probe.buffer.byteLength)
  }
}
notePool()

/**
 * Allocates `size` bytes of page-aligned, zeroed memory owned by the driver, given back when the
 * scope closes. A registration over it still live then (its deregistration waits for a request in
 * flight, such as a receive posted on an endpoint that closes after this scope) delays the free
 * until it is released. If a registration over it failed to release, the memory is kept instead:
 * the device may still point at it.
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
          Effect.zipRight(Effect.suspend(() => {
            const size = memory.byteLength
            if (pins.isQuarantined(memory)) {
              return Effect.logWarning(
                `kept ${size} bytes alive: a failed release may have left the device pointing at them`
              )
            }
            const free = Effect.asVoid(release("free", `${size} bytes`, driver.free(memory)))
            // A registration still live (its deregistration waits for a request in flight, or was
            // refused): freed when the last one is released, never under it.
            return pins.releaseWhenUnpinned(memory, free)
              ? free
              : Effect.logInfo(`kept ${size} bytes alive until the registration over them is released`)
          }))
        )
    ))

/**
 * What {@link mapFile} maps.
 *
 * @since 1.0.0
 * @category models
 */
export interface MapFileOptions {
  /**
   * A regular file, or a character or block device such as a device DAX (`/dev/dax0.0`). On
   * persistent memory, prefer a device DAX: a file on a DAX file system (ext4 -o dax) maps the
   * media too, but Linux refuses to pin its pages for a registration unless the device supports
   * on-demand paging (Soft-RoCE on Linux 6.1 does not; vm/README.md, "Persistent memory").
   */
  readonly path: string
  /** Bytes to map. Default: from `offset` to the end of the file. Required for a device, and with `create`. */
  readonly size?: number | undefined
  /** Where the mapping starts in the file, a multiple of the page size (4096). Default 0. */
  readonly offset?: number | undefined
  /** Create the file (mode 0600) when it is missing, sized to `offset + size`. Default false. */
  readonly create?: boolean | undefined
}

/** The page size of the Linux targets this library runs on (x86-64, arm64 with 4 KiB pages). */
const pageSize = 4096

const mapFileKeys: Keys<MapFileOptions> = { path: true, size: true, offset: true, create: true }

const mapFileRequest = (given: MapFileOptions): Either.Either<MapFileRequest, MapFileError> => {
  const read = readOnce(given, mapFileKeys)
  if (Either.isLeft(read)) {
    return Either.left(
      mapFileError({ path: "(no path)", operation: "mapFile", reason: "Invalid", detail: unreadableWords(read.left) })
    )
  }
  const options = read.right as MapFileOptions
  const path = typeof options?.path === "string" ? options.path : ""
  const refuse = (reason: "SizeZero" | "Unaligned" | "Invalid", detail: string) =>
    Either.left(mapFileError({ path: path === "" ? "(no path)" : path, operation: "mapFile", reason, detail }))
  if (path === "" || path.includes("\0")) return refuse("Invalid", "path must be a non-empty string without NUL")
  const offset = options.offset ?? 0
  if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset < 0) {
    return refuse("Invalid", "offset must be a non-negative integer")
  }
  if (offset % pageSize !== 0) return refuse("Unaligned", `offset ${offset} is not a multiple of ${pageSize}`)
  const size = options.size
  if (size !== undefined && (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0)) {
    return refuse("Invalid", "size must be a non-negative integer")
  }
  if (size === 0) return refuse("SizeZero", "size is 0")
  const create = options.create === true
  if (create && size === undefined) return refuse("SizeZero", "a file to create needs a size")
  return Either.right({ path, offset, size, create })
}

/**
 * Maps a file into memory for the life of a Scope: `mmap(MAP_SHARED)`, so that what is written to
 * the bytes, by this process or by a remote peer through a registration, is written to the file.
 * When the scope closes the mapping is synced (`msync`) and unmapped; if a registration still
 * covers it then, unmapping waits until the last one is released (and never happens if a release
 * failed, since the device may still point at the pages). A mapping cannot be unmapped from
 * under a registration.
 *
 * For a server whose memory must survive a crash, map a file on persistent memory (a device DAX,
 * `/dev/dax0.0`, with its size), register it with `Usage.FLUSH_TYPE_PERSISTENT`, and let clients
 * connect with `directWriteToPmem: true` and flush with `Connection.flush(conn, { ..., type: "persistent" })`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
 *
 * const program = Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const memory = yield* Memory.mapFile({ path: "/var/lib/log.bin", size: 1 << 20, create: true })
 *   return yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const mapFile = (options: MapFileOptions): Effect.Effect<Uint8Array, MapFileError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Either.match(mapFileRequest(options), {
      onLeft: Effect.fail,
      onRight: (request) =>
        Effect.acquireRelease(
          driver.mapFile(request),
          (memory) =>
            // Cached registrations over the mapping go first: a cache must never outlive what it covers.
            Effect.forEach(pins.memoryReleaseHooks(), (hook) => hook(memory.buffer), { discard: true }).pipe(
              Effect.zipRight(Effect.suspend(() => {
                const unmap = Effect.asVoid(release(
                  "msync",
                  `the mapping of ${request.path}`,
                  // The driver knows the mapping, not its path.
                  Effect.mapError(driver.unmapFile(memory), (e) => mapFileError({ ...e, path: request.path }))
                ))
                return pins.releaseWhenUnpinned(memory, unmap)
                  ? unmap
                  : Effect.logInfo(
                    `the mapping of ${request.path} is unmapped when the last registration over it is released`
                  )
              }))
            )
        )
    }))
