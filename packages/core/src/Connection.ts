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
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type { RdmaDriver } from "./Driver.js"
import type { ConnConfig, ConnEvent, ConnHandle, Signal } from "./DriverModel.js"
import * as internal from "./internal/connection.js"
import { TypeId as typeId } from "./internal/connectionImpl.js"
import * as config from "./internal/connectionConfig.js"
import * as errors from "./ConnectionError.js"
import * as ops from "./internal/operations.js"
import * as posting from "./internal/posting.js"
import type { LocalMr } from "./LocalMr.js"
import type { Peer } from "./Peer.js"
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
export const TypeId: unique symbol = typeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * A state of a connection after it is established.
 *
 * @since 0.1.0
 * @category models
 */
export type State = "ESTABLISHED" | "CLOSED" | "LOST"

/**
 * An established connection: what it is to its users. Made by {@link connect} and
 * `Endpoint.accept`; its machinery (its posting kernel, its queues) is its own.
 *
 * @since 0.1.0
 * @category models
 */
export interface Connection {
  readonly [TypeId]: TypeId
  /** The driver's handle, for the driver's own calls. */
  readonly handle: ConnHandle
  /** What the other side sent with its request or acceptance (rdma_cm pads it). */
  readonly privateData: Uint8Array
  /** The connection's events from now on: CLOSED or LOST, then the stream ends. */
  readonly events: Stream.Stream<ConnEvent>
  readonly state: Effect.Effect<State>
}

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
}

/**
 * The driver's configuration that connection settings make, every default filled in: what
 * {@link connect} and `Endpoint.next` pass to the driver, for programs that call it themselves.
 *
 * @since 0.1.0
 * @category constructors
 */
export const toConfig: (options?: Options) => ConnConfig = config.toConfig

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
}

/**
 * One write of a batch: `length` bytes from `srcOffset` of the source to `dstOffset` of the destination.
 *
 * @since 1.0.0
 * @category models
 */
export interface WriteSpan {
  readonly dstOffset: number
  readonly srcOffset: number
  readonly length: number
}

/**
 * @since 1.0.0
 * @category models
 */
export interface WriteManyArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  readonly src: LocalMr<"WRITE_SRC">
  readonly spans: Iterable<WriteSpan>
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
 * @since 1.0.0
 * @category models
 */
export interface FlushArgs<F extends "FLUSH_TYPE_VISIBILITY" | "FLUSH_TYPE_PERSISTENT"> {
  readonly dst: RemoteMr<F>
  /** Default 0. */
  readonly offset?: number | undefined
  readonly length: number
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
  readonly imm?: number | undefined
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
  readonly imm?: number | undefined
  readonly completion?: CompletionMode | undefined
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
 *     yield* Connection.flush(conn, { dst: log, offset: at, length: record.length })
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
 * rpma_write: copies `length` bytes from a local WRITE_SRC region to a remote WRITE_DST region.
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
 *     Effect.zipRight(Connection.flush(conn, { dst: log, offset: at, length: 64 }))
 *   )
 * ```
 *
 * @since 0.1.0
 * @category operations
 */
export const write: (conn: Connection, args: WriteArgs) => Effect.Effect<void, TransferError> = ops.write

/**
 * Many rpma_writes from one local region to one remote region, posted as a sliding window and
 * awaited together: the bandwidth path. As many writes as the send queue has free entries go in
 * one driver call, and more as entries free up (as each completion arrives, not batch after batch),
 * with one wait for the whole batch: no fiber and no Effect per write. Every span is checked before
 * anything is posted. After a failure nothing more is posted; it fails with the first failure once
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
 * const spans = Array.from({ length: 64 }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
 * const program: Effect.Effect<void, Connection.TransferError> = Connection.writeMany(conn, { dst: log, src: records, spans })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany: (conn: Connection, args: WriteManyArgs) => Effect.Effect<void, TransferError> = ops.writeMany

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
export const prepareWrite: (
  conn: Connection,
  args: WriteArgs
) => Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> = ops.prepareWrite

/**
 * A read checked and built once, to post many times (see {@link prepareWrite}).
 *
 * @since 1.0.0
 * @category operations
 */
export const prepareRead: (
  conn: Connection,
  args: ReadArgs
) => Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> = ops.prepareRead

/**
 * rpma_read: copies `length` bytes from a remote READ_SRC region into a local READ_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const read: (conn: Connection, args: ReadArgs) => Effect.Effect<void, TransferError> = ops.read

/**
 * rpma_flush with RPMA_FLUSH_TYPE_VISIBILITY: makes earlier writes to the range visible on the
 * remote node.
 *
 * librpma's flush is an RDMA read of 8 bytes of the region at the flush's offset, whatever its
 * length, which the device refuses past the region's end (and the connection would then fail every
 * later operation). So a flush that starts within 8 bytes of the end (`offset: 4095, length: 1`,
 * or `offset: 4096, length: 0` on a 4096-byte region) reads the region's last 8 bytes instead: the
 * read is only a fence, and the range flushed contains the one asked for. A region smaller than 8
 * bytes cannot be flushed: refused with OutOfRangeError before anything is posted. The same holds
 * for {@link flushPersistent}.
 *
 * @since 0.1.0
 * @category operations
 */
export const flush: (conn: Connection, args: FlushArgs<"FLUSH_TYPE_VISIBILITY">) => Effect.Effect<void, FlushError> = ops.flush

/**
 * rpma_flush with RPMA_FLUSH_TYPE_PERSISTENT: makes earlier writes to the range persistent. Needs
 * a connection made with `directWriteToPmem: true` (RPMA_E_NOSUPP otherwise).
 *
 * @since 0.1.0
 * @category operations
 */
export const flushPersistent: (conn: Connection, args: FlushArgs<"FLUSH_TYPE_PERSISTENT">) => Effect.Effect<void, FlushError> = ops.flushPersistent

/**
 * rpma_atomic_write: stores 8 bytes atomically at an 8-byte-aligned offset of a remote WRITE_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const atomicWrite: (conn: Connection, args: AtomicWriteArgs) => Effect.Effect<void, TransferError> = ops.atomicWrite

/**
 * rpma_send: sends `length` bytes of a SEND region to the other side's next posted receive.
 *
 * @since 0.1.0
 * @category operations
 */
export const send: (conn: Connection, args: SendArgs) => Effect.Effect<void, TransferError> = ops.send

/**
 * rpma_recv: posts a receive into a RECV region and succeeds with the number of bytes received.
 *
 * @since 0.1.0
 * @category operations
 */
export const recv: (conn: Connection, args: RecvArgs) => Effect.Effect<number, TransferError> = ops.recv

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
export const postWrite: (conn: Connection, args: PostWriteArgs) => Effect.Effect<Posted, TransferError> = posting.postWrite

/**
 * rpma_write_with_imm: a write that also consumes a receive on the other side, which completes as
 * RECV_RDMA_WITH_IMM with `imm` and the length written.
 *
 * @since 1.0.0
 * @category operations
 */
export const writeWithImm: (
  conn: Connection,
  args: Omit<PostWriteArgs, "imm" | "completion"> & { readonly imm: number }
) => Effect.Effect<void, TransferError> = posting.writeWithImm

/**
 * Posts an rpma_read without waiting for it.
 *
 * @since 1.0.0
 * @category operations
 */
export const postRead: (conn: Connection, args: PostReadArgs) => Effect.Effect<Posted, TransferError> = posting.postRead

/**
 * Posts an rpma_send (or rpma_send_with_imm, with `imm`) without waiting for it.
 *
 * @since 1.0.0
 * @category operations
 */
export const postSend: (conn: Connection, args: PostSendArgs) => Effect.Effect<Posted, TransferError> = posting.postSend

/**
 * rpma_send_with_imm: a send whose receive on the other side completes with `imm`.
 *
 * @since 1.0.0
 * @category operations
 */
export const sendWithImm: (
  conn: Connection,
  args: Omit<PostSendArgs, "imm" | "completion"> & { readonly imm: number }
) => Effect.Effect<void, TransferError> = posting.sendWithImm

/**
 * Posts an rpma_recv without waiting for it; its completion tells what arrived (a send, with or
 * without immediate data, or a write with immediate data).
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: (conn: Connection, args: RecvArgs) => Effect.Effect<Posted, TransferError> = posting.postRecv

/**
 * rpma_recv, awaited: succeeds with the whole completion (operation, length, immediate data).
 *
 * @since 1.0.0
 * @category operations
 */
export const receive: (conn: Connection, args: RecvArgs) => Effect.Effect<Completion, TransferError> = posting.receive

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
 * it writes straight to persistent memory, {@link flushPersistent} is allowed.
 *
 * @since 1.0.0
 * @category operations
 */
export const applyRemotePeerConfig: (
  conn: Connection,
  descriptor: Uint8Array
) => Effect.Effect<void, RpmaError, RdmaDriver> = posting.applyRemotePeerConfig
