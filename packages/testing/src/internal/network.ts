/**
 * The simulated fabric's connections: endpoints, requests and connections between peers of one
 * process, and work requests that copy bytes between registered memories, enforcing what RDMA
 * hardware enforces (rkey, bounds, access rights from the usage) with the same completion statuses.
 * With a link (a network shared by several processes), a connection's other side may be in
 * another process: the same rules run there, on a message (`reach` is the other side's half).
 */
import { RdmaError, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import { makeSharedReceiveQueues } from "./sharedReceive.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"

// What ibv_reg_mr grants for each usage (librpma's usage_to_access).
const REMOTE_READ = Usage.Flags.READ_SRC | Usage.Flags.FLUSH_TYPE_VISIBILITY | Usage.Flags.FLUSH_TYPE_PERSISTENT
const REMOTE_WRITE = Usage.Flags.WRITE_DST
const LOCAL_WRITE = Usage.Flags.READ_DST | Usage.Flags.WRITE_SRC | Usage.Flags.WRITE_DST | Usage.Flags.RECV
// librpma's flush is an RDMA read of this many bytes at the flush's offset, whatever its length
// (RAW_SIZE in flush.c).
const FLUSH_READ_SIZE = 8

interface PostedRecv {
  readonly id: number
  readonly mr: fabric.MrLocal
  readonly offset: number
  readonly length: number
}

interface PendingSend {
  readonly id: number
  readonly bytes: Uint8Array
  readonly from: fabric.Conn
  /** Immediate data, for a send or a write with it. */
  readonly imm?: number | undefined
  /** For a write with immediate data: its length (the bytes went to the remote region, not the receive). */
  readonly written?: number | undefined
  /** Whether its success produces a completion on the sending side. */
  readonly signalled: boolean
}

/** What a posted request holds until its completion is returned. */
interface Held {
  readonly regions: Array<fabric.MrLocal>
  readonly sendQueue: boolean
  readonly signalled: boolean
}

/** Per-handle queues, kept beside the handles so that the fabric's types stay plain data. */
interface ConnQueues {
  readonly events: Queue.Queue<Driver.Model.ConnEvent>
  readonly completions: CompletionQueue.CompletionQueue
  readonly recvs: Array<PostedRecv>
  readonly sends: Array<PendingSend>
  /** Requests sent to the other side's process, by id, until it answers (or the connection ends). */
  readonly awaiting: Map<number, Driver.Model.WorkRequest>
}

const NONE: ReadonlyArray<Driver.Model.Completion> = []
/** What a shared receive queue without a receive CQ polls: nothing ever completes there. */
const NO_RECEIVE_CQ = CompletionQueue.make(() => {})
const NONE_POSTED: ReadonlyArray<Driver.Model.WorkRequest> = []
const NO_BYTES = new Uint8Array(0)
/** A stand-in's configuration: it has no queues in this process, so nothing reads it. */
const STAND_IN_CONFIG: Driver.Model.ConnConfig = { timeoutMs: 0, sqSize: 0, rqSize: 0, cqSize: 0, directWriteToPmem: false }

/** The requests of a postMany call as a plain array, or undefined when they are not an array (or reading them threw). */
const requestList = (value: unknown): ReadonlyArray<Driver.Model.WorkRequest> | undefined => {
  if (!Array.isArray(value)) return undefined
  try {
    return Array.from(value as ReadonlyArray<Driver.Model.WorkRequest>)
  } catch {
    return undefined
  }
}

type Recv = Extract<Driver.Model.WorkRequest, { readonly op: "recv" }>

/**
 * A completion as ibv_wc has it: no opcode on a failure; immediate data with its flag; the queue
 * pair number on a shared receive queue's.
 */
const completion = (
  id: number,
  status: number,
  opcode: number,
  byteLength: number,
  imm: number | undefined,
  qpNum?: number
): Driver.Model.Completion => {
  const wc: Driver.Model.Completion = imm === undefined
    ? { id, status, byteLength, opcode: status === 0 ? opcode : -1, flags: 0 }
    : { id, status, byteLength, opcode, flags: Model.WcFlags.WITH_IMM, imm }
  return qpNum === undefined ? wc : { ...wc, qpNum }
}

/** Synchronous posts in a row before the simulated driver asks for a turn of the event loop. */
const LOOP_BUDGET_CALLS = 256

export const makeNetwork = (world: fabric.Fabric, tools: Tools, link?: wire.Link) => {
  const { acquire, call, deadOrWrong, invalid, peerOf, problem, refusedOr, releaseHandle, rpma } = tools
  const listeners = new Map<string, fabric.Endpoint>()
  const incoming = new WeakMap<
    fabric.Endpoint,
    Queue.Queue<{ readonly client: fabric.Conn; readonly privateData: Uint8Array } | undefined>
  >()
  const queues = new WeakMap<fabric.Conn, ConnQueues>()
  /**
   * The local regions each posted request names, until its completion is returned (as the addon
   * keeps them); an unsignalled one's, until a later send-queue request's completion is returned.
   */
  const posted = new WeakMap<fabric.Conn, Map<number, Held>>()
  /** Receives posted on a request before it is connected (rpma_conn_req_recv), with what they hold. */
  const early = new WeakMap<fabric.ConnReq, Array<{ readonly recv: PostedRecv; readonly held: Held }>>()
  /** The other side's peer configuration, once applied (rpma_conn_apply_remote_peer_cfg). */
  const remotePmem = new WeakMap<fabric.Conn, boolean>()
  // Every live local region by rkey: the fabric's view of what a remote key reaches.
  const byRkey = new Map<number, fabric.MrLocal>()
  /** Live connections by id: what messages from other processes name. */
  const conns = new Map<number, fabric.Conn>()
  /** Connections whose request went to another process's listener, by the address they asked for. */
  const connecting = new Map<fabric.Conn, string>()
  /** Connections whose other side is frozen (FreezePeer): nothing crosses them, nobody is told. */
  const frozen = new WeakSet<fabric.Conn>()
  /** Processes that have left the network: a request of theirs still queued here is answered LOST. */
  const departed = new Set<number>()
  /** How another process addresses a connection of this one (or the stand-in's own address). */
  const farOf = (conn: fabric.Conn | undefined): wire.Far | undefined =>
    conn === undefined ? undefined : conn.far ?? (link === undefined ? undefined : { process: link.self, conn: conn.id })
  /** A stand-in for a connection of another process. */
  const standIn = (far: wire.Far, peer: fabric.Peer, state: fabric.Conn["state"]): fabric.Conn => ({
    kind: "Conn",
    id: far.conn,
    alive: true,
    peer,
    config: STAND_IN_CONFIG,
    other: undefined,
    state,
    notified: false,
    disconnected: false,
    privateData: NO_BYTES,
    far
  })

  const unsafeQueue = <A>() => Effect.runSync(Queue.unbounded<A>())
  const key = (address: string, port: number) => `${address}:${port}`
  const endpointOf = (value: unknown) => fabric.asHandle(value, "Endpoint")
  const reqOf = (value: unknown) => fabric.asHandle(value, "ConnReq")
  const connOf = (value: unknown) => fabric.asHandle(value, "Conn")
  const q = (conn: fabric.Conn) => queues.get(conn)!
  const srqs = makeSharedReceiveQueues(world, tools, (srq) => {
    // A receive was posted on the queue: the first connection made with it that has a message waiting.
    for (const handle of world.ledger.keys()) {
      const conn = handle as fabric.AnyHandle
      if (conn.kind !== "Conn" || srqs.ofConfig(conn.config) !== srq) continue
      const waiting = q(conn).sends.shift()
      if (waiting !== undefined) return deliver(conn, waiting)
    }
  })

  const localRegionsOf = (wr: Driver.Model.WorkRequest): Array<fabric.MrLocal> => {
    const value = wr.op === "write" || wr.op === "send" ? wr.src : wr.op === "read" || wr.op === "recv" ? wr.dst : undefined
    const mr = fabric.asHandle(value, "MrLocal")
    return mr === undefined || !mr.alive ? [] : [mr]
  }
  const hold = (conn: fabric.Conn, id: number, held: Held) => {
    for (const mr of held.regions) mr.inFlight++
    let byId = posted.get(conn)
    if (byId === undefined) posted.set(conn, byId = new Map())
    byId.set(id, held)
  }
  const holdRegions = (conn: fabric.Conn, wr: Driver.Model.WorkRequest) =>
    hold(conn, wr.id, {
      regions: localRegionsOf(wr),
      sendQueue: wr.op !== "recv",
      signalled: wr.op === "recv" || wr.completion !== "onError"
    })
  const release = (byId: Map<number, Held>, id: number, held: Held) => {
    byId.delete(id)
    for (const mr of held.regions) mr.inFlight--
  }
  const letGo = (conn: fabric.Conn, ids: Iterable<number> | undefined) => {
    const byId = posted.get(conn)
    if (byId === undefined) return
    for (const id of ids ?? [...byId.keys()]) {
      const held = byId.get(id)
      if (held === undefined) continue
      // A send-queue completion: the unsignalled requests posted before it (in order) have succeeded.
      if (held.sendQueue) {
        for (const [earlier, before] of byId) {
          if (earlier === id) break
          if (before.sendQueue && !before.signalled) release(byId, earlier, before)
        }
      }
      release(byId, id, held)
    }
  }

  /** A request's early receives become its connection's. */
  const takeEarly = (req: fabric.ConnReq, conn: fabric.Conn) => {
    const list = early.get(req)
    if (list === undefined) return
    early.delete(req)
    for (const { held, recv } of list) {
      q(conn).recvs.push(recv)
      let byId = posted.get(conn)
      if (byId === undefined) posted.set(conn, byId = new Map())
      byId.set(recv.id, held)
    }
  }
  /** The request is gone without a connection: its queue pair, and what its receives held, with it. */
  const dropEarly = (req: fabric.ConnReq) => {
    for (const { held } of early.get(req) ?? []) for (const mr of held.regions) mr.inFlight--
    early.delete(req)
  }

  const emit = (conn: fabric.Conn, event: Driver.Model.ConnEvent) =>
    conn.far !== undefined
      ? link!.send({ t: "event", to: conn.far, event, from: farOf(conn.other), privateData: conn.privateData })
      : Queue.unsafeOffer(q(conn).events, event)
  const complete = (
    conn: fabric.Conn,
    id: number,
    status: number,
    opcode: number,
    byteLength = 0,
    imm?: number
  ) => {
    if (conn.far !== undefined) return link!.send({ t: "settle", to: conn.far, id, result: status })
    q(conn).completions.push(completion(id, status, opcode, byteLength, imm))
  }
  /** Fails every request still waiting on a connection, as a QP in the error state does. */
  const flushAll = (conn: fabric.Conn) => {
    const { awaiting, recvs, sends } = q(conn)
    for (const [id, wr] of awaiting) complete(conn, id, RdmaError.WcStatus.WR_FLUSH_ERR, opcodeOf(wr))
    awaiting.clear()
    for (const r of recvs.splice(0)) complete(conn, r.id, RdmaError.WcStatus.WR_FLUSH_ERR, Model.WcOpcode.RECV)
    for (const s of sends.splice(0)) complete(s.from, s.id, RdmaError.WcStatus.WR_FLUSH_ERR, Model.WcOpcode.SEND)
  }

  /** Ends one side: no more requests, pending ones flushed, and its one CLOSED or LOST event. */
  const notify = (side: fabric.Conn | undefined, event: "CLOSED" | "LOST") => {
    if (side === undefined || side.notified) return
    side.notified = true
    side.state = "closed"
    if (side.far !== undefined) return link!.send({ t: "notify", to: side.far, event })
    flushAll(side)
    emit(side, event)
  }

  /**
   * rdma_cm's disconnect: this side stops at once, and the other side sees CLOSED. This side sees
   * its own CLOSED only when the other side answers with its own disconnect (or deletes). As
   * rdma_disconnect in the kernel (cma.c), a second call succeeds and sends nothing: the connection
   * manager no longer sends a DREQ (or DREP) once it has.
   */
  const disconnect = (conn: fabric.Conn) => {
    if (conn.disconnected) return
    conn.disconnected = true
    conn.state = "closed"
    flushAll(conn)
    if (!frozen.has(conn)) notify(conn.other, "CLOSED")
  }

  /** A lost connection: both sides see LOST at once. */
  const lose = (conn: fabric.Conn) => {
    notify(conn, "LOST")
    notify(conn.other, "LOST")
  }

  const newConn = (peer: fabric.Peer, config: Driver.Model.ConnConfig, privateData: Uint8Array, address: string) => {
    const conn: fabric.Conn = {
      kind: "Conn",
      id: world.nextId++,
      alive: true,
      peer,
      config,
      other: undefined,
      state: "connecting",
      notified: false,
      disconnected: false,
      privateData
    }
    queues.set(conn, {
      events: unsafeQueue(),
      completions: CompletionQueue.make((taken) => {
        // A completion naming a queue pair is a receive of the shared receive queue (one without a receive CQ).
        const queue = srqs.ofConfig(conn.config)
        const own: Array<number> = []
        for (const c of taken) {
          if (c.qpNum === undefined) own.push(c.id)
          else if (queue !== undefined) srqs.letGo(queue, c.id)
        }
        letGo(conn, own)
      }),
      recvs: [],
      sends: [],
      awaiting: new Map()
    })
    conns.set(conn.id, conn)
    return acquire(conn, "Conn", `connection with ${address}`)
  }

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
    if (c.state === "closed" || c.state === "error") return void complete(c, wr.id, RdmaError.WcStatus.WR_FLUSH_ERR, opcode)
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
    const held: Held = { regions: [mr!], sendQueue: false, signalled: true }
    mr!.inFlight++
    let list = early.get(req)
    if (list === undefined) early.set(req, list = [])
    list.push({ recv: { id: recv.id, mr: mr!, offset: recv.offset, length: recv.length }, held })
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
        : (srqs.completionsOf(srq) ?? q(to).completions).push(completion(recv.id, status, opcode, byteLength, imm, to.id))
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
        deliver(owner, { id: r.id, bytes: new Uint8Array(0), from, imm: r.imm, written: r.length, signalled: r.signalled })
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
    if (wr.op === "read") (localRegion(conn, wr.dst, LOCAL_WRITE) as fabric.MrLocal).memory.set(result, wr.dstOffset)
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
    q(conn).awaiting.set(wr.id, wr)
    // Always answered there, so that a request ends here either way; `finish` keeps an unsignalled success quiet.
    link!.send({ t: "post", to: other.far, from: farOf(conn)!, reach: { ...r, signalled: true } })
    return undefined
  }

  /** The other side's half of a send-queue request, as data (a send names no remote region). */
  const halfOf = (
    wr: Exclude<Driver.Model.WorkRequest, Recv>,
    remote: fabric.MrRemote | undefined,
    offset: number,
    length: number,
    bytes: Uint8Array
  ): wire.Reach => ({
    op: wr.op,
    id: wr.id,
    rkey: remote?.rkey ?? 0,
    address: remote?.address ?? 0n,
    offset,
    length,
    bytes,
    imm: wr.op === "write" || wr.op === "send" ? wr.imm : undefined,
    signalled: wr.completion !== "onError"
  })

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
        return across(conn, wr, halfOf(wr, fabric.asHandle(wr.dst, "MrRemote"), wr.dstOffset, FLUSH_READ_SIZE, NO_BYTES))
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

  const opcodeOf = (wr: Driver.Model.WorkRequest): number =>
    wr.op === "write" || wr.op === "atomicWrite"
      ? Model.WcOpcode.RDMA_WRITE
      : wr.op === "read" || wr.op === "flush"
      ? Model.WcOpcode.RDMA_READ
      : wr.op === "send"
      ? Model.WcOpcode.SEND
      : Model.WcOpcode.RECV

  const operationOf = (wr: Driver.Model.WorkRequest): fabric.DataOperation =>
    wr.op === "atomicWrite" ? "rpma_atomic_write" : `rpma_${wr.op}`

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
    if (handles.length === 0) return invalid("post", `unknown work request ${Arguments.show((wr as { op: unknown }).op)}`)
    for (const [value, kind] of handles) {
      const refused = deadOrWrong(operation, kind === "MrLocal" ? "local memory region" : "remote memory region", fabric.asHandle(value, kind))
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
        return rpma(operation, RdmaError.RpmaCode.RPMA_E_NOSUPP, "the remote peer does not write directly to persistent memory")
      }
      const flushBit = wr.type === "persistent" ? Usage.Flags.FLUSH_TYPE_PERSISTENT : Usage.Flags.FLUSH_TYPE_VISIBILITY
      if ((fabric.asHandle(wr.dst, "MrRemote")!.usage & flushBit) === 0) {
        return rpma(operation, RdmaError.RpmaCode.RPMA_E_NOSUPP, `the remote region does not support ${wr.type} flushes`)
      }
    }
    if (conn.state === "connecting") return rpma(operation, RdmaError.RpmaCode.RPMA_E_PROVIDER, "ibv_post_send: the connection is not established")
    return undefined
  }

  const calls = {
    epListen: (peerValue, address, port) =>
      call(
        "rpma_ep_listen",
        () =>
          deadOrWrong("rpma_ep_listen", "peer", peerOf(peerValue)) ??
            problem("rpma_ep_listen", Arguments.address(address) ?? Arguments.port(port)),
        (code) => rpma("rpma_ep_listen", code, "planned fault"),
        () => {
          const actual = port
          if (!world.devices.has(address)) {
            return Effect.fail(rpma("rpma_ep_listen", RdmaError.RpmaCode.RPMA_E_PROVIDER, `rdma_bind_addr: no RDMA device at ${address}`))
          }
          if (listeners.has(key(address, actual))) {
            return Effect.fail(rpma("rpma_ep_listen", RdmaError.RpmaCode.RPMA_E_PROVIDER, `rdma_bind_addr: ${address}:${actual} is in use`))
          }
          const listen = () => {
            const ep: fabric.Endpoint = { kind: "Endpoint", id: world.nextId++, alive: true, peer: peerOf(peerValue)!, address, port: actual }
            listeners.set(key(address, actual), ep)
            incoming.set(ep, unsafeQueue())
            return acquire(ep, "Endpoint", `endpoint listening on ${address}:${actual}`)
          }
          if (link === undefined) return listen()
          // On a shared network the address is claimed for this process first: one listener in all.
          // Uninterruptible (the claim is bounded by the link's timeout), so a claim granted is never lost.
          return Effect.uninterruptible(Effect.flatMap(Effect.promise(() => link.claim(key(address, actual))), (claimed) =>
            claimed === "ok"
              ? listen()
              : Effect.fail(rpma(
                "rpma_ep_listen",
                RdmaError.RpmaCode.RPMA_E_PROVIDER,
                claimed === "taken"
                  ? `rdma_bind_addr: ${address}:${actual} is in use (by another process on the simulated network)`
                  : `rdma_bind_addr: the simulated network at ${link.path} is gone`
              ))))
        }
      ),

    epShutdown: (value) =>
      Effect.suspend(() => {
        const ep = endpointOf(value)
        const refused = deadOrWrong("rpma_ep_shutdown", "endpoint", ep)
        if (refused !== undefined) return Effect.fail(refused)
        listeners.delete(key(ep!.address, ep!.port))
        link?.send({ t: "unclaim", key: key(ep!.address, ep!.port) })
        releaseHandle(ep!)
        // Waiters wake up to a shut-down endpoint.
        Queue.unsafeOffer(incoming.get(ep!)!, undefined)
        return Effect.void
      }),

    epNextConnReq: (value, config) =>
      call(
        "rpma_ep_next_conn_req",
        () =>
          deadOrWrong("rpma_ep_next_conn_req", "endpoint", endpointOf(value)) ??
            problem("rpma_ep_next_conn_req", Arguments.connConfig(config)) ??
            srqs.refuseConfig("rpma_ep_next_conn_req", config),
        (code) => rpma("rpma_ep_next_conn_req", code, "planned fault"),
        () => {
          const ep = endpointOf(value)!
          const queue = incoming.get(ep)!
          return Effect.flatMap(Queue.take(queue), (client) => {
            if (client === undefined || !ep.alive) {
              Queue.unsafeOffer(queue, undefined)
              return Effect.fail(invalid("rpma_ep_next_conn_req", "the endpoint was shut down"))
            }
            const req: fabric.ConnReq = {
              kind: "ConnReq",
              id: world.nextId++,
              alive: true,
              peer: ep.peer,
              config,
              address: ep.address,
              port: ep.port,
              client: client.client,
              privateData: client.privateData
            }
            return acquire(req, "ConnReq", `incoming connection request on ${ep.address}:${ep.port}`)
          })
        }
      ),

    connReqNew: (peerValue, address, port, config) =>
      call(
        "rpma_conn_req_new",
        () =>
          deadOrWrong("rpma_conn_req_new", "peer", peerOf(peerValue)) ??
            problem(
              "rpma_conn_req_new",
              Arguments.address(address) ?? Arguments.port(port) ?? Arguments.connConfig(config)
            ) ?? srqs.refuseConfig("rpma_conn_req_new", config),
        (code) => rpma("rpma_conn_req_new", code, "planned fault"),
        () => {
          if (!world.devices.has(address)) {
            return Effect.fail(rpma("rpma_conn_req_new", RdmaError.RpmaCode.RPMA_E_PROVIDER, `rdma_resolve_addr: no route to ${address}`))
          }
          const req: fabric.ConnReq = {
            kind: "ConnReq",
            id: world.nextId++,
            alive: true,
            peer: peerOf(peerValue)!,
            config,
            address,
            port,
            client: undefined,
            privateData: new Uint8Array(0)
          }
          return acquire(req, "ConnReq", `outgoing connection request to ${address}:${port}`)
        }
      ),

    connReqPrivateData: (value) =>
      Effect.suspend(() => {
        const req = reqOf(value)
        return refusedOr(deadOrWrong("rpma_conn_req_get_private_data", "connection request", req), () => Effect.succeed(Uint8Array.from(req!.privateData)))
      }),

    connReqConnect: (value, privateData) =>
      call(
        "rpma_conn_req_connect",
        () =>
          deadOrWrong("rpma_conn_req_connect", "connection request", reqOf(value)) ??
            // rdma_cm on RoCE: at most 56 bytes with a request and 196 with an accept. Refused
            // before librpma sees the request, which stays usable (the Driver's contract).
            problem(
              "rpma_conn_req_connect",
              Arguments.privateData(privateData, reqOf(value)!.client === undefined ? "connect" : "accept")
            ),
        (code) => {
          releaseHandle(reqOf(value)!)
          dropEarly(reqOf(value)!)
          return rpma("rpma_conn_req_connect", code, "planned fault")
        },
        () => {
          const req = reqOf(value)!
          releaseHandle(req) // consumed, as rpma_conn_req_connect does
          // What arrives is padded with zeros to rdma_cm's limit.
          const side = req.client === undefined ? "connect" : "accept"
          const sent = new Uint8Array(Arguments.PRIVATE_DATA_LIMIT[side])
          if (privateData !== undefined && privateData !== null) sent.set(privateData)
          if (req.client === undefined) {
            return Effect.tap(newConn(req.peer, req.config, new Uint8Array(0), `${req.address}:${req.port}`), (conn) => {
              takeEarly(req, conn)
              const ep = listeners.get(key(req.address, req.port))
              if (ep !== undefined) return void Queue.unsafeOffer(incoming.get(ep)!, { client: conn, privateData: sent })
              if (link === undefined) return void emit(conn, "REJECTED")
              // Perhaps another process listens there: the network's router knows (REJECTED if none).
              connecting.set(conn, key(req.address, req.port))
              link.send({ t: "connect", key: key(req.address, req.port), from: farOf(conn)!, privateData: sent })
            })
          }
          const client = req.client
          return Effect.tap(newConn(req.peer, req.config, req.privateData, `${req.address}:${req.port}`), (server) => {
            takeEarly(req, server)
            if (!client.alive || client.state !== "connecting" || (client.far !== undefined && departed.has(client.far.process))) {
              return void emit(server, "LOST")
            }
            server.other = client
            client.other = server
            client.privateData = sent
            server.state = "established"
            client.state = "established"
            emit(server, "ESTABLISHED")
            emit(client, "ESTABLISHED")
          })
        }
      ),

    connReqDelete: (value) =>
      Effect.suspend(() => {
        const req = reqOf(value)
        const refused = deadOrWrong("rpma_conn_req_delete", "connection request", req)
        if (refused !== undefined) return Effect.fail(refused)
        releaseHandle(req!)
        dropEarly(req!)
        if (req!.client !== undefined && req!.client.alive) emit(req!.client, "REJECTED")
        return Effect.void
      }),

    peerCfgDescriptor: (direct) =>
      typeof direct !== "boolean"
        ? Effect.fail(invalid("rpma_peer_cfg_get_descriptor", "directWriteToPmem must be a boolean"))
        : Effect.succeed(Uint8Array.of(direct ? 1 : 0)),

    connApplyRemotePeerCfg: (value, descriptor) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        const refused = problem("rpma_conn_apply_remote_peer_cfg", Arguments.peerCfgDescriptor(descriptor)) ??
          deadOrWrong("rpma_conn_apply_remote_peer_cfg", "connection", conn)
        if (refused !== undefined) return Effect.fail(refused)
        remotePmem.set(conn!, descriptor[0] !== 0)
        return Effect.void
      }),

    connNextEvent: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        return refusedOr(deadOrWrong("rpma_conn_next_event", "connection", conn), () => Queue.take(q(conn!).events))
      }),

    connPrivateData: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        return refusedOr(deadOrWrong("rpma_conn_get_private_data", "connection", conn), () => Effect.succeed(Uint8Array.from(conn!.privateData)))
      }),

    connDisconnect: (value) =>
      call(
        "rpma_conn_disconnect",
        () => deadOrWrong("rpma_conn_disconnect", "connection", connOf(value)),
        (code) => rpma("rpma_conn_disconnect", code, "planned fault"),
        () => Effect.sync(() => disconnect(connOf(value)!))
      ),

    connDelete: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        const refused = deadOrWrong("rpma_conn_delete", "connection", conn)
        if (refused !== undefined) return Effect.fail(refused)
        // Deleting ends the connection for the other side too.
        disconnect(conn!)
        letGo(conn!, undefined)
        releaseHandle(conn!)
        conns.delete(conn!.id)
        connecting.delete(conn!)
        // As the addon: a wait still armed hears of it, at once.
        q(conn!).completions.close(invalid("rpma_cq_wait", "the connection was deleted"))
        return Effect.void
      }),

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
      const queue = posted === 0 || reqOf(value) !== undefined ? undefined : completionQueueOf("rpma_cq_get_wc", value).queue
      return { posted, error, ready: queue === undefined ? NONE : queue.drain(), queueError: undefined, turnDue: turnDue() }
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

    connQpNum: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        // The simulated queue pair number: what this side's shared receive queue completions carry.
        return refusedOr(deadOrWrong("rpma_conn_get_qp_num", "connection", conn), () => Effect.succeed(conn!.id))
      }),

    ...srqs.calls
  } satisfies Partial<Driver.Driver>

  /** What another process says about a connection of this one. */
  const receive = (message: wire.Message) => {
    switch (message.t) {
      case "connect": {
        // A request to a listener here: queued for rpma_ep_next_conn_req like one from this process.
        const ep = listeners.get(message.key)
        if (ep === undefined || !ep.alive) return link!.send({ t: "event", to: message.from, event: "REJECTED" })
        const client = standIn(message.from, ep.peer, "connecting")
        return void Queue.unsafeOffer(incoming.get(ep)!, { client, privateData: message.privateData })
      }
      case "event": {
        const conn = conns.get(message.to.conn)
        const accepted = message.event === "ESTABLISHED" ? message.from : undefined
        // Accepted there, given up (or deleted) here meanwhile: the accepting side hears LOST, as in one process.
        if (accepted !== undefined && (conn === undefined || conn.state !== "connecting")) {
          return link!.send({ t: "notify", to: accepted, event: "LOST" })
        }
        if (conn === undefined) return
        connecting.delete(conn)
        if (accepted !== undefined) {
          conn.other = standIn(accepted, conn.peer, "established")
          conn.privateData = message.privateData ?? NO_BYTES
          conn.state = "established"
        }
        return emit(conn, message.event)
      }
      case "notify": {
        const conn = conns.get(message.to.conn)
        return conn === undefined || frozen.has(conn) ? undefined : notify(conn, message.event)
      }
      case "post": {
        const owner = conns.get(message.to.conn)
        if (owner !== undefined && frozen.has(owner)) return // never answered: the sender's bounds end it
        const from = owner?.other
        // Nothing reaches a connection that has ended, nor comes after a request of the sender that failed.
        if (owner === undefined || from?.far === undefined || owner.state !== "established" || from.state === "error") {
          return link!.send({ t: "settle", to: message.from, id: message.reach.id, result: RdmaError.WcStatus.WR_FLUSH_ERR })
        }
        const result = reach(owner, from, message.reach)
        if (result === undefined) return // a send: answered by complete() once a receive takes it
        if (typeof result === "number" && result !== RdmaError.WcStatus.SUCCESS) from.state = "error"
        return link!.send({ t: "settle", to: message.from, id: message.reach.id, result })
      }
      case "settle": {
        const conn = conns.get(message.to.conn)
        const wr = conn === undefined || frozen.has(conn) ? undefined : q(conn).awaiting.get(message.id)
        if (wr === undefined) return // flushed meanwhile (the connection ended), or deleted
        q(conn!).awaiting.delete(message.id)
        return finish(conn!, wr, landed(conn!, wr, message.result))
      }
      case "gone":
        return left(message.process, message.keys)
    }
  }

  /** A process left (`undefined`: the whole network did): its connections are lost, requests to it unreachable. */
  const left = (process: number | undefined, keys: ReadonlyArray<string>) => {
    if (process !== undefined) departed.add(process)
    for (const conn of conns.values()) {
      const asked = connecting.get(conn)
      if (asked !== undefined && (process === undefined || keys.includes(asked))) {
        connecting.delete(conn)
        emit(conn, "UNREACHABLE")
      } else if (conn.other?.far !== undefined && (process === undefined || conn.other.far.process === process)) {
        notify(conn, "LOST")
      }
    }
  }
  link?.attach({ message: receive, down: () => left(undefined, []) })

  return {
    calls,
    /** Endpoints, connection requests and connections of a peer that are alive: they use it. */
    usersOf: (peer: fabric.Peer): number => {
      let users = 0
      for (const handle of world.ledger.keys()) {
        const user = handle as fabric.AnyHandle
        if (
          (user.kind === "Endpoint" || user.kind === "ConnReq" || user.kind === "Conn" || user.kind === "Srq") &&
          user.peer === peer
        ) {
          users++
        }
      }
      return users
    },
    /** Keeps the rkey index in step with registrations. */
    registered: (mr: fabric.MrLocal) => void byRkey.set(mr.rkey, mr),
    deregistered: (mr: fabric.MrLocal) => void byRkey.delete(mr.rkey)
  }
}
