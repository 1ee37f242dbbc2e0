/**
 * The operations on an endpoint of librdmacm's verbs API, over its posting kernel: each reads and
 * checks its arguments when its Effect runs (a region's kind and endpoint, every range, the
 * segment count, inline size, immediate data), posts nothing when a check fails, and fails only
 * with what it can produce.
 *
 * Declared and documented in CmEndpoint.ts.
 */
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as CmEndpoint from "../CmEndpoint.js"
import { CmRegionError, RemoteKeyRefusedError } from "../CmEndpointError.js"
import type * as Connection from "../Connection.js"
import { OutOfRangeError } from "../ConnectionError.js"
import * as Arguments from "../DriverArguments.js"
import type { CmSegment, CmWorkRequest, Completion, Signal } from "../DriverModel.js"
import { Errno, fromErrno } from "../RdmaError.js"
import type * as RemoteKey from "../RemoteKey.js"
import { impl, isCmEndpoint } from "./cmEndpoint.js"
import { regionOwner } from "./cmRegistration.js"
import type { Owners, Pending } from "./dataPath.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import { checkImm, checkRange, comparableSize } from "./operations.js"
import { Operations, type OperationSpec } from "./operationTable.js"
import type * as Owner from "./owner.js"
import { AWAIT, AWAIT_VOID, SUBMIT } from "./poster.js"
import { toCompletion } from "./posting.js"
import { notAnEndpoint } from "./resourceGuard.js"

type TransferError = CmEndpoint.TransferError

/** An operation on an endpoint, data-first and data-last. */
type Operation<Args, A> = {
  (args: Args): (self: CmEndpoint.CmEndpoint) => Effect.Effect<A, TransferError>
  (self: CmEndpoint.CmEndpoint, args: Args): Effect.Effect<A, TransferError>
}

const IBV_WC_REM_ACCESS_ERR = 10

/**
 * What a request is made of, checked: its segments, the owners of their regions, its length, and
 * whether a segment is plain bytes (which only an inline request can carry).
 */
interface Checked {
  readonly segments: ReadonlyArray<CmSegment>
  readonly owners: Array<Owner.Owner>
  readonly length: number
  readonly plain: boolean
}

/**
 * The local side of a request: "msgs" regions of this endpoint, in range, few enough; or, where
 * `plainAllowed` (a send's or a write's source), plain bytes, bounded by their real length.
 */
const checkSegments = (
  operation: string,
  ep: CmEndpoint.CmEndpoint,
  parts: ReadonlyArray<CmEndpoint.Segment | CmEndpoint.SourceSegment>,
  maxSegments: number,
  plainAllowed = false
): Checked | TransferError => {
  if (!Array.isArray(parts) || parts.length === 0) {
    return new OutOfRangeError({ operation, detail: "a request needs at least one segment" })
  }
  if (parts.length > maxSegments) {
    return new CmRegionError({
      operation,
      reason: "TooManySegments",
      detail: `${parts.length} segments, more than the ${maxSegments} the queue pair was made for ` +
        `(maxSendSge / maxRecvSge in its options)`
    })
  }
  // Sized up front: pushing onto an empty array grows its backing store on the first push.
  const segments = new Array<CmSegment>(parts.length)
  const owners = new Array<Owner.Owner>(parts.length)
  let length = 0
  let plain = 0
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!
    if (Arguments.isUint8Array(part?.mr)) {
      if (!plainAllowed || Arguments.isDetached(part.mr)) {
        return new CmRegionError({
          operation,
          reason: "Kind",
          detail: plainAllowed
            ? "the bytes' buffer is detached (transferred or freed): send bytes that are still there"
            : "a receive or a read lands in registered memory: register it with CmEndpoint.registerMessages"
        })
      }
      // Its real bytes, whatever its getters say: the addon reads the same.
      const bytes = Arguments.realView(part.mr)
      const offset = part.offset ?? 0
      const partLength = part.length ?? Math.max(bytes.byteLength - offset, 0)
      const refused = checkRange(operation, "local", offset, partLength, bytes.byteLength)
      if (refused !== undefined) return refused
      segments[i] = { mr: bytes, offset, length: partLength }
      length += partLength
      plain++
      continue
    }
    const mr = part?.mr as CmEndpoint.Region | undefined
    if (mr === undefined || mr === null || typeof mr !== "object" || !("kind" in mr)) {
      return new CmRegionError({
        operation,
        reason: "Kind",
        detail: "a segment's mr must be a region of CmEndpoint.registerMessages"
      })
    }
    if (mr.kind !== "msgs") {
      return new CmRegionError({
        operation,
        reason: "Kind",
        detail: `a region from rdma_reg_${mr.kind} is only a remote ${mr.kind}'s target: post a region from ` +
          `rdma_reg_msgs (CmEndpoint.registerMessages)`
      })
    }
    if (mr.endpoint !== ep) {
      return new CmRegionError({
        operation,
        reason: "OtherEndpoint",
        detail: "the region is registered on another endpoint's protection domain: register it on this endpoint"
      })
    }
    const offset = part.offset ?? 0
    const size = mr.memory.byteLength
    const partLength = part.length ?? Math.max(size - offset, 0)
    const refused = checkRange(operation, "local", offset, partLength, size)
    if (refused !== undefined) return refused
    segments[i] = { mr: handles.cmRegion(mr), offset, length: partLength }
    owners[i - plain] = regionOwner(mr)
    length += partLength
  }
  // Plain bytes hold nothing: the owners are those of the regions alone.
  if (plain > 0) owners.length = parts.length - plain
  return { segments, owners, length, plain: plain > 0 }
}

/** The remote side: a key that allows `access`, and a range inside it. */
const checkRemote = (
  operation: string,
  key: RemoteKey.RemoteKey,
  access: "read" | "write",
  offset: number,
  length: number
): TransferError | undefined => {
  if (key === null || typeof key !== "object" || typeof key.rkey !== "number" || typeof key.address !== "bigint") {
    return new CmRegionError({
      operation,
      reason: "Kind",
      detail: "the remote side must be a RemoteKey (RemoteKey.decode)"
    })
  }
  if (key.access !== access) {
    return new CmRegionError({
      operation,
      reason: "Kind",
      detail: `the remote key allows a remote ${key.access}, not a ${access}: ask the other side for a key of a ` +
        `region from rdma_reg_${access}`
    })
  }
  return checkRange(operation, "remote", offset, length, key.length)
}

/**
 * Whether a send or a write goes inline (IBV_SEND_INLINE: its bytes copied when it is posted). Plain
 * bytes always do, as rdma_post_send with IBV_SEND_INLINE takes any memory: the device never reads
 * it, so it needs no registration, only to fit the inline size granted.
 */
const inlineOf = (
  operation: string,
  ep: CmEndpoint.CmEndpoint,
  checked: Checked,
  inline: boolean | undefined
): boolean | TransferError => {
  const max = ep.info.maxInlineData
  const { length } = checked
  if (checked.plain && inline === false) {
    return new CmRegionError({
      operation,
      reason: "Kind",
      detail: "plain bytes (a Uint8Array, not a region) go only inline: drop `inline: false`, or register the " +
        "memory with CmEndpoint.registerMessages"
    })
  }
  if ((inline === true || checked.plain) && length > max) {
    return new OutOfRangeError({
      operation,
      detail: `${length} bytes cannot go inline: the device granted ${max} (maxInlineData in the options)` +
        (checked.plain ? "; send longer messages from a region of CmEndpoint.registerMessages" : "")
    })
  }
  // Small enough: copied at post time (no DMA read of the region later), unless asked not to.
  return checked.plain || (inline ?? (length > 0 && length <= max))
}

/** A request ready to post, or why not. */
interface Prepared {
  readonly spec: OperationSpec
  readonly owners: Owners
  readonly build: (id: number) => CmWorkRequest
}

const prepareSend = (
  ep: CmEndpoint.CmEndpoint,
  args: CmEndpoint.SendvArgs,
  single: boolean
): Prepared | TransferError => {
  const spec = args.imm !== undefined ? Operations.cmSendWithImm : single ? Operations.cmSend : Operations.cmSendv
  const notEndpoint = notAnEndpoint(spec.name, ep)
  if (notEndpoint !== undefined) return notEndpoint
  const checked = checkSegments(spec.name, ep, args.segments, impl(ep).config.maxSendSge, true)
  if (!("segments" in checked)) return checked
  const refused = checkImm(spec.name, args.imm)
  if (refused !== undefined) return refused
  const inline = inlineOf(spec.name, ep, checked, args.inline)
  if (typeof inline !== "boolean") return inline
  const { segments } = checked
  const imm = args.imm
  const completion = args.completion
  return {
    spec,
    owners: { owners: checked.owners },
    build: (id: number): CmWorkRequest => ({ op: "send", id, segments, imm, inline, completion })
  }
}

const prepareRecv = (
  ep: CmEndpoint.CmEndpoint,
  args: CmEndpoint.RecvvArgs,
  single: boolean
): Prepared | TransferError => {
  const spec = single ? Operations.cmRecv : Operations.cmRecvv
  const notEndpoint = notAnEndpoint(spec.name, ep)
  if (notEndpoint !== undefined) return notEndpoint
  const checked = checkSegments(spec.name, ep, args.segments, impl(ep).config.maxRecvSge)
  if (!("segments" in checked)) return checked
  const { segments } = checked
  return {
    spec,
    owners: { owners: checked.owners },
    build: (id: number): CmWorkRequest => ({ op: "recv", id, segments })
  }
}

const prepareWrite = (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.WriteArgs): Prepared | TransferError => {
  const spec = args.imm !== undefined ? Operations.cmWriteWithImm : Operations.cmWrite
  const notEndpoint = notAnEndpoint(spec.name, ep)
  if (notEndpoint !== undefined) return notEndpoint
  const { dst, dstOffset = 0, length, src, srcOffset = 0 } = args
  const checked = checkSegments(spec.name, ep, [{ mr: src, offset: srcOffset, length }], 1, true)
  if (!("segments" in checked)) return checked
  const refused = checkRemote(spec.name, dst, "write", dstOffset, length) ?? checkImm(spec.name, args.imm)
  if (refused !== undefined) return refused
  const inline = inlineOf(spec.name, ep, checked, args.inline)
  if (typeof inline !== "boolean") return inline
  const { segments } = checked
  const remoteAddress = dst.address + BigInt(dstOffset)
  const { rkey } = dst
  const { completion, imm } = args
  return {
    spec,
    owners: { owners: checked.owners },
    build: (id: number): CmWorkRequest => ({ op: "write", id, segments, remoteAddress, rkey, imm, inline, completion })
  }
}

const prepareRead = (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.ReadArgs): Prepared | TransferError => {
  const spec = Operations.cmRead
  const notEndpoint = notAnEndpoint(spec.name, ep)
  if (notEndpoint !== undefined) return notEndpoint
  const { dst, dstOffset = 0, length, src, srcOffset = 0 } = args
  const checked = checkSegments(spec.name, ep, [{ mr: dst, offset: dstOffset, length }], 1)
  if (!("segments" in checked)) return checked
  const refused = checkRemote(spec.name, src, "read", srcOffset, length)
  if (refused !== undefined) return refused
  const { segments } = checked
  const remoteAddress = src.address + BigInt(srcOffset)
  const { rkey } = src
  const { completion } = args
  return {
    spec,
    owners: { owners: checked.owners },
    build: (id: number): CmWorkRequest => ({ op: "read", id, segments, remoteAddress, rkey, completion })
  }
}

/** A completion the other side's device refused with REM_ACCESS_ERR: the key, named as such. */
const keyRefused = <A>(effect: Effect.Effect<A, TransferError>): Effect.Effect<A, TransferError> =>
  Effect.catchIf(
    effect,
    (e) => e._tag === "CompletionError" && e.status === IBV_WC_REM_ACCESS_ERR,
    (e) => Effect.fail(new RemoteKeyRefusedError({ operation: (e as { operation: string }).operation }))
  )

const isPrepared = (p: Prepared | TransferError): p is Prepared => "build" in p

/** An operation's arguments that are no object at all (null, a number): refused before any is read. */
const notAnObject = (spec: OperationSpec, args: unknown): TransferError | undefined =>
  args !== null && typeof args === "object"
    ? undefined
    : fromErrno(Errno.EINVAL, spec.name, `the arguments must be an object, not ${args === null ? "null" : typeof args}`)

/** Posts one prepared request and waits as `then` says; `complete` makes the completion what is returned. */
const run = (
  ep: CmEndpoint.CmEndpoint,
  prepare: () => Prepared | TransferError,
  then: typeof AWAIT | typeof AWAIT_VOID,
  complete?: (c: Completion) => unknown
): Effect.Effect<any, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const prepared = prepare()
    if (!isPrepared(prepared)) return instrument.refused(prepared)
    return impl(ep).kernel.start<TransferError>(
      fiber,
      prepared.spec,
      prepared.owners,
      prepared.build,
      undefined,
      then,
      complete
    )
  })

// The fields named, not spread: a spread followed by another property makes V8 build a new hidden
// class on every call, and every later read of the object then misses its inline caches.
const sendOne = (args: CmEndpoint.SendArgs): CmEndpoint.SendvArgs => ({
  segments: [{ mr: args.src, offset: args.offset, length: args.length }],
  imm: args.imm,
  inline: args.inline,
  completion: args.completion
})
const recvOne = (args: CmEndpoint.RecvArgs): CmEndpoint.RecvvArgs => ({
  segments: [{ mr: args.dst, offset: args.offset, length: args.length }]
})

export const send: Operation<CmEndpoint.SendArgs, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.SendArgs) =>
    run(ep, () => notAnObject(Operations.cmSend, args) ?? prepareSend(ep, sendOne(args), true), AWAIT_VOID)
)

export const sendv: Operation<CmEndpoint.SendvArgs, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.SendvArgs) =>
    run(ep, () => notAnObject(Operations.cmSendv, args) ?? prepareSend(ep, args, false), AWAIT_VOID)
)

export const recv: Operation<CmEndpoint.RecvArgs, Connection.Completion> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.RecvArgs) =>
    run(ep, () => notAnObject(Operations.cmRecv, args) ?? prepareRecv(ep, recvOne(args), true), AWAIT, toCompletion)
)

export const recvv: Operation<CmEndpoint.RecvvArgs, Connection.Completion> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.RecvvArgs) =>
    run(ep, () => notAnObject(Operations.cmRecvv, args) ?? prepareRecv(ep, args, false), AWAIT, toCompletion)
)

export const write: Operation<CmEndpoint.WriteArgs, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.WriteArgs) =>
    keyRefused(run(ep, () => notAnObject(Operations.cmWrite, args) ?? prepareWrite(ep, args), AWAIT_VOID))
)

export const read: Operation<CmEndpoint.ReadArgs, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.ReadArgs) =>
    keyRefused(run(ep, () => notAnObject(Operations.cmRead, args) ?? prepareRead(ep, args), AWAIT_VOID))
)

/** Posts without waiting: a ticket whose completion may be awaited any number of times. */
const submit = (
  ep: CmEndpoint.CmEndpoint,
  prepare: () => Prepared | TransferError,
  /** Read once the arguments are known to be an object. */
  signal: () => Signal | undefined
): Effect.Effect<CmEndpoint.Posted, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const prepared = prepare()
    if (!isPrepared(prepared)) return instrument.refused(prepared)
    const { kernel } = impl(ep)
    return kernel.start<TransferError>(
      fiber,
      prepared.spec,
      prepared.owners,
      prepared.build,
      signal(),
      SUBMIT,
      ticket(ep, prepared.spec)
    )
  })

/** What posting without waiting returns: the request's completion, to await any number of times. */
const ticket = (ep: CmEndpoint.CmEndpoint, spec: OperationSpec) => (entry: Pending<any>): CmEndpoint.Posted => {
  const completion = impl(ep).kernel.await<Connection.Completion, TransferError>(entry, toCompletion)
  return {
    operation: spec.name,
    completion: spec.op === "write" || spec.op === "read" ? keyRefused(completion) : completion
  }
}

/** As its waiting verb takes it: one region (`send`'s, `recv`'s arguments) or segments (`sendv`'s, `recvv`'s). */
export const postSend: Operation<CmEndpoint.SendArgs | CmEndpoint.SendvArgs, CmEndpoint.Posted> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.SendArgs | CmEndpoint.SendvArgs) =>
    submit(
      ep,
      () =>
        notAnObject(Operations.cmSendv, args) ??
          (isVectored(args)
            ? prepareSend(ep, args, args.segments?.length === 1)
            : prepareSend(ep, sendOne(args), true)),
      () => args.completion ?? "always"
    )
)

export const postRecv: Operation<CmEndpoint.RecvArgs | CmEndpoint.RecvvArgs, CmEndpoint.Posted> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.RecvArgs | CmEndpoint.RecvvArgs) =>
    submit(
      ep,
      () =>
        notAnObject(Operations.cmRecvv, args) ??
          (isVectored(args)
            ? prepareRecv(ep, args, args.segments?.length === 1)
            : prepareRecv(ep, recvOne(args), true)),
      () => undefined
    )
)

export const postWrite: Operation<CmEndpoint.WriteArgs, CmEndpoint.Posted> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.WriteArgs) =>
    submit(ep, () => notAnObject(Operations.cmWrite, args) ?? prepareWrite(ep, args), () => args.completion ?? "always")
)

export const postRead: Operation<CmEndpoint.ReadArgs, CmEndpoint.Posted> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.ReadArgs) =>
    submit(ep, () => notAnObject(Operations.cmRead, args) ?? prepareRead(ep, args), () => args.completion ?? "always")
)

/** A send's arguments, one segment or several. */
const prepareAnySend = (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.SendArgs | CmEndpoint.SendvArgs) =>
  notAnObject(Operations.cmSend, args) ??
    (isVectored(args) ? prepareSend(ep, args, false) : prepareSend(ep, sendOne(args), true))

/** A receive's arguments, one segment or several. */
const prepareAnyRecv = (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.RecvArgs | CmEndpoint.RecvvArgs) =>
  notAnObject(Operations.cmRecv, args) ??
    (isVectored(args) ? prepareRecv(ep, args, false) : prepareRecv(ep, recvOne(args), true))

const isVectored = <V extends { readonly segments: unknown }>(args: object | V): args is V =>
  args !== null && typeof args === "object" && "segments" in args

/** The two requests of a call or a reply, checked (the receive first), or why not. */
const prepareExchange = (
  ep: CmEndpoint.CmEndpoint,
  operation: string,
  args: CmEndpoint.ExchangeArgs
): readonly [Prepared, Prepared] | TransferError => {
  if (args === null || typeof args !== "object" || args.send === undefined || args.recv === undefined) {
    return fromErrno(Errno.EINVAL, operation, "the arguments must name a send and a recv")
  }
  const recv = prepareAnyRecv(ep, args.recv)
  if (!isPrepared(recv)) return recv
  const send = prepareAnySend(ep, args.send)
  if (!isPrepared(send)) return send
  return [recv, send]
}

/** Both requests of an exchange posted in one driver call: the answer awaited (`call`), or the send alone (`reply`). */
const exchange = (
  ep: CmEndpoint.CmEndpoint,
  operation: string,
  args: CmEndpoint.ExchangeArgs,
  then: typeof AWAIT | typeof SUBMIT
): Effect.Effect<any, TransferError> =>
  Effect.withFiberRuntime((fiber) => {
    const prepared = prepareExchange(ep, operation, args)
    if (!Array.isArray(prepared)) return instrument.refused(prepared as TransferError)
    const [recv, send] = prepared as readonly [Prepared, Prepared]
    return impl(ep).kernel.exchange<TransferError>(
      fiber,
      recv,
      send,
      then,
      then === AWAIT ? toCompletion : ticket(ep, recv.spec)
    )
  })

export const call: Operation<CmEndpoint.ExchangeArgs, Connection.Completion> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.ExchangeArgs) => exchange(ep, "CmEndpoint.call", args, AWAIT)
)

export const reply: Operation<CmEndpoint.ExchangeArgs, CmEndpoint.Posted> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, args: CmEndpoint.ExchangeArgs) => exchange(ep, "CmEndpoint.reply", args, SUBMIT)
)

/**
 * Many requests of one kind in one kernel batch (a sliding window over the queue, one wait for
 * all): every one is checked before the first is posted.
 */
const batch = <A>(
  ep: CmEndpoint.CmEndpoint,
  list: ReadonlyArray<A>,
  prepare: (args: A) => Prepared | TransferError
): Effect.Effect<void, TransferError> =>
  Effect.suspend(() => {
    const notEndpoint = notAnEndpoint("rdma_post", ep)
    if (notEndpoint !== undefined) return instrument.refused(notEndpoint)
    if (!Array.isArray(list)) {
      return instrument.refused(fromErrno(Errno.EINVAL, "rdma_post", "the requests must be an array"))
    }
    const prepared: Array<Prepared> = []
    const owners = new Set<Owner.Owner>()
    for (const args of list) {
      const p = prepare(args)
      if (!isPrepared(p)) return instrument.refused(p)
      // One operation per batch: the kernel counts its completions by one spec.
      if (prepared.length > 0 && p.spec !== prepared[0]!.spec) {
        return instrument.refused(
          new OutOfRangeError({
            operation: p.spec.name,
            detail: `a batch holds one kind of request; ${prepared[0]!.spec.name} came first`
          })
        )
      }
      for (const owner of p.owners.owners) owners.add(owner)
      prepared.push(p)
    }
    if (prepared.length === 0) return Effect.void
    return impl(ep).kernel.postBatch<TransferError>({
      spec: prepared[0]!.spec,
      count: prepared.length,
      regions: { owners: [...owners] },
      build: (index, id, completion) => {
        const request = prepared[index]!.build(id)
        // Set on the fresh request (not spread into a copy, which costs a new hidden class a request).
        if (request.op !== "recv") (request as { completion?: Signal }).completion = completion
        return request
      }
    })
  })

export const sendMany: Operation<ReadonlyArray<CmEndpoint.SendArgs>, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, list: ReadonlyArray<CmEndpoint.SendArgs>) =>
    batch(ep, list, (args) => notAnObject(Operations.cmSend, args) ?? prepareSend(ep, sendOne(args), true))
)

export const recvMany: Operation<ReadonlyArray<CmEndpoint.RecvArgs>, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, list: ReadonlyArray<CmEndpoint.RecvArgs>) =>
    batch(ep, list, (args) => notAnObject(Operations.cmRecv, args) ?? prepareRecv(ep, recvOne(args), true))
)

export const writeMany: Operation<ReadonlyArray<CmEndpoint.WriteArgs>, void> = dual(
  2,
  (ep: CmEndpoint.CmEndpoint, list: ReadonlyArray<CmEndpoint.WriteArgs>) =>
    keyRefused(
      Effect.suspend(() =>
        plainWrites(ep, list) ??
          batch(ep, list, (args) => notAnObject(Operations.cmWrite, args) ?? prepareWrite(ep, args))
      )
    )
)

/** A batch's write, made once its checks pass: its id and signal are set when it is posted. */
interface BatchWrite {
  readonly op: "write"
  id: number
  readonly segments: ReadonlyArray<CmSegment>
  readonly remoteAddress: bigint
  readonly rkey: number
  readonly imm: undefined
  readonly inline: boolean
  completion: Signal | undefined
}

/**
 * The common batch of writes (each from a message region of this endpoint to a remote key, no
 * immediate data), checked and made in one pass: one request object a write, each region and key
 * checked once while consecutive writes share it, where the general path made a checked form, a
 * prepared form and a closure a write (about a tenth of a 64 B write's CPU on the device). Any
 * other batch, or one that a check refuses, is left to the general path (undefined), which makes
 * the same checks in the same order and so refuses with the same error.
 */
const plainWrites = (
  ep: CmEndpoint.CmEndpoint,
  list: ReadonlyArray<CmEndpoint.WriteArgs>
): Effect.Effect<void, TransferError> | undefined => {
  if (!isCmEndpoint(ep) || !Array.isArray(list)) return undefined
  // Read once: a list whose length changes as it is read (a Proxy) is read to this length.
  const count = list.length
  if (count === 0) return undefined
  const operation = Operations.cmWrite.name
  const max = ep.info.maxInlineData
  const fixed = new Array<BatchWrite>(count)
  const owners: Array<Owner.Owner> = []
  let src: unknown
  let srcSize = 0
  let srcHandle: CmSegment["mr"] | undefined
  let dst: unknown
  let dstSize: number | bigint = 0
  for (let i = 0; i < count; i++) {
    const args = list[i]
    if (args === null || typeof args !== "object") return undefined
    const { dstOffset = 0, imm, inline, length, srcOffset = 0 } = args
    if (imm !== undefined || (inline !== undefined && typeof inline !== "boolean")) return undefined
    // Each field read once: a getter cannot hand the checks one value and the request another.
    const mr = args.src as CmEndpoint.Region | Uint8Array
    if (mr !== src) {
      if (
        mr === null || typeof mr !== "object" || Arguments.isUint8Array(mr) || !("kind" in mr) ||
        mr.kind !== "msgs" || mr.endpoint !== ep
      ) return undefined
      src = mr
      srcSize = mr.memory.byteLength
      srcHandle = handles.cmRegion(mr)
      const owner = regionOwner(mr)
      if (!owners.includes(owner)) owners.push(owner)
    }
    const key = args.dst
    if (key !== dst) {
      if (
        key === null || typeof key !== "object" || typeof key.rkey !== "number" || typeof key.address !== "bigint" ||
        key.access !== "write"
      ) return undefined
      dst = key
      dstSize = comparableSize(key.length)
    }
    if (
      checkRange(operation, "local", srcOffset, length, srcSize) !== undefined ||
      checkRange(operation, "remote", dstOffset, length, dstSize) !== undefined ||
      (inline === true && length > max)
    ) return undefined
    fixed[i] = {
      op: "write",
      id: 0,
      segments: [{ mr: srcHandle!, offset: srcOffset, length }],
      remoteAddress: key.address + BigInt(dstOffset),
      rkey: key.rkey,
      imm: undefined,
      inline: inline ?? (length > 0 && length <= max),
      completion: undefined
    }
  }
  return impl(ep).kernel.postBatch<TransferError>({
    spec: Operations.cmWrite,
    count,
    regions: { owners },
    build: (i, id, completion) => {
      const request = fixed[i]!
      request.id = id
      request.completion = completion
      return request as CmWorkRequest
    }
  })
}
