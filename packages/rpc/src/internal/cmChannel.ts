/**
 * A message channel over one librdmacm endpoint, with sends and receives only (no region of one
 * side is ever named to the other, so there are no rkeys to guard): whole messages of any size,
 * each way.
 *
 * Each side registers a send pool (`sends` slots of `inlineSize` bytes) and a receive pool
 * (`receives` buffers of `inlineSize` bytes) on the endpoint, and posts every receive before it
 * connects (the client, before rdma_connect) or accepts (the server, before rdma_accept), so the
 * other side's first frame always has a buffer. The receive loop (internal/framing.ts, shared with
 * the librpma channel) takes frames in order and posts each buffer again once its frame is copied
 * out. Frames have the librpma channel's 8-byte header (kind u8, flags u8, sequence u16 LE, length
 * u32 LE), then their payload:
 *
 * - HELLO: the sender's receive buffer size (u32 LE); each side sends it first, and the channel is
 *   open once the other side's has come (the handshake, bounded by the caller).
 * - INLINE: a whole message that fits in the other side's receive buffer after the header.
 * - LARGE: a piece of a larger message, carried in the frame itself, as large as the other side's
 *   buffer allows; flag FINAL on its last piece. A message's pieces are posted in order by one
 *   fiber, up to half the send slots in flight (one large message at a time; inline messages may
 *   pass between its pieces).
 * - KEEPALIVE: nothing; sent every `keepAlive` so that a side that only waits learns of a dead
 *   path (a send is retried by the device within the endpoint's retry count, then fails, and the
 *   endpoint is closed).
 *
 * Flow control is the device's: a send that finds no posted receive is retried until the reader
 * posts one (rnr_retry_count 7, librdmacm's default, retries for ever), so a slow reader slows its
 * sender, and at most `receives` frames wait at the reader. What the other side can make this
 * side hold is bounded as on the librpma path: the pieces of one message and the whole messages
 * not yet handed on (at most `maxMessageSize` bytes each), and the receive pool.
 */
import { CmEndpoint } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as framing from "./framing.js"
import { type Channel, ChannelError, HEADER, protocol, transfer } from "./framing.js"

export interface CmChannelOptions {
  /** Each receive buffer's and send slot's size. Default 4096. */
  readonly inlineSize?: number | undefined
  /** Receives kept posted. Default 16. */
  readonly receives?: number | undefined
  /** Sends in flight at once. Default 8. */
  readonly sends?: number | undefined
  /** The largest message taken from the other side: a larger one ends the channel. Default 64 MiB. */
  readonly maxMessageSize?: number | undefined
  /** How long the messages received before the channel's end may take to be handed on. Default 30 s. */
  readonly ackTimeout?: Duration.DurationInput | undefined
  /** How often a KEEPALIVE frame is sent. Default 5 s; `Duration.infinity`: never. */
  readonly keepAlive?: Duration.DurationInput | undefined
}

export interface CmSettings {
  readonly inlineSize: number
  readonly receives: number
  readonly sends: number
  readonly maxMessageSize: number
  readonly ackTimeout: Duration.Duration
  readonly keepAlive: Duration.Duration
}

const HELLO = 1
const INLINE = 2
const LARGE = 3
const KEEPALIVE = 5
const FINAL = 1
const LEAST_INLINE = HEADER + 64

export const settings = (options?: CmChannelOptions): Effect.Effect<CmSettings, ChannelError> =>
  Effect.all({
    inlineSize: framing.integer("inlineSize", options?.inlineSize, 4096, LEAST_INLINE),
    receives: framing.integer("receives", options?.receives, 16, 2),
    sends: framing.integer("sends", options?.sends, 8, 1),
    maxMessageSize: framing.integer("maxMessageSize", options?.maxMessageSize, 64 << 20, 1),
    ackTimeout: framing.finiteDuration("ackTimeout", options?.ackTimeout, "30 seconds"),
    keepAlive: framing.keepAliveDuration(options?.keepAlive)
  })

/**
 * The channel's half before the connection: regions registered on `ep` and every receive posted,
 * the receive loop running (in the scope). Connect or accept `ep`, then `open` sends HELLO and
 * waits for the other side's (bound it: it waits for the other side as long as it lives).
 */
export const prepare = (
  ep: CmEndpoint.CmEndpoint,
  onMessage: (message: Uint8Array) => Effect.Effect<void, ChannelError>,
  options: CmSettings
): Effect.Effect<
  { readonly open: Effect.Effect<Channel, ChannelError> },
  ChannelError,
  Driver.RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const { ackTimeout, inlineSize: inline, keepAlive, maxMessageSize, receives, sends } = options
    const scope = yield* Effect.scope
    const setup = transfer("setting the channel up")
    const sendPool = yield* Effect.mapError(CmEndpoint.registerMessages(ep, new Uint8Array(sends * inline)), setup)
    // Plain memory: receives still posted when the channel ends keep it registered until the endpoint is destroyed.
    const receivePool = yield* Effect.mapError(
      CmEndpoint.registerMessages(ep, new Uint8Array(receives * inline)),
      setup
    )
    // Closed before the regions are released: a region is deregistered once no request names it,
    // and the receives posted on it end only when the endpoint does.
    yield* Effect.addFinalizer(() => CmEndpoint.close(ep))
    const slots = framing.sendSlots(sends)
    const closed = yield* Deferred.make<void, ChannelError>()
    /** The other side's receive buffer size, from its HELLO. */
    const peerHello = yield* Deferred.make<number, ChannelError>()
    let peerInline = 0
    let ended = false
    /** A large message failed half-way: the other side's state is unknown, nothing more is sent. */
    let broken = false
    let sent = 0
    const largeLock = yield* Effect.makeSemaphore(1)

    const frame = (kind: number, flags: number, sequence: number, payload: Uint8Array | undefined) =>
      Effect.acquireUseRelease(
        slots.take,
        (slot) =>
          Effect.suspend(() => {
            const at = slot * inline
            const length = payload?.length ?? 0
            framing.writeHeader(sendPool.memory, at, { kind, flags, sequence, length })
            if (payload !== undefined) sendPool.memory.set(payload, at + HEADER)
            return CmEndpoint.send(ep, { src: sendPool, offset: at, length: HEADER + length })
          }),
        slots.release
      ).pipe(Effect.mapError(transfer("a send")))

    /** Posts one frame from `slot` without waiting: its completion gives the slot back. */
    const postFrame = (slot: number, kind: number, flags: number, sequence: number, payload: Uint8Array) =>
      Effect.suspend(() => {
        const at = slot * inline
        framing.writeHeader(sendPool.memory, at, { kind, flags, sequence, length: payload.length })
        sendPool.memory.set(payload, at + HEADER)
        return CmEndpoint.postSend(ep, { segments: [{ mr: sendPool, offset: at, length: HEADER + payload.length }] })
      })

    // A large message is sent whole or breaks the channel: one left half-way would leave the other
    // side holding its first pieces, which it would take for the start of the next message. Its
    // pieces are posted in order by this one fiber, up to half the send slots in flight (the rest
    // stay for inline messages; holding them all could leave it waiting for a slot it holds).
    const window = Math.max(1, sends >> 1)
    const sendLarge = (message: Uint8Array, room: number) =>
      largeLock.withPermits(1)(Effect.suspend(() => {
        sent = (sent + 1) & 0xffff
        const inFlight: Array<{ readonly slot: number; readonly posted: CmEndpoint.Posted }> = []
        const oldest = Effect.suspend(() => {
          const { posted, slot } = inFlight.shift()!
          return Effect.ensuring(posted.completion, slots.release(slot))
        })
        const pieces = Effect.gen(function*() {
          for (let done = 0; done < message.length;) {
            if (inFlight.length >= window) yield* oldest
            const piece = message.subarray(done, Math.min(message.length, done + room))
            done += piece.length
            const slot = yield* slots.take
            const posted = yield* Effect.onError(
              postFrame(slot, LARGE, done >= message.length ? FINAL : 0, sent, piece),
              () => slots.release(slot)
            )
            inFlight.push({ slot, posted })
          }
          while (inFlight.length > 0) yield* oldest
        })
        // A failure still waits for what was posted (each completes or is flushed), so that every
        // slot is given back with its send done.
        return pieces.pipe(
          Effect.onError(() =>
            Effect.forEach(
              inFlight.splice(0),
              ({ posted, slot }) => Effect.ensuring(Effect.ignore(posted.completion), slots.release(slot)),
              { discard: true }
            )
          ),
          Effect.mapError(transfer("a send"))
        )
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
        // Known once open has returned the channel: the other side's HELLO came first.
        const room = Math.min(inline, peerInline) - HEADER
        if (room <= 0) return Effect.fail(protocol("a send before the other side's HELLO"))
        return message.length <= room ? frame(INLINE, 0, 0, message) : sendLarge(message, room)
      })

    const messages = yield* framing.inbox(scope, maxMessageSize, onMessage)
    let assembled = new Uint8Array(0)
    let assembledLength = 0
    let hello = false
    const onFrame = (bytes: Uint8Array): Effect.Effect<void, ChannelError> => {
      if (bytes.length < HEADER) {
        return Effect.fail(protocol(`a frame of ${bytes.length} bytes, shorter than its header`))
      }
      const { flags, kind, length } = framing.readHeader(bytes)
      const carried = bytes.length - HEADER
      switch (kind) {
        case HELLO: {
          if (hello) return Effect.fail(protocol("a second HELLO"))
          hello = true
          const size = length === 4 && carried === 4 ?
            new DataView(bytes.buffer, bytes.byteOffset + HEADER, 4).getUint32(0, true) :
            0
          if (size < LEAST_INLINE) {
            return Effect.fail(protocol(`a HELLO that holds no receive buffer size of at least ${LEAST_INLINE}`))
          }
          peerInline = size
          return Deferred.succeed(peerHello, size)
        }
        case INLINE:
          if (length !== carried) {
            return Effect.fail(protocol(`an inline frame says ${length} bytes and has ${carried}`))
          }
          if (length > maxMessageSize) {
            return Effect.fail(protocol(`a message of ${length} bytes, beyond maxMessageSize (${maxMessageSize})`))
          }
          return messages.deliver(bytes.subarray(HEADER))
        case LARGE: {
          if (length > inline - HEADER) {
            return Effect.fail(protocol(`a large piece of ${length} bytes, beyond the ${inline}-byte receive buffer`))
          }
          if (length !== carried) {
            return Effect.fail(protocol(`a large piece says ${length} bytes and has ${carried}`))
          }
          if (assembledLength + length > maxMessageSize) {
            return Effect.fail(
              protocol(
                `a message of more than ${assembledLength + length} bytes, beyond maxMessageSize (${maxMessageSize})`
              )
            )
          }
          if (assembled.length < assembledLength + length) {
            const grown = new Uint8Array(
              Math.min(maxMessageSize, Math.max(assembledLength + length, 2 * assembled.length))
            )
            grown.set(assembled.subarray(0, assembledLength))
            assembled = grown
          }
          assembled.set(bytes.subarray(HEADER), assembledLength)
          assembledLength += length
          if ((flags & FINAL) === 0) return Effect.void
          const whole = assembled.subarray(0, assembledLength)
          assembled = new Uint8Array(0)
          assembledLength = 0
          return messages.deliver(whole)
        }
        case KEEPALIVE:
          return Effect.void
        default:
          return Effect.fail(protocol(`a frame of unknown kind ${kind}`))
      }
    }

    const loop = yield* Effect.mapError(
      framing.receiving({
        receives,
        inline,
        memory: receivePool.memory,
        post: (slot) =>
          CmEndpoint.postRecv(ep, { segments: [{ mr: receivePool, offset: slot * inline, length: inline }] }),
        onFrame
      }),
      setup
    )
    const stop = Effect.sync(() => {
      ended = true
    })
    yield* framing.runToEnd({ scope, loop, inbox: messages, stop, closed, drainTimeout: ackTimeout })

    const helloPayload = new Uint8Array(4)
    new DataView(helloPayload.buffer).setUint32(0, inline, true)
    const open = Effect.gen(function*() {
      yield* frame(HELLO, 0, 0, helloPayload)
      // The channel's end before the other side's HELLO fails the handshake with why it ended.
      yield* Effect.raceFirst(
        Deferred.await(peerHello),
        Effect.flatMap(
          Deferred.await(closed),
          () => Effect.fail(new ChannelError({ reason: "Closed", detail: "the connection closed before its HELLO" }))
        )
      )
      // A failed keepalive closes the endpoint: the receives fail with it, which closes the channel.
      if (Duration.isFinite(keepAlive)) {
        yield* frame(KEEPALIVE, 0, 0, undefined).pipe(
          Effect.delay(keepAlive),
          Effect.repeat({ while: () => !ended }),
          Effect.catchAll(() => CmEndpoint.close(ep)),
          Effect.interruptible,
          Effect.forkIn(scope)
        )
      }
      return { send, closed } satisfies Channel
    })
    return { open }
  })
