/**
 * Pipelines over a connection: Sinks that write a Stream of byte chunks into the other side's
 * memory (a range that fills up, or a ring its reader frees), and a Stream of the messages the
 * other side sends, over a pool of pre-posted receives.
 *
 * Each runs on both paths: over a librpma `Connection` (`writeRange(peer, conn, options)`, the
 * other side's memory a `RemoteMr`) or over a librdmacm `CmEndpoint` (`writeRange(endpoint,
 * options)`, the other side's memory a `RemoteKey`, the staging region a message region of the
 * endpoint's). Only `writeRange`'s `flush` is librpma's alone (rpma_flush has no librdmacm
 * counterpart).
 *
 * Backpressure comes from the send queue: a Sink copies the chunks it is given into a registered
 * staging region and writes them with one `Connection.writeMany` (posted as the send queue has
 * room, one wait for the batch) when the staging region is full or the chunk ends; it takes the
 * next chunk only once those writes completed. So at most the staging region's bytes are in flight,
 * and a slow link slows the Stream that feeds the Sink. No fiber is started per chunk.
 *
 * @since 1.0.0
 */
import type * as Duration from "effect/Duration"
import type * as Sink from "effect/Sink"
import type * as Stream from "effect/Stream"
import type * as CmEndpoint from "./CmEndpoint.js"
import type * as Connection from "./Connection.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/rdmaStream.js"
import type { LocalMr } from "./LocalMr.js"
import type { Peer } from "./Peer.js"
import type { MemoryRefusedError, RpmaError } from "./RdmaError.js"
import type * as RemoteKey from "./RemoteKey.js"
import type { RemoteMr } from "./RemoteMr.js"

/**
 * A chunk did not fit in what is left of the range: `written` bytes were written (every chunk
 * before it, whole), the chunk needed `needed`, the range holds `capacity`.
 *
 * @since 1.0.0
 * @category errors
 */
export const RegionFullError: typeof internal.RegionFullError = internal.RegionFullError

/**
 * @since 1.0.0
 * @category errors
 */
export type RegionFullError = internal.RegionFullError

/**
 * The ring stayed full for `stallTimeout`: its reader did not free space (`unread` bytes waited).
 *
 * @since 1.0.0
 * @category errors
 */
export const RingStalledError: typeof internal.RingStalledError = internal.RingStalledError

/**
 * @since 1.0.0
 * @category errors
 */
export type RingStalledError = internal.RingStalledError

/**
 * An option out of its range (a staging size, a pool size, a range outside its region): the
 * message names the option and what it must be.
 *
 * @since 1.0.0
 * @category errors
 */
export const StreamOptionError: typeof internal.StreamOptionError = internal.StreamOptionError

/**
 * @since 1.0.0
 * @category errors
 */
export type StreamOptionError = internal.StreamOptionError

/**
 * What a Sink's staging and writes can fail with.
 *
 * @since 1.0.0
 * @category errors
 */
export type WriteError = Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError

/**
 * The bytes at the start of a ring that are not data: the writer's tail word (bytes ever written,
 * u64 little-endian, at offset 0), then the reader's head word (bytes ever read, at offset 8).
 *
 * @since 1.0.0
 * @category constants
 */
export const RING_HEADER: number = internal.RING_HEADER

/**
 * @since 1.0.0
 * @category models
 */
export type RangeOptions =
  & RangeSettings
  & (
    | {
      readonly dst: RemoteMr<"WRITE_DST">
      readonly flush?: undefined
    }
    | {
      readonly dst: RemoteMr<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">
      /**
       * After each chunk's writes complete, flush the range (rpma_flush): `"visibility"` makes them
       * visible on the remote node, `"persistent"` persistent (the connection must allow it: see
       * `Connection.flush`). The region must allow that flush type. Default: no flush.
       */
      readonly flush: "visibility"
    }
    | {
      readonly dst: RemoteMr<"WRITE_DST" | "FLUSH_TYPE_PERSISTENT">
      readonly flush: "persistent"
    }
  )

/**
 * What every {@link RangeOptions} may say.
 *
 * @since 1.0.0
 * @category models
 */
export interface RangeSettings {
  /** Where the range starts in `dst`. Default 0. */
  readonly offset?: number | undefined
  /** The range's length. Default: the rest of `dst`. */
  readonly length?: number | undefined
  /** The registered staging region's size, the most bytes in flight. Default 64 KiB. */
  readonly stagingSize?: number | undefined
  /**
   * A staging region of your own (WRITE_SRC, of the Sink's peer) instead of one registered per
   * Sink: reused across Sinks (a Sink per batch, per reconnect), one Sink at a time. Exclusive
   * with `stagingSize`.
   */
  readonly staging?: LocalMr<"WRITE_SRC"> | undefined
  /**
   * At the range's end, go on from its start, over what was written there (a circular log whose
   * reader keeps up by its own means), instead of failing with {@link RegionFullError}. A chunk
   * larger than the whole range still fails. Default false.
   */
  readonly wrap?: boolean | undefined
}

/**
 * {@link writeRange}'s options on a librdmacm endpoint: the other side's region is a write key
 * (`RemoteKey.make` of an `rdma_reg_write` region), the staging region a message region of the
 * endpoint's. There is no `flush`: it is librpma's (rpma_flush), and librdmacm has no counterpart.
 * A write's completion says the other side's device took it; to tell the reader the bytes are
 * there, send it a message after the writes (a reliable connection delivers it after them).
 *
 * @since 1.0.0
 * @category models
 */
export interface CmRangeOptions extends Omit<RangeSettings, "staging"> {
  readonly dst: RemoteKey.RemoteKey<"write">
  /** A staging region of your own (`CmEndpoint.registerMessages` on the Sink's endpoint). */
  readonly staging?: CmEndpoint.MessageRegion | undefined
}

/**
 * What a ring writer may say on either path.
 *
 * @since 1.0.0
 * @category models
 */
export interface RingSettings {
  /** The registered staging region's size. Default 64 KiB, or the ring's data size if smaller. */
  readonly stagingSize?: number | undefined
  /** How often the writer reads the reader's head word while the ring is full. Default 1 ms. */
  readonly pollInterval?: Duration.DurationInput | undefined
  /** How long the ring may stay full before the Sink fails with {@link RingStalledError}. Default 30 s. */
  readonly stallTimeout?: Duration.DurationInput | undefined
}

/**
 * @since 1.0.0
 * @category models
 */
export interface RingOptions extends RingSettings {
  /** The reader's ring (a region registered WRITE_DST and READ_SRC), read with {@link readRing}. */
  readonly ring: RemoteMr<"WRITE_DST" | "READ_SRC">
  /** A staging region of your own, as {@link RangeSettings}' `staging`. */
  readonly staging?: LocalMr<"WRITE_SRC"> | undefined
}

/**
 * {@link writeRing}'s options on a librdmacm endpoint. librdmacm registers memory for the other
 * side's writes (`rdma_reg_write`) or reads (`rdma_reg_read`), not both: the reader registers its
 * ring memory once each way and sends both keys; the writer writes the data and its tail word
 * through `ring` and reads the reader's head word through `head`.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmRingOptions extends RingSettings {
  /** The write key of the reader's ring memory. */
  readonly ring: RemoteKey.RemoteKey<"write">
  /** The read key of the same memory (at least its {@link RING_HEADER}-byte header, from its start). */
  readonly head: RemoteKey.RemoteKey<"read">
  /** A staging region of your own (`CmEndpoint.registerMessages` on the Sink's endpoint). */
  readonly staging?: CmEndpoint.MessageRegion | undefined
}

/**
 * What a Sink on a librdmacm endpoint fails with, besides its own errors: a write's, the staging
 * region's registration, or a bad option.
 *
 * @since 1.0.0
 * @category errors
 */
export type CmWriteError = CmEndpoint.TransferError | MemoryRefusedError | StreamOptionError

/**
 * @since 1.0.0
 * @category models
 */
export interface MessagesOptions {
  /** Receives kept posted (the most messages the other side can send ahead). Default 16. */
  readonly count?: number | undefined
  /** Each receive buffer's size: the largest message. Default 4096. */
  readonly size?: number | undefined
}

/**
 * A Sink that writes the chunks of a Stream one after another into a remote range, and ends with
 * the number of bytes written. A chunk that does not fit in what is left fails the Sink with
 * {@link RegionFullError}, after everything before it was written; with `wrap`, the writing goes
 * on from the range's start instead. With `flush`, each chunk is flushed once its writes complete,
 * so the Sink pulls the next chunk only when the last one is visible (or persistent) there.
 *
 * Nothing is replayed: a Sink that fails (its connection lost, say) has written some prefix of
 * what it consumed, and which is not known. A writer that must not lose records over a reconnect
 * (`RdmaClient.withConnection`) frames them and resumes from what the reader acknowledged, as a
 * log does; the Sink gives it the bytes written per run.
 *
 * @example
 * ```ts
 * import { Effect, Stream } from "effect"
 * import { Connection, Peer, RdmaStream, RemoteMr } from "@effect-rdma/core"
 *
 * declare const peer: Peer.Peer
 * declare const conn: Connection.Connection
 * declare const log: RemoteMr.RemoteMr<"WRITE_DST">
 * declare const records: Stream.Stream<Uint8Array>
 *
 * const written = Stream.run(records, RdmaStream.writeRange(peer, conn, { dst: log }))
 * ```
 *
 * @since 1.0.0
 * @category sinks
 */
export const writeRange: {
  (
    endpoint: CmEndpoint.CmEndpoint,
    options: CmRangeOptions
  ): Sink.Sink<number, Uint8Array, never, CmWriteError | RegionFullError, RdmaDriver>
  (
    peer: Peer,
    conn: Connection.Connection,
    options: RangeOptions
  ): Sink.Sink<number, Uint8Array, never, WriteError | Connection.FlushError | RegionFullError, RdmaDriver>
} = internal.writeRange

/**
 * A Sink that writes the chunks of a Stream into a remote ring, wrapping at its end, and ends with
 * the number of bytes written. The ring is a region of the reader's: {@link RING_HEADER} bytes of
 * header, then the data. After each batch of writes completes, the writer writes its tail word;
 * the reader ({@link readRing}) copies the bytes between its head and that tail out and advances
 * its head word, which the writer reads (an RDMA read) when the ring has no room for the next
 * piece, every `pollInterval`, for at most `stallTimeout`. A chunk larger than the ring is written
 * in pieces. The ring carries bytes, not records: frame them (a length prefix) if the reader needs
 * their boundaries. One writer per ring.
 *
 * @since 1.0.0
 * @category sinks
 */
export const writeRing: {
  (
    endpoint: CmEndpoint.CmEndpoint,
    options: CmRingOptions
  ): Sink.Sink<number, Uint8Array, never, CmWriteError | RingStalledError, RdmaDriver>
  (
    peer: Peer,
    conn: Connection.Connection,
    options: RingOptions
  ): Sink.Sink<number, Uint8Array, never, WriteError | RingStalledError, RdmaDriver>
} = internal.writeRing

/**
 * The reader's side of {@link writeRing}: a Stream of the bytes written into `ring` (copies, in the
 * order written, in pieces as they arrived), polling its tail word every `pollInterval`
 * (default 1 ms). Each piece's space is freed (the head word advanced) once it is copied. It never
 * ends by itself: take what you expect, or interrupt it.
 *
 * @since 1.0.0
 * @category streams
 */
export const readRing: (
  ring: LocalMr<"WRITE_DST" | "READ_SRC"> | CmEndpoint.Region<"write" | "read">,
  options?: { readonly pollInterval?: Duration.DurationInput | undefined }
) => Stream.Stream<Uint8Array, StreamOptionError> = internal.readRing

/**
 * A Stream of the messages the other side sends on `conn` (rpma_send), over a pool of `count`
 * receives of `size` bytes each, kept posted: a receive is posted again as soon as its message is
 * copied out. Each element is a copy (the buffer is reused at once), so it may be kept. The pool
 * bounds what the other side can send ahead; a sender beyond it waits (librpma retries a send
 * that finds no receive without end), so a slow consumer slows the sender. The Stream ends when
 * the connection is closed and fails with `ConnectionClosedError` (`LOST`) when it is lost. Its
 * receive region is released when it ends, or, while receives are still posted, when the
 * connection is deleted (posted receives cannot be recalled).
 *
 * @since 1.0.0
 * @category streams
 */
export const messages: {
  (
    endpoint: CmEndpoint.CmEndpoint,
    options?: MessagesOptions
  ): Stream.Stream<Uint8Array, CmEndpoint.TransferError | MemoryRefusedError | StreamOptionError, RdmaDriver>
  (
    peer: Peer,
    conn: Connection.Connection,
    options?: MessagesOptions
  ): Stream.Stream<
    Uint8Array,
    Connection.TransferError | RpmaError | MemoryRefusedError | StreamOptionError,
    RdmaDriver
  >
} = internal.messages
