/**
 * What posted requests hold: the local regions each request names, counted in flight (a region in
 * flight cannot be deregistered) until its completion is returned, as the addon keeps them; an
 * unsignalled request's until a later send-queue request's completion is returned. Receives posted
 * on a request before it is connected (rpma_conn_req_recv) are held here until they become the
 * connection's, or the request goes.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import type { ConnectionRegistry } from "./connectionRegistry.js"
import type * as fabric from "./fabric.js"
import { type Held, localRegionsOf, type PostedRecv } from "./workRequests.js"

export const makeHeldRegions = ({ q }: Pick<ConnectionRegistry, "q">) => {
  /**
   * The local regions each posted request names, until its completion is returned (as the addon
   * keeps them); an unsignalled one's, until a later send-queue request's completion is returned.
   */
  const posted = new WeakMap<fabric.Conn, Map<number, Held>>()
  /** Receives posted on a request before it is connected (rpma_conn_req_recv), with what they hold. */
  const early = new WeakMap<fabric.ConnReq, Array<{ readonly recv: PostedRecv; readonly held: Held }>>()
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

  /** A receive posted on a request before it is connected: its region held until it completes or the request goes. */
  const holdEarly = (req: fabric.ConnReq, recv: PostedRecv) => {
    const held: Held = { regions: [recv.mr], sendQueue: false, signalled: true }
    recv.mr.inFlight++
    let list = early.get(req)
    if (list === undefined) early.set(req, list = [])
    list.push({ recv, held })
  }

  return { holdRegions, letGo, takeEarly, dropEarly, holdEarly }
}

export type HeldRegions = ReturnType<typeof makeHeldRegions>
