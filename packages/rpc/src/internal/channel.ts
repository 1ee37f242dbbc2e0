/**
 * A message channel over one connection: whole messages of any size, each way.
 *
 * Frames are sent (rpma_send) into the other side's pool of pre-posted receives, which its
 * receive loop takes in order and posts again. A frame is an 8-byte header (kind u8, flags u8,
 * sequence u16 LE, length u32 LE), then its payload:
 *
 * - HELLO: the sender's landing region's 21-byte descriptor; each side sends it first.
 * - INLINE: a whole message that fits in a receive buffer after the header.
 * - LARGE: a piece of a larger message, `length` bytes already written (rpma_write) at the start of
 *   the receiver's landing region; flag FINAL on its last piece. The receiver copies the piece
 *   out and answers RELEASE; the sender writes its next piece (of this message or the next) only
 *   after that acknowledgement.
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
import { Connection, LocalMr, type Peer, RemoteMr, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import * as framing from "./framing.js"
import { type Channel, ChannelError, HEADER, protocol, transfer } from "./framing.js"

export { type Channel, ChannelError } from "./framing.js"

export interface ChannelOptions {
  /** Each receive buffer's size; messages that fit after an 8-byte header go inline. 72 to 1 GiB (2^30); default 4096. */
  readonly inlineSize?: number | undefined
  /** Receives kept posted. 2 to 65536 (and `receives` × `inlineSize` at most 2^31 - 1 bytes); default 16. */
  readonly receives?: number | undefined
  /** Sends in flight at once. 1 to 65536 (and `sends` × `inlineSize` at most 2^31 - 1 bytes); default 8. */
  readonly sends?: number | undefined
  /** The landing region's size: larger messages are written into it in pieces of this size. 1 to 2^31 - 1; default 1 MiB. */
  readonly landingSize?: number | undefined
  /** The largest message taken from the other side: a larger one ends the channel. Default 64 MiB. */
  readonly maxMessageSize?: number | undefined
  /** How long a large message waits for the other side's landing region and each acknowledgement. Default 30 s. */
  readonly ackTimeout?: Duration.DurationInput | undefined
  /** How often the other side's landing region is read, to find a dead path. Default 5 s; `Duration.infinity`: never. */
  readonly keepAlive?: Duration.DurationInput | undefined
}

/** The channel's settings, checked: what {@link make} takes, and what a layer checks before it connects. */
export interface Settings {
  readonly inlineSize: number
  readonly receives: number
  readonly sends: number
  readonly landingSize: number
  readonly maxMessageSize: number
  readonly ackTimeout: Duration.Duration
  readonly keepAlive: Duration.Duration
}

const HELLO = 1
const INLINE = 2
const LARGE = 3
const RELEASE = 4
const FINAL = 1
/**
 * RELEASEs not yet sent when a piece comes: the other side sends a piece only after the last one's
 * RELEASE has reached it, which can be before that send's completion is seen here, so two; more is
 * a sender that does not wait, and would pile up sends.
 */
const MAX_PENDING_RELEASES = 2
/** What HELLO's region allows: the other side writes large messages into it and reads it to keep alive. */
const landingUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)

/**
 * Checks `options` and fills in the defaults: a `"Protocol"` ChannelError names the first that is
 * out of range (with its value and the range allowed), or the pool (`receives` or `sends` times
 * `inlineSize`) larger than 2^31 - 1 bytes.
 */
export const settings = (options?: ChannelOptions): Effect.Effect<Settings, ChannelError> =>
  Effect.all({
    inlineSize: framing.integer("inlineSize", options?.inlineSize, 4096, HEADER + 64, framing.MAX_INLINE),
    receives: framing.integer("receives", options?.receives, 16, 2, framing.MAX_QUEUE),
    sends: framing.integer("sends", options?.sends, 8, 1, framing.MAX_QUEUE),
    landingSize: framing.integer("landingSize", options?.landingSize, 1 << 20, 1, framing.MAX_POOL),
    maxMessageSize: framing.integer("maxMessageSize", options?.maxMessageSize, 64 << 20, 1),
    ackTimeout: framing.finiteDuration("ackTimeout", options?.ackTimeout, "30 seconds"),
    keepAlive: framing.keepAliveDuration(options?.keepAlive)
  }).pipe(Effect.flatMap(framing.pools))

/**
 * Opens a channel on `conn`: posts its receives, sends HELLO, and runs its receive loop
 * (in the scope) calling `onMessage` with each whole message, in order. A message `onMessage` fails
 * ends the channel with that error, as a frame that breaks the channel's rules does.
 */
export const make = (
  peer: Peer.Peer,
  conn: Connection.Connection,
  onMessage: (message: Uint8Array) => Effect.Effect<void, ChannelError>,
  options?: ChannelOptions
): Effect.Effect<Channel, ChannelError, Driver.RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const { ackTimeout, inlineSize: inline, keepAlive, landingSize: landing, maxMessageSize, receives, sends } =
      yield* settings(options)
    const scope = yield* Effect.scope
    const context = yield* Effect.context<Driver.RdmaDriver | Scope.Scope>()

    const setup = transfer("setting the channel up")
    const sendPool = yield* Effect.mapError(LocalMr.allocate(peer, sends * inline, Usage.SEND), setup)
    const landingMr = yield* Effect.mapError(LocalMr.allocate(peer, landing, landingUsage), setup)
    const probe = yield* Effect.mapError(LocalMr.allocate(peer, 8, Usage.READ_DST), setup)
    const staging = yield* Effect.mapError(LocalMr.allocate(peer, landing, Usage.WRITE_SRC), setup)
    const landingDescriptor = yield* Effect.mapError(LocalMr.descriptor(landingMr), setup)

    const slots = framing.sendSlots(sends)
    const remoteLanding = yield* Deferred.make<RemoteMr.RemoteMr<"WRITE_DST" | "READ_SRC">, ChannelError>()
    const closed = yield* Deferred.make<void, ChannelError>()
    let ended = false
    /** The piece in flight: its sequence number, which its RELEASE repeats (an interrupted send's late RELEASE is ignored). */
    let released: { readonly sequence: number; readonly ack: Deferred.Deferred<void, ChannelError> } | undefined
    /** A large message failed half-way: the other side's state is unknown, nothing more is sent. */
    let broken = false
    let sent = 0
    /** The other side's landing region, once its HELLO has come. */
    let landingDst: RemoteMr.RemoteMr<"WRITE_DST" | "READ_SRC"> | undefined
    const largeLock = yield* Effect.makeSemaphore(1)

    /** Sends one frame from a free send slot. */
    const frame = (kind: number, flags: number, sequence: number, length: number, payload: Uint8Array | undefined) =>
      framing.sendFromSlot(slots, (slot) =>
        Effect.suspend(() => {
          const at = slot * inline
          framing.writeHeader(sendPool.memory, at, { kind, flags, sequence, length })
          if (payload !== undefined) sendPool.memory.set(payload, at + HEADER)
          return Connection.postSend(conn, { src: sendPool, offset: at, length: HEADER + (payload?.length ?? 0) })
        })).pipe(Effect.mapError(transfer("a send")))

    /** Fails with the first wait for the other side that timed out: the channel ends with it. */
    const timedOut = yield* Deferred.make<never, ChannelError>()
    /**
     * Waits for `deferred`, which the receive loop completes (or fails when the channel ends), at
     * most `ackTimeout` by the Clock: a timer fiber of its own fails it then, so the wait ends as
     * bounded even where the caller is uninterruptible (@effect/rpc's server sends so). A wait
     * that times out ends the channel with its Timeout (as the cm channel's does), and the
     * connection's owner closes it: a side that does not answer is dropped (a client connects
     * again), not kept with a channel that refuses every send.
     */
    const bounded = <A>(what: string, deferred: Deferred.Deferred<A, ChannelError>) =>
      Effect.flatMap(
        Deferred.fail(
          deferred,
          new ChannelError({ reason: "Timeout", detail: `${what} did not come within ${Duration.format(ackTimeout)}` })
        ).pipe(Effect.delay(ackTimeout), Effect.interruptible, Effect.forkIn(scope)),
        (timer) => Effect.ensuring(Deferred.await(deferred), Fiber.interrupt(timer))
      ).pipe(
        Effect.tapError((error) => error.reason === "Timeout" ? Deferred.fail(timedOut, error) : Effect.void)
      )

    // A large message is sent whole or fails the channel: one left half-way would leave the other
    // side holding its first pieces, which it would take for the start of the next message. Each
    // piece waits for the last one's RELEASE (the landing region is free again), the first piece
    // of a message included: a message's last RELEASE is not waited for by the message itself,
    // so a call's answer and its RELEASE cross, and a later large message finds it there. The
    // write is unsignalled: the LARGE frame's send after it completes only once the write has
    // (one send queue, in order), and fails if the write did.
    const sendLarge = (message: Uint8Array) =>
      largeLock.withPermits(1)(Effect.gen(function*() {
        const dst = landingDst ?? (yield* bounded("the other side's landing region (its HELLO)", remoteLanding))
        for (let done = 0; done < message.length;) {
          if (released !== undefined) yield* bounded("the acknowledgement of a large message's piece", released.ack)
          const piece = message.subarray(done, Math.min(message.length, done + landing))
          done += piece.length
          staging.memory.set(piece, 0)
          const ack = yield* Deferred.make<void, ChannelError>()
          sent = (sent + 1) & 0xffff
          released = { sequence: sent, ack }
          yield* Effect.mapError(
            Connection.postWrite(conn, { dst, src: staging, length: piece.length, completion: "onError" }),
            transfer("writing a large message")
          )
          yield* frame(LARGE, done >= message.length ? FINAL : 0, sent, piece.length, undefined)
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
        return message.length <= inline - HEADER ? frame(INLINE, 0, 0, message.length, message) : sendLarge(message)
      })

    // The receive loop. What it holds for the other side is bounded: the pieces of one message
    // (at most `maxMessageSize`), the whole messages not yet taken (at most `maxMessageSize`
    // bytes), the landing region and the receive pool.
    let assembled = new Uint8Array(0)
    let assembledLength = 0
    let pendingReleases = 0
    let hello = false
    // Whole messages go to `onMessage` from a fiber of their own, so that the loop never waits for
    // it: a handler that sends a large answer needs the loop to read the acknowledgement.
    const messages = yield* framing.inbox(scope, maxMessageSize, onMessage)
    const deliver = messages.deliver
    const onFrame = (bytes: Uint8Array): Effect.Effect<void, ChannelError> => {
      if (bytes.length < HEADER) {
        return Effect.fail(protocol(`a frame of ${bytes.length} bytes, shorter than its header`))
      }
      const { flags, kind, length, sequence } = framing.readHeader(bytes)
      switch (kind) {
        case HELLO:
          if (hello) return Effect.fail(protocol("a second HELLO"))
          hello = true
          return RemoteMr.fromDescriptor(bytes.subarray(HEADER)).pipe(
            Effect.flatMap(RemoteMr.require(landingUsage)),
            Effect.mapError((cause) =>
              protocol(`a HELLO that holds no landing region's descriptor (${cause.message})`)
            ),
            Effect.flatMap((remote) => {
              landingDst = remote
              return Deferred.succeed(remoteLanding, remote)
            }),
            Effect.asVoid,
            // Released with the channel's scope.
            Effect.provide(context)
          )
        case INLINE:
          if (length !== bytes.length - HEADER) {
            return Effect.fail(protocol(`an inline frame says ${length} bytes and has ${bytes.length - HEADER}`))
          }
          if (length > maxMessageSize) {
            return Effect.fail(protocol(`a message of ${length} bytes, beyond maxMessageSize (${maxMessageSize})`))
          }
          return deliver(bytes.subarray(HEADER))
        case LARGE: {
          if (length > landing) {
            return Effect.fail(protocol(`a large piece of ${length} bytes, beyond the ${landing}-byte landing region`))
          }
          if (assembledLength + length > maxMessageSize) {
            return Effect.fail(
              protocol(
                `a message of more than ${assembledLength + length} bytes, beyond maxMessageSize (${maxMessageSize})`
              )
            )
          }
          if (pendingReleases >= MAX_PENDING_RELEASES) {
            return Effect.fail(protocol("a large piece sent before the last one was acknowledged"))
          }
          if (assembled.length < assembledLength + length) {
            const grown = new Uint8Array(
              Math.min(maxMessageSize, Math.max(assembledLength + length, 2 * assembled.length))
            )
            grown.set(assembled.subarray(0, assembledLength))
            assembled = grown
          }
          assembled.set(landingMr.memory.subarray(0, length), assembledLength)
          assembledLength += length
          // Acknowledged from a fiber of its own: the loop never waits for a send.
          pendingReleases++
          const ack = Effect.forkIn(
            frame(RELEASE, 0, sequence, 0, undefined).pipe(
              Effect.ignore,
              Effect.ensuring(Effect.sync(() => {
                pendingReleases--
              }))
            ),
            scope
          )
          if ((flags & FINAL) === 0) return Effect.asVoid(ack)
          const whole = assembled.subarray(0, assembledLength)
          assembled = new Uint8Array(0)
          assembledLength = 0
          return Effect.zipRight(ack, deliver(whole))
        }
        case RELEASE:
          return Effect.suspend(() => {
            if (released === undefined || released.sequence !== sequence) return Effect.void
            const { ack } = released
            released = undefined
            return Deferred.succeed(ack, undefined)
          })
        default:
          return Effect.fail(protocol(`a frame of unknown kind ${kind}`))
      }
    }

    // The channel's end: what waits for the other side stops at once.
    const stop = Effect.suspend(() => {
      ended = true
      const gone = new ChannelError({ reason: "Closed", detail: "the connection closed" })
      return Effect.zipRight(
        Deferred.fail(remoteLanding, gone),
        released === undefined ? Effect.void : Deferred.fail(released.ack, gone)
      )
    })
    // The receives, kept posted: the oldest holds the next frame (receives complete in the order
    // they were posted). A frame is copied out and its receive posted again before it is handled.
    // Plain memory, not Memory.allocate's: receives still posted when the channel ends keep the
    // region registered until the connection is deleted, and the registration keeps it alive.
    const receivePool = yield* Effect.mapError(
      LocalMr.register(peer, new Uint8Array(receives * inline), Usage.RECV),
      setup
    )
    const receiveLoop = yield* Effect.mapError(
      framing.receiving({
        receives,
        inline,
        memory: receivePool.memory,
        post: (slot) => Connection.postRecv(conn, { dst: receivePool, offset: slot * inline, length: inline }),
        onFrame
      }),
      setup
    )
    yield* framing.runToEnd({
      scope,
      loop: Effect.raceFirst(receiveLoop, Deferred.await(timedOut)),
      inbox: messages,
      stop,
      closed,
      // The messages received before the end are delivered before it is announced, for at most `ackTimeout`.
      drainTimeout: ackTimeout
    })
    yield* frame(HELLO, 0, 0, landingDescriptor.length, landingDescriptor)
    // A failed read needs nothing more: the connection's end fails the receives, which closes the channel.
    if (Duration.isFinite(keepAlive)) {
      yield* Deferred.await(remoteLanding).pipe(
        Effect.flatMap((src) =>
          Connection.read(conn, { dst: probe, src, length: 8 }).pipe(
            Effect.delay(keepAlive),
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
