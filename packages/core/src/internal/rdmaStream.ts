/**
 * Streams over a connection: Sinks that write chunks into a remote range or ring through the batch
 * path, and a Stream of messages over a pool of pre-posted receives. Built on the public API only.
 *
 * Declared and documented in RdmaStream.ts.
 */
import type * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Sink from "effect/Sink"
import * as Stream from "effect/Stream"
import * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import * as LocalMr from "../LocalMr.js"
import type { Peer } from "../Peer.js"
import type { MemoryRefusedError, RpmaError } from "../RdmaError.js"
import type * as RdmaStream from "../RdmaStream.js"
import type { RemoteMr } from "../RemoteMr.js"
import * as Usage from "../Usage.js"

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

/**
 * The staging region: the caller's `staging` (a WRITE_SRC region of `peer`, reused across Sinks),
 * or one of `stagingSize` (default `fallback`) registered for this Sink's life.
 */
const stagingOf = (
  peer: Peer,
  options: { readonly staging?: LocalMr.LocalMr<"WRITE_SRC"> | undefined; readonly stagingSize?: number | undefined },
  fallback: number
): Effect.Effect<
  LocalMr.LocalMr<"WRITE_SRC">,
  StreamOptionError | RpmaError | MemoryRefusedError,
  RdmaDriver | Scope.Scope
> => {
  const given = options.staging
  if (given === undefined) {
    const size = positiveInt("stagingSize", options.stagingSize, fallback)
    return typeof size === "number" ? LocalMr.allocate(peer, size, Usage.WRITE_SRC) : Effect.fail(size)
  }
  const problem = options.stagingSize !== undefined
    ? "and stagingSize are exclusive: the staging region's size is its own"
    : !LocalMr.isLocalMr(given) || !Usage.has(given.usage, "WRITE_SRC")
    ? "must be a LocalMr registered with Usage.WRITE_SRC"
    : given.peer !== peer
    ? "must be a region of the Sink's peer (the connection's)"
    : undefined
  return problem === undefined
    ? Effect.succeed(given)
    : Effect.fail(new StreamOptionError({ option: "staging", detail: problem }))
}

type StageError = Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError

/**
 * A staging region and the spans staged in it: bytes are copied in, then written with one
 * `writeMany` (a sliding window over the send queue, one wait) when it is full or a chunk ends.
 */
const stager = (
  conn: Connection.Connection,
  dst: RemoteMr<"WRITE_DST">,
  src: LocalMr.LocalMr<"WRITE_SRC">
) => {
  let used = 0
  let spans: Array<Connection.WriteArgs> = []
  const flush = Effect.suspend(() => {
    if (spans.length === 0) return Effect.void
    const batch = spans
    spans = []
    used = 0
    return Connection.writeMany(conn, batch)
  })
  /** Stages `bytes` for `dstOffset` (flushing first when they do not fit); they fit in the region. */
  const stage = (bytes: Uint8Array, dstOffset: number) =>
    Effect.suspend(() => {
      const staged = Effect.sync(() => {
        src.memory.set(bytes, used)
        spans.push({ dst, dstOffset, src, srcOffset: used, length: bytes.length })
        used += bytes.length
      })
      return used + bytes.length > src.size ? Effect.zipRight(flush, staged) : staged
    })
  return { flush, stage, pending: () => spans.length > 0 }
}

export const writeRange = (
  peer: Peer,
  conn: Connection.Connection,
  options: RdmaStream.RangeOptions
): Sink.Sink<number, Uint8Array, never, StageError | Connection.FlushError | RegionFullError, RdmaDriver> =>
  Sink.unwrapScoped<
    number,
    Uint8Array,
    never,
    StageError | Connection.FlushError | RegionFullError,
    RdmaDriver | Scope.Scope
  >(
    Effect.gen(function*() {
      const size = Number(options.dst.size)
      const start = options.offset ?? 0
      const end = options.length === undefined ? size : start + options.length
      if (!Number.isSafeInteger(start) || start < 0 || !Number.isSafeInteger(end) || end > size || end < start) {
        return yield* new StreamOptionError({
          option: "offset/length",
          detail: `must name a range within the ${size}-byte region, got offset ${start} and end ${end}`
        })
      }
      const flushType = options.flush
      if (flushType !== undefined && flushType !== "visibility" && flushType !== "persistent") {
        return yield* new StreamOptionError({
          option: "flush",
          detail: `must be "visibility" or "persistent" (or left out), got ${String(flushType)}`
        })
      }
      const wrap = options.wrap ?? false
      if (typeof wrap !== "boolean") {
        return yield* new StreamOptionError({ option: "wrap", detail: `must be a boolean, got ${String(wrap)}` })
      }
      const src = yield* stagingOf(peer, options, DEFAULT_STAGING)
      const { flush: writeStaged, stage } = stager(conn, options.dst, src)
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
            inPieces(first, src.size, (piece, from) => stage(piece, dstOffset + from)),
            rest.length === 0 ? Effect.void : Effect.suspend(() => {
              at = start + rest.length
              return inPieces(rest, src.size, (piece, from) => stage(piece, start + from))
            })
          )
        })
      // After a chunk's writes completed: a flush of the range (librpma's is a fence, an 8-byte
      // read, whatever the length: one per chunk).
      const flushRange = options.flush === undefined
        ? Effect.void
        : options.flush === "persistent"
        ? Connection.flush(conn, { dst: options.dst, dstOffset: start, length: capacity, type: "persistent" })
        : Connection.flush(conn, { dst: options.dst, dstOffset: start, length: capacity })
      const writeChunk = (chunk: Chunk.Chunk<Uint8Array>) =>
        Effect.zipRight(
          Effect.forEach(chunk, (bytes) =>
            Effect.suspend(() => {
              if (wrap ? bytes.length > capacity : at + bytes.length > end) {
                // What was staged before it is written: the range holds every chunk that fitted.
                return Effect.zipRight(
                  Effect.zipRight(writeStaged, flushRange),
                  Effect.fail(
                    new RegionFullError({
                      written: wrap ? 0 : at - start,
                      needed: bytes.length,
                      capacity
                    })
                  )
                )
              }
              return place(bytes)
            }), { discard: true }),
          Effect.zipRight(writeStaged, flushRange)
        )
      return Sink.forEachChunk(writeChunk).pipe(Sink.map(() => written))
    })
  )

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

export const writeRing = (
  peer: Peer,
  conn: Connection.Connection,
  options: {
    readonly ring: RemoteMr<"WRITE_DST" | "READ_SRC">
    readonly staging?: LocalMr.LocalMr<"WRITE_SRC"> | undefined
    readonly stagingSize?: number | undefined
    readonly pollInterval?: Duration.DurationInput | undefined
    readonly stallTimeout?: Duration.DurationInput | undefined
  }
): Sink.Sink<number, Uint8Array, never, StageError | RingStalledError, RdmaDriver> =>
  Sink.unwrapScoped<number, Uint8Array, never, StageError | RingStalledError, RdmaDriver | Scope.Scope>(
    Effect.gen(function*() {
      const capacity = Number(options.ring.size) - RING_HEADER
      if (capacity <= 0) {
        return yield* new StreamOptionError({
          option: "ring",
          detail: `must be larger than its ${RING_HEADER}-byte header, got ${options.ring.size} bytes`
        })
      }
      const pollInterval = Duration.decode(options.pollInterval ?? "1 millis")
      const stallTimeout = Duration.decode(options.stallTimeout ?? "30 seconds")
      const dst = options.ring
      const src = yield* stagingOf(peer, options, Math.min(DEFAULT_STAGING, capacity))
      const stagingSize = src.size
      // The tail word to publish, and the reader's head word read back.
      const words = yield* LocalMr.allocate(peer, 16, Usage.combine(Usage.WRITE_SRC, Usage.READ_DST))
      const { flush, stage } = stager(conn, dst, src)
      let tail = 0
      let head = 0
      // The tail is written after the data's completion, so a reader that sees it sees the data.
      const publish = Effect.zipRight(
        flush,
        Effect.suspend(() => {
          writeU64(words.memory, 0, tail)
          return Connection.write(conn, { dst, dstOffset: TAIL_AT, src: words, srcOffset: 0, length: 8 })
        })
      )
      const readHead = Effect.zipRight(
        Connection.read(conn, { dst: words, dstOffset: 8, src: dst, srcOffset: HEAD_AT, length: 8 }),
        Effect.sync(() => {
          head = readU64(words.memory, 8)
        })
      )
      /** Waits, publishing what is staged first, until the reader leaves room for `need` bytes. */
      const room = (need: number) =>
        Effect.suspend(() => {
          if (tail - head + need <= capacity) return Effect.void
          // The Clock's time, as the sleeps between polls are: a TestClock drives the stall too.
          return Effect.flatMap(Clock.currentTimeMillis, (started) => {
            const poll: Effect.Effect<void, StageError | RingStalledError> = Effect.suspend(() => {
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
      const pieceSize = Math.min(capacity, stagingSize)
      const writeChunk = (chunk: Chunk.Chunk<Uint8Array>) =>
        Effect.zipRight(
          Effect.forEach(chunk, (bytes) => inPieces(bytes, pieceSize, piece), { discard: true }),
          publish
        )
      return Sink.forEachChunk(writeChunk).pipe(Sink.map(() => tail))
    })
  )

export const readRing = (
  ring: LocalMr.LocalMr<"WRITE_DST" | "READ_SRC">,
  options?: { readonly pollInterval?: Duration.DurationInput | undefined }
): Stream.Stream<Uint8Array, StreamOptionError> => {
  const capacity = ring.size - RING_HEADER
  if (capacity <= 0) {
    return Stream.fail(
      new StreamOptionError({
        option: "ring",
        detail: `must be larger than its ${RING_HEADER}-byte header, got ${ring.size} bytes`
      })
    )
  }
  const pollInterval = Duration.decode(options?.pollInterval ?? "1 millis")
  const memory = ring.memory
  const next: Effect.Effect<Uint8Array> = Effect.suspend(() => {
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
}

type MessagesError = Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError

export const messages = (
  peer: Peer,
  conn: Connection.Connection,
  options?: { readonly count?: number | undefined; readonly size?: number | undefined }
): Stream.Stream<Uint8Array, MessagesError, RdmaDriver> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const count = positiveInt("count", options?.count, 16)
    if (typeof count !== "number") return yield* count
    const size = positiveInt("size", options?.size, 4096)
    if (typeof size !== "number") return yield* size
    // Plain memory, not Memory.allocate's: receives still posted when the stream ends keep the
    // region registered until the connection is deleted, and the registration keeps this memory
    // alive until then (an allocation freed with the stream's scope would have to wait for it).
    const pool = yield* LocalMr.register(peer, new Uint8Array(count * size), Usage.RECV)
    const post = (slot: number) => Connection.postRecv(conn, { dst: pool, offset: slot * size, length: size })
    const posted: Array<Connection.Posted | undefined> = yield* Effect.forEach(
      Array.from({ length: count }, (_, slot) => slot),
      post
    )
    const closed = (e: unknown) =>
      typeof e === "object" && e !== null && (e as { _tag?: unknown })._tag === "ConnectionClosedError" &&
      (e as { reason?: unknown }).reason === "CLOSED"
    // Receives complete in the order they were posted: the oldest one holds the next message.
    let slot = 0
    const next: Effect.Effect<Uint8Array, Option.Option<MessagesError>, RdmaDriver> = Effect.suspend(() => {
      const receive = posted[slot]
      // A receive could not be posted again (the connection closed): the messages before it were all taken.
      if (receive === undefined) return Effect.fail(Option.none())
      return Effect.flatMap(receive.completion, (completion) => {
        const at = slot * size
        const bytes = pool.memory.slice(at, at + completion.byteLength)
        const current = slot
        slot = (slot + 1) % count
        return post(current).pipe(
          Effect.map((again) => {
            posted[current] = again
            return bytes
          }),
          // The message is delivered even when its buffer cannot be posted again.
          Effect.catchIf(closed, () =>
            Effect.sync(() => {
              posted[current] = undefined
              return bytes
            }))
        )
      }).pipe(Effect.mapError((e) => closed(e) ? Option.none() : Option.some(e)))
    })
    // A connection closed by either side ends the stream; a lost one fails it.
    return Stream.repeatEffectOption(next)
  }))
