/**
 * A connection between two peers (`struct rpma_conn`), and the operations that move data over it:
 * write, read, flush, atomic write, send and receive. Each operation is an Effect that succeeds
 * when its completion arrives and fails with a tagged error when it does not.
 *
 * Completions are collected by one fiber per connection that waits on the driver (the native one
 * polls the completion channel's file descriptor through libuv: no thread per operation, nothing
 * blocks the event loop), so any number of operations can be in flight. When the connection is
 * lost or closed, every pending operation fails with {@link ConnectionClosedError}.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as PubSub from "effect/PubSub"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { ConnConfig, ConnEvent, ConnHandle, ConnReqHandle, Driver, WorkRequest } from "./Driver.js"
import { RdmaDriver } from "./Driver.js"
import * as instrument from "./internal/instrument.js"
import { release } from "./internal/release.js"
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
}> {
  override get message(): string {
    return `${this.operation}: the connection was ${this.reason === "LOST" ? "lost" : "closed"}`
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
  /** @internal */
  readonly post: (operation: string, request: (id: number) => WorkRequest) => Effect.Effect<number, OperationError>
}

const MAX_LENGTH = 2 ** 32 - 1

/**
 * Wraps an established connection: starts its completion and event fibers and returns the
 * resource. The release disconnects, waits (bounded) for CLOSED, stops the fibers and deletes.
 */
const establish = (
  driver: Driver,
  handle: ConnHandle,
  config: ConnConfig
): Effect.Effect<Connection, RpmaError, Scope.Scope> =>
  Effect.gen(function*() {
    const privateData = yield* driver.connPrivateData(handle)
    const pending = new Map<number, Deferred.Deferred<number, OperationError>>()
    const operations = new Map<number, string>()
    let nextId = 1
    let state: State = "ESTABLISHED"
    const events = yield* PubSub.unbounded<ConnEvent>({ replay: 1 })
    const ended = yield* Deferred.make<void>()

    const failPending = (reason: "CLOSED" | "LOST") =>
      Effect.forEach(pending, ([id, deferred]) =>
        Deferred.fail(deferred, new ConnectionClosedError({ operation: operations.get(id) ?? "operation", reason })), {
        discard: true
      }).pipe(Effect.zipRight(Effect.sync(() => {
        pending.clear()
        operations.clear()
      })))

    const completionFiber = yield* driver.nextCompletions(handle).pipe(
      Effect.flatMap((completions) =>
        Effect.forEach(completions, (c) => {
          const deferred = pending.get(c.id)
          if (deferred === undefined) return Effect.void
          const operation = operations.get(c.id)!
          pending.delete(c.id)
          operations.delete(c.id)
          return c.status === 0
            ? Deferred.succeed(deferred, c.byteLength)
            : Deferred.fail(deferred, new CompletionError({ operation, status: c.status }))
        }, { discard: true })
      ),
      Effect.forever,
      // The completion queue failing is the connection failing.
      Effect.catchAll(() => Effect.zipRight(Effect.sync(() => (state = "LOST")), failPending("LOST"))),
      // Forked while the connection is being acquired (uninterruptibly): the loop itself must stay interruptible.
      Effect.interruptible,
      Effect.forkDaemon
    )

    const eventFiber = yield* driver.connNextEvent(handle).pipe(
      Effect.catchAll(() => Effect.succeed("LOST" as const)),
      Effect.tap((event) => PubSub.publish(events, event)),
      Effect.repeat({ until: (event) => event === "CLOSED" || event === "LOST" }),
      Effect.tap((event) => {
        const reason = event === "LOST" ? "LOST" : "CLOSED"
        state = reason
        // rdma_cm: the side that started the disconnect sees CLOSED only once this side answers
        // (rdma_disconnect sends the reply); librpma's own examples disconnect after CLOSED too.
        return Effect.zipRight(failPending(reason), Effect.ignore(driver.connDisconnect(handle)))
      }),
      Effect.ensuring(Deferred.succeed(ended, undefined)),
      Effect.interruptible,
      Effect.forkDaemon
    )

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (state === "ESTABLISHED") {
          yield* release("rpma_conn_disconnect", "a connection", driver.connDisconnect(handle))
          yield* Deferred.await(ended).pipe(Effect.timeout(Duration.millis(config.timeoutMs)), Effect.ignore)
        }
        yield* Fiber.interrupt(eventFiber)
        yield* Fiber.interrupt(completionFiber)
        yield* failPending("CLOSED")
        yield* release("rpma_conn_delete", "a connection", driver.connDelete(handle))
      })
    )

    // The queues have fixed sizes: more requests than that would make ibv_post_send fail, so wait for a slot.
    const sendSlots = yield* Effect.makeSemaphore(config.sqSize)
    const recvSlots = yield* Effect.makeSemaphore(config.rqSize)

    // Once posted, a request cannot be recalled: the device may still touch its memory. So an
    // operation is uninterruptible from the moment it has a slot; an interruption takes effect
    // when the completion arrives (a lost or closed connection completes every pending request).
    const postAndAwait = (operation: string, request: WorkRequest) =>
      Effect.gen(function*() {
        if (state !== "ESTABLISHED") {
          return yield* Effect.fail(new ConnectionClosedError({ operation, reason: state }))
        }
        const deferred = yield* Deferred.make<number, OperationError>()
        pending.set(request.id, deferred)
        operations.set(request.id, operation)
        yield* driver.post(handle, request).pipe(
          Effect.tapError(() => Effect.sync(() => (pending.delete(request.id), operations.delete(request.id))))
        )
        return yield* Deferred.await(deferred)
      })

    const post = (operation: string, request: (id: number) => WorkRequest) =>
      Effect.uninterruptibleMask((restore) => {
        const wr = request(nextId++)
        const slots = wr.op === "recv" ? recvSlots : sendSlots
        return Effect.zipRight(restore(slots.take(1)), Effect.ensuring(postAndAwait(operation, wr), slots.release(1)))
      })

    return {
      handle,
      privateData,
      events: Stream.fromPubSub(events).pipe(Stream.takeUntil((e) => e === "CLOSED" || e === "LOST")),
      state: Effect.sync(() => state),
      post
    }
  })

/**
 * Resumes once the event loop has run its I/O phase: setImmediate callbacks run right after it.
 * Node runs expired timers before it polls for I/O, so after the loop was held up (synchronous
 * work, a long GC, a stalled VM) a deadline fires ahead of an event that arrived well before it.
 */
const afterPendingIo: Effect.Effect<void> = Effect.async<void>((resume) => {
  const immediate = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(immediate))
})

const awaitEstablished = (
  driver: Driver,
  handle: ConnHandle,
  address: string,
  port: number,
  config: ConnConfig
): Effect.Effect<void, RpmaError | ConnectionFailedError> =>
  Effect.raceFirst(
    driver.connNextEvent(handle),
    // The deadline counts only once what was ready before it has been delivered.
    Effect.sleep(Duration.millis(config.timeoutMs)).pipe(
      Effect.zipRight(afterPendingIo),
      Effect.zipRight(Effect.fail(new ConnectionFailedError({ address, port, event: "TIMEOUT" })))
    )
  ).pipe(
    Effect.flatMap((event) =>
      event === "ESTABLISHED" ? Effect.void : Effect.fail(new ConnectionFailedError({ address, port, event }))
    )
  )

/** Connects a request (consumed either way) and waits for ESTABLISHED; deletes the connection on failure. */
const connectRequest = (
  driver: Driver,
  req: ConnReqHandle,
  privateData: Uint8Array | undefined,
  where: { readonly address: string; readonly port: number },
  config: ConnConfig
): Effect.Effect<Connection, RpmaError | ConnectionFailedError, Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(driver.connReqConnect(req, privateData), (handle) =>
      restore(awaitEstablished(driver, handle, where.address, where.port, config)).pipe(
        Effect.tapErrorCause(() => release("rpma_conn_delete", "a failed connection", driver.connDelete(handle))),
        Effect.zipRight(establish(driver, handle, config))
      ))
  )

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
    return Effect.flatMap(
      driver.connReqNew(peer.handle, address, port, config),
      (req) => connectRequest(driver, req, options?.privateData, { address, port }, config)
    )
  })

/** @internal Used by Endpoint to accept an incoming request. */
export const accept = connectRequest

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
    Effect.asVoid(conn.post("rpma_write", (id) => ({
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
    Effect.asVoid(conn.post("rpma_read", (id) => ({
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
    Effect.asVoid(conn.post("rpma_flush", (id) => ({ op: "flush", id, dst: dst.handle, dstOffset: offset, length, type })))
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
    Effect.asVoid(conn.post("rpma_atomic_write", (id) => ({
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
    Effect.asVoid(conn.post("rpma_send", (id) => ({ op: "send", id, src: src.handle, offset, length })))
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
    conn.post("rpma_recv", (id) => ({ op: "recv", id, dst: dst.handle, offset, length }))
  )
