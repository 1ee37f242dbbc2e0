/**
 * librpma's data path in the simulated network: posting a work request (librpma's argument checks,
 * planned faults, the regions it holds), running it as the device would (rkey, bounds and access
 * checked on the other side, the same completion statuses), here or as a message to the other
 * side's process, delivering sends to receives, and the completion queues polled and waited on.
 */
import { RdmaError, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as CompletionQueue from "./completionQueue.js"
import type { ConnectionEnds } from "./connectionEnds.js"
import type { ConnectionRegistry } from "./connectionRegistry.js"
import * as fabric from "./fabric.js"
import type { HeldRegions } from "./heldRegions.js"
import type { SharedReceiveQueues } from "./sharedReceive.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"
import {
  completion,
  FLUSH_READ_SIZE,
  halfOf,
  LOCAL_WRITE,
  LOOP_BUDGET_CALLS,
  NO_BYTES,
  NO_RECEIVE_CQ,
  NONE,
  NONE_POSTED,
  opcodeOf,
  operationOf,
  type PendingSend,
  type Recv,
  REMOTE_READ,
  REMOTE_WRITE,
  requestList
} from "./workRequests.js"

export const makeDataPath = (
  world: fabric.Fabric,
  { deadOrWrong, invalid, refusedOr, rpma }: Tools,
  link: wire.Link | undefined,
  { byRkey, connOf, farOf, frozen, q, remotePmem, reqOf }: ConnectionRegistry,
  { holdEarly, holdRegions }: HeldRegions,
  { complete, flushAll, lose }: ConnectionEnds,
  srqs: SharedReceiveQueues
) => {
  /** rpma_write / rpma_read / ... / rpma_recv on a connection: undefined once posted, else the refusal. */
  const postOnConn = (conn: fabric.Conn | undefined, wr: Driver.Model.WorkRequest): RdmaError.RpmaError | undefined => {
    const operation = operationOf(wr)
    const refused = deadOrWrong(operation, "connection", conn) ?? refuse(conn!, wr)
    if (refused !== undefined) return refused
    const planned = fabric.countCall(world, operation)
    if (planned !== undefined && "code" in planned) return rpma(operation, planned.code, "planned fault")
    const c = conn!
    holdRegions(c, wr)
    if (planned !== undefined && "loseConnection" in planned) lose(c)
    if (planned !== undefined && "freezePeer" in planned) {
      frozen.add(c)
      if (c.other !== undefined && c.other.far === undefined) frozen.add(c.other)
    }
    const opcode = opcodeOf(wr)
    if (c.state === "closed" || c.state === "error") {
      return void complete(c, wr.id, RdmaError.WcStatus.WR_FLUSH_ERR, opcode)
    }
    const status = planned !== undefined && "completionStatus" in planned ? planned.completionStatus : execute(c, wr)
    if (status !== undefined) finish(c, wr, status)
    return undefined
  }

  /** A request's outcome on its own side. */
  const finish = (c: fabric.Conn, wr: Driver.Model.WorkRequest, status: number) => {
    // A failed request moves the queue pair to the error state: everything after it is flushed.
    if (status !== RdmaError.WcStatus.SUCCESS) {
      c.state = "error"
      flushAll(c)
    } else if (wr.op !== "recv" && wr.completion === "onError") {
      return // unsignalled: its success produces no completion
    }
    complete(c, wr.id, status, opcodeOf(wr))
  }

  /**
   * rpma_conn_req_recv: a receive that becomes the connection's once the request is connected. Its
   * region is held until its completion, or until the request or its connection is deleted.
   */
  const postOnRequest = (req: fabric.ConnReq, recv: Recv): RdmaError.RpmaError | undefined => {
    const mr = fabric.asHandle(recv.dst, "MrLocal")
    const refused = deadOrWrong("rpma_conn_req_recv", "local memory region", mr) ??
      (srqs.ofConfig(req.config) !== undefined
        ? invalid("rpma_conn_req_recv", "the request was made with a shared receive queue: post receives there")
        : undefined)
    if (refused !== undefined) return refused
    holdEarly(req, { id: recv.id, mr: mr!, offset: recv.offset, length: recv.length })
    return undefined
  }

  /**
   * Posts one request on a queue (a connection, a shared receive queue or a connection request),
   * synchronously: undefined once posted, else the refusal. The request is read once into a plain
   * object, as the addon does: a getter cannot change it after the checks.
   */
  const postOn = (value: unknown, given: Driver.Model.WorkRequest): RdmaError.RpmaError | undefined => {
    const checked = Arguments.workRequest(given)
    const srq = srqs.srqOf(value)
    const req = reqOf(value)
    const receivesOnly = srq !== undefined
      ? { operation: "rpma_srq_recv", what: "shared receive queue", handle: srq }
      : req !== undefined
      ? { operation: "rpma_conn_req_recv", what: "connection request", handle: req }
      : undefined
    if (checked.request === undefined) return invalid(receivesOnly?.operation ?? "rpma_write", checked.problem)
    const wr = checked.request as Driver.Model.WorkRequest
    if (receivesOnly === undefined) {
      // Neither of the other two: a connection, or the refusal that says what was expected.
      return connOf(value) === undefined
        ? invalid(operationOf(wr), "expected a connection, shared receive queue or connection request handle")
        : postOnConn(connOf(value), wr)
    }
    const refused = deadOrWrong(receivesOnly.operation, receivesOnly.what, receivesOnly.handle) ??
      (wr.op !== "recv"
        ? invalid(receivesOnly.operation, `a ${receivesOnly.what} takes receives only, not a ${wr.op}`)
        : undefined)
    if (refused !== undefined || wr.op !== "recv") return refused
    return srq !== undefined ? srqs.post(srq, wr) : postOnRequest(req!, wr)
  }

  /** The completion queue a handle has (a connection's or a shared receive queue's), or why not. */
  const completionQueueOf = (operation: string, value: unknown) => {
    const srq = srqs.srqOf(value)
    if (srq !== undefined) {
      const refused = deadOrWrong(operation, "shared receive queue", srq)
      if (refused !== undefined) return { refused }
      const queue = srqs.completionsOf(srq)
      if (queue !== undefined) return { queue }
      // No receive CQ: nothing completes on the queue itself. A poll finds nothing; a wait is refused, as the addon does.
      return operation === "rpma_cq_wait"
        ? {
          refused: invalid(
            operation,
            "the shared receive queue has no receive CQ (rcqSize 0): its receives complete on its connections' CQs; wait on those"
          )
        }
        : { queue: NO_RECEIVE_CQ }
    }
    const conn = connOf(value)
    const refused = conn === undefined
      ? invalid(operation, "expected a connection or shared receive queue handle")
      : deadOrWrong(operation, "connection", conn)
    return refused !== undefined ? { refused } : { queue: q(conn!).completions }
  }

  /**
   * Whether the event loop is due a turn: postMany answers synchronously, and a loop of writes
   * would otherwise never let timers and I/O run. Counted in calls (the simulator's are cheap),
   * reset when the loop turns.
   */
  let runLength = 0
  const turnDue = (): boolean => {
    if (runLength++ === 0) setImmediate(() => (runLength = 0))
    return runLength > LOOP_BUDGET_CALLS
  }

  /** The local region a local handle names, if it may be used on this connection. */
  const localRegion = (conn: fabric.Conn, value: unknown, access: number): number | fabric.MrLocal => {
    const mr = fabric.asHandle(value, "MrLocal")
    if (mr === undefined || !mr.alive) return -1
    // A region of another peer (another protection domain) or without the access: a local protection error.
    if (mr.peer !== conn.peer || (access !== 0 && (mr.usage & access) === 0)) return RdmaError.WcStatus.LOC_PROT_ERR
    return mr
  }

  /**
   * What a remote key and address reach on the side of `owner` (the other side's peer), or the
   * completion status that refuses it.
   */
  const remoteTarget = (owner: fabric.Peer, remote: wire.Reach, access: number) => {
    const { length, offset } = remote
    const target = byRkey.get(remote.rkey)
    const address = remote.address + BigInt(offset)
    if (
      target === undefined || !target.alive || target.peer !== owner ||
      (target.usage & access) === 0 || address < target.address ||
      address + BigInt(length) > target.address + BigInt(target.memory.byteLength)
    ) return RdmaError.WcStatus.REM_ACCESS_ERR
    return { target, at: Number(address - target.address) }
  }

  /** Delivers a send to the other side's next posted receive, or queues it there (RNR retries forever). */
  const deliver = (to: fabric.Conn, send: PendingSend) => {
    // With a shared receive queue, the receive comes from it and completes on its receive CQ, or,
    // without one, on this connection's, naming the queue pair either way.
    const srq = srqs.ofConfig(to.config)
    const recv = srq !== undefined ? srqs.take(srq) : q(to).recvs.shift()
    if (recv === undefined) return void q(to).sends.push(send)
    const completeRecv = (status: number, opcode: number, byteLength = 0, imm?: number) =>
      srq === undefined
        ? complete(to, recv.id, status, opcode, byteLength, imm)
        : (srqs.completionsOf(srq) ?? q(to).completions).push(
          completion(recv.id, status, opcode, byteLength, imm, to.id)
        )
    const sentOpcode = send.written === undefined ? Model.WcOpcode.SEND : Model.WcOpcode.RDMA_WRITE
    if (send.bytes.byteLength > recv.length) {
      completeRecv(RdmaError.WcStatus.LOC_LEN_ERR, Model.WcOpcode.RECV)
      complete(send.from, send.id, RdmaError.WcStatus.REM_INV_REQ_ERR, sentOpcode)
      to.state = "error"
      send.from.state = "error"
      return
    }
    recv.mr.memory.set(send.bytes, recv.offset)
    if (send.written !== undefined) {
      completeRecv(RdmaError.WcStatus.SUCCESS, Model.WcOpcode.RECV_RDMA_WITH_IMM, send.written, send.imm)
    } else {
      completeRecv(RdmaError.WcStatus.SUCCESS, Model.WcOpcode.RECV, send.bytes.byteLength, send.imm)
    }
    if (send.signalled) complete(send.from, send.id, RdmaError.WcStatus.SUCCESS, sentOpcode)
  }

  /**
   * The other side's half of a request, run on the side of `owner` (the connection whose peer's
   * memory and receives it reaches; `from` is the sending connection, maybe a stand-in for one in
   * another process): the completion status, the bytes read, or undefined when it completes later.
   */
  const reach = (owner: fabric.Conn, from: fabric.Conn, r: wire.Reach): number | Uint8Array | undefined => {
    switch (r.op) {
      case "write":
      case "atomicWrite": {
        const dst = remoteTarget(owner.peer, r, REMOTE_WRITE)
        if (typeof dst === "number") return dst
        dst.target.memory.set(r.bytes, dst.at)
        if (r.imm === undefined) return RdmaError.WcStatus.SUCCESS
        // The immediate data consumes a receive on the other side, which completes with it.
        deliver(owner, {
          id: r.id,
          bytes: new Uint8Array(0),
          from,
          imm: r.imm,
          written: r.length,
          signalled: r.signalled
        })
        return undefined
      }
      case "read": {
        const src = remoteTarget(owner.peer, r, REMOTE_READ)
        return typeof src === "number" ? src : src.target.memory.slice(src.at, src.at + r.length)
      }
      case "flush": {
        const dst = remoteTarget(owner.peer, r, REMOTE_READ)
        return typeof dst === "number" ? dst : RdmaError.WcStatus.SUCCESS
      }
      case "send":
        deliver(owner, { id: r.id, bytes: r.bytes, from, imm: r.imm, signalled: r.signalled })
        return undefined
    }
  }

  /** A read's bytes land in its local region; the status of the request. */
  const landed = (conn: fabric.Conn, wr: Driver.Model.WorkRequest, result: number | Uint8Array): number => {
    if (typeof result === "number") return result
    if (wr.op !== "read") return RdmaError.WcStatus.SUCCESS
    // An answer of another length than asked is not one a responder sends: the request failed there.
    if (result.byteLength !== wr.length) return RdmaError.WcStatus.REM_OP_ERR
    ;(localRegion(conn, wr.dst, LOCAL_WRITE) as fabric.MrLocal).memory.set(result, wr.dstOffset)
    return RdmaError.WcStatus.SUCCESS
  }

  /** Runs the other side's half: here, or as a message to its process (answered by `settle`). */
  const across = (conn: fabric.Conn, wr: Driver.Model.WorkRequest, r: wire.Reach): number | undefined => {
    const other = conn.other!
    // Frozen: it waits for an answer that never comes (until this side's own flush).
    if (frozen.has(conn)) return void q(conn).awaiting.set(wr.id, wr)
    if (other.far === undefined) {
      const result = reach(other, conn, r)
      return result === undefined ? undefined : landed(conn, wr, result)
    }
    // More than one frame of the network carries: refused here, as a device refuses more than its max_msg_sz.
    if (r.length > link!.maxMessageSize) return RdmaError.WcStatus.LOC_LEN_ERR
    q(conn).awaiting.set(wr.id, wr)
    // Always answered there, so that a request ends here either way; `finish` keeps an unsignalled success quiet.
    link!.send({ t: "post", to: other.far, from: farOf(conn)!, reach: { ...r, signalled: true } })
    return undefined
  }

  /** Runs a work request; returns the completion status, or undefined when it completes later. */
  const execute = (conn: fabric.Conn, wr: Driver.Model.WorkRequest): number | undefined => {
    switch (wr.op) {
      case "write":
      case "atomicWrite": {
        const length = wr.op === "write" ? wr.length : 8
        let bytes: Uint8Array
        if (wr.op === "write") {
          const src = localRegion(conn, wr.src, 0)
          if (typeof src === "number") return RdmaError.WcStatus.LOC_PROT_ERR
          if (wr.srcOffset + length > src.memory.byteLength) return RdmaError.WcStatus.LOC_PROT_ERR
          bytes = src.memory.subarray(wr.srcOffset, wr.srcOffset + length)
        } else {
          bytes = wr.value
        }
        return across(conn, wr, halfOf(wr, fabric.asHandle(wr.dst, "MrRemote"), wr.dstOffset, length, bytes))
      }
      case "read": {
        const dst = localRegion(conn, wr.dst, LOCAL_WRITE)
        if (typeof dst === "number") return RdmaError.WcStatus.LOC_PROT_ERR
        if (wr.dstOffset + wr.length > dst.memory.byteLength) return RdmaError.WcStatus.LOC_PROT_ERR
        return across(conn, wr, halfOf(wr, fabric.asHandle(wr.src, "MrRemote"), wr.srcOffset, wr.length, NO_BYTES))
      }
      case "flush":
        // Exactly as the device: 8 bytes at the offset, whatever the length (core places its
        // flushes so that they fit; a driver-level post past the end fails here as there).
        return across(
          conn,
          wr,
          halfOf(wr, fabric.asHandle(wr.dst, "MrRemote"), wr.dstOffset, FLUSH_READ_SIZE, NO_BYTES)
        )
      case "send": {
        const src = localRegion(conn, wr.src, 0)
        if (typeof src === "number") return RdmaError.WcStatus.LOC_PROT_ERR
        if (wr.offset + wr.length > src.memory.byteLength) return RdmaError.WcStatus.LOC_PROT_ERR
        // The bytes leave when the request runs, as a NIC's DMA read would take them.
        return across(conn, wr, halfOf(wr, undefined, 0, wr.length, src.memory.slice(wr.offset, wr.offset + wr.length)))
      }
      case "recv": {
        const dst = localRegion(conn, wr.dst, LOCAL_WRITE)
        if (typeof dst === "number") return RdmaError.WcStatus.LOC_PROT_ERR
        if (wr.offset + wr.length > dst.memory.byteLength) return RdmaError.WcStatus.LOC_PROT_ERR
        q(conn).recvs.push({ id: wr.id, mr: dst, offset: wr.offset, length: wr.length })
        const waiting = q(conn).sends.shift()
        if (waiting !== undefined) deliver(conn, waiting)
        return undefined
      }
    }
  }

  /** librpma's own argument checks of a work request, before anything is posted. */
  const refuse = (conn: fabric.Conn, wr: Driver.Model.WorkRequest) => {
    const operation = operationOf(wr)
    const handles: Array<[unknown, fabric.Kind]> = wr.op === "write"
      ? [[wr.dst, "MrRemote"], [wr.src, "MrLocal"]]
      : wr.op === "read"
      ? [[wr.dst, "MrLocal"], [wr.src, "MrRemote"]]
      : wr.op === "flush" || wr.op === "atomicWrite"
      ? [[wr.dst, "MrRemote"]]
      : wr.op === "send"
      ? [[wr.src, "MrLocal"]]
      : wr.op === "recv"
      ? [[wr.dst, "MrLocal"]]
      : []
    if (handles.length === 0) {
      return invalid("post", `unknown work request ${Arguments.show((wr as { op: unknown }).op)}`)
    }
    for (const [value, kind] of handles) {
      const refused = deadOrWrong(
        operation,
        kind === "MrLocal" ? "local memory region" : "remote memory region",
        fabric.asHandle(value, kind)
      )
      if (refused !== undefined) return refused
    }
    if (wr.op === "recv" && srqs.ofConfig(conn.config) !== undefined) {
      return invalid(operation, "the connection was made with a shared receive queue: post receives there")
    }
    if (wr.op === "atomicWrite" && wr.dstOffset % 8 !== 0) {
      return invalid(operation, `dst_offset ${wr.dstOffset} is not aligned to 8 bytes`)
    }
    if (wr.op === "flush") {
      if (wr.type !== "visibility" && wr.type !== "persistent") return invalid(operation, "unknown flush type")
      if (wr.type === "persistent" && !(remotePmem.get(conn) ?? conn.config.directWriteToPmem)) {
        return rpma(
          operation,
          RdmaError.RpmaCode.RPMA_E_NOSUPP,
          "the remote peer does not write directly to persistent memory"
        )
      }
      const flushBit = wr.type === "persistent" ? Usage.Flags.FLUSH_TYPE_PERSISTENT : Usage.Flags.FLUSH_TYPE_VISIBILITY
      if ((fabric.asHandle(wr.dst, "MrRemote")!.usage & flushBit) === 0) {
        return rpma(
          operation,
          RdmaError.RpmaCode.RPMA_E_NOSUPP,
          `the remote region does not support ${wr.type} flushes`
        )
      }
    }
    if (conn.state === "connecting") {
      return rpma(operation, RdmaError.RpmaCode.RPMA_E_PROVIDER, "ibv_post_send: the connection is not established")
    }
    return undefined
  }

  const calls = {
    postMany: (value, given) => {
      let posted = 0
      let error: RdmaError.RpmaError | undefined
      const requests = requestList(given)
      if (requests === undefined) {
        error = invalid("rpma_post", "the requests must be an array of work requests")
      }
      for (const request of requests ?? NONE_POSTED) {
        error = postOn(value, request)
        if (error !== undefined) break
        posted++
      }
      // A connection request has no completion queue yet: its receives complete on its connection's.
      const queue = posted === 0 || reqOf(value) !== undefined
        ? undefined
        : completionQueueOf("rpma_cq_get_wc", value).queue
      return {
        posted,
        error,
        ready: queue === undefined ? NONE : queue.drain(),
        queueError: undefined,
        turnDue: turnDue()
      }
    },

    armCompletions: (value, onReady) => {
      const { queue, refused } = completionQueueOf("rpma_cq_wait", value)
      return refused !== undefined ? CompletionQueue.refusedWait(refused, onReady) : queue.arm(onReady)
    },

    pollCompletions: (value) =>
      Effect.suspend(() => {
        const { queue, refused } = completionQueueOf("rpma_cq_get_wc", value)
        return refusedOr(refused, () => Effect.succeed(queue!.drain()))
      }),
    // No real time to spin on: what is queued, as a spin that found it at once (or none).
    spinCompletions: (value, budgetNs): Model.SpinOutcome => {
      const { queue, refused } = completionQueueOf("rpma_cq_get_wc", value)
      if (refused !== undefined) return Exit.fail(refused)
      const badBudget = Arguments.spinBudget(budgetNs)
      if (badBudget !== undefined) return Exit.fail(invalid("rpma_cq_get_wc", badBudget))
      return Exit.succeed(queue === undefined ? NONE : queue.drain())
    }
  } satisfies Partial<Driver.Driver>

  return { calls, postOn, completionQueueOf, turnDue, deliver, reach, landed, finish }
}

export type DataPath = ReturnType<typeof makeDataPath>
