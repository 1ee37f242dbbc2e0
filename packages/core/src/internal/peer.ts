/**
 * What a peer's life needs beside its public face: the record of its users.
 *
 * @internal
 */
import type { Peer } from "../Peer.js"
import * as Owner from "./owner.js"

/** @internal Its regions, listeners and connections: the peer is deleted after the last of them. */
export const ownerOf = (peer: Peer): Owner.Owner => Owner.of(peer, () => `the peer at ${peer.address}`)
