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
import { RdmaDriver, WcFlags, WcOpcode } from "./Driver.js"
import * as internal from "./internal/connection.js"
import * as instrument from "./internal/instrument.js"
import type { LocalMr } from "./LocalMr.js"
import type { Peer } from "./Peer.js"
import { CompletionError, type RpmaError } from "./RdmaError.js"
import type { RemoteMr } from "./RemoteMr.js"

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
}

/** @internal */
export const toConfig = (options: Options | undefined): ConnConfig => {
  const sqSize = options?.sendQueueSize ?? 64
  const rqSize = options?.receiveQueueSize ?? 64
  return {
    timeoutMs: Duration.toMillis(Duration.decode(options?.timeout ?? "5 seconds")),
    sqSize,
    rqSize,
    cqSize: options?.completionQueueSize ?? sqSize + rqSize,
    directWriteToPmem: options?.directWriteToPmem ?? false
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
  readonly post: (
    operation: string,
    queue: "send" | "recv",
    regions: ReadonlyArray<LocalMr<any>>,
    build: (id: number) => WorkRequest
  ) => Effect.Effect<DriverCompletion, OperationError>
  /** @internal Posts a request without awaiting it: succeeds once posted, with the wait for its outcome. */
  readonly submit: (
    operation: string,
    op: WorkRequest["op"],
    regions: ReadonlyArray<LocalMr<any>>,
    build: (id: number) => WorkRequest,
    signal: Signal | undefined
  ) => Effect.Effect<Effect.Effect<DriverCompletion, OperationError>, OperationError>
  /** @internal Posts many requests on the send queue with one wait per batch of completions. */
  readonly postMany: (
    operation: string,
    requests: ReadonlyArray<{ readonly regions: ReadonlyArray<LocalMr<any>>; readonly build: (id: number) => WorkRequest }>
  ) => Effect.Effect<void, OperationError>
}

const MAX_LENGTH = 2 ** 32 - 1

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
 *     yield* Connection.write(conn, log, at, src, 0, record.length)
 *     yield* Connection.flush(conn, log, at, record.length)
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
    return internal.open(
      driver,
      peer,
      driver.connReqNew(peer.handle, address, port, config),
      options?.privateData,
      { address, port },
      config
    )
  })

const checkRange = (
  operation: string,
  what: string,
  offset: number,
  length: number,
  size: number | bigint
): OutOfRangeError | undefined => {
  if (!Number.isSafeInteger(offset) || offset < 0) {
    return new OutOfRangeError({ operation, detail: `${what} offset ${offset} is not a non-negative integer` })
  }
  if (!Number.isSafeInteger(length) || length < 0) {
    return new OutOfRangeError({ operation, detail: `length ${length} is not a non-negative integer` })
  }
  if (length > MAX_LENGTH) {
    return new OutOfRangeError({
      operation,
      detail: `length ${length} exceeds 2^32 - 1, which librpma would silently truncate: split the operation`
    })
  }
  if (BigInt(offset) + BigInt(length) > BigInt(size)) {
    return new OutOfRangeError({
      operation,
      detail: `${what} range [${offset}, ${offset + length}) is outside its ${size}-byte region`
    })
  }
  return undefined
}

const guarded = <A>(
  checks: ReadonlyArray<OutOfRangeError | undefined>,
  effect: Effect.Effect<A, OperationError>
): Effect.Effect<A, OperationError> => {
  const refused = checks.find((c) => c !== undefined)
  return refused === undefined ? effect : Effect.fail(refused)
}

/**
 * rpma_write: copies `length` bytes from a local region to a remote one. The types require a local
 * WRITE_SRC source and a remote WRITE_DST destination.
 *
 * @since 0.1.0
 * @category operations
 */
export const write = (
  conn: Connection,
  dst: RemoteMr<"WRITE_DST">,
  dstOffset: number,
  src: LocalMr<"WRITE_SRC">,
  srcOffset: number,
  length: number
): Effect.Effect<void, OperationError> =>
  guarded(
    [
      checkRange("rpma_write", "destination", dstOffset, length, dst.size),
      checkRange("rpma_write", "source", srcOffset, length, src.size)
    ],
    Effect.asVoid(conn.post("rpma_write", "send", [src], (id) => ({
      op: "write",
      id,
      dst: dst.handle,
      dstOffset,
      src: src.handle,
      srcOffset,
      length
    })))
  )

/**
 * One write of a batch: `length` bytes from `srcOffset` of the source to `dstOffset` of the destination.
 *
 * @since 0.2.0
 * @category models
 */
export interface WriteSpan {
  readonly dstOffset: number
  readonly srcOffset: number
  readonly length: number
}

/**
 * Many rpma_writes from one local region to one remote region, posted as fast as the send queue
 * allows and awaited together: the bandwidth path (one fiber, no fiber or Effect per write beyond
 * what waiting needs). Every span is checked before anything is posted. Fails with the first
 * failure once every posted write has completed.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr, RemoteMr } from "@effect-rdma/core"
 *
 * declare const conn: Connection.Connection
 * declare const log: RemoteMr.RemoteMr<"WRITE_DST">
 * declare const records: LocalMr.LocalMr<"WRITE_SRC">
 * // 64 records of 64 bytes, each to its slot of the remote log.
 * const spans = Array.from({ length: 64 }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
 * const program: Effect.Effect<void, Connection.OperationError> = Connection.writeMany(conn, log, records, spans)
 * ```
 *
 * @since 0.2.0
 * @category operations
 */
export const writeMany = (
  conn: Connection,
  dst: RemoteMr<"WRITE_DST">,
  src: LocalMr<"WRITE_SRC">,
  spans: Iterable<WriteSpan>
): Effect.Effect<void, OperationError> =>
  Effect.suspend(() => {
    const regions = [src]
    const requests: Array<{ readonly regions: ReadonlyArray<LocalMr<any>>; readonly build: (id: number) => WorkRequest }> = []
    for (const { dstOffset, length, srcOffset } of spans) {
      const refused = checkRange("rpma_write", "destination", dstOffset, length, dst.size) ??
        checkRange("rpma_write", "source", srcOffset, length, src.size)
      if (refused !== undefined) return Effect.fail(refused)
      requests.push({
        regions,
        build: (id) => ({ op: "write", id, dst: dst.handle, dstOffset, src: src.handle, srcOffset, length })
      })
    }
    return conn.postMany("rpma_write", requests)
  })

/**
 * rpma_read: copies `length` bytes from a remote READ_SRC region into a local READ_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const read = (
  conn: Connection,
  dst: LocalMr<"READ_DST">,
  dstOffset: number,
  src: RemoteMr<"READ_SRC">,
  srcOffset: number,
  length: number
): Effect.Effect<void, OperationError> =>
  guarded(
    [
      checkRange("rpma_read", "destination", dstOffset, length, dst.size),
      checkRange("rpma_read", "source", srcOffset, length, src.size)
    ],
    Effect.asVoid(conn.post("rpma_read", "send", [dst], (id) => ({
      op: "read",
      id,
      dst: dst.handle,
      dstOffset,
      src: src.handle,
      srcOffset,
      length
    })))
  )

/**
 * rpma_flush with RPMA_FLUSH_TYPE_VISIBILITY: makes earlier writes to the range visible on the
 * remote node.
 *
 * @since 0.1.0
 * @category operations
 */
export const flush = (
  conn: Connection,
  dst: RemoteMr<"FLUSH_TYPE_VISIBILITY">,
  offset: number,
  length: number
): Effect.Effect<void, OperationError> => flushWith(conn, dst, offset, length, "visibility")

/**
 * rpma_flush with RPMA_FLUSH_TYPE_PERSISTENT: makes earlier writes to the range persistent. Needs
 * a connection made with `directWriteToPmem: true`.
 *
 * @since 0.1.0
 * @category operations
 */
export const flushPersistent = (
  conn: Connection,
  dst: RemoteMr<"FLUSH_TYPE_PERSISTENT">,
  offset: number,
  length: number
): Effect.Effect<void, OperationError> => flushWith(conn, dst, offset, length, "persistent")

const flushWith = (
  conn: Connection,
  dst: RemoteMr<any>,
  offset: number,
  length: number,
  type: "visibility" | "persistent"
) =>
  guarded(
    [checkRange("rpma_flush", "destination", offset, length, dst.size)],
    Effect.asVoid(conn.post("rpma_flush", "send", [], (id) => ({ op: "flush", id, dst: dst.handle, dstOffset: offset, length, type })))
  )

/**
 * rpma_atomic_write: stores 8 bytes atomically at an 8-byte-aligned offset of a remote WRITE_DST region.
 *
 * @since 0.1.0
 * @category operations
 */
export const atomicWrite = (
  conn: Connection,
  dst: RemoteMr<"WRITE_DST">,
  offset: number,
  value: Uint8Array
): Effect.Effect<void, OperationError> =>
  guarded(
    [
      value instanceof Uint8Array && value.byteLength === 8
        ? undefined
        : new OutOfRangeError({ operation: "rpma_atomic_write", detail: "the value must be exactly 8 bytes" }),
      offset % 8 === 0
        ? undefined
        : new OutOfRangeError({ operation: "rpma_atomic_write", detail: `offset ${offset} is not 8-byte aligned` }),
      checkRange("rpma_atomic_write", "destination", offset, 8, dst.size)
    ],
    Effect.asVoid(conn.post("rpma_atomic_write", "send", [], (id) => ({
      op: "atomicWrite",
      id,
      dst: dst.handle,
      dstOffset: offset,
      value: Uint8Array.from(value)
    })))
  )

/**
 * rpma_send: sends `length` bytes of a SEND region to the other side's next posted receive.
 *
 * @since 0.1.0
 * @category operations
 */
export const send = (
  conn: Connection,
  src: LocalMr<"SEND">,
  offset: number,
  length: number
): Effect.Effect<void, OperationError> =>
  guarded(
    [checkRange("rpma_send", "source", offset, length, src.size)],
    Effect.asVoid(conn.post("rpma_send", "send", [src], (id) => ({ op: "send", id, src: src.handle, offset, length })))
  )

/**
 * rpma_recv: posts a receive into a RECV region and succeeds with the number of bytes received.
 *
 * @since 0.1.0
 * @category operations
 */
export const recv = (
  conn: Connection,
  dst: LocalMr<"RECV">,
  offset: number,
  length: number
): Effect.Effect<number, OperationError> =>
  guarded(
    [checkRange("rpma_recv", "destination", offset, length, dst.size)],
    Effect.map(
      conn.post("rpma_recv", "recv", [dst], (id) => ({ op: "recv", id, dst: dst.handle, offset, length })),
      (c) => c.byteLength
    )
  )

/**
 * What a completion says it completed (`enum ibv_wc_opcode`).
 *
 * @since 0.3.0
 * @category models
 */
export type CompletedOperation = "SEND" | "RDMA_WRITE" | "RDMA_READ" | "RECV" | "RECV_RDMA_WITH_IMM" | "OTHER"

/**
 * A successful completion: what it was, the bytes it moved (for a receive: the bytes received, or
 * the length of the write with immediate data that consumed it), its flags, and the immediate data
 * when the other side sent some.
 *
 * @since 0.3.0
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

const operationNames: Record<number, CompletedOperation> = {
  [WcOpcode.SEND]: "SEND",
  [WcOpcode.RDMA_WRITE]: "RDMA_WRITE",
  [WcOpcode.RDMA_READ]: "RDMA_READ",
  [WcOpcode.RECV]: "RECV",
  [WcOpcode.RECV_RDMA_WITH_IMM]: "RECV_RDMA_WITH_IMM"
}

const toCompletion = (c: DriverCompletion): Completion => ({
  operation: operationNames[c.opcode] ?? "OTHER",
  opcode: c.opcode,
  byteLength: c.byteLength,
  flags: c.flags,
  imm: (c.flags & WcFlags.WITH_IMM) !== 0 ? c.imm : undefined
})

/**
 * A request posted without waiting for it. It holds its queue entry and keeps its regions
 * registered (their release deferred, their memory alive) until its completion arrives, an implied
 * one for an unsignalled request (a later request on the same send queue completed), or the
 * connection ends; a connection that closes fails the requests still in flight and releases their
 * regions only once it is deleted. `completion` waits for the outcome; it may be awaited any number
 * of times, or never.
 *
 * @since 0.3.0
 * @category models
 */
export interface Posted {
  readonly operation: string
  readonly completion: Effect.Effect<Completion, OperationError>
}

/** @internal */
export const completionOf = (
  wait: Effect.Effect<DriverCompletion, OperationError>
): Effect.Effect<Completion, OperationError> => Effect.map(wait, toCompletion)

const makePosted = (operation: string) => (wait: Effect.Effect<DriverCompletion, OperationError>): Posted => ({
  operation,
  completion: Effect.map(wait, toCompletion)
})

/**
 * For send-queue requests: `"always"` (the default) produces a completion, `"onError"` only a
 * failed one (RPMA_F_COMPLETION_ON_ERROR). An unsignalled request's success is known when a later
 * signalled request on the same connection completes, so wait on the last one only, as librpma's
 * clients do. The request that takes the send queue's last free entry is signalled regardless.
 *
 * @since 0.3.0
 * @category models
 */
export type CompletionMode = Signal

const checkImm = (operation: string, imm: number | undefined): OutOfRangeError | undefined =>
  imm === undefined || (Number.isInteger(imm) && imm >= 0 && imm <= MAX_LENGTH)
    ? undefined
    : new OutOfRangeError({ operation, detail: `immediate data ${imm} is not a 32-bit unsigned integer` })

/**
 * The arguments of a write: `length` bytes from `srcOffset` of a local WRITE_SRC region to
 * `dstOffset` of a remote WRITE_DST region.
 *
 * @since 0.3.0
 * @category models
 */
export interface WriteArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  readonly dstOffset: number
  readonly src: LocalMr<"WRITE_SRC">
  readonly srcOffset: number
  readonly length: number
  /** rpma_write_with_imm: also consumes a receive on the other side, which completes with it. */
  readonly imm?: number | undefined
  readonly completion?: CompletionMode | undefined
}

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
 *   yield* Connection.postWrite(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64, completion: "onError" })
 *   yield* Connection.flush(conn, dst, 0, 64)
 * })
 * ```
 *
 * @since 0.3.0
 * @category operations
 */
export const postWrite = (conn: Connection, args: WriteArgs): Effect.Effect<Posted, OperationError> => {
  const { completion, dst, dstOffset, imm, length, src, srcOffset } = args
  const operation = imm === undefined ? "rpma_write" : "rpma_write_with_imm"
  return guarded(
    [
      checkImm(operation, imm),
      checkRange(operation, "destination", dstOffset, length, dst.size),
      checkRange(operation, "source", srcOffset, length, src.size)
    ],
    Effect.map(
      conn.submit(operation, "write", [src], (id) => ({
        op: "write",
        id,
        dst: dst.handle,
        dstOffset,
        src: src.handle,
        srcOffset,
        length,
        imm
      }), completion),
      makePosted(operation)
    )
  )
}

/**
 * rpma_write_with_imm: a write that also consumes a receive on the other side, which completes as
 * RECV_RDMA_WITH_IMM with `imm` and the length written.
 *
 * @since 0.3.0
 * @category operations
 */
export const writeWithImm = (
  conn: Connection,
  args: Omit<WriteArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, OperationError> =>
  Effect.flatMap(postWrite(conn, args), (posted) => Effect.asVoid(posted.completion))

/**
 * Posts an rpma_read without waiting for it.
 *
 * @since 0.3.0
 * @category operations
 */
export const postRead = (conn: Connection, args: {
  readonly dst: LocalMr<"READ_DST">
  readonly dstOffset: number
  readonly src: RemoteMr<"READ_SRC">
  readonly srcOffset: number
  readonly length: number
  readonly completion?: CompletionMode | undefined
}): Effect.Effect<Posted, OperationError> => {
  const { completion, dst, dstOffset, length, src, srcOffset } = args
  return guarded(
    [
      checkRange("rpma_read", "destination", dstOffset, length, dst.size),
      checkRange("rpma_read", "source", srcOffset, length, src.size)
    ],
    Effect.map(
      conn.submit("rpma_read", "read", [dst], (id) => ({
        op: "read",
        id,
        dst: dst.handle,
        dstOffset,
        src: src.handle,
        srcOffset,
        length
      }), completion),
      makePosted("rpma_read")
    )
  )
}

/**
 * The arguments of a send: `length` bytes from `offset` of a local SEND region.
 *
 * @since 0.3.0
 * @category models
 */
export interface SendArgs {
  readonly src: LocalMr<"SEND">
  readonly offset: number
  readonly length: number
  /** rpma_send_with_imm: the receive on the other side completes with it. */
  readonly imm?: number | undefined
  readonly completion?: CompletionMode | undefined
}

/**
 * Posts an rpma_send (or rpma_send_with_imm, with `imm`) without waiting for it.
 *
 * @since 0.3.0
 * @category operations
 */
export const postSend = (conn: Connection, args: SendArgs): Effect.Effect<Posted, OperationError> => {
  const { completion, imm, length, offset, src } = args
  const operation = imm === undefined ? "rpma_send" : "rpma_send_with_imm"
  return guarded(
    [checkImm(operation, imm), checkRange(operation, "source", offset, length, src.size)],
    Effect.map(
      conn.submit(operation, "send", [src], (id) => ({ op: "send", id, src: src.handle, offset, length, imm }), completion),
      makePosted(operation)
    )
  )
}

/**
 * rpma_send_with_imm: a send whose receive on the other side completes with `imm`.
 *
 * @since 0.3.0
 * @category operations
 */
export const sendWithImm = (
  conn: Connection,
  args: Omit<SendArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, OperationError> =>
  Effect.flatMap(postSend(conn, args), (posted) => Effect.asVoid(posted.completion))

/**
 * The arguments of a receive: into `length` bytes at `offset` of a local RECV region.
 *
 * @since 0.3.0
 * @category models
 */
export interface RecvArgs {
  readonly dst: LocalMr<"RECV">
  readonly offset: number
  readonly length: number
}

/**
 * Posts an rpma_recv without waiting for it; its completion tells what arrived (a send, with or
 * without immediate data, or a write with immediate data).
 *
 * @since 0.3.0
 * @category operations
 */
export const postRecv = (conn: Connection, args: RecvArgs): Effect.Effect<Posted, OperationError> => {
  const { dst, length, offset } = args
  return guarded(
    [checkRange("rpma_recv", "destination", offset, length, dst.size)],
    Effect.map(
      conn.submit("rpma_recv", "recv", [dst], (id) => ({ op: "recv", id, dst: dst.handle, offset, length }), undefined),
      makePosted("rpma_recv")
    )
  )
}

/**
 * rpma_recv, awaited: succeeds with the whole completion (operation, length, immediate data).
 *
 * @since 0.3.0
 * @category operations
 */
export const receive = (conn: Connection, args: RecvArgs): Effect.Effect<Completion, OperationError> =>
  Effect.flatMap(postRecv(conn, args), (posted) => posted.completion)

/**
 * The peer configuration descriptor of this side (rpma_peer_cfg_get_descriptor): tells the other
 * side, which applies it with {@link applyRemotePeerConfig}, whether this side's memory is written
 * straight to persistent memory. Send it as it is (librpma's format, so a C peer reads it).
 *
 * @since 0.3.0
 * @category constructors
 */
export const peerConfigDescriptor = (options: {
  readonly directWriteToPmem: boolean
}): Effect.Effect<Uint8Array, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.peerCfgDescriptor(options.directWriteToPmem))

/**
 * Applies the other side's peer configuration descriptor to the connection
 * (rpma_peer_cfg_from_descriptor + rpma_conn_apply_remote_peer_cfg): after a descriptor that says
 * it writes straight to persistent memory, {@link flushPersistent} is allowed.
 *
 * @since 0.3.0
 * @category operations
 */
export const applyRemotePeerConfig = (
  conn: Connection,
  descriptor: Uint8Array
): Effect.Effect<void, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.connApplyRemotePeerCfg(conn.handle, descriptor))
