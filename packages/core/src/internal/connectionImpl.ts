/**
 * What a Connection is inside: the public face (Connection.ts) over its posting kernel. Apart from
 * internal/connection.ts (its life) so that the operations reach the kernel without importing the
 * connection's life and what that imports.
 */
import type * as Effect from "effect/Effect"
import type * as Stream from "effect/Stream"
import type * as Connection from "../Connection.js"
import type { ConnHandle } from "../DriverModel.js"
import type { Peer } from "../Peer.js"
import type { Poster } from "./poster.js"
import { PipeableBase } from "./resource.js"

export const TypeId: Connection.TypeId = Symbol.for("@effect-rdma/core/Connection") as Connection.TypeId

/**
 * A connection's machinery behind its public face: its handle, the posting kernel of its
 * queue pair (with its table and slots), which the operations post through, and its life.
 */
export class ConnectionImpl extends PipeableBase implements Connection.Connection {
  readonly [TypeId]: Connection.TypeId = TypeId
  constructor(
    readonly handle: ConnHandle,
    readonly privateData: Uint8Array,
    /** Its state now. */
    readonly state: Effect.Effect<Connection.State>,
    /** Its state now, then each change, until Closed or Lost. */
    readonly changes: Stream.Stream<Connection.State>,
    /** The final state, once the connection has ended (closed by either side, or lost). */
    readonly awaitClosed: Effect.Effect<Connection.State>,
    /** Disconnects and releases it, bounded by its timeout; once (the scope's finalizer calls it too). */
    readonly close: Effect.Effect<void>,
    /** Posts on the queue pair and reads its completions (internal/poster.ts). */
    readonly kernel: Poster,
    /** The peer whose protection domain its queue pair is on: local regions must be registered there. */
    readonly peer: Peer
  ) {
    super()
  }
}

/** The machinery of a connection (every Connection is a ConnectionImpl: nothing else makes one). */
export const impl = (conn: Connection.Connection): ConnectionImpl => conn as ConnectionImpl

export const isConnection = (u: unknown): u is Connection.Connection => u instanceof ConnectionImpl
