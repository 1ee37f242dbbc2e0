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
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type { Completion as DriverCompletion, ConnEvent, ConnHandle, Signal, WorkRequest } from "./Driver.js"
import { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/connection.js"
import * as ops from "./internal/operations.js"
import * as instrument from "./internal/instrument.js"
import { type Options, toConfig } from "./internal/connectionConfig.js"
import {
  type ConnectionFailedError,
  type OperationError,
  OutOfRangeError
} from "./internal/connectionErrors.js"
import type { LocalMr } from "./LocalMr.js"
import type { Owner } from "./internal/owner.js"
import * as srq from "./internal/srq.js"
import type { Peer } from "./Peer.js"
import type { RpmaError } from "./RdmaError.js"
import type { SharedReceiveQueue } from "./SharedReceiveQueue.js"

/**
 * Connection settings ({@link Options}: every field has a default) and the driver's configuration
 * they make.
 *
 * @since 0.1.0
 */
export { type Options, toConfig } from "./internal/connectionConfig.js"

/**
 * How connecting ({@link ConnectionFailedError}) and operations ({@link OperationError}) fail.
 *
 * @since 0.1.0
 */
export {
  ConnectionClosedError,
  ConnectionFailedError,
  type OperationError,
  OutOfRangeError
} from "./internal/connectionErrors.js"

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
  /**
   * @internal As {@link run}, called inside the operation's own `withFiberRuntime` (its checks and
   * its post in one Effect op): the Effect that follows the post.
   */
  readonly runIn: (
    fiber: Fiber.RuntimeFiber<any, any>,
    operation: string,
    op: WorkRequest["op"],
    regions: Parameters<PostCall<void>>[2],
    build: (id: number) => WorkRequest
  ) => Effect.Effect<void, OperationError>
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
    build: (index: number, id: number, completion: Signal) => WorkRequest
  ) => Effect.Effect<void, OperationError>
}

/** @internal A request built with its id, posted on the send or receive queue and awaited. */
export type PostCall<A> = (
  operation: string,
  queue: "send" | "recv",
  regions: ReadonlyArray<LocalMr<any>> | { readonly owners: ReadonlyArray<Owner> },
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
