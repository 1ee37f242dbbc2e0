/**
 * The operations on a connection, over its posting kernel (internal/poster.ts). Each takes its
 * arguments by name (three adjacent offsets and lengths are too easily swapped), reads and checks
 * them when its Effect runs (never when it is made), checks every range before anything is
 * posted, and fails only with what it can produce: a range it refuses, the connection's end, a
 * work completion's status, and the codes librpma's post functions return for it.
 *
 * Declared and documented in Connection.ts.
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Connection from "../Connection.js"
import { OutOfRangeError } from "../ConnectionError.js"
import type { Completion, Signal, WorkRequest } from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import { RpmaInvalidError } from "../RdmaError.js"
import type { RemoteMr } from "../RemoteMr.js"
import { impl } from "./connectionImpl.js"
import { type Owners, ownersOf, ownersOfOne } from "./dataPath.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import { Operations, type OperationSpec } from "./operationTable.js"
import { AWAIT, AWAIT_VOID } from "./poster.js"
import { notAConnection } from "./resourceGuard.js"

type TransferError = Connection.TransferError
type FlushError = Connection.FlushError

const MAX_LENGTH = 2 ** 32 - 1

/** The range check every operation makes before it posts. */
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

/**
 * A size as {@link checkRange} compares it fastest: a number where that is exact. V8 compares a
 * number with a bigint in a runtime call (about 90 instructions); a batch converts its remote
 * region's size once.
 */
export const comparableSize = (size: number | bigint): number | bigint =>
  typeof size === "bigint" && size <= MAX_SAFE_BIGINT ? Number(size) : size

const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER)

/**
 * Arguments that are no object (null, a number, missing): refused before anything is read from
 * them. With {@link notRegion} for each region they name, where reading a region's size would throw.
 */
export const malformed = (operation: string, args: unknown): OutOfRangeError | undefined =>
  args === null || typeof args !== "object"
    ? new OutOfRangeError({ operation, detail: `the arguments must be an object, not ${kindOf(args)}` })
    : undefined

/** `value`, given as the region `name`, is no object. */
export const notRegion = (operation: string, name: string, value: unknown): OutOfRangeError | undefined =>
  value === null || typeof value !== "object"
    ? new OutOfRangeError({ operation, detail: `${name} must be a region, not ${kindOf(value)}` })
    : undefined

/** A transfer's arguments (a write's or a read's): an object naming both regions. Read by name, not by a list of names. */
const malformedTransfer = (operation: string, args: TransferArgs): OutOfRangeError | undefined =>
  malformed(operation, args) ?? notRegion(operation, "dst", args.dst) ?? notRegion(operation, "src", args.src)

const kindOf = (value: unknown): string => value === null ? "null" : typeof value

/** A refusal of a batch's `index`-th request, named as such. */
const inBatch = (refused: OutOfRangeError, index: number): OutOfRangeError =>
  new OutOfRangeError({ operation: refused.operation, detail: `write ${index} of the batch: ${refused.detail}` })

/** Immediate data: a 32-bit unsigned integer, or none. */
export const checkImm = (operation: string, imm: number | undefined): OutOfRangeError | undefined =>
  imm === undefined || (Number.isInteger(imm) && imm >= 0 && imm <= MAX_LENGTH)
    ? undefined
    : new OutOfRangeError({ operation, detail: `immediate data ${imm} is not a 32-bit unsigned integer` })

/** A receive's length: what is given, else the rest of the region. */
export const recvLength = (args: Connection.RecvArgs): number =>
  args.length ?? Math.max(args.dst.size - (args.offset ?? 0), 0)

/**
 * A local region registered on another peer than the connection's: another protection domain,
 * which the device refuses only when it runs the request (IBV_WC_LOC_PROT_ERR), failing the
 * connection with it. Refused before posting, as librpma's post functions refuse what they can
 * tell is wrong. A region whose peer cannot be read is left to the driver.
 */
export const foreignRegion = (
  conn: Connection.Connection,
  operation: string,
  name: string,
  mr: LocalMr<any>
): RpmaInvalidError | undefined => {
  const peer = mr.peer
  const own = impl(conn).peer
  return peer === own || peer === undefined || handles.peer(peer) === handles.peer(own)
    ? undefined
    : new RpmaInvalidError({
      operation,
      detail: `the ${name} region is registered on another peer than the connection's (the peer at ${own.address}): ` +
        "register it on the peer the connection was made with (RdmaClient.withConnection gives the client's)"
    })
}

/** The regions of a request that holds none of ours (a flush, an atomic write: remote only). */
const NO_REGIONS: ReadonlyArray<LocalMr<any>> = []

interface TransferArgs {
  readonly dst: LocalMr<any> | RemoteMr<any>
  readonly dstOffset?: number | undefined
  readonly src: LocalMr<any> | RemoteMr<any>
  readonly srcOffset?: number | undefined
  readonly length: number
}

/**
 * A write or a read, checked and built once: the Effect that posts it and awaits its completion, to
 * run any number of times, or the range it refuses.
 */
const prepareTransfer = (
  conn: Connection.Connection,
  spec: OperationSpec,
  regions: Owners,
  { dst, dstOffset = 0, length, src, srcOffset = 0 }: TransferArgs,
  /** The operation's fiber, when called inside its `withFiberRuntime`; undefined for a prepared Effect. */
  fiber?: Fiber.RuntimeFiber<any, any>
): Effect.Effect<void, TransferError> | Refusal => {
  const operation = spec.name
  const refused = checkRange(operation, "destination", dstOffset, length, dst.size) ??
    checkRange(operation, "source", srcOffset, length, src.size) ??
    (spec.op === "write"
      ? foreignRegion(conn, operation, "source", src as LocalMr<any>)
      : foreignRegion(conn, operation, "destination", dst as LocalMr<any>))
  if (refused !== undefined) return refused
  const dstHandle = handles.region(dst)
  const srcHandle = handles.region(src)
  const op = spec.op
  const build = (id: number) =>
    ({ op, id, dst: dstHandle, dstOffset, src: srcHandle, srcOffset, length }) as WorkRequest
  const kernel = impl(conn).kernel
  return fiber === undefined
    ? Effect.withFiberRuntime((fiber) =>
      kernel.start<TransferError>(fiber, spec, regions, build, undefined, AWAIT_VOID)
    )
    : kernel.start<TransferError>(fiber, spec, regions, build, undefined, AWAIT_VOID)
}

/** What a request's checks refuse it with before anything is posted. */
type Refusal = OutOfRangeError | RpmaInvalidError

const isRefusal = (u: unknown): u is Refusal => u instanceof OutOfRangeError || u instanceof RpmaInvalidError

const orFail = <A>(prepared: Effect.Effect<A, TransferError> | Refusal): Effect.Effect<A, TransferError> =>
  isRefusal(prepared) ? instrument.refused(prepared) : prepared

/**
 * A prepared request on `conn`: what `prepare` made, or its refusal. On anything but a connection,
 * prepared all the same: an Effect that fails as the operation fails on it (RPMA_E_INVAL).
 */
const prepared = (
  conn: Connection.Connection,
  operation: string,
  prepare: () => Effect.Effect<void, TransferError> | Refusal
): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> =>
  Effect.suspend(() => {
    const notConnection = notAConnection(operation, conn)
    if (notConnection !== undefined) return Effect.succeed(Effect.suspend(() => instrument.refused(notConnection)))
    const made = prepare()
    // A region of another peer fails the prepared Effect as the operation fails (RPMA_E_INVAL).
    return made instanceof OutOfRangeError
      ? instrument.refused(made)
      : made instanceof RpmaInvalidError
      ? Effect.succeed(Effect.suspend(() => instrument.refused(made)))
      : Effect.succeed(made)
  })

/** The awaited form of a request posted without waiting (a write or send with immediate data). */
export const awaitPosted = (
  posted: Effect.Effect<Connection.Posted, TransferError>
): Effect.Effect<void, TransferError> => Effect.flatMap(posted, (p) => Effect.asVoid(p.completion))

/** With `imm`, rpma_write_with_imm: posted as postWrite posts it (internal/posting.ts), then awaited. */
let writeWithImm: (conn: Connection.Connection, args: Connection.WriteArgs) => Effect.Effect<void, TransferError>
/** With `imm`, rpma_send_with_imm, likewise. */
let sendWithImm: (conn: Connection.Connection, args: Connection.SendArgs) => Effect.Effect<void, TransferError>

/** Set by internal/posting.ts, which imports this module (no cycle of imports). */
export const withImm = (
  write: typeof writeWithImm,
  send: typeof sendWithImm
): void => {
  writeWithImm = write
  sendWithImm = send
}

export const write = (conn: Connection.Connection, args: Connection.WriteArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => {
    const refused = notAConnection(Operations.write.name, conn) ?? malformedTransfer(Operations.write.name, args)
    if (refused !== undefined) return instrument.refused(refused)
    return args.imm !== undefined
      ? writeWithImm(conn, args)
      : orFail(prepareTransfer(conn, Operations.write, owners(args.src), args, fiber))
  })
}

export const prepareWrite = (
  conn: Connection.Connection,
  args: Connection.WriteArgs
): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> =>
  prepared(
    conn,
    Operations.write.name,
    () =>
      malformedTransfer(Operations.write.name, args) ??
        prepareTransfer(conn, Operations.write, { owners: ownersOf([args.src]) }, args)
  )

/** A batch's write, made once its checks pass: its id and signal are set when it is posted. */
interface BatchWrite {
  readonly op: "write"
  id: number
  readonly dst: unknown
  readonly dstOffset: number
  readonly src: unknown
  readonly srcOffset: number
  readonly length: number
  completion: Signal
}

export const writeMany = (
  conn: Connection.Connection,
  writes: ReadonlyArray<Connection.WriteArgs>
): Effect.Effect<void, TransferError> =>
  Effect.suspend(() => {
    const operation = Operations.write.name
    const notConnection = notAConnection(operation, conn)
    if (notConnection !== undefined) return instrument.refused(notConnection)
    if (!Array.isArray(writes)) {
      return instrument.refused(new OutOfRangeError({ operation, detail: "the writes must be an array of WriteArgs" }))
    }
    // Read once: a list whose length changes as it is read (a Proxy) is read to this length.
    const count = writes.length
    const fixed: Array<BatchWrite> = new Array(count)
    const sources: Array<LocalMr<any>> = []
    // Consecutive writes of the same regions (the common batch) read their sizes and handles once.
    let dst: Connection.WriteArgs["dst"] | undefined
    let dstSize: number | bigint = 0
    let dstHandle: unknown
    let src: Connection.WriteArgs["src"] | undefined
    let srcSize: number | bigint = 0
    let srcHandle: unknown
    for (let i = 0; i < count; i++) {
      const args = writes[i]
      if (args === null || typeof args !== "object") {
        return instrument.refused(
          new OutOfRangeError({ operation, detail: `write ${i} of the batch is not a WriteArgs` })
        )
      }
      // Each field read once: a getter cannot hand the checks one value and the request another.
      const { dst: nextDst, dstOffset = 0, imm, length, src: nextSrc, srcOffset = 0 } = args
      if (nextDst !== dst || i === 0) {
        const refused = notRegion(operation, "dst", nextDst)
        if (refused !== undefined) return instrument.refused(inBatch(refused, i))
        dst = nextDst
        dstSize = comparableSize(nextDst.size)
        dstHandle = handles.remoteMr(nextDst)
      }
      if (nextSrc !== src || i === 0) {
        const next = nextSrc
        const refused = notRegion(operation, "src", next)
        if (refused !== undefined) return instrument.refused(inBatch(refused, i))
        const foreign = foreignRegion(conn, operation, `write ${i} of the batch: its source`, next)
        if (foreign !== undefined) return instrument.refused(foreign)
        src = next
        srcSize = next.size
        srcHandle = handles.localMr(next)
        if (!sources.includes(next)) sources.push(next)
      }
      const refused = imm !== undefined
        ? new OutOfRangeError({
          operation,
          detail: "a batch of writes carries no immediate data: post such a write with postWrite"
        })
        : checkRange(operation, "destination", dstOffset, length, dstSize) ??
          checkRange(operation, "source", srcOffset, length, srcSize)
      if (refused !== undefined) return instrument.refused(refused)
      fixed[i] = {
        op: "write",
        id: 0,
        dst: dstHandle,
        dstOffset,
        src: srcHandle,
        srcOffset,
        length,
        completion: "always"
      }
    }
    return impl(conn).kernel.postBatch<TransferError>({
      spec: Operations.write,
      count,
      regions: sources,
      // The request made above, its id and signal set: each is posted once (a traced batch builds
      // every one first for its size, with id 0, before any is posted).
      build: (i, id, completion) => {
        const request = fixed[i]!
        request.id = id
        request.completion = completion
        return request as WorkRequest
      }
    })
  })

export const read = (conn: Connection.Connection, args: Connection.ReadArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => {
    const notConnection = notAConnection(Operations.read.name, conn)
    if (notConnection !== undefined) return instrument.refused(notConnection)
    return orFail(
      malformedTransfer(Operations.read.name, args) ??
        prepareTransfer(conn, Operations.read, owners(args.dst), args, fiber)
    )
  })
}

export const prepareRead = (
  conn: Connection.Connection,
  args: Connection.ReadArgs
): Effect.Effect<Effect.Effect<void, TransferError>, OutOfRangeError> =>
  prepared(
    conn,
    Operations.read.name,
    () =>
      malformedTransfer(Operations.read.name, args) ??
        prepareTransfer(conn, Operations.read, { owners: ownersOf([args.dst]) }, args)
  )

/** librpma's flush reads this many bytes of the region at its offset (RAW_SIZE in librpma's flush.c). */
const FLUSH_READ_SIZE = 8

/**
 * Where a flush of [offset, offset + length), already checked to lie within its `size`-byte
 * region, is posted. librpma's flush (APM, both types) is an RDMA read of 8 bytes at the flush's offset,
 * whatever its length: the device refuses one that starts within 8 bytes of the region's end
 * (REM_ACCESS_ERR), and the connection then fails every later request. The read is only a fence (a
 * read after writes on the same queue pair makes them visible; where it reads does not matter), so
 * a flush near the end reads the region's last 8 bytes instead, and only a region smaller than 8
 * bytes, which no read of 8 bytes fits, is refused.
 */
const flushReadAt = (offset: number, length: number, size: number | bigint): number | OutOfRangeError => {
  // The common cases without touching the size (a bigint, whose comparison with a number costs
  // about 20 ns): a range of 8 bytes or more already fits the read.
  if (length >= FLUSH_READ_SIZE || offset + FLUSH_READ_SIZE <= size) return offset
  if (size < FLUSH_READ_SIZE) {
    return new OutOfRangeError({
      operation: Operations.flush.name,
      detail:
        `a ${size}-byte region cannot be flushed: librpma's flush reads ${FLUSH_READ_SIZE} bytes of the region, so it must be at least ${FLUSH_READ_SIZE} bytes`
    })
  }
  return Number(size) - FLUSH_READ_SIZE
}

export const flush = (conn: Connection.Connection, args: Connection.FlushArgs): Effect.Effect<void, FlushError> =>
  Effect.withFiberRuntime((fiber) => {
    const malformedArgs = notAConnection(Operations.flush.name, conn) ?? malformed(Operations.flush.name, args) ??
      notRegion(Operations.flush.name, "dst", args.dst)
    if (malformedArgs !== undefined) return instrument.refused(malformedArgs)
    const { dst, dstOffset: offset = 0, length } = args
    const type = args.type ?? "visibility"
    if (type !== "visibility" && type !== "persistent") {
      return instrument.refused(
        new OutOfRangeError({
          operation: Operations.flush.name,
          detail: `type is "visibility" or "persistent", not ${String(type)}`
        })
      )
    }
    const refused = checkRange(Operations.flush.name, "destination", offset, length, dst.size)
    if (refused !== undefined) return instrument.refused(refused)
    const at = flushReadAt(offset, length, dst.size)
    if (typeof at !== "number") return instrument.refused(at)
    // From the read's start to the flush's end: the range asked for, or one that contains it.
    const posted = at === offset ? length : offset + length - at
    const dstHandle = handles.remoteMr(dst)
    return impl(conn).kernel.start<FlushError>(
      fiber,
      Operations.flush,
      NO_REGIONS,
      (id) => ({
        op: "flush",
        id,
        dst: dstHandle,
        dstOffset: at,
        length: posted,
        type
      }),
      undefined,
      AWAIT_VOID
    )
  })

export const atomicWrite = (
  conn: Connection.Connection,
  args: Connection.AtomicWriteArgs
): Effect.Effect<void, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const operation = Operations.atomicWrite.name
    const malformedArgs = notAConnection(operation, conn) ?? malformed(operation, args) ??
      notRegion(operation, "dst", args.dst)
    if (malformedArgs !== undefined) return instrument.refused(malformedArgs)
    const { dst, offset, value } = args
    const refused = !(value instanceof Uint8Array) || value.byteLength !== 8
      ? new OutOfRangeError({ operation, detail: "the value must be exactly 8 bytes" })
      : offset % 8 !== 0
      ? new OutOfRangeError({ operation, detail: `offset ${offset} is not 8-byte aligned` })
      : checkRange(operation, "destination", offset, 8, dst.size)
    if (refused !== undefined) return instrument.refused(refused)
    const bytes = Uint8Array.from(value)
    const dstHandle = handles.remoteMr(dst)
    return impl(conn).kernel.start<TransferError>(
      fiber,
      Operations.atomicWrite,
      NO_REGIONS,
      (id) => ({
        op: "atomicWrite",
        id,
        dst: dstHandle,
        dstOffset: offset,
        value: bytes
      }),
      undefined,
      AWAIT_VOID
    )
  })

export const send = (conn: Connection.Connection, args: Connection.SendArgs): Effect.Effect<void, TransferError> => {
  const owners = ownersOfOne()
  return Effect.withFiberRuntime((fiber) => {
    const malformedArgs = notAConnection(Operations.send.name, conn) ?? malformed(Operations.send.name, args) ??
      notRegion(Operations.send.name, "src", args.src)
    if (malformedArgs !== undefined) return instrument.refused(malformedArgs)
    if (args.imm !== undefined) return sendWithImm(conn, args)
    const { length, offset = 0, src } = args
    const refused = checkRange(Operations.send.name, "source", offset, length, src.size) ??
      foreignRegion(conn, Operations.send.name, "source", src)
    if (refused !== undefined) return instrument.refused(refused)
    const srcHandle = handles.localMr(src)
    return impl(conn).kernel.start<TransferError>(
      fiber,
      Operations.send,
      owners(src),
      (id) => ({ op: "send", id, src: srcHandle, offset, length }),
      undefined,
      AWAIT_VOID
    )
  })
}

/** A receive on a connection, awaited: its completion as `complete` makes it. */
export const awaitRecv = <A>(
  conn: Connection.Connection,
  args: Connection.RecvArgs,
  complete: (c: Completion) => A
): Effect.Effect<A, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const malformedArgs = notAConnection(Operations.recv.name, conn) ?? malformed(Operations.recv.name, args) ??
      notRegion(Operations.recv.name, "dst", args.dst)
    if (malformedArgs !== undefined) return instrument.refused(malformedArgs)
    const { dst, offset = 0 } = args
    const length = recvLength(args)
    const refused = checkRange(Operations.recv.name, "destination", offset, length, dst.size) ??
      foreignRegion(conn, Operations.recv.name, "destination", dst)
    if (refused !== undefined) return instrument.refused(refused)
    const dstHandle = handles.localMr(dst)
    return impl(conn).kernel.start<TransferError>(
      fiber,
      Operations.recv,
      [dst],
      (id) => ({ op: "recv", id, dst: dstHandle, offset, length }),
      undefined,
      AWAIT,
      complete
    )
  })
