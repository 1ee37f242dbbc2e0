/**
 * The driver's handle of each resource. It is a field of the resource's implementation class
 * (internal/peer.ts, internal/localMr.ts's Region, internal/remoteMr.ts's RemoteRegion,
 * internal/srq.ts, internal/connectionImpl.ts; on the librdmacm path internal/cmEndpoint.ts's
 * EndpointImpl, internal/cmListener.ts's ListenerImpl, and the object internal/cmRegistration.ts
 * makes for a region), not of its public interface. There is one accessor for each kind, and each
 * is a plain property read of the classes its callers read before (one, or both regions' for
 * `region`), so the data path's reads stay as they were. The public `Driver.handleOf` covers every
 * kind in one function, for driver authors.
 *
 * Only type imports: Driver.ts re-exports from here, and the resources' modules import Driver.ts.
 */
import type { CmEndpoint, Region } from "../CmEndpoint.js"
import type { CmListener } from "../CmListener.js"
import type { Connection } from "../Connection.js"
import type {
  CmEpHandle,
  CmListenerHandle,
  CmMrHandle,
  ConnHandle,
  MrHandle,
  PeerHandle,
  RemoteMrHandle,
  SrqHandle
} from "../DriverModel.js"
import type { LocalMr } from "../LocalMr.js"
import type { Peer } from "../Peer.js"
import type { RemoteMr } from "../RemoteMr.js"
import type { SharedReceiveQueue } from "../SharedReceiveQueue.js"

/** What every implementation class carries besides its public face. */
export interface Handled<H> {
  readonly handle: H
}

export const peer = (peer: Peer): PeerHandle => (peer as unknown as Handled<PeerHandle>).handle

export const localMr = (mr: LocalMr<any>): MrHandle => (mr as unknown as Handled<MrHandle>).handle

export const remoteMr = (mr: RemoteMr<any>): RemoteMrHandle => (mr as unknown as Handled<RemoteMrHandle>).handle

/** Either kind of region: a transfer's destination is remote for a write and local for a read. */
export const region = (mr: LocalMr<any> | RemoteMr<any>): MrHandle | RemoteMrHandle =>
  (mr as unknown as Handled<MrHandle | RemoteMrHandle>).handle

export const srq = (queue: SharedReceiveQueue): SrqHandle => (queue as unknown as Handled<SrqHandle>).handle

export const connection = (conn: Connection): ConnHandle => (conn as unknown as Handled<ConnHandle>).handle

export const cmEndpoint = (ep: CmEndpoint): CmEpHandle => (ep as unknown as Handled<CmEpHandle>).handle

export const cmRegion = (mr: Region): CmMrHandle => (mr as unknown as Handled<CmMrHandle>).handle

export const cmListener = (listener: CmListener): CmListenerHandle =>
  (listener as unknown as Handled<CmListenerHandle>).handle

/** Any of them: `Driver.handleOf`. */
export const any = (
  resource: Peer | LocalMr<any> | RemoteMr<any> | SharedReceiveQueue | Connection | CmEndpoint | Region | CmListener
): unknown => (resource as unknown as Handled<unknown>).handle
