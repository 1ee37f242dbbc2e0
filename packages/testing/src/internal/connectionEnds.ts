/**
 * A connection's life on its own side: made (with its queues), its events (here, or as a message to
 * the process of a stand-in), its completions, and its end: a disconnect (the other side sees
 * CLOSED), a loss (both see LOST), and the flush of everything still waiting, as a queue pair in the
 * error state does.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Model } from "@effect-rdma/core/Driver"
import * as Queue from "effect/Queue"
import * as CompletionQueue from "./completionQueue.js"
import type { ConnectionRegistry } from "./connectionRegistry.js"
import type * as fabric from "./fabric.js"
import type { HeldRegions } from "./heldRegions.js"
import type { SharedReceiveQueues } from "./sharedReceive.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"
import { completion, opcodeOf } from "./workRequests.js"

export const makeConnectionEnds = (
  world: fabric.Fabric,
  { acquire }: Tools,
  link: wire.Link | undefined,
  { conns, farOf, frozen, q, queues, unsafeQueue }: ConnectionRegistry,
  { letGo }: HeldRegions,
  srqs: SharedReceiveQueues
) => {
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

  return { emit, complete, flushAll, notify, disconnect, lose, newConn }
}

export type ConnectionEnds = ReturnType<typeof makeConnectionEnds>
