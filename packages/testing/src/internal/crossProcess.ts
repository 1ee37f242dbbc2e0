/**
 * What the processes sharing a simulated network tell this one about librpma's connections: a
 * request for a listener here (its client a stand-in), the answer to a request made here, a
 * disconnect or loss of the other side, the other side's half of a request (run here, answered with
 * `settle`) and that answer, and a process that left (its connections lost, requests to it
 * unreachable).
 */
import { RdmaError } from "@effect-rdma/core"
import * as Queue from "effect/Queue"
import type { ConnectionEnds } from "./connectionEnds.js"
import type { ConnectionRegistry } from "./connectionRegistry.js"
import type { DataPath } from "./dataPath.js"
import type * as wire from "./wire.js"
import { NO_BYTES } from "./workRequests.js"

/** Listens on `link` for the rest of the world's life. */
export const hearCrossProcess = (
  link: wire.Link,
  { connecting, conns, departed, frozen, incoming, listeners, q, standIn }: ConnectionRegistry,
  { emit, notify }: ConnectionEnds,
  { finish, landed, reach }: DataPath
): void => {
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
          return link!.send({
            t: "settle",
            to: message.from,
            id: message.reach.id,
            result: RdmaError.WcStatus.WR_FLUSH_ERR
          })
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
  link.attach({ message: receive, down: () => left(undefined, []) })
}
