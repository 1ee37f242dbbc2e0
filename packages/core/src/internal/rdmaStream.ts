/**
 * Streams over a connection (librpma) or an endpoint (librdmacm): Sinks that write chunks into a
 * remote range or ring through the batch path, and a Stream of messages over a pool of pre-posted
 * receives. Built on the public API only; the two paths differ only in their `WritePath`.
 *
 * Declared and documented in RdmaStream.ts.
 */
import type * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Sink from "effect/Sink"
import * as Stream from "effect/Stream"
import * as CmEndpoint from "../CmEndpoint.js"
import * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import * as LocalMr from "../LocalMr.js"
import type { Peer } from "../Peer.js"
import type { MemoryRefusedError, RpmaError } from "../RdmaError.js"
import type * as RdmaStream from "../RdmaStream.js"
import type * as RemoteKey from "../RemoteKey.js"
import { isRemoteMr, type RemoteMr } from "../RemoteMr.js"
import * as Usage from "../Usage.js"
import { isReleased as isCmRegionReleased } from "./cmRegistration.js"
import { isReleased as isLocalMrReleased } from "./localMr.js"
import { type Keys, readOnce, type Unreadable, unreadableDetail } from "./optionsOnce.js"
import { kindOf } from "./resourceGuard.js"

export class RegionFullError extends Data.TaggedError("RegionFullError")<{
  readonly written: number
  readonly needed: number
  readonly capacity: number
}> {
  override get message(): string {
    return `the remote range is full: ${this.written} of its ${this.capacity} bytes are written and the next chunk needs ${this.needed} more; write to a larger range, or use a ring (RdmaStream.writeRing)`
  }
}

export class RingStalledError extends Data.TaggedError("RingStalledError")<{
  readonly waited: Duration.Duration
  readonly unread: number
}> {
  override get message(): string {
    return `the ring stayed full for ${
      Duration.format(this.waited)
    }: its reader left ${this.unread} bytes unread; read it faster (RdmaStream.readRing), give it a larger ring, or raise stallTimeout`
  }
}

export class StreamOptionError extends Data.TaggedError("StreamOptionError")<{
  readonly option: string
  readonly detail: string
}> {
  override get message(): string {
    return `RdmaStream: ${this.option} ${this.detail}`
  }
}

/** The ring's header: the writer's tail word, then the reader's head word. */
export const RING_HEADER = 64
const TAIL_AT = 0
const HEAD_AT = 8
const DEFAULT_STAGING = 64 * 1024

const positiveInt = (option: string, value: number | undefined, fallback: number): StreamOptionError | number => {
  const v = value ?? fallback
  return Number.isSafeInteger(v) && v > 0
    ? v
    : new StreamOptionError({ option, detail: `must be a positive integer, got ${v}` })
}

type StageError = Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError

const optionError = (option: string, detail: string) => Effect.fail(new StreamOptionError({ option, detail }))

/** An option whose read threw, refused naming it. */
const unreadable = (option: Unreadable) => optionError(option.key, unreadableDetail(option))

/**
 * A Sink's options, read once (optionsOnce), with the region they write to: or the
 * StreamOptionError that says what to give, never a defect, whatever is given.
 */
const sinkOptions = <O extends object>(
  given: O | undefined,
  keys: Keys<O>,
  region: keyof O & string,
  isRegion: (u: unknown) => boolean,
  what: string
): Effect.Effect<O, StreamOptionError> => {
  if (typeof given !== "object" || given === null) {
    return optionError("options", `must be an object naming ${region}, ${what}, got ${kindOf(given)}`)
  }
  const read = readOnce(given, keys)
  if (Either.isLeft(read)) return unreadable(read.left)
  const options = read.right as O
  return isRegion(options[region])
    ? Effect.succeed(options)
    : optionError(region, `must be ${what}, got ${kindOf(options[region])}`)
}

/** A remote key as RemoteKey.make and decode make it (a plain object: checked by its fields). */
const isRemoteKey = (u: unknown): boolean =>
  typeof u === "object" && u !== null && typeof (u as RemoteKey.RemoteKey).address === "bigint" &&
  typeof (u as RemoteKey.RemoteKey).length === "bigint"

const rangeKeys = { offset: true, length: true, stagingSize: true, staging: true, wrap: true, dst: true } as const
const ringKeys = { stagingSize: true, pollInterval: true, stallTimeout: true, staging: true, ring: true } as const
const REMOTE_MR = "a RemoteMr (RemoteMr.fromDescriptor)"
const REMOTE_KEY = "a RemoteKey (RemoteKey.decode of the other side's key)"

/** A duration option (`fallback` when absent; infinite only where `finite` is false), or why not: never thrown. */
const durationOption = (
  option: string,
  value: Duration.DurationInput | undefined,
  fallback: Duration.DurationInput,
  finite: boolean
): Effect.Effect<Duration.Duration, StreamOptionError> => {
  const decoded = typeof value === "number" && !(value >= 0) ? Option.none() : Duration.decodeUnknown(value ?? fallback)
  return Option.isSome(decoded) && (!finite || Duration.isFinite(decoded.value))
    ? Effect.succeed(decoded.value)
    : optionError(
      option,
      `must be a ${finite ? "finite " : ""}duration (e.g. "1 millis", or milliseconds), got ${String(value)}`
    )
}

/** How a ring's writer polls its reader's head, and how long it waits for room before it gives up. */
interface RingTiming {
  readonly pollInterval: Duration.Duration
  readonly stallTimeout: Duration.Duration
}

const ringTiming = (options: RdmaStream.RingSettings): Effect.Effect<RingTiming, StreamOptionError> =>
  Effect.all({
    pollInterval: durationOption("pollInterval", options.pollInterval, "1 millis", true),
    stallTimeout: durationOption("stallTimeout", options.stallTimeout, "30 seconds", false)
  })

/**
 * What a Sink writes through, on either path: the staging region's bytes, the request that writes
 * `length` of them from `srcOffset` to `dstOffset` of the destination, and the batch call.
 */
interface WritePath<A, E> {
  readonly memory: Uint8Array
  readonly request: (srcOffset: number, dstOffset: number, length: number) => A
  readonly writeMany: (batch: Array<A>) => Effect.Effect<void, E>
}

/** A ring writer's path: also the tail word's write and the reader's head word read back. */
interface RingPath<A, E> extends WritePath<A, E> {
  readonly writeTail: (tail: number) => Effect.Effect<void, E>
  readonly readHead: Effect.Effect<number, E>
}

/**
 * A Sink's staging region: the caller's `staging` (reused across Sinks) once `problemOf` finds
 * nothing wrong with it, or one of `stagingSize` (default `fallback`) made by `register` for this
 * Sink's life. The two paths differ only in those two.
 */
const staging = <M, E>(
  options: { readonly staging?: M | undefined; readonly stagingSize?: number | undefined },
  fallback: number,
  register: (size: number) => Effect.Effect<M, E, RdmaDriver | Scope.Scope>,
  problemOf: (given: M) => string | undefined
): Effect.Effect<M, StreamOptionError | E, RdmaDriver | Scope.Scope> => {
  const given = options.staging
  if (given === undefined) {
    const size = positiveInt("stagingSize", options.stagingSize, fallback)
    return typeof size === "number" ? register(size) : Effect.fail(size)
  }
  const problem = options.stagingSize !== undefined
    ? "and stagingSize are exclusive: the staging region's size is its own"
    : problemOf(given)
  return problem === undefined ? Effect.succeed(given) : optionError("staging", problem)
}

/** A region whose scope closed (allocated memory goes with it: its buffer is detached). */
const gone = (region: LocalMr.LocalMr<any> | CmEndpoint.Region<any>): string | undefined =>
  isLocalMrReleased(region) || isCmRegionReleased(region) || region.memory.byteLength === 0
    ? "was released: give a region whose scope is open"
    : undefined

/** On the librpma path: a WRITE_SRC region of the Sink's peer. */
const rpmaStaging = (
  peer: Peer,
  options: { readonly staging?: LocalMr.LocalMr<"WRITE_SRC"> | undefined; readonly stagingSize?: number | undefined },
  fallback: number
) =>
  staging(
    options,
    fallback,
    (size) => LocalMr.allocate(peer, size, Usage.WRITE_SRC),
    (given) =>
      !LocalMr.isLocalMr(given) || !Usage.has(given.usage, "WRITE_SRC")
        ? "must be a LocalMr registered with Usage.WRITE_SRC"
        : given.peer !== peer
        ? "must be a region of the Sink's peer (the connection's)"
        : gone(given)
  )

/** On the librdmacm path: a message region of the Sink's endpoint (rdma_reg_msgs). */
const cmStaging = (
  endpoint: CmEndpoint.CmEndpoint,
  options: { readonly staging?: CmEndpoint.MessageRegion | undefined; readonly stagingSize?: number | undefined },
  fallback: number
) =>
  staging(
    options,
    fallback,
    (size) => CmEndpoint.registerMessages(endpoint, new Uint8Array(size)),
    (given) =>
      !CmEndpoint.isRegion(given) || given.kind !== "msgs"
        ? "must be a region of CmEndpoint.registerMessages"
        : given.endpoint !== endpoint
        ? "must be a region of the Sink's endpoint (registered on it)"
        : gone(given)
  )

const rpmaPath = (
  conn: Connection.Connection,
  dst: RemoteMr<"WRITE_DST">,
  src: LocalMr.LocalMr<"WRITE_SRC">
): WritePath<Connection.WriteArgs, Connection.TransferError> => ({
  memory: src.memory,
  request: (srcOffset, dstOffset, length) => ({ dst, dstOffset, src, srcOffset, length }),
  writeMany: (batch) => Connection.writeMany(conn, batch)
})

const cmPath = (
  endpoint: CmEndpoint.CmEndpoint,
  dst: RemoteKey.RemoteKey<"write">,
  src: CmEndpoint.MessageRegion
): WritePath<CmEndpoint.WriteArgs, CmEndpoint.TransferError> => ({
  memory: src.memory,
  request: (srcOffset, dstOffset, length) => ({ dst, dstOffset, src, srcOffset, length }),
  writeMany: (batch) => CmEndpoint.writeMany(endpoint, batch)
})

/**
 * Spans staged in a path's staging region: bytes are copied in, then written with one batch (a
 * sliding window over the send queue, one wait) when the region is full or a chunk ends.
 */
const stager = <A, E>(path: WritePath<A, E>) => {
  let used = 0
  let batch: Array<A> = []
  const flush = Effect.suspend(() => {
    if (batch.length === 0) return Effect.void
    const full = batch
    batch = []
    used = 0
    return path.writeMany(full)
  })
  /** Stages `bytes` for `dstOffset` (flushing first when they do not fit); they fit in the region. */
  const stage = (bytes: Uint8Array, dstOffset: number) =>
    Effect.suspend(() => {
      const staged = Effect.sync(() => {
        // Released while the Sink ran, its memory detached under it: nothing to copy into, and the
        // batch's write refuses the released region with its tagged error.
        if (path.memory.byteLength > 0) path.memory.set(bytes, used)
        batch.push(path.request(used, dstOffset, bytes.length))
        used += bytes.length
      })
      return used + bytes.length > path.memory.byteLength ? Effect.zipRight(flush, staged) : staged
    })
  return { flush, stage }
}

/** A range's bounds and wrapping, checked against the destination's `size` bytes. */
const rangeOf = (
  size: number,
  options: RdmaStream.RangeSettings | RdmaStream.CmRangeOptions
): Effect.Effect<{ readonly start: number; readonly end: number; readonly wrap: boolean }, StreamOptionError> => {
  const start = options.offset ?? 0
  const end = options.length === undefined ? size : start + options.length
  if (!Number.isSafeInteger(start) || start < 0 || !Number.isSafeInteger(end) || end > size || end < start) {
    return optionError(
      "offset/length",
      `must name a range within the ${size}-byte region, got offset ${start} and end ${end}`
    )
  }
  const wrap = options.wrap ?? false
  if (typeof wrap !== "boolean") return optionError("wrap", `must be a boolean, got ${String(wrap)}`)
  return Effect.succeed({ start, end, wrap })
}

/** The range Sink over a path; `flushRange` runs after each chunk's writes completed. */
const rangeSink = <A, E, F>(
  range: { readonly start: number; readonly end: number; readonly wrap: boolean },
  path: WritePath<A, E>,
  flushRange: Effect.Effect<void, F>
): Sink.Sink<number, Uint8Array, never, E | F | RegionFullError> => {
  const { end, start, wrap } = range
  const { flush: writeStaged, stage } = stager(path)
  const stagingSize = path.memory.byteLength
  const capacity = end - start
  let at = start
  let written = 0
  /** Stages `bytes` from `at` on, going on from the range's start at its end when it wraps. */
  const place = (bytes: Uint8Array) =>
    Effect.suspend(() => {
      const first = bytes.subarray(0, end - at)
      const dstOffset = at
      at += first.length
      written += bytes.length
      const rest = bytes.subarray(first.length)
      if (at === end && wrap) at = start
      return Effect.zipRight(
        inPieces(first, stagingSize, (piece, from) => stage(piece, dstOffset + from)),
        rest.length === 0 ? Effect.void : Effect.suspend(() => {
          at = start + rest.length
          return inPieces(rest, stagingSize, (piece, from) => stage(piece, start + from))
        })
      )
    })
  const writeChunk = (chunk: Chunk.Chunk<Uint8Array>) =>
    Effect.zipRight(
      Effect.forEach(chunk, (bytes) =>
        Effect.suspend(() => {
          if (wrap ? bytes.length > capacity : at + bytes.length > end) {
            // What was staged before it is written: the range holds every chunk that fitted.
            return Effect.zipRight(
              Effect.zipRight(writeStaged, flushRange),
              Effect.fail(new RegionFullError({ written: wrap ? 0 : at - start, needed: bytes.length, capacity }))
            )
          }
          return place(bytes)
        }), { discard: true }),
      Effect.zipRight(writeStaged, flushRange)
    )
  return Sink.forEachChunk(writeChunk).pipe(Sink.map(() => written))
}

type RpmaRangeError = StageError | Connection.FlushError | RegionFullError
type CmRangeError = RdmaStream.CmWriteError | RegionFullError

const rpmaRange = (
  peer: Peer,
  conn: Connection.Connection,
  given: RdmaStream.RangeOptions
): Sink.Sink<number, Uint8Array, never, RpmaRangeError, RdmaDriver> =>
  Sink.unwrapScoped<number, Uint8Array, never, RpmaRangeError, RdmaDriver | Scope.Scope>(Effect.gen(function*() {
    const options = yield* sinkOptions(given, { ...rangeKeys, flush: true }, "dst", isRemoteMr, REMOTE_MR)
    const range = yield* rangeOf(Number(options.dst.size), options)
    const flushType = options.flush
    if (flushType !== undefined && flushType !== "visibility" && flushType !== "persistent") {
      return yield* optionError("flush", `must be "visibility" or "persistent" (or left out), got ${String(flushType)}`)
    }
    const src = yield* rpmaStaging(peer, options, DEFAULT_STAGING)
    // After a chunk's writes completed: a flush of the range (librpma's is a fence, an 8-byte
    // read, whatever the length: one per chunk).
    const dstOffset = range.start
    const length = range.end - range.start
    const flushRange = options.flush === undefined
      ? Effect.void
      : options.flush === "persistent"
      ? Connection.flush(conn, { dst: options.dst, dstOffset, length, type: "persistent" })
      : Connection.flush(conn, { dst: options.dst, dstOffset, length })
    return rangeSink(range, rpmaPath(conn, options.dst, src), flushRange)
  }))

const cmRange = (
  endpoint: CmEndpoint.CmEndpoint,
  given: RdmaStream.CmRangeOptions
): Sink.Sink<number, Uint8Array, never, CmRangeError, RdmaDriver> =>
  Sink.unwrapScoped<number, Uint8Array, never, CmRangeError, RdmaDriver | Scope.Scope>(Effect.gen(function*() {
    // flush is read to be refused: librdmacm has none.
    const options = yield* sinkOptions(
      given as RdmaStream.CmRangeOptions & { readonly flush?: unknown },
      { ...rangeKeys, flush: true },
      "dst",
      isRemoteKey,
      REMOTE_KEY
    )
    if (options.flush !== undefined) {
      return yield* optionError(
        "flush",
        "is librpma's (rpma_flush), which librdmacm has no counterpart for: on a CmEndpoint a write's completion says the other side's device took it; tell the reader with a send after the writes (a reliable connection delivers it after them)"
      )
    }
    const range = yield* rangeOf(Number(options.dst.length), options)
    const src = yield* cmStaging(endpoint, options, DEFAULT_STAGING)
    return rangeSink(range, cmPath(endpoint, options.dst, src), Effect.void)
  }))

interface WriteRange {
  (endpoint: CmEndpoint.CmEndpoint, options: RdmaStream.CmRangeOptions): Sink.Sink<
    number,
    Uint8Array,
    never,
    CmRangeError,
    RdmaDriver
  >
  (peer: Peer, conn: Connection.Connection, options: RdmaStream.RangeOptions): Sink.Sink<
    number,
    Uint8Array,
    never,
    RpmaRangeError,
    RdmaDriver
  >
}

export const writeRange: WriteRange =
  ((first: Peer | CmEndpoint.CmEndpoint, ...rest: Array<unknown>) =>
    CmEndpoint.isCmEndpoint(first)
      ? cmRange(first, rest[0] as RdmaStream.CmRangeOptions)
      : rpmaRange(first, rest[0] as Connection.Connection, rest[1] as RdmaStream.RangeOptions)) as WriteRange

/** Calls `f` with `bytes` in pieces of at most `size` bytes, and each piece's offset in `bytes`. */
const inPieces = <E>(
  bytes: Uint8Array,
  size: number,
  f: (piece: Uint8Array, at: number) => Effect.Effect<void, E>
): Effect.Effect<void, E> => {
  if (bytes.length <= size) return f(bytes, 0)
  let done = 0
  return Effect.whileLoop({
    while: () => done < bytes.length,
    body: () => f(bytes.subarray(done, Math.min(bytes.length, done + size)), done),
    step: () => {
      done += size
    }
  })
}

const readU64 = (memory: Uint8Array, at: number): number =>
  Number(new DataView(memory.buffer, memory.byteOffset + at, 8).getBigUint64(0, true))
const writeU64 = (memory: Uint8Array, at: number, value: number): void =>
  new DataView(memory.buffer, memory.byteOffset + at, 8).setBigUint64(0, BigInt(value), true)

/** The ring Sink over a path, into a ring of `capacity` data bytes after its header. */
const ringSink = <A, E>(
  capacity: number,
  { pollInterval, stallTimeout }: RingTiming,
  path: RingPath<A, E>
): Sink.Sink<number, Uint8Array, never, E | RingStalledError> => {
  const { flush, stage } = stager(path)
  let tail = 0
  let head = 0
  // The tail is written after the data's completion, so a reader that sees it sees the data.
  const publish = Effect.zipRight(flush, Effect.suspend(() => path.writeTail(tail)))
  const readHead = Effect.map(path.readHead, (read) => {
    head = read
  })
  /** Waits, publishing what is staged first, until the reader leaves room for `need` bytes. */
  const room = (need: number) =>
    Effect.suspend(() => {
      if (tail - head + need <= capacity) return Effect.void
      // The Clock's time, as the sleeps between polls are: a TestClock drives the stall too.
      return Effect.flatMap(Clock.currentTimeMillis, (started) => {
        const poll: Effect.Effect<void, E | RingStalledError> = Effect.suspend(() => {
          if (tail - head + need <= capacity) return Effect.void
          return Effect.flatMap(Clock.currentTimeMillis, (now) =>
            now - started > Duration.toMillis(stallTimeout)
              ? Effect.fail(new RingStalledError({ waited: stallTimeout, unread: tail - head }))
              : Effect.zipRight(Effect.zipRight(Effect.sleep(pollInterval), readHead), poll))
        })
        return Effect.zipRight(publish, Effect.zipRight(readHead, poll))
      })
    })
  /** One piece (at most the ring's capacity and the staging region), split where the ring wraps. */
  const piece = (bytes: Uint8Array) =>
    Effect.zipRight(
      room(bytes.length),
      Effect.suspend(() => {
        const at = tail % capacity
        const first = Math.min(bytes.length, capacity - at)
        tail += bytes.length
        const wrapped = first < bytes.length
          ? stage(bytes.subarray(first), RING_HEADER)
          : Effect.void
        return Effect.zipRight(stage(bytes.subarray(0, first), RING_HEADER + at), wrapped)
      })
    )
  const pieceSize = Math.min(capacity, path.memory.byteLength)
  const writeChunk = (chunk: Chunk.Chunk<Uint8Array>) =>
    Effect.zipRight(
      Effect.forEach(chunk, (bytes) => inPieces(bytes, pieceSize, piece), { discard: true }),
      publish
    )
  return Sink.forEachChunk(writeChunk).pipe(Sink.map(() => tail))
}

/** The ring's data bytes after its header, or why a ring of `size` bytes has none. */
const ringCapacity = (size: number): Effect.Effect<number, StreamOptionError> =>
  size > RING_HEADER
    ? Effect.succeed(size - RING_HEADER)
    : optionError("ring", `must be larger than its ${RING_HEADER}-byte header, got ${size} bytes`)

type RpmaRingError = StageError | RingStalledError
type CmRingError = RdmaStream.CmWriteError | RingStalledError

const rpmaRing = (
  peer: Peer,
  conn: Connection.Connection,
  given: RdmaStream.RingOptions
): Sink.Sink<number, Uint8Array, never, RpmaRingError, RdmaDriver> =>
  Sink.unwrapScoped<number, Uint8Array, never, RpmaRingError, RdmaDriver | Scope.Scope>(Effect.gen(function*() {
    const options = yield* sinkOptions(given, ringKeys, "ring", isRemoteMr, REMOTE_MR)
    const dst = options.ring
    const capacity = yield* ringCapacity(Number(dst.size))
    const timing = yield* ringTiming(options)
    const src = yield* rpmaStaging(peer, options, Math.min(DEFAULT_STAGING, capacity))
    // The tail word to publish, and the reader's head word read back.
    const words = yield* LocalMr.allocate(peer, 16, Usage.combine(Usage.WRITE_SRC, Usage.READ_DST))
    return ringSink(capacity, timing, {
      ...rpmaPath(conn, dst, src),
      writeTail: (tail) => {
        writeU64(words.memory, 0, tail)
        return Connection.write(conn, { dst, dstOffset: TAIL_AT, src: words, srcOffset: 0, length: 8 })
      },
      readHead: Effect.map(
        Connection.read(conn, { dst: words, dstOffset: 8, src: dst, srcOffset: HEAD_AT, length: 8 }),
        () => readU64(words.memory, 8)
      )
    })
  }))

const cmRing = (
  endpoint: CmEndpoint.CmEndpoint,
  given: RdmaStream.CmRingOptions
): Sink.Sink<number, Uint8Array, never, CmRingError, RdmaDriver> =>
  Sink.unwrapScoped<number, Uint8Array, never, CmRingError, RdmaDriver | Scope.Scope>(Effect.gen(function*() {
    const options = yield* sinkOptions(given, { ...ringKeys, head: true }, "ring", isRemoteKey, REMOTE_KEY)
    const { head, ring } = options
    const capacity = yield* ringCapacity(Number(ring.length))
    const timing = yield* ringTiming(options)
    if (head?.access !== "read" || head.address !== ring.address || Number(head.length) < RING_HEADER) {
      return yield* optionError(
        "head",
        "must be a read key of the ring's own memory (rdma_reg_read of the memory the ring's write key is of, from its start)"
      )
    }
    const src = yield* cmStaging(endpoint, options, Math.min(DEFAULT_STAGING, capacity))
    const words = yield* CmEndpoint.registerMessages(endpoint, new Uint8Array(16))
    return ringSink(capacity, timing, {
      ...cmPath(endpoint, ring, src),
      writeTail: (tail) => {
        writeU64(words.memory, 0, tail)
        return CmEndpoint.write(endpoint, { dst: ring, dstOffset: TAIL_AT, src: words, srcOffset: 0, length: 8 })
      },
      readHead: Effect.map(
        CmEndpoint.read(endpoint, { dst: words, dstOffset: 8, src: head, srcOffset: HEAD_AT, length: 8 }),
        () => readU64(words.memory, 8)
      )
    })
  }))

interface WriteRing {
  (endpoint: CmEndpoint.CmEndpoint, options: RdmaStream.CmRingOptions): Sink.Sink<
    number,
    Uint8Array,
    never,
    CmRingError,
    RdmaDriver
  >
  (peer: Peer, conn: Connection.Connection, options: RdmaStream.RingOptions): Sink.Sink<
    number,
    Uint8Array,
    never,
    RpmaRingError,
    RdmaDriver
  >
}

export const writeRing: WriteRing =
  ((first: Peer | CmEndpoint.CmEndpoint, ...rest: Array<unknown>) =>
    CmEndpoint.isCmEndpoint(first)
      ? cmRing(first, rest[0] as RdmaStream.CmRingOptions)
      : rpmaRing(first, rest[0] as Connection.Connection, rest[1] as RdmaStream.RingOptions)) as WriteRing

export const readRing = (
  ring: LocalMr.LocalMr<"WRITE_DST" | "READ_SRC"> | CmEndpoint.Region<"write" | "read">,
  given?: { readonly pollInterval?: Duration.DurationInput | undefined }
): Stream.Stream<Uint8Array, StreamOptionError> =>
  Stream.unwrap(Effect.suspend(() => {
    // Told by what made it, not by reading fields of whatever was given.
    if (!LocalMr.isLocalMr(ring) && !CmEndpoint.isRegion(ring)) {
      return optionError(
        "ring",
        `must be a region (a LocalMr, or a CmEndpoint.Region) holding the ring, not ${kindOf(ring)}`
      )
    }
    const read = readOnce(given, { pollInterval: true })
    if (Either.isLeft(read)) return unreadable(read.left)
    const options = read.right
    const memory = ring.memory
    // Released: nothing writes into it any more, and its memory may be gone.
    const released = () => isLocalMrReleased(ring) || isCmRegionReleased(ring)
    const refused = gone(ring)
    if (refused !== undefined) return optionError("ring", refused)
    const capacity = memory.byteLength - RING_HEADER
    if (capacity <= 0) {
      return optionError("ring", `must be larger than its ${RING_HEADER}-byte header, got ${memory.byteLength} bytes`)
    }
    return Effect.map(durationOption("pollInterval", options?.pollInterval, "1 millis", true), (pollInterval) => {
      const next: Effect.Effect<Uint8Array, StreamOptionError> = Effect.suspend(() => {
        if (released()) return optionError("ring", "was released while the Stream read it")
        const head = readU64(memory, HEAD_AT)
        const tail = readU64(memory, TAIL_AT)
        if (tail === head) return Effect.zipRight(Effect.sleep(pollInterval), next)
        const at = head % capacity
        const length = Math.min(tail - head, capacity - at)
        const bytes = memory.slice(RING_HEADER + at, RING_HEADER + at + length)
        // Copied out, so the writer may reuse the space at once.
        writeU64(memory, HEAD_AT, head + length)
        return Effect.succeed(bytes)
      })
      return Stream.repeatEffect(next)
    })
  }))

type MessagesError = Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError
type CmMessagesError = CmEndpoint.TransferError | MemoryRefusedError | StreamOptionError

/** A receive posted, on either path: its completion holds the message's length. */
interface PostedReceive<E> {
  readonly completion: Effect.Effect<Connection.Completion, E>
}

const isClosed = (e: unknown) =>
  typeof e === "object" && e !== null && (e as { _tag?: unknown })._tag === "ConnectionClosedError" &&
  (e as { reason?: unknown }).reason === "CLOSED"

/**
 * The messages Stream over a pool of `count` receives of `size` bytes in `memory`, each slot posted
 * with `post`.
 */
const messageStream = <E>(
  count: number,
  size: number,
  memory: Uint8Array,
  post: (slot: number) => Effect.Effect<PostedReceive<E>, E>
): Effect.Effect<Stream.Stream<Uint8Array, E>, E> =>
  Effect.gen(function*() {
    const posted: Array<PostedReceive<E> | undefined> = yield* Effect.forEach(
      Array.from({ length: count }, (_, slot) => slot),
      post
    )
    // Receives complete in the order they were posted: the oldest one holds the next message.
    let slot = 0
    const next: Effect.Effect<Uint8Array, Option.Option<E>> = Effect.suspend(() => {
      const receive = posted[slot]
      // A receive could not be posted again (the connection closed): the messages before it were all taken.
      if (receive === undefined) return Effect.fail(Option.none())
      return Effect.flatMap(receive.completion, (completion) => {
        const at = slot * size
        const bytes = memory.slice(at, at + completion.byteLength)
        const current = slot
        slot = (slot + 1) % count
        return post(current).pipe(
          Effect.map((again) => {
            posted[current] = again
            return bytes
          }),
          // The message is delivered even when its buffer cannot be posted again.
          Effect.catchIf(isClosed, () =>
            Effect.sync(() => {
              posted[current] = undefined
              return bytes
            }))
        )
      }).pipe(Effect.mapError((e) => isClosed(e) ? Option.none() : Option.some(e)))
    })
    // A connection closed by either side ends the stream; a lost one fails it.
    return Stream.repeatEffectOption(next)
  })

/** The pool's shape, checked. */
const poolOf = (given: RdmaStream.MessagesOptions | undefined) =>
  Effect.gen(function*() {
    const read = readOnce(given, { count: true, size: true })
    if (Either.isLeft(read)) return yield* unreadable(read.left)
    const options = read.right
    const count = positiveInt("count", options?.count, 16)
    if (typeof count !== "number") return yield* count
    const size = positiveInt("size", options?.size, 4096)
    if (typeof size !== "number") return yield* size
    return { count, size }
  })

const rpmaMessages = (
  peer: Peer,
  conn: Connection.Connection,
  options: RdmaStream.MessagesOptions | undefined
): Stream.Stream<Uint8Array, MessagesError, RdmaDriver> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const { count, size } = yield* poolOf(options)
    // Plain memory, not Memory.allocate's: receives still posted when the stream ends keep the
    // region registered until the connection is deleted, and the registration keeps this memory
    // alive until then (an allocation freed with the stream's scope would have to wait for it).
    const pool = yield* LocalMr.register(peer, new Uint8Array(count * size), Usage.RECV)
    return yield* messageStream<MessagesError>(
      count,
      size,
      pool.memory,
      (slot) => Connection.postRecv(conn, { dst: pool, offset: slot * size, length: size })
    )
  }))

const cmMessages = (
  endpoint: CmEndpoint.CmEndpoint,
  options: RdmaStream.MessagesOptions | undefined
): Stream.Stream<Uint8Array, CmMessagesError, RdmaDriver> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const { count, size } = yield* poolOf(options)
    // Plain memory, as on the librpma path; its region is deregistered once no receive names it.
    const pool = yield* CmEndpoint.registerMessages(endpoint, new Uint8Array(count * size))
    return yield* messageStream<CmMessagesError>(
      count,
      size,
      pool.memory,
      (slot) => CmEndpoint.postRecv(endpoint, { segments: [{ mr: pool, offset: slot * size, length: size }] })
    )
  }))

interface Messages {
  (endpoint: CmEndpoint.CmEndpoint, options?: RdmaStream.MessagesOptions): Stream.Stream<
    Uint8Array,
    CmMessagesError,
    RdmaDriver
  >
  (peer: Peer, conn: Connection.Connection, options?: RdmaStream.MessagesOptions): Stream.Stream<
    Uint8Array,
    MessagesError,
    RdmaDriver
  >
}

export const messages: Messages =
  ((first: Peer | CmEndpoint.CmEndpoint, ...rest: Array<unknown>) =>
    CmEndpoint.isCmEndpoint(first)
      ? cmMessages(first, rest[0] as RdmaStream.MessagesOptions | undefined)
      : rpmaMessages(
        first,
        rest[0] as Connection.Connection,
        rest[1] as RdmaStream.MessagesOptions | undefined
      )) as Messages
