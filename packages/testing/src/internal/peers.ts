/**
 * The simulated driver's devices and peers: rpma_utils_get_ibv_context on the addresses the world
 * has a device at, rpma_peer_new and rpma_peer_delete (refused while regions or connections use it).
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

/** `usersOf` counts what else uses a peer (its endpoints, requests and connections). */
export const makePeerCalls = (world: fabric.Fabric, tools: Tools, usersOf: (peer: fabric.Peer) => number) => {
  const { acquire, call, deadOrWrong, inUse, invalid, peerOf, releaseHandle, rpma } = tools
  return {
    getIbvContext: (address, kind) =>
      call(
        "rpma_utils_get_ibv_context",
        () =>
          typeof address !== "string"
            ? invalid("rpma_utils_get_ibv_context", "address is NULL")
            : kind !== "local" && kind !== "remote"
            ? invalid("rpma_utils_get_ibv_context", `unknown address type ${Arguments.show(kind)}`)
            : undefined,
        (code) => rpma("rpma_utils_get_ibv_context", code, "planned fault"),
        () =>
          world.devices.has(address)
            ? Effect.succeed(
              fabric.track<fabric.IbvContext>({ kind: "IbvContext", id: world.nextId++, alive: true, address })
            )
            : Effect.fail(rpma(
              "rpma_utils_get_ibv_context",
              RdmaError.RpmaCode.RPMA_E_PROVIDER,
              `no RDMA device answers at ${address}`
            ))
      ),

    peerNew: (context) =>
      call(
        "rpma_peer_new",
        () =>
          fabric.asHandle(context, "IbvContext") === undefined
            ? invalid("rpma_peer_new", "ibv_ctx is NULL (not an ibv context handle)")
            : undefined,
        (code) => rpma("rpma_peer_new", code, "planned fault"),
        () => {
          const ctx = fabric.asHandle(context, "IbvContext")!
          const peer: fabric.Peer = { kind: "Peer", id: world.nextId++, alive: true, context: ctx, regions: new Set() }
          return acquire(peer, "Peer", `peer on ${ctx.address}`)
        }
      ),

    peerDelete: (value) =>
      call<void, RdmaError.RpmaError | RdmaError.ResourceInUseError>(
        "rpma_peer_delete",
        () => {
          const peer = peerOf(value)
          const refused = deadOrWrong("rpma_peer_delete", "peer", peer)
          if (refused !== undefined) return refused
          // As the native driver: librpma would free the peer under its users' feet.
          if (peer!.regions.size > 0) {
            const n = peer!.regions.size
            return inUse(
              "rpma_peer_delete",
              `${n} ${n === 1 ? "region" : "regions"} still registered: deregister them first`
            )
          }
          const users = usersOf(peer!)
          return users === 0 ? undefined : inUse(
            "rpma_peer_delete",
            `${users} ${
              users === 1
                ? "endpoint, connection request or connection still uses it"
                : "endpoints, connection requests or connections still use it"
            }: shut down or delete them first`
          )
        },
        (code) => {
          // librpma frees the peer even when ibv_dealloc_pd fails.
          releaseHandle(peerOf(value)!)
          return rpma("rpma_peer_delete", code, "ibv_dealloc_pd failed (planned fault)")
        },
        () => Effect.sync(() => releaseHandle(peerOf(value)!))
      )
  } satisfies Partial<Driver.Driver>
}
