/**
 * Posting without waiting, unsignalled requests, immediate data, and the peer configuration
 * descriptor: librpma's features beyond one awaited operation. Re-exported by Connection.ts, where
 * they are documented for users.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { Connection } from "../Connection.js"
import { type OperationError, OutOfRangeError } from "./connectionErrors.js"
import type { Completion as DriverCompletion } from "../Driver.js"
import { RdmaDriver, WcFlags, WcOpcode } from "../Driver.js"
import type { RpmaError } from "../RdmaError.js"
import * as instrument from "./instrument.js"
import {
  checkRange,
  type PostReadArgs,
  type PostSendArgs,
  type PostWriteArgs,
  type RecvArgs
} from "./operations.js"

const MAX_LENGTH = 2 ** 32 - 1

const guarded = <A>(
  checks: ReadonlyArray<OutOfRangeError | undefined>,
  effect: Effect.Effect<A, OperationError>
): Effect.Effect<A, OperationError> => {
  const refused = checks.find((c) => c !== undefined)
  return refused === undefined ? effect : Effect.fail(refused)
}

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

/** @internal */
export const toCompletion = (c: DriverCompletion): Completion => ({
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

const checkImm = (operation: string, imm: number | undefined): OutOfRangeError | undefined =>
  imm === undefined || (Number.isInteger(imm) && imm >= 0 && imm <= MAX_LENGTH)
    ? undefined
    : new OutOfRangeError({ operation, detail: `immediate data ${imm} is not a 32-bit unsigned integer` })

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
 * @since 0.3.0
 * @category operations
 */
export const postWrite = (conn: Connection, args: PostWriteArgs): Effect.Effect<Posted, OperationError> => {
  const { completion, dst, dstOffset = 0, imm, length, src, srcOffset = 0 } = args
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
  args: Omit<PostWriteArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, OperationError> =>
  Effect.flatMap(postWrite(conn, args), (posted) => Effect.asVoid(posted.completion))

/**
 * Posts an rpma_read without waiting for it.
 *
 * @since 0.3.0
 * @category operations
 */
export const postRead = (conn: Connection, args: PostReadArgs): Effect.Effect<Posted, OperationError> => {
  const { completion, dst, dstOffset = 0, length, src, srcOffset = 0 } = args
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
 * Posts an rpma_send (or rpma_send_with_imm, with `imm`) without waiting for it.
 *
 * @since 0.3.0
 * @category operations
 */
export const postSend = (conn: Connection, args: PostSendArgs): Effect.Effect<Posted, OperationError> => {
  const { completion, imm, length, offset = 0, src } = args
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
  args: Omit<PostSendArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, OperationError> =>
  Effect.flatMap(postSend(conn, args), (posted) => Effect.asVoid(posted.completion))

/**
 * Posts an rpma_recv without waiting for it; its completion tells what arrived (a send, with or
 * without immediate data, or a write with immediate data).
 *
 * @since 0.3.0
 * @category operations
 */
export const postRecv = (conn: Connection, args: RecvArgs): Effect.Effect<Posted, OperationError> => {
  const { dst, offset = 0 } = args
  const length = args.length ?? Math.max(dst.size - offset, 0)
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
