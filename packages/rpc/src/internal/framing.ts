/**
 * What the RPC channels of both paths share (internal/channel.ts over a librpma connection,
 * internal/cmChannel.ts over a librdmacm endpoint): the frame header, the error, the settings'
 * checks, the send slots, the inbox that hands whole messages to the RPC layer, and the receive
 * loop over a pool of posted receives with the channel's end.
 *
 * A frame is an 8-byte header (kind u8, flags u8, sequence u16 LE, length u32 LE), then its
 * payload. The kinds each path uses are listed in its module.
 */
import type { Connection } from "@effect-rdma/core"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"

export class ChannelError extends Data.TaggedError("RdmaChannelError")<{
  readonly reason: "Closed" | "Protocol" | "Transfer" | "Timeout"
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `RDMA RPC channel: ${this.detail}`
  }
}

export interface Channel {
  readonly send: (message: Uint8Array) => Effect.Effect<void, ChannelError>
  /**
   * Completes when the channel has ended and the messages received before its end are delivered:
   * with success when the other side closed the connection, else with why (a `"Protocol"` reason:
   * the other side broke the channel's rules, or `onMessage` refused a message).
   */
  readonly closed: Deferred.Deferred<void, ChannelError>
}

export const HEADER = 8

export interface Header {
  readonly kind: number
  readonly flags: number
  readonly sequence: number
  readonly length: number
}

export const writeHeader = (memory: Uint8Array, at: number, header: Header): void => {
  const view = new DataView(memory.buffer, memory.byteOffset + at, HEADER)
  view.setUint8(0, header.kind)
  view.setUint8(1, header.flags)
  view.setUint16(2, header.sequence, true)
  view.setUint32(4, header.length, true)
}

/** The header of a frame of at least {@link HEADER} bytes. */
export const readHeader = (bytes: Uint8Array): Header => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, HEADER)
  return {
    kind: view.getUint8(0),
    flags: view.getUint8(1),
    sequence: view.getUint16(2, true),
    length: view.getUint32(4, true)
  }
}

export const transfer = (what: string) => (cause: unknown) =>
  new ChannelError({
    reason: "Transfer",
    detail: `${what} failed: ${
      cause instanceof Error || (typeof cause === "object" && cause !== null && "message" in cause)
        ? String((cause as Error).message)
        : String(cause)
    }`,
    cause
  })

export const protocol = (detail: string) => new ChannelError({ reason: "Protocol", detail })

/** Waits until the function `park` is given is called; `unpark` forgets it (woken or interrupted). */
const parked = (park: (wake: () => void) => void, unpark: () => void): Effect.Effect<void> =>
  Effect.async<void>((resume) => {
    park(() => {
      unpark()
      resume(Effect.void)
    })
    return Effect.sync(unpark)
  })

/**
 * A positive integer option with its default, or a `"Protocol"` ChannelError naming it, its value
 * and the range allowed: at least `least`, and at most `most` when given.
 */
export const integer = (name: string, value: number | undefined, fallback: number, least: number, most?: number) =>
  Effect.suspend(() => {
    const v = value ?? fallback
    return Number.isSafeInteger(v) && v >= least && (most === undefined || v <= most)
      ? Effect.succeed(v)
      : Effect.fail(protocol(
        most === undefined
          ? `${name} must be an integer of at least ${least}, got ${v}`
          : `${name} must be an integer from ${least} to ${most}, got ${v}`
      ))
  })

/**
 * The most `receives` and `sends` can be: the most entries core allows a connection's queues
 * (`Connection.Options.sendQueueSize` / `receiveQueueSize`, and a librdmacm endpoint's, are 1 to
 * 65536).
 */
export const MAX_QUEUE = 65536
/** The most `inlineSize` can be: 1 GiB. */
export const MAX_INLINE = 2 ** 30
/**
 * The most bytes one pool (`receives` × `inlineSize`, `sends` × `inlineSize`) or the librpma
 * landing region can take: 2^31 - 1, what one registration and one librpma length are sure to hold.
 */
export const MAX_POOL = 2 ** 31 - 1

/**
 * A pool of `count` buffers of `inlineSize` bytes, or a `"Protocol"` ChannelError naming both when
 * it is larger than {@link MAX_POOL}: each is in range alone, so it says to lower one of them.
 */
export const pool = (countName: "receives" | "sends", count: number, inlineSize: number) =>
  count * inlineSize <= MAX_POOL
    ? Effect.void
    : Effect.fail(protocol(
      `${countName} × inlineSize must be at most ${MAX_POOL} bytes, got ${count} × ${inlineSize} = ${
        count * inlineSize
      }: lower ${countName} or inlineSize`
    ))

/** Both pools of `settings` checked ({@link pool}): the settings, or the first pool out of range. */
export const pools = <S extends { readonly inlineSize: number; readonly receives: number; readonly sends: number }>(
  settings: S
): Effect.Effect<S, ChannelError> =>
  pool("receives", settings.receives, settings.inlineSize).pipe(
    Effect.zipRight(pool("sends", settings.sends, settings.inlineSize)),
    Effect.as(settings)
  )

/** A positive, finite duration option with its default. */
export const finiteDuration = (name: string, value: Duration.DurationInput | undefined, fallback: string) =>
  Effect.suspend(() => {
    const d = Duration.decodeUnknown(value ?? fallback)
    return Option.isSome(d) && Duration.isFinite(d.value) && Duration.toMillis(d.value) > 0
      ? Effect.succeed(d.value)
      : Effect.fail(protocol(`${name} must be a positive, finite duration, got ${String(value)}`))
  })

/** A positive duration option (`Duration.infinity`: never) with its default. */
export const keepAliveDuration = (value: Duration.DurationInput | undefined) =>
  Effect.suspend(() => {
    const d = Duration.decodeUnknown(value ?? "5 seconds")
    return Option.isSome(d) && Duration.toMillis(d.value) > 0
      ? Effect.succeed(d.value)
      : Effect.fail(
        protocol(`keepAlive must be a positive duration (Duration.infinity: never), got ${String(value)}`)
      )
  })

/**
 * `n` send slots: `take` waits for a free one, `release` gives one back. `changed` waits for the
 * next release (or `wake`): each wakes one waiter, which looks again.
 */
export const sendSlots = (n: number) => {
  const freeSlots = Array.from({ length: n }, (_, i) => n - 1 - i)
  const waiters: Array<() => void> = []
  const wake = (): void => {
    waiters.shift()?.()
  }
  const changed: Effect.Effect<void> = Effect.async<void>((resume) => {
    const woken = () => resume(Effect.void)
    waiters.push(woken)
    return Effect.sync(() => {
      const at = waiters.indexOf(woken)
      if (at >= 0) waiters.splice(at, 1)
      // Woken, then interrupted before looking: the next waiter looks in its place.
      else wake()
    })
  })
  const take: Effect.Effect<number> = Effect.suspend(() =>
    freeSlots.length > 0 ? Effect.succeed(freeSlots.pop()!) : Effect.zipRight(changed, take)
  )
  const release = (slot: number) =>
    Effect.sync(() => {
      freeSlots.push(slot)
      wake()
    })
  const free = (): number => freeSlots.length
  return { take, release, free, changed, wake }
}

/**
 * A frame sent from a free slot: the slot taken (`take`, by default the slots' own; waiting for it
 * can be interrupted), the send posted (`post` writes the frame into the slot), its completion
 * awaited (interruptibly). The slot goes back once the device is done reading it: at the
 * completion, or, when the wait is interrupted, when the completion arrives later (a fiber of its
 * own waits for it; it arrives or is flushed when the connection ends). Given back at the
 * interruption, the next frame written into the slot would go out in the posted send's place.
 */
export const sendFromSlot = <E1, E2>(
  slots: ReturnType<typeof sendSlots>,
  post: (slot: number) => Effect.Effect<{ readonly completion: Effect.Effect<unknown, E2> }, E1>,
  take: Effect.Effect<number> = slots.take
): Effect.Effect<void, E1 | E2> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(restore(take), (slot) =>
      Effect.matchCauseEffect(post(slot), {
        onFailure: (cause) => Effect.zipRight(slots.release(slot), Effect.failCause(cause)),
        onSuccess: (posted) => releaseAfter(slots, slot, restore(posted.completion), posted.completion)
      }))
  )

/**
 * `slot` given back once `awaited` (a send's completion, awaited interruptibly) ends; when it is
 * interrupted, once `completion` comes (a fiber of its own waits for it; it comes, or is flushed
 * when the connection ends), not before: the device may still read the slot.
 */
const releaseAfter = <E>(
  slots: ReturnType<typeof sendSlots>,
  slot: number,
  awaited: Effect.Effect<unknown, E>,
  completion: Effect.Effect<unknown, unknown>
): Effect.Effect<void, E> =>
  awaited.pipe(
    Effect.onExit((exit) =>
      Exit.isInterrupted(exit)
        ? Effect.forkDaemon(Effect.ensuring(Effect.ignore(completion), slots.release(slot)))
        : slots.release(slot)
    ),
    Effect.asVoid
  )

/**
 * Frames sent from `slots` without waiting for their sends, as the librdmacm channel sends them
 * (a completion would wake the sender's fiber for nothing: a failed send fails the queue pair,
 * and with it the receives and the channel), where {@link sendFromSlot} awaits each. A posted send
 * holds its slot with its completion, and the slot comes back once that completion is taken, by a
 * later `take` that finds no free slot (oldest first: a queue pair completes its sends in order).
 * A reap interrupted before its completion comes gives the slot back when it does; a failed one
 * fails that `take` (`failed`), its slot given back.
 */
export const heldSlots = <E>(slots: ReturnType<typeof sendSlots>, failed: (cause: unknown) => E) => {
  const held: Array<{ readonly slot: number; readonly completion: Effect.Effect<unknown, unknown> }> = []
  const reap = (send: (typeof held)[number]): Effect.Effect<void, E> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.mapError(releaseAfter(slots, send.slot, restore(send.completion), send.completion), failed)
    )
  /**
   * A free slot: reaps the oldest held send while there is none, else waits for a release or a
   * send to reap (one that another fiber takes the slot of, or a large message's piece, which
   * its sender awaits), and looks again.
   */
  const take: Effect.Effect<number, E> = Effect.suspend(() =>
    slots.free() > 0
      ? slots.take
      : Effect.zipRight(held.length > 0 ? reap(held.shift()!) : slots.changed, take)
  )
  /**
   * A frame posted from a free slot (`post` writes it there and posts it), the slot held until its
   * completion is reaped. Waiting for the slot can be interrupted; a refused post gives it back.
   */
  const send = <E1>(
    post: (slot: number) => Effect.Effect<{ readonly completion: Effect.Effect<unknown, unknown> }, E1>
  ): Effect.Effect<void, E | E1> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(take), (slot) =>
        Effect.matchCauseEffect(post(slot), {
          onFailure: (cause) => Effect.zipRight(slots.release(slot), Effect.failCause(cause)),
          onSuccess: (posted) =>
            Effect.sync(() => {
              held.push({ slot, completion: posted.completion })
              // A fiber waiting for a slot may reap it.
              slots.wake()
            })
        }))
    )
  return { take, send }
}

export interface Inbox {
  /** Queues a whole message for `onMessage`, waiting while the queue holds `maxMessageSize` bytes. */
  readonly deliver: (message: Uint8Array) => Effect.Effect<void>
  /** No more messages: `onMessage`'s fiber stops once it has taken the ones queued. */
  readonly end: () => void
  /** Fails when a message is refused: the receive loop ends with its error. */
  readonly refused: Deferred.Deferred<never, ChannelError>
  /** Completes when `onMessage` has taken the last message, or stopped. */
  readonly drained: Deferred.Deferred<void>
}

/**
 * Whole messages on their way to `onMessage`, from a fiber of its own (in `scope`), so that the
 * receive loop never waits for it: a handler that sends a large answer may need the loop (the
 * acknowledgements of the librpma path). A message it refuses (or a defect in it) ends the channel.
 * One producer (the receive loop) and one consumer, each woken by the other when it waits; the
 * bytes queued are at most `maxMessageSize`.
 */
export const inbox = (
  scope: Scope.Scope,
  maxMessageSize: number,
  onMessage: (message: Uint8Array) => Effect.Effect<void, ChannelError>
): Effect.Effect<Inbox> =>
  Effect.gen(function*() {
    const refused = yield* Deferred.make<never, ChannelError>()
    const drained = yield* Deferred.make<void>()
    const queue: Array<Uint8Array | undefined> = []
    let queuedBytes = 0
    let wakeConsumer: (() => void) | undefined
    let wakeProducer: (() => void) | undefined
    const enqueue = (message: Uint8Array | undefined) => {
      queue.push(message)
      queuedBytes += message?.length ?? 0
      wakeConsumer?.()
    }
    const deliver = (message: Uint8Array): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (queuedBytes + message.length <= maxMessageSize) return Effect.sync(() => enqueue(message))
        return Effect.zipRight(
          parked((wake) => {
            wakeProducer = wake
          }, () => {
            wakeProducer = undefined
          }),
          deliver(message)
        )
      })
    /** The next message for `onMessage`, waiting for one. */
    const nextMessage: Effect.Effect<Uint8Array | undefined> = Effect.suspend(() =>
      queue.length > 0
        ? Effect.succeed(queue.shift())
        : Effect.zipRight(
          parked((wake) => {
            wakeConsumer = wake
          }, () => {
            wakeConsumer = undefined
          }),
          nextMessage
        )
    )
    const taken = (bytes: number) =>
      Effect.sync(() => {
        queuedBytes -= bytes
        wakeProducer?.()
      })
    yield* nextMessage.pipe(
      Effect.flatMap((message) =>
        message === undefined
          ? Effect.interrupt
          : Effect.zipRight(
            onMessage(message).pipe(
              Effect.catchAllDefect((defect) =>
                Effect.fail(protocol(`a message could not be handled: ${String(defect)}`))
              )
            ),
            taken(message.length)
          )
      ),
      Effect.forever,
      Effect.tapError((error) => Deferred.fail(refused, error)),
      Effect.ensuring(Deferred.succeed(drained, undefined)),
      Effect.interruptible,
      Effect.forkIn(scope)
    )
    return { deliver, end: () => enqueue(undefined), refused, drained }
  })

/** A receive posted on either path: its completion says how many bytes came. */
export interface PostedReceive<E> {
  readonly completion: Effect.Effect<Connection.Completion, E>
}

/** The connection was closed (by either side): the frames before it were all taken. A lost one fails. */
const closedConnection = (e: unknown) =>
  typeof e === "object" && e !== null && (e as { _tag?: unknown })._tag === "ConnectionClosedError" &&
  (e as { reason?: unknown }).reason === "CLOSED"

/**
 * Posts `receives` receives of `inline` bytes each into `memory` (slot i at i * inline), and
 * answers the receive loop: the oldest receive holds the next frame (receives complete in the
 * order they were posted); a frame is copied out and its receive posted again before `onFrame`
 * handles it. The loop ends when the connection has closed, and fails when it is lost, a receive
 * fails otherwise, or `onFrame` fails.
 */
export const receiving = <E, E2>(options: {
  readonly receives: number
  readonly inline: number
  readonly memory: Uint8Array
  readonly post: (slot: number) => Effect.Effect<PostedReceive<E2>, E>
  readonly onFrame: (bytes: Uint8Array) => Effect.Effect<void, ChannelError>
}): Effect.Effect<Effect.Effect<void, ChannelError>, E> =>
  Effect.gen(function*() {
    const { inline, memory, onFrame, post, receives } = options
    const posted: Array<PostedReceive<E2> | undefined> = yield* Effect.forEach(
      Array.from({ length: receives }, (_, slot) => slot),
      post
    )
    const failed = transfer("receiving")
    let slot = 0
    /** Takes the next frame: false once the connection has closed. */
    const receiveNext: Effect.Effect<boolean, ChannelError> = Effect.suspend(() => {
      const receive = posted[slot]
      // A receive could not be posted again (the connection closed): the frames before it were all taken.
      if (receive === undefined) return Effect.succeed(false)
      return Effect.matchEffect(receive.completion, {
        onFailure: (e) => closedConnection(e) ? Effect.succeed(false) : Effect.fail(failed(e)),
        onSuccess: (completion) => {
          const current = slot
          const at = current * inline
          const bytes = memory.slice(at, at + completion.byteLength)
          slot = (slot + 1) % receives
          return Effect.matchEffect(post(current), {
            // The frame is handled even when its buffer cannot be posted again.
            onFailure: (e) => {
              if (!closedConnection(e)) return Effect.fail(failed(e))
              posted[current] = undefined
              return Effect.as(onFrame(bytes), true)
            },
            onSuccess: (again) => {
              posted[current] = again
              return Effect.as(onFrame(bytes), true)
            }
          })
        }
      })
    })
    const loop: Effect.Effect<void, ChannelError> = Effect.flatMap(
      receiveNext,
      (more) => more ? loop : Effect.void
    )
    return loop
  })

/**
 * Runs the receive loop (in `scope`) until it ends or a message is refused, then ends the channel:
 * `stop` fails what waits for the other side, the messages received before the end are delivered
 * (for at most `drainTimeout`), and `closed` completes with how it ended. An interruption (the
 * scope closing) skips the drain: the close waits for nothing.
 */
export const runToEnd = (options: {
  readonly scope: Scope.Scope
  readonly loop: Effect.Effect<void, ChannelError>
  readonly inbox: Inbox
  readonly stop: Effect.Effect<void>
  readonly closed: Deferred.Deferred<void, ChannelError>
  readonly drainTimeout: Duration.Duration
}): Effect.Effect<void> => {
  const { closed, drainTimeout, inbox, loop, scope, stop } = options
  return Effect.raceFirst(loop, Deferred.await(inbox.refused)).pipe(
    Effect.exit,
    Effect.flatMap((exit) =>
      stop.pipe(
        Effect.zipRight(Effect.sync(() => inbox.end())),
        Effect.zipRight(Effect.timeout(Deferred.await(inbox.drained), drainTimeout)),
        Effect.ignore,
        Effect.zipRight(Deferred.done(closed, exit))
      )
    ),
    Effect.onInterrupt(() =>
      Effect.zipRight(
        stop,
        Deferred.fail(closed, new ChannelError({ reason: "Closed", detail: "the channel was closed" }))
      )
    ),
    Effect.interruptible,
    Effect.forkIn(scope),
    Effect.asVoid
  )
}
