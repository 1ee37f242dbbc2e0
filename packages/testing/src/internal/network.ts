/**
 * The simulated fabric's connections: endpoints, requests and connections between peers of one
 * process, and work requests that copy bytes between registered memories, enforcing what RDMA
 * hardware enforces (rkey, bounds, access rights from the usage) with the same completion statuses.
 * With a link (a network shared by several processes), a connection's other side may be in
 * another process: the same rules run there, on a message (`reach` is the other side's half).
 *
 * Assembled here from its parts: what is kept about connections (connectionRegistry.ts), what
 * posted requests hold (heldRegions.ts), a connection's life and end (connectionEnds.ts), from
 * listening to deletion (connectionSetup.ts), the data path (dataPath.ts), shared receive queues
 * (sharedReceive.ts), and what other processes say (crossProcess.ts).
 */
import type * as Driver from "@effect-rdma/core/Driver"
import { makeConnectionEnds } from "./connectionEnds.js"
import { makeConnectionRegistry } from "./connectionRegistry.js"
import { makeConnectionSetup } from "./connectionSetup.js"
import { hearCrossProcess } from "./crossProcess.js"
import { makeDataPath } from "./dataPath.js"
import type * as fabric from "./fabric.js"
import { makeHeldRegions } from "./heldRegions.js"
import { makeSharedReceiveQueues } from "./sharedReceive.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"

export const makeNetwork = (world: fabric.Fabric, tools: Tools, link?: wire.Link) => {
  const registry = makeConnectionRegistry(link)
  const { byRkey, q } = registry
  const held = makeHeldRegions(registry)
  const srqs = makeSharedReceiveQueues(world, tools, (srq) => {
    // A receive was posted on the queue: the first connection made with it that has a message waiting.
    for (const handle of world.ledger.keys()) {
      const conn = handle as fabric.AnyHandle
      if (conn.kind !== "Conn" || srqs.ofConfig(conn.config) !== srq) continue
      const waiting = q(conn).sends.shift()
      if (waiting !== undefined) return dataPath.deliver(conn, waiting)
    }
  })
  const ends = makeConnectionEnds(world, tools, link, registry, held, srqs)
  const dataPath = makeDataPath(world, tools, link, registry, held, ends, srqs)
  if (link !== undefined) hearCrossProcess(link, registry, ends, dataPath)

  const calls = {
    ...makeConnectionSetup(world, tools, link, registry, held, ends, srqs),
    ...dataPath.calls,
    ...srqs.calls
  } satisfies Partial<Driver.Driver>

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
