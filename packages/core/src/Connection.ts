/**
 * A connection between two peers (`struct rpma_conn`), and the operations that move data over it:
 * write, read, flush, atomic write, send and receive. Each operation is an Effect that succeeds
 * when its completion arrives and fails with a tagged error when it does not.
 *
 * Completions are collected by one fiber per connection that waits on the driver (the native one
 * polls the completion channel's file descriptor through libuv: no thread per operation, nothing
 * blocks the event loop), so any number of operations can be in flight. When the connection is
 * lost or closed, the completions already queued are delivered, then every operation still pending
 * fails with {@link ConnectionClosedError}.
 *
 * An operation can be interrupted (a timeout, a closing scope) while it waits for its completion:
 * it then ends at once with its outcome unknown, but its request stays posted, and the regions it
 * names stay registered (their release is deferred) until it completes or its connection is
 * deleted, because the device may still reach them. A receive interrupted that way may still take
 * the next message.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type { Completion as DriverCompletion, ConnConfig, ConnEvent, ConnHandle, Signal, WorkRequest } from "./Driver.js"
import { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/connection.js"
import * as ops from "./internal/operations.js"
import * as instrument from "./internal/instrument.js"
import type { LocalMr } from "./LocalMr.js"
import * as srq from "./internal/srq.js"
import type { Peer } from "./Peer.js"
import { CompletionError, type RpmaError } from "./RdmaError.js"
import type { SharedReceiveQueue } from "./SharedReceiveQueue.js"

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
  /** Completion queue size. Default: send + receive queue sizes. */
  readonly completionQueueSize?: number | undefined
  /** The remote peer writes straight to persistent memory, so persistent flushes are allowed. Default false. */
  readonly directWriteToPmem?: boolean | undefined
  /**
   * Bytes sent with the connection request (rdma_cm private data). It is neither encrypted nor
   * authenticated: carry descriptors over {@link DescriptorExchange} instead, unless a C peer needs it.
   */
  readonly privateData?: Uint8Array | undefined
  /**
   * rpma_conn_cfg_set_srq: the connection's incoming messages land in this queue's receives (post
   * them with {@link SharedReceiveQueue.postRecv}); {@link recv} on the connection is refused. The
   * queue is deleted only after the connection.
   */
  readonly sharedReceiveQueue?: SharedReceiveQueue | undefined
  /**
   * rpma_conn_cfg_set_rcq_size: receives complete on a receive completion queue of their own, of
   * this size (at least the receive queue size), and the completion queue then needs only the send
   * queue's size. Operations complete the same way. Default 0: receives complete on the completion queue.
   */
  readonly receiveCompletionQueueSize?: number | undefined
  /**
   * rpma_conn_cfg_set_compl_channel: the completion queue and the receive completion queue signal
   * on one channel (waited on with rpma_conn_wait). Not with a shared receive queue. Default false.
   */
  readonly sharedCompletionChannel?: boolean | undefined
}

/** A timeout in milliseconds; NaN for what is not a duration (refused when the connection opens). */
const timeoutMillis = (timeout: Duration.DurationInput | undefined): number => {
  try {
    return Duration.toMillis(Duration.decode(timeout ?? "5 seconds"))
  } catch {
    return Number.NaN
  }
}

/** @internal */
export const toConfig = (options: Options | undefined): ConnConfig => {
  const sqSize = options?.sendQueueSize ?? 64
  const rqSize = options?.receiveQueueSize ?? 64
  const rcqSize = options?.receiveCompletionQueueSize ?? 0
  // Receives elsewhere (a shared receive queue, a receive CQ of its own): the CQ holds the sends.
  const receivesOnCq = options?.sharedReceiveQueue === undefined && rcqSize === 0
  return {
    timeoutMs: timeoutMillis(options?.timeout),
    sqSize,
    rqSize,
    cqSize: options?.completionQueueSize ?? (receivesOnCq ? sqSize + rqSize : sqSize),
    rcqSize,
    sharedCompletionChannel: options?.sharedCompletionChannel ?? false,
    directWriteToPmem: options?.directWriteToPmem ?? false,
    srq: options?.sharedReceiveQueue?.handle
  }
}

/**
 * The connection could not be established: the other side rejected it, could not be reached, or
 * did not answer in time.
 *
 * @since 0.1.0
 * @category errors
 */
export class ConnectionFailedError extends Data.TaggedError("ConnectionFailedError")<{
  readonly address: string
  readonly port: number
  readonly event: ConnEvent | "TIMEOUT"
}> {
  override get message(): string {
    const why = this.event === "REJECTED"
      ? "the other side rejected it (nobody listens there, or it refused the request)"
      : this.event === "UNREACHABLE"
      ? "the address is unreachable"
      : this.event === "TIMEOUT"
      ? "it was not established in time"
      : `unexpected event ${this.event}`
    return `connection to ${this.address}:${this.port} failed: ${why}`
  }
}

/**
 * The connection is closed or lost: the operation was not done, or its outcome is unknown.
 *
 * @since 0.1.0
 * @category errors
 */
export class ConnectionClosedError extends Data.TaggedError("ConnectionClosedError")<{
  readonly operation: string
  readonly reason: "CLOSED" | "LOST"
  /** What ended the connection, when it was a failure (of its event channel or completion queue). */
  readonly cause?: unknown
}> {
  override get message(): string {
    const head = `${this.operation}: the connection was ${this.reason === "LOST" ? "lost" : "closed"}`
    const cause = this.cause instanceof Error || (typeof this.cause === "object" && this.cause !== null && "message" in this.cause)
      ? String((this.cause as { message: unknown }).message)
      : undefined
    return cause === undefined ? head : `${head}: ${cause}`
  }
}

/**
 * An offset or length that does not fit a region, checked before anything is posted (librpma
 * checks neither, and silently truncates lengths above 2^32 - 1).
 *
 * @since 0.1.0
 * @category errors
 */
export class OutOfRangeError extends Data.TaggedError("OutOfRangeError")<{
  readonly operation: string
  readonly detail: string
}> {
  override get message(): string {
    return `${this.operation}: ${this.detail}`
  }
}

/**
 * Everything an operation can fail with.
 *
 * @since 0.1.0
 * @category errors
 */
export type OperationError = CompletionError | ConnectionClosedError | OutOfRangeError | RpmaError

/**
 * The arguments of each operation, by name, and what each can fail with.
 *
 * @since 0.2.0
 */
export type {
  AtomicWriteArgs,
  CompletionMode,
  PostReadArgs,
  PostSendArgs,
  PostWriteArgs,
  FlushArgs,
  FlushError,
  ReadArgs,
  RecvArgs,
  SendArgs,
  TransferError,
  WriteArgs,
  WriteManyArgs,
  WriteSpan
} from "./internal/operations.js"

/**
 * A state of a connection after it is established.
 *
 * @since 0.1.0
 * @category models
 */
export type State = "ESTABLISHED" | "CLOSED" | "LOST"

/**
 * @since 0.1.0
 * @category models
 */
export interface Connection {
  readonly handle: ConnHandle
  /** What the other side sent with its request or acceptance (rdma_cm pads it). */
  readonly privateData: Uint8Array
  /** The connection's events from now on: CLOSED or LOST, then the stream ends. */
  readonly events: Stream.Stream<ConnEvent>
  readonly state: Effect.Effect<State>
  /** @internal Posts a request built with its id on the send or receive queue, and awaits its completion. */
  readonly post: PostCall<DriverCompletion>
  /** @internal As {@link post}, succeeding with nothing (no `Effect.asVoid` per operation). */
  readonly run: PostCall<void>
  /** @internal Posts a request without awaiting it: succeeds once posted, with the wait for its outcome. */
  readonly submit: (
    operation: string,
    op: WorkRequest["op"],
    regions: ReadonlyArray<LocalMr<any>>,
    build: (id: number) => WorkRequest,
    signal: Signal | undefined
  ) => Effect.Effect<Effect.Effect<DriverCompletion, OperationError>, OperationError>
  /**
   * @internal Posts `count` requests on the send queue, all holding `regions`, request `i` built
   * by `build(i, id)`, with one wait per batch of completions.
   */
  readonly postMany: (
    operation: string,
    count: number,
    regions: ReadonlyArray<LocalMr<any>>,
    build: (index: number, id: number) => WorkRequest
  ) => Effect.Effect<void, OperationError>
}

/** @internal A request built with its id, posted on the send or receive queue and awaited. */
export type PostCall<A> = (
  operation: string,
  queue: "send" | "recv",
  regions: ReadonlyArray<LocalMr<any>>,
  build: (id: number) => WorkRequest
) => Effect.Effect<A, OperationError>

/**
 * Connects to a peer listening at `address`:`port` (rpma_conn_req_new + rpma_conn_req_connect)
 * and waits for the connection to be established. Disconnected and deleted when the scope closes.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, DescriptorExchange, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
 *
 * declare const ca: string // the log server's CA certificate (PEM)
 *
 * const append = (record: Uint8Array, at: number) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const peer = yield* Peer.Peer
 *     const offer = yield* DescriptorExchange.fetch({ host: "log.internal", port: 7000, tls: { ca } })
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
export const connect = (
  peer: Peer,
  address: string,
  port: number,
  options?: Options
): Effect.Effect<Connection, RpmaError | ConnectionFailedError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const config = toConfig(options)
    return Effect.zipRight(
      srq.usedBy(options?.sharedReceiveQueue?.queue),
      internal.open(
        driver,
        peer,
        driver.connReqNew(peer.handle, address, port, config),
        options?.privateData,
        { address, port },
        config
      )
    )
  })

/**
 * rpma_conn_get_qp_num: the number of the connection's queue pair, which the completions of a
 * {@link SharedReceiveQueue.SharedReceiveQueue} carry to say which connection a message came on.
 *
 * @since 0.3.0
 * @category getters
 */
export const qpNum = (conn: Connection): Effect.Effect<number, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.connQpNum(conn.handle))

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
export const write: (conn: Connection, args: ops.WriteArgs) => Effect.Effect<void, ops.TransferError> = ops.write

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
 * @since 0.2.0
 * @category operations
 */
export const writeMany: (conn: Connection, args: ops.WriteManyArgs) => Effect.Effect<void, ops.TransferError> =
  ops.writeMany

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
 * @since 0.3.0
 * @category operations
 */
export const prepareWrite: (
  conn: Connection,
  args: ops.WriteArgs
) => Effect.Effect<Effect.Effect<void, ops.TransferError>, OutOfRangeError> = ops.prepareWrite

/**
 * A read checked and built once, to post many times (see {@link prepareWrite}).
 *
 * @since 0.3.0
 * @category operations
 */
export const prepareRead: (
  conn: Connection,
  args: ops.ReadArgs
) => Effect.Effect<Effect.Effect<void, ops.TransferError>, OutOfRangeError> = ops.prepareRead

/**
 * rpma_read: copies `length` bytes from a remote READ_SRC region into a local READ_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const read: (conn: Connection, args: ops.ReadArgs) => Effect.Effect<void, ops.TransferError> = ops.read

/**
 * rpma_flush with RPMA_FLUSH_TYPE_VISIBILITY: makes earlier writes to the range visible on the
 * remote node.
 *
 * @since 0.1.0
 * @category operations
 */
export const flush = (
  conn: Connection,
  args: ops.FlushArgs<"FLUSH_TYPE_VISIBILITY">
): Effect.Effect<void, ops.FlushError> => ops.flushWith(conn, args, "visibility")

/**
 * rpma_flush with RPMA_FLUSH_TYPE_PERSISTENT: makes earlier writes to the range persistent. Needs
 * a connection made with `directWriteToPmem: true` (RPMA_E_NOSUPP otherwise).
 *
 * @since 0.1.0
 * @category operations
 */
export const flushPersistent = (
  conn: Connection,
  args: ops.FlushArgs<"FLUSH_TYPE_PERSISTENT">
): Effect.Effect<void, ops.FlushError> => ops.flushWith(conn, args, "persistent")

/**
 * rpma_atomic_write: stores 8 bytes atomically at an 8-byte-aligned offset of a remote WRITE_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const atomicWrite: (conn: Connection, args: ops.AtomicWriteArgs) => Effect.Effect<void, ops.TransferError> =
  ops.atomicWrite

/**
 * rpma_send: sends `length` bytes of a SEND region to the other side's next posted receive.
 *
 * @since 0.1.0
 * @category operations
 */
export const send: (conn: Connection, args: ops.SendArgs) => Effect.Effect<void, ops.TransferError> = ops.send

/**
 * rpma_recv: posts a receive into a RECV region and succeeds with the number of bytes received.
 *
 * @since 0.1.0
 * @category operations
 */
export const recv: (conn: Connection, args: ops.RecvArgs) => Effect.Effect<number, ops.TransferError> = ops.recv

/**
 * Posting without waiting (a `Posted` ticket whose completion can be awaited later, or never),
 * unsignalled requests, immediate data, whole completions, and the peer configuration descriptor.
 *
 * @since 0.3.0
 */
export {
  applyRemotePeerConfig,
  type CompletedOperation,
  type Completion,
  completionOf,
  peerConfigDescriptor,
  type Posted,
  postRead,
  postRecv,
  postSend,
  postWrite,
  receive,
  sendWithImm,
  writeWithImm
} from "./internal/posting.js"
