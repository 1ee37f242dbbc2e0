/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 * Resources are opaque: the driver's handle is not on their public types; `Driver.handleOf` reads
 * it, typed by the kind of resource.
 */
import type { CmEndpoint, CmListener, Connection, LocalMr, Peer, RemoteMr, SharedReceiveQueue } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { describe, expect, it } from "@effect/vitest"

declare const peer: Peer.Peer
declare const mr: LocalMr.LocalMr<"WRITE_SRC">
declare const remote: RemoteMr.RemoteMr<"WRITE_DST">
declare const srq: SharedReceiveQueue.SharedReceiveQueue
declare const conn: Connection.Connection
declare const ep: CmEndpoint.CmEndpoint
declare const msgs: CmEndpoint.MessageRegion
declare const readable: CmEndpoint.Region<"read">
declare const listener: CmListener.CmListener

export const typeTests = () => [
  // @ts-expect-error a Peer shows no handle
  peer.handle,
  // @ts-expect-error a LocalMr shows no handle
  mr.handle,
  // @ts-expect-error a RemoteMr shows no handle
  remote.handle,
  // @ts-expect-error a SharedReceiveQueue shows no handle
  srq.handle,
  // @ts-expect-error a Connection shows no handle
  conn.handle,
  // @ts-expect-error a CmEndpoint shows no handle
  ep.handle,
  // @ts-expect-error a CmEndpoint.Region shows no handle
  msgs.handle,
  // @ts-expect-error a CmEndpoint.Region of any kind shows no handle
  readable.handle,
  // @ts-expect-error a CmListener shows no handle
  listener.handle,
  Driver.handleOf(peer) satisfies Driver.Model.PeerHandle,
  Driver.handleOf(mr) satisfies Driver.Model.MrHandle,
  Driver.handleOf(remote) satisfies Driver.Model.RemoteMrHandle,
  Driver.handleOf(srq) satisfies Driver.Model.SrqHandle,
  Driver.handleOf(conn) satisfies Driver.Model.ConnHandle,
  Driver.handleOf(ep) satisfies Driver.Model.CmEpHandle,
  Driver.handleOf(msgs) satisfies Driver.Model.CmMrHandle,
  Driver.handleOf(readable) satisfies Driver.Model.CmMrHandle,
  Driver.handleOf(listener) satisfies Driver.Model.CmListenerHandle,
  // @ts-expect-error a region's handle is not a peer's
  Driver.handleOf(mr) satisfies Driver.Model.PeerHandle,
  // @ts-expect-error a remote region's handle is not a local region's
  Driver.handleOf(remote) satisfies Driver.Model.MrHandle,
  // @ts-expect-error an endpoint's handle is not a connection's
  Driver.handleOf(ep) satisfies Driver.Model.ConnHandle,
  // @ts-expect-error an endpoint's region's handle is not a librpma region's
  Driver.handleOf(msgs) satisfies Driver.Model.MrHandle,
  // @ts-expect-error a listener's handle is not an endpoint's
  Driver.handleOf(listener) satisfies Driver.Model.CmEpHandle,
  // @ts-expect-error only resources have a handle
  Driver.handleOf({ handle: 1 })
]

describe("handleOf types", () => {
  it("compiles (the checks are the @ts-expect-error lines)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
