/**
 * The simulated driver assembled: one world (its devices, planned faults and ledger) and the calls
 * of each part over it (peers, registrations, rdma_cm identifiers, host memory, librpma's
 * connections, librdmacm's endpoints), with the network's link when the world shares one.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Options, Simulation } from "../SimulatedDriver.js"
import { makeCmEndpoints } from "./cmEndpoints.js"
import { makeCmRegionCalls } from "./cmRegions.js"
import * as fabric from "./fabric.js"
import { checked } from "./faults.js"
import { makeMemoryCalls } from "./hostMemory.js"
import { makeNetwork } from "./network.js"
import { makePeerCalls } from "./peers.js"
import { makeRegionCalls } from "./regions.js"
import { makeTools } from "./tools.js"
import { fanOut, type Link } from "./wire.js"

/** What is alive in `world`, by kind, as Driver.live counts it. */
const liveCounts = (world: fabric.Fabric) => {
  const count = {
    Peer: 0,
    MrLocal: 0,
    MrRemote: 0,
    CmMr: 0,
    Endpoint: 0,
    ConnReq: 0,
    Conn: 0,
    Srq: 0,
    CmEp: 0,
    CmListener: 0
  }
  for (const entry of world.ledger.values()) count[entry.kind]++
  return {
    peers: count.Peer,
    localRegions: count.MrLocal,
    remoteRegions: count.MrRemote,
    cmRegions: count.CmMr,
    cmEndpoints: count.CmEp,
    cmListeners: count.CmListener,
    endpoints: count.Endpoint,
    connectionRequests: count.ConnReq,
    connections: count.Conn,
    sharedReceiveQueues: count.Srq
  }
}

/** A simulated driver and its control; its connections reach other processes through `link` (SimulatedNetwork). */
export const makeLinked = (
  options: Options | undefined,
  link: Link | undefined
): { readonly driver: Driver.Driver; readonly control: Simulation } => {
  const world = fabric.makeFabric(options?.devices ?? [fabric.DEFAULT_ADDRESS])
  for (const fault of options?.faults ?? []) fabric.planFault(world, checked("SimulatedDriver options.faults", fault))
  const maxRegionSize = options?.maxRegionSize ?? 2 ** 32
  const tools = makeTools(world)
  // Both the connections and librdmacm's endpoints hear the network (started once the driver is made).
  const shared = link === undefined ? undefined : fanOut(link)
  const network = makeNetwork(world, tools, shared?.link)

  const driver: Driver.Driver = {
    name: "simulated",
    ...makePeerCalls(world, tools, network.usersOf),
    ...makeRegionCalls(world, tools, maxRegionSize, network),
    ...makeCmRegionCalls(world, tools),
    ...makeMemoryCalls(tools, maxRegionSize),
    ...network.calls,
    ...makeCmEndpoints(world, tools, shared?.link),
    live: Effect.sync(() => liveCounts(world))
  }

  const control: Simulation = {
    // A fault that could never fire is the test's mistake: a defect that says so, not a silent plan.
    fail: (fault) => Effect.sync(() => fabric.planFault(world, checked("SimulatedDriver.fail", fault))),
    live: Effect.sync(() => Array.from(world.ledger.values())),
    calls: (operation) => Effect.sync(() => world.calls.get(operation) ?? 0)
  }

  shared?.start()
  return { driver, control }
}
