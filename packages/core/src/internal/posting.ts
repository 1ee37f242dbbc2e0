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
import { OutOfRangeError } from "../ConnectionError.js"
import type { OperationError } from "../ConnectionError.js"
import type { RdmaDriver } from "../Driver.js"
import type { Completion as DriverCompletion, Signal, WorkRequest } from "../DriverModel.js"
import { WcFlags, WcOpcode } from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import { type RpmaError, RpmaInvalidError } from "../RdmaError.js"
import { impl } from "./connectionImpl.js"
import type { Pending } from "./dataPath.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import {
  awaitPosted,
  awaitRecv,
  checkImm,
  checkRange,
  foreignRegion,
  malformed,
  notRegion,
  recvLength,
  withImm
} from "./operations.js"
import { Operations, type OperationSpec } from "./operationTable.js"
import { AWAIT, type Exchanged, type Poster, SUBMIT } from "./poster.js"
import { notAConnection } from "./resourceGuard.js"

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
    (entry: Pending<OperationError>) => ({
      operation: spec.name,
      completion: kernel.await<C, TransferError>(entry, complete)
    })
  )

export const postWrite = (
  conn: Connection.Connection,
  args: Connection.PostWriteArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const malformedArgs = notAConnection(Operations.write.name, conn) ?? malformed(Operations.write.name, args) ??
      notRegion(Operations.write.name, "dst", args.dst) ?? notRegion(Operations.write.name, "src", args.src)
    if (malformedArgs !== undefined) return Effect.fail(malformedArgs)
    const { completion, dst, dstOffset = 0, imm, length, src, srcOffset = 0 } = args
    const spec = imm === undefined ? Operations.write : Operations.writeWithImm
    const operation = spec.name
    const dstHandle = handles.remoteMr(dst)
    const srcHandle = handles.localMr(src)
    return submit(
      impl(conn).kernel,
      fiber,
      spec,
      checkImm(operation, imm) ?? checkRange(operation, "destination", dstOffset, length, dst.size) ??
        checkRange(operation, "source", srcOffset, length, src.size) ?? foreignRegion(conn, operation, "source", src),
      [src],
      (id) => ({ op: "write", id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length, imm }),
      completion,
      toCompletion
    )
  })

export const postRead = (
  conn: Connection.Connection,
  args: Connection.PostReadArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const malformedArgs = notAConnection(Operations.read.name, conn) ?? malformed(Operations.read.name, args) ??
      notRegion(Operations.read.name, "dst", args.dst) ?? notRegion(Operations.read.name, "src", args.src)
    if (malformedArgs !== undefined) return Effect.fail(malformedArgs)
    const { completion, dst, dstOffset = 0, length, src, srcOffset = 0 } = args
    const operation = Operations.read.name
    const dstHandle = handles.localMr(dst)
    const srcHandle = handles.remoteMr(src)
    return submit(
      impl(conn).kernel,
      fiber,
      Operations.read,
      checkRange(operation, "destination", dstOffset, length, dst.size) ??
        checkRange(operation, "source", srcOffset, length, src.size) ??
        foreignRegion(conn, operation, "destination", dst),
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
    const malformedArgs = notAConnection(Operations.send.name, conn) ?? malformed(Operations.send.name, args) ??
      notRegion(Operations.send.name, "src", args.src)
    if (malformedArgs !== undefined) return Effect.fail(malformedArgs)
    const { completion, imm, length, offset = 0, src } = args
    const spec = imm === undefined ? Operations.send : Operations.sendWithImm
    const srcHandle = handles.localMr(src)
    return submit(
      impl(conn).kernel,
      fiber,
      spec,
      checkImm(spec.name, imm) ?? checkRange(spec.name, "source", offset, length, src.size) ??
        foreignRegion(conn, spec.name, "source", src),
      [src],
      (id) => ({ op: "send", id, src: srcHandle, offset, length, imm }),
      completion,
      toCompletion
    )
  })

withImm(
  (conn, args) => awaitPosted(postWrite(conn, args)),
  (conn, args) => awaitPosted(postSend(conn, args))
)

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
    const malformedArgs = malformed(spec.name, args) ?? notRegion(spec.name, "dst", args.dst)
    if (malformedArgs !== undefined) return Effect.fail(malformedArgs)
    const { dst, offset = 0 } = args
    const length = recvLength(args)
    const dstHandle = handles.localMr(dst)
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

export const postRecv = (
  conn: Connection.Connection,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Posted, TransferError> =>
  Effect.suspend(() => {
    const notConnection = notAConnection(Operations.recv.name, conn)
    return notConnection === undefined
      ? submitRecv(
        impl(conn).kernel,
        Operations.recv,
        args,
        ({ dst }) => foreignRegion(conn, Operations.recv.name, "destination", dst),
        toCompletion
      )
      : instrument.refused(notConnection)
  })

export const recv = (
  conn: Connection.Connection,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Completion, TransferError> => awaitRecv(conn, args, toCompletion)

/** The two requests of a call or a reply, checked (the receive first), or why not. */
const exchanged = (
  conn: Connection.Connection,
  args: Connection.ExchangeArgs
): readonly [Exchanged<WorkRequest>, Exchanged<WorkRequest>] | TransferError => {
  if (args === null || typeof args !== "object" || args.send == null || args.recv == null) {
    return new OutOfRangeError({ operation: Operations.send.name, detail: "the arguments must name a send and a recv" })
  }
  const { recv, send } = args
  const malformedArgs = malformed(Operations.recv.name, recv) ?? notRegion(Operations.recv.name, "dst", recv.dst) ??
    malformed(Operations.send.name, send) ?? notRegion(Operations.send.name, "src", send.src)
  if (malformedArgs !== undefined) return malformedArgs
  const { dst, offset: recvOffset = 0 } = recv
  const recvLengthOf = recvLength(recv)
  const refused = checkRange(Operations.recv.name, "destination", recvOffset, recvLengthOf, dst.size) ??
    foreignRegion(conn, Operations.recv.name, "destination", dst)
  if (refused !== undefined) return refused
  const { imm, length, offset = 0, src } = send
  const spec = imm === undefined ? Operations.send : Operations.sendWithImm
  const sendRefused = checkImm(spec.name, imm) ?? checkRange(spec.name, "source", offset, length, src.size) ??
    foreignRegion(conn, spec.name, "source", src)
  if (sendRefused !== undefined) return sendRefused
  const dstHandle = handles.localMr(dst)
  const srcHandle = handles.localMr(src)
  return [
    {
      spec: Operations.recv,
      owners: [dst],
      build: (id) => ({ op: "recv", id, dst: dstHandle, offset: recvOffset, length: recvLengthOf })
    },
    { spec, owners: [src], build: (id) => ({ op: "send", id, src: srcHandle, offset, length, imm }) }
  ]
}

/** Both requests posted in one driver call: the answer awaited (`call`), or the receive's ticket (`reply`). */
const exchange = (
  conn: Connection.Connection,
  args: Connection.ExchangeArgs,
  then: typeof AWAIT | typeof SUBMIT
): Effect.Effect<any, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const prepared = notAConnection(Operations.send.name, conn) ?? exchanged(conn, args)
    if (!Array.isArray(prepared)) return instrument.refused(prepared as TransferError)
    const [recv, send] = prepared
    const kernel = impl(conn).kernel
    return kernel.exchange<TransferError>(
      fiber,
      recv,
      send,
      then,
      then === AWAIT ? toCompletion : (entry: Pending<OperationError>): Connection.Posted => ({
        operation: Operations.recv.name,
        completion: kernel.await<Connection.Completion, TransferError>(entry, toCompletion)
      })
    )
  })

export const call = (
  conn: Connection.Connection,
  args: Connection.ExchangeArgs
): Effect.Effect<Connection.Completion, TransferError> => exchange(conn, args, AWAIT)

export const reply = (
  conn: Connection.Connection,
  args: Connection.ExchangeArgs
): Effect.Effect<Connection.Posted, TransferError> => exchange(conn, args, SUBMIT)

export const peerConfigDescriptor = (options: {
  readonly directWriteToPmem: boolean
}): Effect.Effect<Uint8Array, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) =>
    options !== null && typeof options === "object"
      ? driver.peerCfgDescriptor(options.directWriteToPmem)
      : instrument.refused(
        new RpmaInvalidError({
          operation: "rpma_peer_cfg_get_descriptor",
          detail: "the options must be an object: { directWriteToPmem: boolean }"
        })
      ))

export const applyRemotePeerConfig = (
  conn: Connection.Connection,
  descriptor: Uint8Array
): Effect.Effect<void, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const refused = notAConnection("rpma_conn_apply_remote_peer_cfg", conn)
    return refused === undefined
      ? driver.connApplyRemotePeerCfg(impl(conn).handle, descriptor)
      : instrument.refused(refused)
  })

export const qpNum = (conn: Connection.Connection): Effect.Effect<number, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const refused = notAConnection("rpma_conn_get_qp_num", conn)
    return refused === undefined ? driver.connQpNum(impl(conn).handle) : instrument.refused(refused)
  })
