/**
 * The native driver's device and peer calls (peer.cc): the device behind an address, and the
 * peer (protection domain) on it.
 */
import type { Driver, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { as, attempt, attemptPromise, rpma } from "./addon.js"
import { inUseOr, rpmaFailure } from "./failures.js"

export const peerCalls = (binding: Binding): Pick<Driver, "getIbvContext" | "peerNew" | "peerDelete"> => ({
  getIbvContext: (address, kind) =>
    attemptPromise(() => binding.getIbvContext(address, kind), rpmaFailure("rpma_utils_get_ibv_context")).pipe(
      Effect.map(as<Model.IbvContextHandle>)
    ),
  peerNew: (context) => rpma("rpma_peer_new", () => as<Model.PeerHandle>(binding.peerNew(context))),
  peerDelete: (peer) =>
    attempt(() => binding.peerDelete(peer), inUseOr("rpma_peer_delete", rpmaFailure("rpma_peer_delete")))
})
