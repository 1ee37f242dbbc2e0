/**
 * The operations on a connection. Each takes its arguments by name (three adjacent offsets and
 * lengths are too easily swapped), checks every range before anything is posted, and fails only
 * with what it can produce: a range it refuses, the connection's end, a work completion's status,
 * and the codes librpma's post functions return for it.
 *
 * Re-exported by Connection.ts, where they are documented for users.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type { Connection, PostCall } from "../Connection.js"
import { type ConnectionClosedError, OutOfRangeError } from "./connectionErrors.js"
import type { Completion, Signal, WorkRequest } from "../Driver.js"
import type { LocalMr } from "../LocalMr.js"
import { type Owners, ownersOf, ownersOfOne } from "./dataPath.js"
import type { CompletionError, RpmaInvalidError, RpmaNoSupportError, RpmaProviderError } from "../RdmaError.js"
import type { RemoteMr } from "../RemoteMr.js"

/** librpma's post functions (rpma_write, rpma_read, rpma_send, ...) return only these. */
type PostError = RpmaInvalidError | RpmaProviderError

/**
 * What a write, read, atomic write, send or receive can fail with: a range refused before posting,
 * the connection's end, the work completion's status, or librpma refusing the post.
 *
 * @since 0.2.0
 * @category errors
 */
export type TransferError = OutOfRangeError | ConnectionClosedError | CompletionError | PostError

/**
 * What a flush can fail with: as a transfer, and RPMA_E_NOSUPP when the remote region or peer does
 * not support the flush type.
 *
 * @since 0.2.0
 * @category errors
 */
export type FlushError = TransferError | RpmaNoSupportError

const MAX_LENGTH = 2 ** 32 - 1

/** @internal */
export const checkRange = (
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
  // Exact in plain numbers while the end is a safe integer (a number compares exactly with a
  // bigint size too); BigInt only past 2^53 (measured: the BigInts were a tenth of a batch's time).
  const end = offset + length
  if (end <= Number.MAX_SAFE_INTEGER ? end > size : BigInt(offset) + BigInt(length) > BigInt(size)) {
    return new OutOfRangeError({
      operation,
      detail: `${what} range [${offset}, ${offset + length}) is outside its ${size}-byte region`
    })
  }
  return undefined
}

/** The connection's post, with its error narrowed to what this operation can produce. */
const post = <E>(conn: Connection, ...args: Parameters<PostCall<Completion>>): Effect.Effect<Completion, E> =>
  conn.post(...args) as Effect.Effect<Completion, any>

/** The regions of a request that holds none of ours (a flush, an atomic write: remote only). */
const NO_REGIONS: ReadonlyArray<LocalMr<any>> = []

/** As {@link post}, for the operations that succeed with nothing. */
const run = <E>(conn: Connection, ...args: Parameters<PostCall<void>>): Effect.Effect<void, E> =>
  conn.run(...args) as Effect.Effect<void, any>

/**
 * @since 0.2.0
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
 * A write or a read, checked and built once: the Effect that posts it and awaits its completion, to
 * run any number of times, or the range it refuses.
 */
const prepareTransfer = (
  conn: Connection,
  op: "write" | "read",
  regions: Owners,
  { dst, dstOffset = 0, length, src, srcOffset = 0 }: {
    readonly dst: { readonly handle: any; readonly size: number | bigint }
    readonly dstOffset?: number | undefined
    readonly src: { readonly handle: any; readonly size: number | bigint }
    readonly srcOffset?: number | undefined
    readonly length: number
  },
  /** The operation's fiber, when called inside its `withFiberRuntime`; undefined for a prepared Effect. */
  fiber?: Fiber.RuntimeFiber<any, any>
): Effect.Effect<void, TransferError> | OutOfRangeError => {
  const operation = op === "write" ? "rpma_write" : "rpma_read"
  const refused = checkRange(operation, "destination", dstOffset, length, dst.size) ??
    checkRange(operation, "source", srcOffset, length, src.size)
  if (refused !== undefined) return refused
  const dstHandle = dst.handle
  const srcHandle = src.handle
  const build = (id: number) => ({ op, id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length }) as WorkRequest
  return fiber === undefined
    ? run<TransferError>(conn, operation, "send", regions, build)
    : conn.runIn(fiber, operation, op, regions, build) as Effect.Effect<void, TransferError>
}

const orFail = <A>(prepared: Effect.Effect<A, TransferError> | OutOfRangeError): Effect.Effect<A, TransferError> =>
  prepared instanceof OutOfRangeError ? Effect.fail(prepared) : prepared

/** @internal */
export const write = (conn: Connection, args: WriteArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => orFail(prepareTransfer(conn, "write", owners(args.src), args, fiber)))
}

/** @internal */
export const prepareWrite = (
  conn: Connection,
  args: WriteArgs
): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> =>
  Effect.suspend(() => {
    const prepared = prepareTransfer(conn, "write", { owners: ownersOf([args.src]) }, args)
    return prepared instanceof OutOfRangeError ? Effect.fail(prepared) : Effect.succeed(prepared)
  })

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
 * @since 0.2.0
 * @category models
 */
export interface WriteManyArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  readonly src: LocalMr<"WRITE_SRC">
  readonly spans: Iterable<WriteSpan>
}

/** @internal */
export const writeMany = (conn: Connection, args: WriteManyArgs): Effect.Effect<void, TransferError> =>
  Effect.suspend(() => {
    const { dst, src } = args
    // Each span read once, then checked: its getters cannot change what was checked.
    const fixed: Array<WriteSpan> = []
    for (const { dstOffset, length, srcOffset } of args.spans) {
      const refused = checkRange("rpma_write", "destination", dstOffset, length, dst.size) ??
        checkRange("rpma_write", "source", srcOffset, length, src.size)
      if (refused !== undefined) return Effect.fail(refused)
      fixed.push({ dstOffset, length, srcOffset })
    }
    const dstHandle = dst.handle
    const srcHandle = src.handle
    return conn.postMany("rpma_write", fixed.length, [src], (i, id, completion) => {
      const { dstOffset, length, srcOffset } = fixed[i]!
      return { op: "write", id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length, completion }
    }) as Effect.Effect<void, TransferError>
  })

/**
 * @since 0.2.0
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

/** @internal */
export const read = (conn: Connection, args: ReadArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => orFail(prepareTransfer(conn, "read", owners(args.dst), args, fiber)))
}

/** @internal */
export const prepareRead = (
  conn: Connection,
  args: ReadArgs
): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> =>
  Effect.suspend(() => {
    const prepared = prepareTransfer(conn, "read", { owners: ownersOf([args.dst]) }, args)
    return prepared instanceof OutOfRangeError ? Effect.fail(prepared) : Effect.succeed(prepared)
  })

/**
 * @since 0.2.0
 * @category models
 */
export interface FlushArgs<F extends "FLUSH_TYPE_VISIBILITY" | "FLUSH_TYPE_PERSISTENT"> {
  readonly dst: RemoteMr<F>
  /** Default 0. */
  readonly offset?: number | undefined
  readonly length: number
}

/** @internal */
export const flushWith = (
  conn: Connection,
  args: FlushArgs<any>,
  type: "visibility" | "persistent"
): Effect.Effect<void, FlushError> =>
  Effect.withFiberRuntime((fiber) => {
    const { dst, length, offset = 0 } = args
    const refused = checkRange("rpma_flush", "destination", offset, length, dst.size)
    if (refused !== undefined) return Effect.fail(refused)
    const dstHandle = dst.handle
    return conn.runIn(fiber, "rpma_flush", "flush", NO_REGIONS, (id) => ({
      op: "flush",
      id,
      dst: dstHandle,
      dstOffset: offset,
      length,
      type
    })) as Effect.Effect<void, FlushError>
  })

/**
 * @since 0.2.0
 * @category models
 */
export interface AtomicWriteArgs {
  readonly dst: RemoteMr<"WRITE_DST">
  /** 8-byte aligned. */
  readonly offset: number
  /** Exactly 8 bytes. */
  readonly value: Uint8Array
}

/** @internal */
export const atomicWrite = (conn: Connection, args: AtomicWriteArgs): Effect.Effect<void, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const { dst, offset, value } = args
    const operation = "rpma_atomic_write"
    const refused = !(value instanceof Uint8Array) || value.byteLength !== 8
      ? new OutOfRangeError({ operation, detail: "the value must be exactly 8 bytes" })
      : offset % 8 !== 0
      ? new OutOfRangeError({ operation, detail: `offset ${offset} is not 8-byte aligned` })
      : checkRange(operation, "destination", offset, 8, dst.size)
    if (refused !== undefined) return Effect.fail(refused)
    const bytes = Uint8Array.from(value)
    const dstHandle = dst.handle
    return conn.runIn(fiber, operation, "atomicWrite", NO_REGIONS, (id) => ({
      op: "atomicWrite",
      id,
      dst: dstHandle,
      dstOffset: offset,
      value: bytes
    })) as Effect.Effect<void, TransferError>
  })

/**
 * @since 0.2.0
 * @category models
 */
export interface SendArgs {
  readonly src: LocalMr<"SEND">
  /** Default 0. */
  readonly offset?: number | undefined
  readonly length: number
}

/** @internal */
export const send = (conn: Connection, args: SendArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => {
    const { length, offset = 0, src } = args
    const refused = checkRange("rpma_send", "source", offset, length, src.size)
    if (refused !== undefined) return Effect.fail(refused)
    const srcHandle = src.handle
    return conn.runIn(fiber, "rpma_send", "send", owners(src), (id) => ({ op: "send", id, src: srcHandle, offset, length })) as Effect.Effect<
      void,
      TransferError
    >
  })
}

/**
 * @since 0.2.0
 * @category models
 */
export interface RecvArgs {
  readonly dst: LocalMr<"RECV">
  /** Default 0. */
  readonly offset?: number | undefined
  /** The most bytes to receive. Default: the rest of the region. */
  readonly length?: number | undefined
}

/** @internal */
export const recv = (conn: Connection, args: RecvArgs): Effect.Effect<number, TransferError> =>
  Effect.suspend(() => {
    const { dst, offset = 0 } = args
    const length = args.length ?? Math.max(dst.size - offset, 0)
    const refused = checkRange("rpma_recv", "destination", offset, length, dst.size)
    if (refused !== undefined) return Effect.fail(refused)
    return Effect.map(
      post<TransferError>(conn, "rpma_recv", "recv", [dst], (id) => ({ op: "recv", id, dst: dst.handle, offset, length })),
      (c) => c.byteLength
    )
  })

/**
 * For send-queue requests posted without waiting: `"always"` (the default) produces a completion,
 * `"onError"` only a failed one (RPMA_F_COMPLETION_ON_ERROR). An unsignalled request's success is
 * known when a later signalled request on the same connection completes, so wait on the last one
 * only, as librpma's clients do. The request that takes the send queue's last free entry is
 * signalled regardless.
 *
 * @since 0.3.0
 * @category models
 */
export type CompletionMode = Signal

/**
 * A write posted without waiting: with `imm`, rpma_write_with_imm (it also consumes a receive on
 * the other side, which completes with it).
 *
 * @since 0.3.0
 * @category models
 */
export interface PostWriteArgs extends WriteArgs {
  readonly imm?: number | undefined
  readonly completion?: CompletionMode | undefined
}

/**
 * A read posted without waiting.
 *
 * @since 0.3.0
 * @category models
 */
export interface PostReadArgs extends ReadArgs {
  readonly completion?: CompletionMode | undefined
}

/**
 * A send posted without waiting: with `imm`, rpma_send_with_imm (the receive on the other side
 * completes with it).
 *
 * @since 0.3.0
 * @category models
 */
export interface PostSendArgs extends SendArgs {
  readonly imm?: number | undefined
  readonly completion?: CompletionMode | undefined
}
