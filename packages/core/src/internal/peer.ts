/**
 * What a peer is inside: its public face (Peer.ts) and the record of its users.
 */
import type { PeerHandle } from "../DriverModel.js"
import type * as Peer from "../Peer.js"
import * as Owner from "./owner.js"
import { PipeableBase } from "./resource.js"

export const TypeId: Peer.TypeId = Symbol.for("@effect-rdma/core/Peer") as Peer.TypeId

export class PeerImpl extends PipeableBase implements Peer.Peer {
  readonly [TypeId]: Peer.TypeId = TypeId
  constructor(readonly handle: PeerHandle, readonly address: string) {
    super()
  }
}

export const isPeer = (u: unknown): u is Peer.Peer => u instanceof PeerImpl

/** Its regions, listeners and connections: the peer is deleted after the last of them. */
export const ownerOf = (peer: Peer.Peer): Owner.Owner => Owner.of(peer, () => `the peer at ${peer.address}`)
