/**
 * A connection between two peers (`struct rpma_conn`), and the operations that move data over it:
 * write, read, flush, atomic write, send and receive. Each operation is an Effect that succeeds
 * when its completion arrives and fails with a tagged error when it does not. An operation reads
 * and checks its arguments when its Effect runs, whether it waits for its completion or not.
 *
 * Completions are read from the connection's completion channel, armed with a callback while
 * requests are outstanding (the native driver polls its file descriptor through libuv: no thread
 * and no fiber per operation, nothing blocks the event loop), so any number of operations can be
 * in flight. When the connection is lost or closed, the completions already queued are delivered,
 * then every operation still pending fails with {@link ConnectionClosedError}. The end waits (within
 * the timeout) only for what the device reports by itself: signalled requests, receives, and what
 * the disconnect flushes. A request posted unsignalled (`completion: "onError"`) that succeeded
 * reports nothing, ever, so the end does not wait for it: one that no later completion settled fails
 * with its outcome unknown (`unsignalled: true`), and a close after unsignalled requests takes no
 * longer than one after signalled requests.
 *
 * An operation can be interrupted (a timeout, a closing scope) while it waits for its completion:
 * it then ends at once with its outcome unknown, but its request stays posted, and the regions it
 * names stay registered (their release is deferred) until it completes or its connection is
 * deleted, because the device may still reach them. A receive interrupted that way may still take
 * the next message.
 *
 * @since 0.1.0
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import * as errors from "./ConnectionError.js"
import type { RdmaDriver } from "./Driver.js"
import type { Signal } from "./DriverModel.js"
import * as internal from "./internal/connection.js"
import * as connectionImpl from "./internal/connectionImpl.js"
import * as ops from "./internal/operations.js"
import * as posting from "./internal/posting.js"
import type { LocalMr } from "./LocalMr.js"
import type { Peer } from "./Peer.js"
import type * as Polling from "./Polling.js"
import type {
  CompletionError,
  RpmaError,
  RpmaInvalidError,
  RpmaNoSupportError,
  RpmaProviderError
} from "./RdmaError.js"
import type { RemoteMr } from "./RemoteMr.js"
import type { SharedReceiveQueue } from "./SharedReceiveQueue.js"

/**
 * What marks a {@link Connection}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = connectionImpl.TypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * A state of a connection, the same on both data paths: `"Connecting"` until it is established
 * (a librpma connection exists only from `"Connected"` on), `"Closing"` while this side closes it,
 * then `"Closed"` (by either side) or `"Lost"` (the link or the other side failed).
 *
 * @since 1.0.0
 * @category models
 */
export type State = "Connecting" | "Connected" | "Closing" | "Closed" | "Lost"

/**
 * An established connection: what it is to its users. Made by {@link connect} and
 * `Listener.accept`; its machinery (its posting kernel, its queues) is its own. Its state is read
 * with {@link state} and {@link changes}.
 *
 * @since 0.1.0
 * @category models
 */
export interface Connection extends Pipeable {
  readonly [TypeId]: TypeId
  /** What the other side sent with its request or acceptance (rdma_cm pads it). */
  readonly privateData: Uint8Array
}

/**
 * @since 1.0.0
 * @category guards
 */
export const isConnection: (u: unknown) => u is Connection = connectionImpl.isConnection

/**
 * Connection settings; every field has a default.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How long to wait for address resolution and for the connection to be established. Default 5 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Requests in flight at once on the send queue. Default 64. */
  readonly sendQueueSize?: number | undefined
  /** Receives posted at once. Default 64. */
  readonly receiveQueueSize?: number | undefined
  /**
   * Completion queue size. Default: send + receive queue sizes; only the send queue's with a
   * receive CQ (the connection's or its shared receive queue's); with a shared receive queue that
   * has none, the send queue's plus the queue's receives, which complete here.
   */
  readonly completionQueueSize?: number | undefined
  /** The remote peer writes straight to persistent memory, so persistent flushes are allowed. Default false. */
  readonly directWriteToPmem?: boolean | undefined
  /**
   * Bytes sent with the connection request (rdma_cm private data). It is neither encrypted nor
   * authenticated: carry descriptors over `DescriptorExchange` instead, unless a C peer needs it.
   */
  readonly privateData?: Uint8Array | undefined
  /**
   * rpma_conn_cfg_set_srq: the connection's incoming messages land in this queue's receives (post
   * them with `SharedReceiveQueue.postRecv`); `Connection.recv` on the connection is refused. The
   * queue is deleted only after the connection.
   */
  readonly sharedReceiveQueue?: SharedReceiveQueue | undefined
  /**
   * rpma_conn_cfg_set_rcq_size: receives complete on a receive completion queue of their own, of
   * this size, and the completion queue then needs only the send queue's size. Operations complete
   * the same way. Smaller than the receive queue is accepted (as librpma does): if more receives
   * complete than it holds before they are polled, the device overruns it (IBV_EVENT_CQ_ERR): those
   * completions are lost, and their receives fail only when the connection ends. With a shared
   * receive queue made with `completionQueueSize: 0` its receives of this connection's messages
   * complete here (librpma's 08srq mode r); refused with one that has a receive CQ of its own,
   * where they complete instead. Default 0: receives complete on the completion queue.
   */
  readonly receiveCompletionQueueSize?: number | undefined
  /**
   * rpma_conn_cfg_set_compl_channel: the completion queue and the receive completion queue signal
   * on one channel (waited on with rpma_conn_wait). Not with a shared receive queue that has a
   * receive CQ of its own (librpma refuses it). Default false.
   */
  readonly sharedCompletionChannel?: boolean | undefined
  /**
   * How it waits for completions: `"off"` (arm the completion channel and wait), `{ budget }`
   * (busy-poll up to `budget`, at most 10 ms, before each wait) or `"adaptive"` / `{ budget,
   * adaptive: true }` (the budget shrinks to 0 while polls find nothing, so an idle one costs no
   * CPU). One wake-up holds the event loop at most `budget`. Default: `Polling.layer`'s, else
   * `"off"` (see the Polling module).
   */
  readonly polling?: Polling.Polling | undefined
}

/**
 * The connection could not be established: the other side rejected it, could not be reached, or
 * did not answer in time.
 *
 * @since 0.1.0
 * @category errors
 */
export const ConnectionFailedError: typeof errors.ConnectionFailedError = errors.ConnectionFailedError

/**
 * The connection could not be established: the other side rejected it, could not be reached, or
 * did not answer in time.
 *
 * @since 0.1.0
 * @category errors
 */
export type ConnectionFailedError = errors.ConnectionFailedError

/**
 * The connection is closed or lost: the operation was not done, or its outcome is unknown.
 *
 * @since 0.1.0
 * @category errors
 */
export const ConnectionClosedError: typeof errors.ConnectionClosedError = errors.ConnectionClosedError

/**
 * The connection is closed or lost: the operation was not done, or its outcome is unknown.
 *
 * @since 0.1.0
 * @category errors
 */
export type ConnectionClosedError = errors.ConnectionClosedError

/**
 * An offset or length that does not fit a region, checked before anything is posted (librpma
 * checks neither, and silently truncates lengths above 2^32 - 1).
 *
 * @since 0.1.0
 * @category errors
 */
export const OutOfRangeError: typeof errors.OutOfRangeError = errors.OutOfRangeError

/**
 * An offset or length that does not fit a region, checked before anything is posted (librpma
 * checks neither, and silently truncates lengths above 2^32 - 1).
 *
 * @since 0.1.0
 * @category errors
 */
export type OutOfRangeError = errors.OutOfRangeError

/**
 * What librpma's post functions (rpma_write, rpma_read, rpma_send, ...) refuse a request with:
 * RPMA_E_INVAL for an argument the library or the driver refuses (a region of another peer, a
 * request on a closed queue), RPMA_E_PROVIDER for what the device refuses (a full queue).
 *
 * @since 1.0.0
 * @category errors
 */
export type PostError = RpmaInvalidError | RpmaProviderError

/**
 * What a write, read, atomic write, send or receive can fail with, awaited or not: a range refused
 * before posting, the connection's end, the work completion's status, or librpma refusing the post.
 *
 * @since 1.0.0
 * @category errors
 */
export type TransferError = OutOfRangeError | ConnectionClosedError | CompletionError | PostError

/**
 * What a flush can fail with: as a transfer, and RPMA_E_NOSUPP when the remote region or peer does
 * not support the flush type.
 *
 * @since 1.0.0
 * @category errors
 */
export type FlushError = TransferError | RpmaNoSupportError

/**
 * Everything an operation can fail with (a flush's errors: the widest).
 *
 * @since 0.1.0
 * @category errors
 */
export type OperationError = FlushError

/**
 * @since 1.0.0
 * @category models
 */
export interface WriteArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  /** Default 0. */
  readonly dstOffset?: number | undefined
  readonly src: LocalMr<"WRITE_SRC">
  /** Default 0. */
  readonly srcOffset?: number | undefined
  readonly length: number
  /**
   * Immediate data (a 32-bit unsigned integer): rpma_write_with_imm, a write that also consumes a
   * receive on the other side, which completes as RECV_RDMA_WITH_IMM with `imm` and the length
   * written.
   *
   * @since 1.0.0
   */
  readonly imm?: number | undefined
}

/**
 * @since 1.0.0
 * @category models
 */
export interface ReadArgs {
  readonly dst: LocalMr<"READ_DST">
  /** Default 0. */
  readonly dstOffset?: number | undefined
  readonly src: RemoteMr<"READ_SRC">
  /** Default 0. */
  readonly srcOffset?: number | undefined
  readonly length: number
}

/**
 * A flush of `length` bytes from `dstOffset` of a remote region: `type: "visibility"` (the
 * default) makes earlier writes to the range visible, `"persistent"` makes them persistent (the
 * region must allow that flush type: its usage says so).
 *
 * @since 1.0.0
 * @category models
 */
export type FlushArgs =
  | {
    readonly dst: RemoteMr<"FLUSH_TYPE_VISIBILITY">
    /** Default 0. */
    readonly dstOffset?: number | undefined
    readonly length: number
    /** Default `"visibility"`. */
    readonly type?: "visibility" | undefined
  }
  | {
    readonly dst: RemoteMr<"FLUSH_TYPE_PERSISTENT">
    /** Default 0. */
    readonly dstOffset?: number | undefined
    readonly length: number
    readonly type: "persistent"
  }

/**
 * @since 1.0.0
 * @category models
 */
export interface AtomicWriteArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  /** 8-byte aligned. */
  readonly offset: number
  /** Exactly 8 bytes. */
  readonly value: Uint8Array
}

/**
 * @since 1.0.0
 * @category models
 */
export interface SendArgs {
  readonly src: LocalMr<"SEND">
  /** Default 0. */
  readonly offset?: number | undefined
  readonly length: number
  /**
   * Immediate data (a 32-bit unsigned integer): rpma_send_with_imm, whose receive on the other
   * side completes with it.
   *
   * @since 1.0.0
   */
  readonly imm?: number | undefined
}

/**
 * @since 1.0.0
 * @category models
 */
export interface RecvArgs {
  readonly dst: LocalMr<"RECV">
  /** Default 0. */
  readonly offset?: number | undefined
  /** The most bytes to receive. Default: the rest of the region. */
  readonly length?: number | undefined
}

/**
 * For send-queue requests posted without waiting: `"always"` (the default) produces a completion,
 * `"onError"` only a failed one (RPMA_F_COMPLETION_ON_ERROR). An unsignalled request's success is
 * known when a later signalled request on the same connection completes, so wait on the last one
 * only, as librpma's clients do. The request that takes the send queue's last free entry is
 * signalled regardless.
 *
 * @since 1.0.0
 * @category models
 */
export type CompletionMode = Signal

/**
 * A write posted without waiting: with `imm`, rpma_write_with_imm (it also consumes a receive on
 * the other side, which completes with it).
 *
 * @since 1.0.0
 * @category models
 */
export interface PostWriteArgs extends WriteArgs {
  readonly completion?: CompletionMode | undefined
}

/**
 * A read posted without waiting.
 *
 * @since 1.0.0
 * @category models
 */
export interface PostReadArgs extends ReadArgs {
  readonly completion?: CompletionMode | undefined
}

/**
 * A send posted without waiting: with `imm`, rpma_send_with_imm (the receive on the other side
 * completes with it).
 *
 * @since 1.0.0
 * @category models
 */
export interface PostSendArgs extends SendArgs {
  readonly completion?: CompletionMode | undefined
}

/**
 * A request and its answer (`call`), or an answer and the next request (`reply`): the receive is
 * posted first, then the send, so that the other side's message never finds no receive.
 *
 * @since 1.0.0
 * @category models
 */
export interface ExchangeArgs {
  readonly send: SendArgs
  readonly recv: RecvArgs
}

/**
 * What a completion says it completed (`enum ibv_wc_opcode`).
 *
 * @since 1.0.0
 * @category models
 */
export type CompletedOperation = "SEND" | "RDMA_WRITE" | "RDMA_READ" | "RECV" | "RECV_RDMA_WITH_IMM" | "OTHER"

/**
 * A successful completion: what it was, the bytes it moved (for a receive: the bytes received, or
 * the length of the write with immediate data that consumed it), its flags, and the immediate data
 * when the other side sent some.
 *
 * @since 1.0.0
 * @category models
 */
export interface Completion {
  readonly operation: CompletedOperation
  /** `enum ibv_wc_opcode`. */
  readonly opcode: number
  readonly byteLength: number
  /** `ibv_wc.wc_flags`. */
  readonly flags: number
  /** The immediate data (a 32-bit unsigned integer), when present. */
  readonly imm: number | undefined
}

/**
 * A request posted without waiting for it. It holds its queue entry and keeps its regions
 * registered (their release deferred, their memory alive) until its completion arrives, an implied
 * one for an unsignalled request (a later request on the same send queue completed), or the
 * connection ends; a connection that closes fails the requests still in flight and releases their
 * regions only once it is deleted. An unsignalled request that nothing settled by then fails with
 * ConnectionClosedError, `unsignalled: true`: it may have succeeded (which it never reports). `completion` waits for the outcome; it may be awaited any number
 * of times, or never.
 *
 * @since 1.0.0
 * @category models
 */
export interface Posted {
  readonly operation: string
  readonly completion: Effect.Effect<Completion, TransferError>
}

/**
 * Connects to a peer listening at `address`:`port` (rpma_conn_req_new + rpma_conn_req_connect)
 * and waits for the connection to be established. Disconnected and deleted when the scope closes.
 * A server that isolates its clients (`Listener.serve`'s default) answers with the port of a
 * listener of this client's own and a one-time token: that first connection is closed and the one
 * made there (with the same options, the token as its private data) returned. It is followed once,
 * and only to the same address. The returned connection's `privateData` is the accept's there.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, DescriptorExchange, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
 *
 * declare const tls: DescriptorExchange.TlsOptions // the log server's CA, this client's key and certificate
 *
 * const append = (record: Uint8Array, at: number) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const peer = yield* Peer.Peer
 *     const offer = yield* DescriptorExchange.fetch({ host: "log.internal", port: 7000, tls })
 *     const descriptor = offer.regions["log"]
 *     if (descriptor === undefined) return yield* Effect.dieMessage("the server offers no log region")
 *     const log = yield* RemoteMr.fromDescriptor(descriptor).pipe(
 *       Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)))
 *     )
 *     const conn = yield* Connection.connect(peer, offer.rdma.address, offer.rdma.port)
 *     const src = yield* LocalMr.allocate(peer, record.length, Usage.WRITE_SRC)
 *     src.memory.set(record)
 *     yield* Connection.write(conn, { dst: log, dstOffset: at, src, length: record.length })
 *     yield* Connection.flush(conn, { dst: log, dstOffset: at, length: record.length })
 *   }))
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const connect: (
  peer: Peer,
  address: string,
  port: number,
  options?: Options
) => Effect.Effect<Connection, RpmaError | ConnectionFailedError, RdmaDriver | Scope.Scope> = internal.connect

/**
 * rpma_conn_get_qp_num: the number of the connection's queue pair, which the completions of a
 * {@link SharedReceiveQueue.SharedReceiveQueue} carry to say which connection a message came on.
 *
 * @since 1.0.0
 * @category getters
 */
export const qpNum: (conn: Connection) => Effect.Effect<number, RpmaError, RdmaDriver> = posting.qpNum

/**
 * rpma_write: copies `length` bytes from a local WRITE_SRC region to a remote WRITE_DST region;
 * with `imm`, rpma_write_with_imm (a receive on the other side completes with it). Data-first or
 * data-last: `Connection.write(conn, args)` or `conn.pipe(Connection.write(args))`.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr, RemoteMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const log: RemoteMr.RemoteMr<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">
 * declare const record: LocalMr.LocalMr<"WRITE_SRC">
 *
 * const append = (at: number) =>
 *   Connection.write(conn, { dst: log, dstOffset: at, src: record, length: 64 }).pipe(
 *     Effect.zipRight(Connection.flush(conn, { dst: log, dstOffset: at, length: 64 }))
 *   )
 * ```
 *
 * @since 0.1.0
 * @category operations
 */
export const write: {
  (args: WriteArgs): (conn: Connection) => Effect.Effect<void, TransferError>
  (conn: Connection, args: WriteArgs): Effect.Effect<void, TransferError>
} = dual(2, ops.write)

/**
 * Many rpma_writes, posted as a sliding window and awaited together: the bandwidth path. As many writes as the send queue has free entries go in
 * one driver call, and more as entries free up (as each completion arrives, not batch after batch),
 * with one wait for the whole batch: no fiber and no Effect per write. Every write is checked before
 * anything is posted (consecutive writes of the same regions look them up once); immediate data is
 * refused in a batch (post such writes with {@link postWrite}). After a failure nothing more is posted; it fails with the first failure once
 * every posted write has its outcome. Interrupted, it posts nothing more (what is in flight keeps
 * its regions until it completes).
 *
 * @example
 * ```ts
 * import type { Effect } from "effect"
 * import { Connection, LocalMr, RemoteMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const log: RemoteMr.RemoteMr<"WRITE_DST">
 * declare const records: LocalMr.LocalMr<"WRITE_SRC">
 * // 64 records of 64 bytes, each to its slot of the remote log.
 * const writes = Array.from({ length: 64 }, (_, i) => ({ dst: log, dstOffset: i * 64, src: records, srcOffset: i * 64, length: 64 }))
 * const program: Effect.Effect<void, Connection.TransferError> = Connection.writeMany(conn, writes)
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany: {
  (args: ReadonlyArray<WriteArgs>): (conn: Connection) => Effect.Effect<void, TransferError>
  (conn: Connection, args: ReadonlyArray<WriteArgs>): Effect.Effect<void, TransferError>
} = dual(2, ops.writeMany)

/**
 * A write checked and built once, to post many times, as jVerbs' stateful verb calls do: the
 * handles, ranges and request are fixed when it is prepared (an OutOfRangeError then, never later),
 * and each run of the returned Effect posts it and awaits its completion with nothing else to do.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr, RemoteMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const slot: RemoteMr.RemoteMr<"WRITE_DST">
 * declare const heartbeat: LocalMr.LocalMr<"WRITE_SRC">
 *
 * const beat = Effect.gen(function*() {
 *   const post = yield* Connection.prepareWrite(conn, { dst: slot, src: heartbeat, length: 8 })
 *   for (let i = 0; i < 1000; i++) yield* post
 * })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const prepareWrite: {
  (args: WriteArgs): (conn: Connection) => Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError>
  (conn: Connection, args: WriteArgs): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError>
} = dual(2, ops.prepareWrite)

/**
 * A read checked and built once, to post many times (see {@link prepareWrite}).
 *
 * @since 1.0.0
 * @category operations
 */
export const prepareRead: {
  (args: ReadArgs): (conn: Connection) => Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError>
  (conn: Connection, args: ReadArgs): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError>
} = dual(2, ops.prepareRead)

/**
 * rpma_read: copies `length` bytes from a remote READ_SRC region into a local READ_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const read: {
  (args: ReadArgs): (conn: Connection) => Effect.Effect<void, TransferError>
  (conn: Connection, args: ReadArgs): Effect.Effect<void, TransferError>
} = dual(2, ops.read)

/**
 * rpma_flush: with `type: "visibility"` (the default, RPMA_FLUSH_TYPE_VISIBILITY) makes earlier
 * writes to the range visible on the remote node; with `type: "persistent"`
 * (RPMA_FLUSH_TYPE_PERSISTENT) makes them persistent, which needs a connection made with
 * `directWriteToPmem: true` or the other side's peer configuration saying so (RPMA_E_NOSUPP
 * otherwise).
 *
 * librpma's flush is an RDMA read of 8 bytes of the region at the flush's offset, whatever its
 * length, which the device refuses past the region's end (and the connection would then fail every
 * later operation). So a flush that starts within 8 bytes of the end (`dstOffset: 4095, length: 1`,
 * or `dstOffset: 4096, length: 0` on a 4096-byte region) reads the region's last 8 bytes instead: the
 * read is only a fence, and the range flushed contains the one asked for. A region smaller than 8
 * bytes cannot be flushed: refused with OutOfRangeError before anything is posted.
 *
 * @since 0.1.0
 * @category operations
 */
export const flush: {
  (args: FlushArgs): (conn: Connection) => Effect.Effect<void, FlushError>
  (conn: Connection, args: FlushArgs): Effect.Effect<void, FlushError>
} = dual(2, ops.flush)

/**
 * rpma_atomic_write: stores 8 bytes atomically at an 8-byte-aligned offset of a remote WRITE_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const atomicWrite: {
  (args: AtomicWriteArgs): (conn: Connection) => Effect.Effect<void, TransferError>
  (conn: Connection, args: AtomicWriteArgs): Effect.Effect<void, TransferError>
} = dual(2, ops.atomicWrite)

/**
 * rpma_send: sends `length` bytes of a SEND region to the other side's next posted receive; with
 * `imm`, rpma_send_with_imm (that receive completes with it).
 *
 * @since 0.1.0
 * @category operations
 */
export const send: {
  (args: SendArgs): (conn: Connection) => Effect.Effect<void, TransferError>
  (conn: Connection, args: SendArgs): Effect.Effect<void, TransferError>
} = dual(2, ops.send)

/**
 * rpma_recv: posts a receive into a RECV region and succeeds with its completion: what arrived (a
 * send, with or without immediate data, or a write with immediate data), the bytes received
 * (`byteLength`) and the immediate data.
 *
 * @since 0.1.0
 * @category operations
 */
export const recv: {
  (args: RecvArgs): (conn: Connection) => Effect.Effect<Completion, TransferError>
  (conn: Connection, args: RecvArgs): Effect.Effect<Completion, TransferError>
} = dual(2, posting.recv)

/**
 * Posts an rpma_write (or rpma_write_with_imm, with `imm`) without waiting for it.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr, RemoteMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const dst: RemoteMr.RemoteMr<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">
 * declare const src: LocalMr.LocalMr<"WRITE_SRC">
 * // Write unsignalled, wait only on the flush that follows it.
 * const program = Effect.gen(function*() {
 *   yield* Connection.postWrite(conn, { dst, src, length: 64, completion: "onError" })
 *   yield* Connection.flush(conn, { dst, length: 64 })
 * })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const postWrite: {
  (args: PostWriteArgs): (conn: Connection) => Effect.Effect<Posted, TransferError>
  (conn: Connection, args: PostWriteArgs): Effect.Effect<Posted, TransferError>
} = dual(2, posting.postWrite)

/**
 * Posts an rpma_read without waiting for it.
 *
 * @since 1.0.0
 * @category operations
 */
export const postRead: {
  (args: PostReadArgs): (conn: Connection) => Effect.Effect<Posted, TransferError>
  (conn: Connection, args: PostReadArgs): Effect.Effect<Posted, TransferError>
} = dual(2, posting.postRead)

/**
 * Posts an rpma_send (or rpma_send_with_imm, with `imm`) without waiting for it.
 *
 * @since 1.0.0
 * @category operations
 */
export const postSend: {
  (args: PostSendArgs): (conn: Connection) => Effect.Effect<Posted, TransferError>
  (conn: Connection, args: PostSendArgs): Effect.Effect<Posted, TransferError>
} = dual(2, posting.postSend)

/**
 * A request and its answer: posts the receive for the answer (rpma_recv), then the request
 * (rpma_send), and succeeds with the answer's completion. The receive goes first, so the answer
 * never finds no receive posted.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const request: LocalMr.LocalMr<"SEND">
 * declare const answer: LocalMr.LocalMr<"RECV">
 * const ask = Effect.map(
 *   Connection.call(conn, { send: { src: request, length: 16 }, recv: { dst: answer } }),
 *   (completion) => answer.memory.subarray(0, completion.byteLength)
 * )
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const call: {
  (args: ExchangeArgs): (conn: Connection) => Effect.Effect<Completion, TransferError>
  (conn: Connection, args: ExchangeArgs): Effect.Effect<Completion, TransferError>
} = dual(2, posting.call)

/**
 * The server's half of {@link call}: posts the receive for the next request (rpma_recv), then this
 * answer (rpma_send), and succeeds once both are posted, with the receive's {@link Posted}: await
 * its `completion` for the next request.
 *
 * @since 1.0.0
 * @category operations
 */
export const reply: {
  (args: ExchangeArgs): (conn: Connection) => Effect.Effect<Posted, TransferError>
  (conn: Connection, args: ExchangeArgs): Effect.Effect<Posted, TransferError>
} = dual(2, posting.reply)

/**
 * Posts an rpma_recv without waiting for it; its completion tells what arrived (a send, with or
 * without immediate data, or a write with immediate data).
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: {
  (args: RecvArgs): (conn: Connection) => Effect.Effect<Posted, TransferError>
  (conn: Connection, args: RecvArgs): Effect.Effect<Posted, TransferError>
} = dual(2, posting.postRecv)

/**
 * The peer configuration descriptor of this side (rpma_peer_cfg_get_descriptor): tells the other
 * side, which applies it with {@link applyRemotePeerConfig}, whether this side's memory is written
 * straight to persistent memory. Send it as it is (librpma's format, so a C peer reads it).
 *
 * @since 1.0.0
 * @category constructors
 */
export const peerConfigDescriptor: (options: {
  readonly directWriteToPmem: boolean
}) => Effect.Effect<Uint8Array, RpmaError, RdmaDriver> = posting.peerConfigDescriptor

/**
 * Applies the other side's peer configuration descriptor to the connection
 * (rpma_peer_cfg_from_descriptor + rpma_conn_apply_remote_peer_cfg): after a descriptor that says
 * it writes straight to persistent memory, a persistent {@link flush} is allowed.
 *
 * @since 1.0.0
 * @category operations
 */
export const applyRemotePeerConfig: {
  (descriptor: Uint8Array): (conn: Connection) => Effect.Effect<void, RpmaError, RdmaDriver>
  (conn: Connection, descriptor: Uint8Array): Effect.Effect<void, RpmaError, RdmaDriver>
} = dual(2, posting.applyRemotePeerConfig)

/**
 * Closes the connection (rpma_conn_disconnect, then rpma_conn_delete) and waits, within its
 * `timeout`, for the other side's answer and the requests still in flight: those that have no
 * outcome by then fail with {@link ConnectionClosedError}. Idempotent; the scope's finalizer calls
 * it too.
 *
 * @since 1.0.0
 * @category lifecycle
 */
export const close: (conn: Connection) => Effect.Effect<void> = internal.close

/**
 * Waits until the connection ends, closed by either side (`"Closed"`) or lost (`"Lost"`), and
 * succeeds with that final state. A server's handler that leaves the connection to its client
 * returns this.
 *
 * @since 1.0.0
 * @category lifecycle
 */
export const awaitClosed: (conn: Connection) => Effect.Effect<State> = internal.awaitClosed

/**
 * The connection's state now.
 *
 * @since 1.0.0
 * @category getters
 */
export const state: (conn: Connection) => Effect.Effect<State> = internal.state

/**
 * The connection's state now, then each change: the stream ends with `"Closed"` or `"Lost"`.
 *
 * @since 1.0.0
 * @category getters
 */
export const changes: (conn: Connection) => Stream.Stream<State> = internal.changes
