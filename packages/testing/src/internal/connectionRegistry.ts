/**
 * What the network keeps about librpma's connections: listeners and their incoming requests, each
 * connection's queues (events, completions, receives, sends waiting, requests awaiting another
 * process), the connections by id (what other processes name), the regions by rkey, and the
 * stand-ins for connections of other processes.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import type * as wire from "./wire.js"
import { NO_BYTES, type PendingSend, type PostedRecv } from "./workRequests.js"

/** Per-handle queues, kept beside the handles so that the fabric's types stay plain data. */
export interface ConnQueues {
  readonly events: Queue.Queue<Driver.Model.ConnEvent>
  readonly completions: CompletionQueue.CompletionQueue
  readonly recvs: Array<PostedRecv>
  readonly sends: Array<PendingSend>
  /** Requests sent to the other side's process, by id, until it answers (or the connection ends). */
  readonly awaiting: Map<number, Driver.Model.WorkRequest>
}

/** A stand-in's configuration: it has no queues in this process, so nothing reads it. */
const STAND_IN_CONFIG: Driver.Model.ConnConfig = {
  timeoutMs: 0,
  sqSize: 0,
  rqSize: 0,
  cqSize: 0,
  directWriteToPmem: false
}

export const makeConnectionRegistry = (link: wire.Link | undefined) => {
  const listeners = new Map<string, fabric.Endpoint>()
  const incoming = new WeakMap<
    fabric.Endpoint,
    Queue.Queue<{ readonly client: fabric.Conn; readonly privateData: Uint8Array } | undefined>
  >()
  const queues = new WeakMap<fabric.Conn, ConnQueues>()
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
    conn === undefined
      ? undefined
      : conn.far ?? (link === undefined ? undefined : { process: link.self, conn: conn.id })
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

  return {
    listeners,
    incoming,
    queues,
    remotePmem,
    byRkey,
    conns,
    connecting,
    frozen,
    departed,
    farOf,
    standIn,
    unsafeQueue,
    key,
    endpointOf,
    reqOf,
    connOf,
    q
  }
}

export type ConnectionRegistry = ReturnType<typeof makeConnectionRegistry>
