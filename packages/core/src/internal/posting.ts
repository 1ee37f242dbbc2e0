/**
 * Posting without waiting, unsignalled requests, immediate data, whole completions, and the peer
 * configuration descriptor: librpma's features beyond one awaited operation. Each reads and checks
 * its arguments when its Effect runs, as the awaited operations do, and fails with the same
 * errors as they do.
 *
 * Declared and documented in Connection.ts.
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Connection from "../Connection.js"
import { impl } from "./connectionImpl.js"
import type { OperationError } from "../ConnectionError.js"
import type { RdmaDriver } from "../Driver.js"
import type { Completion as DriverCompletion, Signal, WorkRequest } from "../DriverModel.js"
import { WcFlags, WcOpcode } from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import type { RpmaError } from "../RdmaError.js"
import type { Pending } from "./dataPath.js"
import * as instrument from "./instrument.js"
import { Operations, type OperationSpec } from "./operationTable.js"
import { awaitRecv, checkImm, checkRange, recvLength } from "./operations.js"
import type { Poster } from "./poster.js"
import { SUBMIT } from "./poster.js"

type TransferError = Connection.TransferError

const operationNames: Record<number, Connection.CompletedOperation> = {
  [WcOpcode.SEND]: "SEND",
  [WcOpcode.RDMA_WRITE]: "RDMA_WRITE",
  [WcOpcode.RDMA_READ]: "RDMA_READ",
  [WcOpcode.RECV]: "RECV",
  [WcOpcode.RECV_RDMA_WITH_IMM]: "RECV_RDMA_WITH_IMM"
}

/** A driver's completion as users read it. */
export const toCompletion = (c: DriverCompletion): Connection.Completion => ({
  operation: operationNames[c.opcode] ?? "OTHER",
  opcode: c.opcode,
  byteLength: c.byteLength,
  flags: c.flags,
  imm: (c.flags & WcFlags.WITH_IMM) !== 0 ? c.imm : undefined
})

export const completionOf = (
  wait: Effect.Effect<DriverCompletion, TransferError>
): Effect.Effect<Connection.Completion, TransferError> => Effect.map(wait, toCompletion)

/**
 * Posts through `kernel` without waiting, once `refused` (the checks, made when the
 * Effect runs) found nothing: a ticket whose completion `complete` makes what users read.
 */
export const submit = <C>(
  kernel: Poster,
  fiber: Fiber.RuntimeFiber<any, any>,
  spec: OperationSpec,
  refused: TransferError | undefined,
  regions: ReadonlyArray<LocalMr<any>>,
  build: (id: number) => WorkRequest,
  signal: Signal | undefined,
  complete: (c: DriverCompletion) => C
): Effect.Effect<{ readonly operation: string; readonly completion: Effect.Effect<C, TransferError> }, TransferError> =>
  refused !== undefined ? Effect.fail(refused) : kernel.start<TransferError>(
    fiber,
    spec,
    regions,
    build,
    signal,
    SUBMIT,
    (entry: Pending<OperationError>) => ({ operation: spec.name, completion: kernel.await<C, TransferError>(entry, complete) })
  )

export const postWrite = (
  conn: Connection.Connection,
  args: Connection.PostWriteArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const { completion, dst, dstOffset = 0, imm, length, src, srcOffset = 0 } = args
    const spec = imm === undefined ? Operations.write : Operations.writeWithImm
    const operation = spec.name
    const dstHandle = dst.handle
    const srcHandle = src.handle
    return submit(
      impl(conn).kernel,
      fiber,
      spec,
      checkImm(operation, imm) ?? checkRange(operation, "destination", dstOffset, length, dst.size) ??
        checkRange(operation, "source", srcOffset, length, src.size),
      [src],
      (id) => ({ op: "write", id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length, imm }),
      completion,
      toCompletion
    )
  })

export const writeWithImm = (
  conn: Connection.Connection,
  args: Omit<Connection.PostWriteArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, TransferError> => Effect.flatMap(postWrite(conn, args), (posted) => Effect.asVoid(posted.completion))

export const postRead = (
  conn: Connection.Connection,
  args: Connection.PostReadArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const { completion, dst, dstOffset = 0, length, src, srcOffset = 0 } = args
    const operation = Operations.read.name
    const dstHandle = dst.handle
    const srcHandle = src.handle
    return submit(
      impl(conn).kernel,
      fiber,
      Operations.read,
      checkRange(operation, "destination", dstOffset, length, dst.size) ??
        checkRange(operation, "source", srcOffset, length, src.size),
      [dst],
      (id) => ({ op: "read", id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length }),
      completion,
      toCompletion
    )
  })

export const postSend = (
  conn: Connection.Connection,
  args: Connection.PostSendArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const { completion, imm, length, offset = 0, src } = args
    const spec = imm === undefined ? Operations.send : Operations.sendWithImm
    const srcHandle = src.handle
    return submit(
      impl(conn).kernel,
      fiber,
      spec,
      checkImm(spec.name, imm) ?? checkRange(spec.name, "source", offset, length, src.size),
      [src],
      (id) => ({ op: "send", id, src: srcHandle, offset, length, imm }),
      completion,
      toCompletion
    )
  })

export const sendWithImm = (
  conn: Connection.Connection,
  args: Omit<Connection.PostSendArgs, "imm" | "completion"> & { readonly imm: number }
): Effect.Effect<void, TransferError> => Effect.flatMap(postSend(conn, args), (posted) => Effect.asVoid(posted.completion))

/**
 * A receive posted through `kernel` without waiting (on a connection, a shared receive
 * queue, a connection request): its range checked, then what `refusal` finds, when the Effect runs.
 */
export const submitRecv = <C>(
  kernel: Poster,
  spec: OperationSpec,
  args: Connection.RecvArgs,
  refusal: (args: Connection.RecvArgs) => TransferError | undefined,
  complete: (c: DriverCompletion) => C
): Effect.Effect<{ readonly operation: string; readonly completion: Effect.Effect<C, TransferError> }, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const { dst, offset = 0 } = args
    const length = recvLength(args)
    const dstHandle = dst.handle
    return submit(
      kernel,
      fiber,
      spec,
      checkRange(spec.name, "destination", offset, length, dst.size) ?? refusal(args),
      [dst],
      (id) => ({ op: "recv", id, dst: dstHandle, offset, length }),
      undefined,
      complete
    )
  })

const noRefusal = () => undefined

export const postRecv = (
  conn: Connection.Connection,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  submitRecv(impl(conn).kernel, Operations.recv, args, noRefusal, toCompletion)

export const receive = (
  conn: Connection.Connection,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Completion, TransferError> => awaitRecv(conn, args, toCompletion)

export const peerConfigDescriptor = (options: {
  readonly directWriteToPmem: boolean
}): Effect.Effect<Uint8Array, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.peerCfgDescriptor(options.directWriteToPmem))

export const applyRemotePeerConfig = (
  conn: Connection.Connection,
  descriptor: Uint8Array
): Effect.Effect<void, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.connApplyRemotePeerCfg(conn.handle, descriptor))

export const qpNum = (conn: Connection.Connection): Effect.Effect<number, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => driver.connQpNum(conn.handle))
