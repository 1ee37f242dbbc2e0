/**
 * A message channel over one connection: whole messages of any size, each way.
 *
 * Frames are sent (rpma_send) into the other side's pool of pre-posted receives
 * (`RdmaStream.messages`). A frame is an 8-byte header (kind u8, flags u8, 2 reserved bytes,
 * length u32 LE), then its payload:
 *
 * - HELLO: the sender's landing region's 21-byte descriptor; each side sends it first.
 * - INLINE: a whole message that fits in a receive buffer after the header.
 * - LARGE: a piece of a larger message, `length` bytes already written (rpma_write) at the start of
 *   the receiver's landing region; flag FINAL on its last piece. The receiver copies the piece
 *   out and answers RELEASE; the sender writes its next piece only after that acknowledgement.
 * - RELEASE: the landing region is free again.
 *
 * Every `keepAlive` each side reads 8 bytes of the other's landing region (which is why HELLO's
 * region allows reads: it holds only what the reader itself wrote there). A side that only waits
 * (a call waiting for its answer) posts nothing else, and a connection with nothing posted never
 * learns that its link or peer is gone; a one-sided read is timed by the connection's watchdog
 * (sends are not: they wait on the other side's application), so over a dead path the connection
 * is lost within its timeout, the receives fail, and the channel closes.
 *
 * A sender that finds no posted receive is retried by the device without end (librpma's RNR
 * retry count is 7, "infinite"), so a slow reader slows its sender and no credits are needed.
 */
import { Connection, LocalMr, type Peer, RdmaStream, RemoteMr, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"

export class ChannelError extends Data.TaggedError("RdmaChannelError")<{
  readonly reason: "Closed" | "Protocol" | "Transfer" | "Timeout"
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `RDMA RPC channel: ${this.detail}`
  }
}

export interface ChannelOptions {
  /** Each receive buffer's size; messages that fit after an 8-byte header go inline. Default 4096. */
  readonly inlineSize?: number | undefined
  /** Receives kept posted. Default 16. */
  readonly receives?: number | undefined
  /** Sends in flight at once. Default 8. */
  readonly sends?: number | undefined
  /** The landing region's size: larger messages are written into it in pieces of this size. Default 1 MiB. */
  readonly landingSize?: number | undefined
  /** How long a large message waits for the other side's landing region and each acknowledgement. Default 30 s. */
  readonly ackTimeout?: Duration.DurationInput | undefined
  /** How often the other side's landing region is read, to find a dead path. Default 5 s; `Duration.infinity`: never. */
  readonly keepAlive?: Duration.DurationInput | undefined
}

export interface Channel {
  readonly send: (message: Uint8Array) => Effect.Effect<void, ChannelError>
  /** Completes when the other side has closed the connection (success) or it failed. */
  readonly closed: Deferred.Deferred<void, ChannelError>
}

const HEADER = 8
const HELLO = 1
const INLINE = 2
const LARGE = 3
const RELEASE = 4
const FINAL = 1
/** What HELLO's region allows: the other side writes large messages into it and reads it to keep alive. */
const landingUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)

const transfer = (what: string) => (cause: unknown) =>
  new ChannelError({
    reason: "Transfer",
    detail: `${what} failed: ${cause instanceof Error || (typeof cause === "object" && cause !== null && "message" in cause) ? String((cause as Error).message) : String(cause)}`,
    cause
  })

const positive = (name: string, value: number | undefined, fallback: number, least: number) => {
  const v = value ?? fallback
  return Number.isSafeInteger(v) && v >= least ? v : new ChannelError({
    reason: "Protocol",
    detail: `${name} must be an integer of at least ${least}, got ${v}`
  })
}

/**
 * Opens a channel on `conn`: posts its receives, sends HELLO, and runs its receive loop
 * (in the scope) calling `onMessage` with each whole message, in order.
 */
export const make = (
  peer: Peer.Peer,
  conn: Connection.Connection,
  onMessage: (message: Uint8Array) => Effect.Effect<void>,
  options?: ChannelOptions
): Effect.Effect<Channel, ChannelError, Driver.RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const inlineSize = positive("inlineSize", options?.inlineSize, 4096, HEADER + 64)
    const receives = positive("receives", options?.receives, 16, 2)
    const sends = positive("sends", options?.sends, 8, 1)
    const landingSize = positive("landingSize", options?.landingSize, 1 << 20, 1)
    for (const v of [inlineSize, receives, sends, landingSize]) if (typeof v !== "number") return yield* v
    const [inline, nReceives, nSends, landing] = [inlineSize, receives, sends, landingSize] as Array<number>
    const ackTimeout = Duration.decode(options?.ackTimeout ?? "30 seconds")
    const keepAlive = Duration.decodeUnknown(options?.keepAlive ?? "5 seconds")
    if (Option.isNone(keepAlive) || Duration.toMillis(keepAlive.value) <= 0) {
      return yield* new ChannelError({
        reason: "Protocol",
        detail: `keepAlive must be a positive duration (Duration.infinity: never), got ${String(options?.keepAlive)}`
      })
    }
    const scope = yield* Effect.scope
    const context = yield* Effect.context<Driver.RdmaDriver | Scope.Scope>()

    const setup = transfer("setting the channel up")
    const sendPool = yield* Effect.mapError(LocalMr.allocate(peer, nSends! * inline!, Usage.SEND), setup)
    const landingMr = yield* Effect.mapError(LocalMr.allocate(peer, landing!, landingUsage), setup)
    const probe = yield* Effect.mapError(LocalMr.allocate(peer, 8, Usage.READ_DST), setup)
    const staging = yield* Effect.mapError(LocalMr.allocate(peer, landing!, Usage.WRITE_SRC), setup)
    const landingDescriptor = yield* Effect.mapError(LocalMr.descriptor(landingMr), setup)

    const freeSlots = yield* Queue.bounded<number>(nSends!)
    yield* Queue.offerAll(freeSlots, Array.from({ length: nSends! }, (_, i) => i))
    const remoteLanding = yield* Deferred.make<RemoteMr.RemoteMr<"WRITE_DST" | "READ_SRC">, ChannelError>()
    const closed = yield* Deferred.make<void, ChannelError>()
    const inbox = yield* Queue.unbounded<Uint8Array | undefined>()
    let ended = false
    /** The piece in flight: its sequence number, which its RELEASE repeats (an interrupted send's late RELEASE is ignored). */
    let released: { readonly sequence: number; readonly ack: Deferred.Deferred<void, ChannelError> } | undefined
    /** A large message failed half-way: the other side's state is unknown, nothing more is sent. */
    let broken = false
    let sent = 0
    const largeLock = yield* Effect.makeSemaphore(1)

    /** Sends one frame from a free send slot. */
    const frame = (kind: number, flags: number, sequence: number, length: number, payload: Uint8Array | undefined) =>
      Effect.acquireUseRelease(
        Queue.take(freeSlots),
        (slot) =>
          Effect.suspend(() => {
            const at = slot * inline!
            const view = new DataView(sendPool.memory.buffer, sendPool.memory.byteOffset + at, HEADER)
            view.setUint8(0, kind)
            view.setUint8(1, flags)
            view.setUint16(2, sequence, true)
            view.setUint32(4, length, true)
            if (payload !== undefined) sendPool.memory.set(payload, at + HEADER)
            return Connection.send(conn, { src: sendPool, offset: at, length: HEADER + (payload?.length ?? 0) })
          }),
        (slot) => Queue.offer(freeSlots, slot)
      ).pipe(Effect.mapError(transfer("a send")))

    /**
     * Waits for `deferred`, which the receive loop completes (or fails when the connection ends),
     * at most `ackTimeout`: a timer fails it then. No race and no fiber, so the wait ends as bounded
     * even where the caller is uninterruptible (@effect/rpc's server sends so).
     */
    const bounded = <A>(what: string, deferred: Deferred.Deferred<A, ChannelError>) =>
      Effect.suspend(() => {
        const timer = setTimeout(() =>
          Deferred.unsafeDone(
            deferred,
            Exit.fail(
              new ChannelError({ reason: "Timeout", detail: `${what} did not come within ${Duration.format(ackTimeout)}` })
            )
          ), Duration.toMillis(ackTimeout))
        return Effect.ensuring(Deferred.await(deferred), Effect.sync(() => clearTimeout(timer)))
      })

    // A large message is sent whole or fails the channel: one left half-way would leave the other
    // side holding its first pieces, which it would take for the start of the next message.
    const sendLarge = (message: Uint8Array) =>
      largeLock.withPermits(1)(Effect.gen(function*() {
        const dst = yield* bounded("the other side's landing region (its HELLO)", remoteLanding)
        for (let done = 0; done < message.length;) {
          const piece = message.subarray(done, Math.min(message.length, done + landing!))
          done += piece.length
          staging.memory.set(piece, 0)
          const ack = yield* Deferred.make<void, ChannelError>()
          sent = (sent + 1) & 0xffff
          released = { sequence: sent, ack }
          yield* Effect.mapError(
            Connection.write(conn, { dst, src: staging, length: piece.length }),
            transfer("writing a large message")
          )
          yield* frame(LARGE, done >= message.length ? FINAL : 0, sent, piece.length, undefined)
          yield* bounded("the acknowledgement of a large message's piece", ack)
        }
      })).pipe(
        Effect.tapError(() =>
          Effect.sync(() => {
            broken = true
          })
        ),
        Effect.uninterruptible
      )

    const send = (message: Uint8Array): Effect.Effect<void, ChannelError> =>
      Effect.suspend(() => {
        if (ended || broken) {
          return Effect.fail(
            new ChannelError({
              reason: "Closed",
              detail: ended ? "the connection is closed" : "a large message failed half-way: open a new connection"
            })
          )
        }
        return message.length <= inline! - HEADER ? frame(INLINE, 0, 0, message.length, message) : sendLarge(message)
      })

    // The receive loop.
    let pieces: Array<Uint8Array> = []
    const protocolError = (detail: string) => Effect.fail(new ChannelError({ reason: "Protocol", detail }))
    const onFrame = (bytes: Uint8Array): Effect.Effect<void, ChannelError> => {
      if (bytes.length < HEADER) return protocolError(`a frame of ${bytes.length} bytes, shorter than its header`)
      const view = new DataView(bytes.buffer, bytes.byteOffset, HEADER)
      const kind = view.getUint8(0)
      const flags = view.getUint8(1)
      const sequence = view.getUint16(2, true)
      const length = view.getUint32(4, true)
      switch (kind) {
        case HELLO:
          return RemoteMr.fromDescriptor(bytes.subarray(HEADER)).pipe(
            Effect.flatMap(RemoteMr.require(landingUsage)),
            Effect.mapError(transfer("reading the other side's HELLO")),
            Effect.flatMap((remote) => Deferred.succeed(remoteLanding, remote)),
            Effect.asVoid,
            // Released with the channel's scope.
            Effect.provide(context)
          )
        case INLINE:
          if (length !== bytes.length - HEADER) return protocolError(`an inline frame says ${length} bytes and has ${bytes.length - HEADER}`)
          return Queue.offer(inbox, bytes.subarray(HEADER))
        case LARGE: {
          if (length > landing!) return protocolError(`a large piece of ${length} bytes, beyond the ${landing}-byte landing region`)
          pieces.push(landingMr.memory.slice(0, length))
          // Acknowledged from a fiber of its own: the loop never waits for a send.
          const ack = Effect.forkIn(Effect.ignore(frame(RELEASE, 0, sequence, 0, undefined)), scope)
          if ((flags & FINAL) === 0) return Effect.asVoid(ack)
          const whole = concat(pieces)
          pieces = []
          return Effect.zipRight(ack, Queue.offer(inbox, whole))
        }
        case RELEASE:
          return Effect.suspend(() => {
            if (released === undefined || released.sequence !== sequence) return Effect.void
            const { ack } = released
            released = undefined
            return Deferred.succeed(ack, undefined)
          })
        default:
          return protocolError(`a frame of unknown kind ${kind}`)
      }
    }

    // Whole messages go to `onMessage` from a fiber of their own, so that the loop never waits for
    // it: a handler that sends a large answer needs the loop to read the acknowledgement. The RPC
    // protocol's own acknowledgements bound what accumulates here.
    yield* Queue.take(inbox).pipe(
      Effect.flatMap((message) => message === undefined ? Effect.never : onMessage(message)),
      Effect.forever,
      Effect.interruptible,
      Effect.forkIn(scope)
    )
    yield* RdmaStream.messages(peer, conn, { count: nReceives!, size: inline! }).pipe(
      Stream.mapError(transfer("receiving")),
      Stream.runForEach(onFrame),
      Effect.onExit((exit) =>
        Effect.sync(() => {
          ended = true
        }).pipe(
          // A large message waiting for the landing region or an acknowledgement stops now.
          Effect.zipRight(Effect.suspend(() => {
            const gone = new ChannelError({ reason: "Closed", detail: "the connection closed" })
            return Effect.zipRight(
              Deferred.fail(remoteLanding, gone),
              released === undefined ? Effect.void : Deferred.fail(released.ack, gone)
            )
          })),
          // The messages received before the end are delivered before it is announced.
          Effect.zipRight(Queue.offer(inbox, undefined)),
          Effect.zipRight(Effect.repeat(Queue.size(inbox), { until: (n) => n <= 0, schedule: Schedule.spaced("1 millis") })),
          Effect.timeout(ackTimeout),
          Effect.ignore,
          Effect.zipRight(Deferred.done(closed, Exit.isSuccess(exit) ? Exit.void : Exit.failCause(exit.cause)))
        )
      ),
      Effect.interruptible,
      Effect.forkIn(scope)
    )
    yield* frame(HELLO, 0, 0, landingDescriptor.length, landingDescriptor)
    // A failed read needs nothing more: the connection's end fails the receives, which closes the channel.
    if (Duration.isFinite(keepAlive.value)) {
      yield* Deferred.await(remoteLanding).pipe(
        Effect.flatMap((src) =>
          Connection.read(conn, { dst: probe, src, length: 8 }).pipe(
            Effect.delay(keepAlive.value),
            Effect.repeat({ while: () => !ended })
          )
        ),
        Effect.ignore,
        Effect.interruptible,
        Effect.forkIn(scope)
      )
    }
    return { send, closed }
  })

const concat = (parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  if (parts.length === 1) return parts[0]!
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}
