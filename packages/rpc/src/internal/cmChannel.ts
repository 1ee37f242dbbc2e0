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
 * u32 LE), then their payload; here the sequence field of every frame carries the credits its
 * sender returns (see below):
 *
 * - HELLO: the sender's receive buffer size and its receive count (u32 LE each); each side sends it
 *   first, and the channel is open once the other side's has come (the handshake, bounded by the
 *   caller).
 * - INLINE: a whole message that fits in the other side's receive buffer after the header.
 * - LARGE: a piece of a larger message, carried in the frame itself, as large as the other side's
 *   buffer allows; flag FINAL on its last piece. A message's pieces are posted in order by one
 *   fiber, up to half the send slots in flight (one large message at a time; inline messages may
 *   pass between its pieces).
 * - KEEPALIVE: nothing; sent every `keepAlive` so that a side that only waits learns of a dead
 *   path (a send is retried by the device within the endpoint's retry count, then fails, and the
 *   endpoint is closed).
 * - CREDIT: nothing but the credits in its header; sent when a side owes at least half its
 *   receives and has sent nothing that carried them.
 *
 * Flow control is by credits, so that no frame is ever sent into a receive not posted (the device's
 * receiver-not-ready retries cost hundreds of milliseconds each on Soft-RoCE, and fail the send
 * where the endpoint asks for none): a side starts with the other side's receive count from its
 * HELLO, less one for its own HELLO, and spends one credit per frame. The reader returns a credit
 * for each receive it has posted again, in the header of the next frame it sends (any kind), or in
 * a CREDIT frame once it owes at least half its receives. The last credit is kept for a frame that
 * returns credits: a frame that returns none waits while one credit is left, so that both sides can
 * never be left without a credit each, owing the other. A sender without a credit waits (the reader
 * is slow: its inbox is full, or it has not been scheduled) for at most `ackTimeout`, after which
 * the send fails, the endpoint is closed and the channel ends, all with a "Timeout" ChannelError.
 * Both sides must run this version: the HELLO of an earlier one (4 bytes) is refused. What the
 * other side can make this side hold is bounded as on the librpma path: the pieces of one message
 * and the whole messages not yet handed on (at most `maxMessageSize` bytes each), and the receive
 * pool; a side that returns more credits than it was given breaks the channel's rules.
 */
import { CmEndpoint } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import * as framing from "./framing.js"
import { type Channel, ChannelError, HEADER, protocol, transfer } from "./framing.js"

export interface CmChannelOptions {
  /** Each receive buffer's and send slot's size. 72 to 1 GiB (2^30); default 32768. */
  readonly inlineSize?: number | undefined
  /** Receives kept posted. 3 to 65536 (and `receives` × `inlineSize` at most 2^31 - 1 bytes); default 16. */
  readonly receives?: number | undefined
  /** Sends in flight at once. 1 to 65536 (and `sends` × `inlineSize` at most 2^31 - 1 bytes); default 8. */
  readonly sends?: number | undefined
  /** The largest message taken from the other side: a larger one ends the channel. Default 64 MiB. */
  readonly maxMessageSize?: number | undefined
  /** How long a frame waits for a credit, and the messages received before the end for being handed on. Default 30 s. */
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
const CREDIT = 6
const FINAL = 1
/** Credits one frame can return (its sequence field): the rest wait for the next frame. */
const MOST_RETURNED = 0xffff
const LEAST_INLINE = HEADER + 64

/**
 * Checks `options` and fills in the defaults: a `"Protocol"` ChannelError names the first that is
 * out of range (with its value and the range allowed), or the pool (`receives` or `sends` times
 * `inlineSize`) larger than 2^31 - 1 bytes.
 */
export const settings = (options?: CmChannelOptions): Effect.Effect<CmSettings, ChannelError> =>
  Effect.all({
    inlineSize: framing.integer("inlineSize", options?.inlineSize, 32768, LEAST_INLINE, framing.MAX_INLINE),
    // At least 3: half of them (the most owed before a CREDIT frame) is then at least 2, so a CREDIT
    // frame alone never makes the other side owe enough to send one back.
    receives: framing.integer("receives", options?.receives, 16, 3, framing.MAX_QUEUE),
    sends: framing.integer("sends", options?.sends, 8, 1, framing.MAX_QUEUE),
    maxMessageSize: framing.integer("maxMessageSize", options?.maxMessageSize, 64 << 20, 1),
    ackTimeout: framing.finiteDuration("ackTimeout", options?.ackTimeout, "30 seconds"),
    keepAlive: framing.keepAliveDuration(options?.keepAlive)
  }).pipe(Effect.flatMap(framing.pools))

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
    /** The other side's receive count, from its HELLO. */
    let peerReceives = 0
    let ended = false
    /** A send waited `ackTimeout` for a credit and closed the endpoint: the channel ends with this, not the loop's end. */
    let timedOut: ChannelError | undefined
    /** A large message failed half-way: the other side's state is unknown, nothing more is sent. */
    let broken = false
    const largeLock = yield* Effect.makeSemaphore(1)

    /** Frames this side may still send: receives the other side has posted and this side not yet filled. */
    let credits = 0
    /** Receives this side has posted again and not yet told the other side of. */
    let owed = 0
    /** Owed credits that make a CREDIT frame worth sending when nothing else carries them. */
    const enough = Math.ceil(receives / 2)
    /** The fibers waiting for a change of `credits` or `owed` (or for the channel's end): woken all at once. */
    let watchers: Array<() => void> = []
    const changed = () => {
      const woken = watchers
      watchers = []
      for (const wake of woken) wake()
    }
    const nextChange = (waiting: { wake?: (() => void) | undefined }) =>
      Effect.async<void>((resume) => {
        const wake = () => resume(Effect.void)
        waiting.wake = wake
        watchers.push(wake)
        return Effect.sync(() => {
          const at = watchers.indexOf(wake)
          if (at >= 0) watchers.splice(at, 1)
        })
      })
    const closedError = () =>
      new ChannelError({
        reason: "Closed",
        detail: ended ? "the connection is closed" : "a large message failed half-way: open a new connection"
      })

    /**
     * Takes one credit and the owed credits the frame is to return, at once (the last credit only
     * for a frame that returns some), waiting for a credit while there is none to spend: at most
     * `ackTimeout`, by a timer fiber of its own, so that the wait ends even where the caller is
     * uninterruptible (@effect/rpc's server sends so). `undefined` for a frame that only returns
     * credits (`onlyReturns`) when another frame has taken them meanwhile.
     */
    const takeCredit = (
      onlyReturns: boolean,
      ticket: Ticket = { credit: false, returned: 0, posted: false }
    ): Effect.Effect<number | undefined, ChannelError> => {
      const now = (): number | undefined | "wait" => {
        if (onlyReturns && owed === 0) return undefined
        if (credits >= 2 || (credits === 1 && owed > 0)) {
          credits -= 1
          const returned = Math.min(owed, MOST_RETURNED)
          owed -= returned
          ticket.credit = true
          ticket.returned = returned
          return returned
        }
        return "wait"
      }
      return Effect.suspend(() => {
        if (ended || broken) return Effect.fail(closedError())
        const taken = now()
        if (taken !== "wait") return Effect.succeed(taken)
        const waiting: { wake?: (() => void) | undefined; late: boolean } = { late: false }
        const timer = Effect.sync(() => {
          waiting.late = true
          const wake = waiting.wake
          const at = wake === undefined ? -1 : watchers.indexOf(wake)
          // Still waiting (not yet woken by a change): woken once, here.
          if (at >= 0) {
            watchers.splice(at, 1)
            wake!()
          }
        }).pipe(Effect.delay(ackTimeout), Effect.interruptible, Effect.forkIn(scope))
        const wait: Effect.Effect<number | undefined, ChannelError> = Effect.suspend(() => {
          if (ended || broken) return Effect.fail(closedError())
          const taken = now()
          if (taken !== "wait") return Effect.succeed(taken)
          if (waiting.late) {
            timedOut ??= new ChannelError({
              reason: "Timeout",
              detail: `the other side returned no credit within ${Duration.format(ackTimeout)}`
            })
            return Effect.zipRight(CmEndpoint.close(ep), Effect.fail(timedOut))
          }
          return Effect.zipRight(nextChange(waiting), wait)
        })
        return Effect.flatMap(timer, (fiber) => Effect.ensuring(wait, Fiber.interrupt(fiber)))
      })
    }
    /**
     * What a frame has taken, recorded where it is taken: a credit (HELLO takes none) and the owed
     * credits it is to return. A frame that ends unposted, however it ends (interrupted while it
     * waits for its credit or its slot, or between the two), gives them back.
     */
    interface Ticket {
      credit: boolean
      returned: number
      posted: boolean
    }
    const refund = (ticket: Ticket) =>
      Effect.sync(() => {
        if (ticket.posted || (!ticket.credit && ticket.returned === 0)) return
        if (ticket.credit) credits += 1
        owed += ticket.returned
        ticket.credit = false
        ticket.returned = 0
        changed()
      })

    const writeFrame = (slot: number, header: framing.Header, payload: Uint8Array | undefined) => {
      const at = slot * inline
      framing.writeHeader(sendPool.memory, at, header)
      if (payload !== undefined) sendPool.memory.set(payload, at + HEADER)
      return { mr: sendPool, offset: at, length: HEADER + header.length }
    }

    const held = framing.heldSlots(slots, transfer("a send"))
    /**
     * One frame from a send slot, posted (not awaited: see framing.heldSlots). Its credit is taken
     * first (HELLO takes none: every receive is posted before the connection), then a slot; waiting
     * for either can be interrupted (what the frame took then comes back: its ticket). Once
     * posted, its credit is spent.
     */
    const frame = (kind: number, flags: number, payload: Uint8Array | undefined) =>
      Effect.suspend(() => {
        const ticket: Ticket = { credit: false, returned: 0, posted: false }
        const take = kind === HELLO ?
          Effect.sync(() => {
            ticket.returned = Math.min(owed, MOST_RETURNED)
            owed -= ticket.returned
            return ticket.returned
          }) :
          takeCredit(kind === CREDIT, ticket)
        return Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(restore(take), (returned) =>
            returned === undefined ? Effect.void : restore(
              held.send((slot) =>
                postFrame(slot, kind, flags, returned, payload).pipe(
                  Effect.tap(() => {
                    ticket.posted = true
                  }),
                  Effect.mapError(transfer("a send"))
                )
              )
            )).pipe(Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : refund(ticket)))
        )
      })

    /** Posts one frame from `slot` without waiting. */
    const postFrame = (
      slot: number,
      kind: number,
      flags: number,
      returned: number,
      payload: Uint8Array | undefined
    ) =>
      Effect.suspend(() =>
        CmEndpoint.postSend(ep, {
          segments: [writeFrame(slot, { kind, flags, sequence: returned, length: payload?.length ?? 0 }, payload)]
        })
      )

    // A large message is sent whole or breaks the channel: one left half-way would leave the other
    // side holding its first pieces, which it would take for the start of the next message. Its
    // pieces are posted in order by this one fiber, up to half the send slots in flight (the rest
    // stay for inline messages; holding them all could leave it waiting for a slot it holds), each
    // with a credit (waited for within `ackTimeout`).
    const window = Math.max(1, sends >> 1)
    const sendLarge = (message: Uint8Array, room: number) =>
      largeLock.withPermits(1)(Effect.suspend(() => {
        const inFlight: Array<{ readonly slot: number; readonly posted: CmEndpoint.Posted }> = []
        const oldest = Effect.suspend(() => {
          const { posted, slot } = inFlight.shift()!
          return Effect.ensuring(posted.completion, slots.release(slot))
        })
        const pieces = Effect.gen(function*() {
          for (let done = 0; done < message.length;) {
            if (inFlight.length >= window) yield* oldest
            const returned = (yield* takeCredit(false))!
            const slot = yield* held.take
            const piece = message.subarray(done, Math.min(message.length, done + room))
            done += piece.length
            const posted = yield* Effect.onError(
              postFrame(slot, LARGE, done >= message.length ? FINAL : 0, returned, piece),
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
          Effect.mapError((e) => e instanceof ChannelError ? e : transfer("a send")(e))
        )
      })).pipe(
        Effect.tapError(() =>
          Effect.sync(() => {
            broken = true
            changed()
          })
        ),
        Effect.uninterruptible
      )

    const send = (message: Uint8Array): Effect.Effect<void, ChannelError> =>
      Effect.suspend(() => {
        if (ended || broken) return Effect.fail(closedError())
        // Known once open has returned the channel: the other side's HELLO came first.
        const room = Math.min(inline, peerInline) - HEADER
        if (room <= 0) return Effect.fail(protocol("a send before the other side's HELLO"))
        return message.length <= room ? frame(INLINE, 0, message) : sendLarge(message, room)
      })

    const messages = yield* framing.inbox(scope, maxMessageSize, onMessage)
    /**
     * The pieces of the large message being received (each its frame's own copy, taken out of its
     * receive buffer), joined once at the last: one copy of the message, not one per growth.
     */
    let pieces: Array<Uint8Array> = []
    let assembledLength = 0
    let hello = false
    const onFrame = (bytes: Uint8Array): Effect.Effect<void, ChannelError> => {
      if (bytes.length < HEADER) {
        return Effect.fail(protocol(`a frame of ${bytes.length} bytes, shorter than its header`))
      }
      const { flags, kind, length, sequence: returned } = framing.readHeader(bytes)
      const carried = bytes.length - HEADER
      // Its receive was posted again before this frame is handled: one more credit owed.
      owed += 1
      if (owed >= enough) changed()
      if (kind !== HELLO && returned > 0) {
        if (!hello || credits + returned > peerReceives) {
          return Effect.fail(
            protocol(`${returned} credits returned, more than the ${peerReceives - credits} frames not yet returned`)
          )
        }
        credits += returned
        changed()
      }
      switch (kind) {
        case HELLO: {
          if (hello) return Effect.fail(protocol("a second HELLO"))
          hello = true
          const view = length === 8 && carried === 8
            ? new DataView(bytes.buffer, bytes.byteOffset + HEADER, 8)
            : undefined
          const size = view?.getUint32(0, true) ?? 0
          const count = view?.getUint32(4, true) ?? 0
          if (size < LEAST_INLINE || count < 3) {
            return Effect.fail(
              protocol(
                `a HELLO that holds no receive buffer size of at least ${LEAST_INLINE} and receive count of at least 3 (both sides must run the same version)`
              )
            )
          }
          // Its receives were all posted before the connection; this side's HELLO took one.
          if (returned > 1) return Effect.fail(protocol(`a HELLO that returns ${returned} credits, more than 1`))
          peerInline = size
          peerReceives = count
          credits = count - 1 + returned
          changed()
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
          pieces.push(bytes.subarray(HEADER))
          assembledLength += length
          if ((flags & FINAL) === 0) return Effect.void
          const whole = new Uint8Array(assembledLength)
          let at = 0
          for (const piece of pieces) {
            whole.set(piece, at)
            at += piece.length
          }
          pieces = []
          assembledLength = 0
          return messages.deliver(whole)
        }
        case KEEPALIVE:
        case CREDIT:
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
      changed()
    })
    yield* framing.runToEnd({
      scope,
      loop: Effect.flatMap(Effect.exit(loop), (exit) => timedOut === undefined ? exit : Effect.fail(timedOut)),
      inbox: messages,
      stop,
      closed,
      drainTimeout: ackTimeout
    })

    const helloPayload = new Uint8Array(8)
    new DataView(helloPayload.buffer).setUint32(0, inline, true)
    new DataView(helloPayload.buffer).setUint32(4, receives, true)
    const open = Effect.gen(function*() {
      yield* frame(HELLO, 0, helloPayload)
      // The channel's end before the other side's HELLO fails the handshake with why it ended.
      yield* Effect.raceFirst(
        Deferred.await(peerHello),
        Effect.flatMap(
          Deferred.await(closed),
          () => Effect.fail(new ChannelError({ reason: "Closed", detail: "the connection closed before its HELLO" }))
        )
      )
      // The owed credits go back in a CREDIT frame once they are `enough` and no other frame has
      // taken them (the fibers sending one run first). A failed one closes the endpoint.
      yield* Effect.gen(function*() {
        const waiting: { wake?: (() => void) | undefined } = {}
        while (!ended && !broken) {
          if (owed < enough) {
            yield* nextChange(waiting)
            continue
          }
          yield* Effect.yieldNow()
          if (owed >= enough) yield* frame(CREDIT, 0, undefined)
        }
      }).pipe(
        Effect.catchAll(() => CmEndpoint.close(ep)),
        Effect.interruptible,
        Effect.forkIn(scope)
      )
      // A failed keepalive closes the endpoint: the receives fail with it, which closes the channel.
      if (Duration.isFinite(keepAlive)) {
        yield* frame(KEEPALIVE, 0, undefined).pipe(
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
