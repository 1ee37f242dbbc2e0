/**
 * What a Connection is inside: the public face (Connection.ts) over its posting kernel. Apart from
 * internal/connection.ts (its life) so that the operations reach the kernel without importing the
 * connection's life and what that imports.
 */
import type * as Effect from "effect/Effect"
import type * as Stream from "effect/Stream"
import type * as Connection from "../Connection.js"
import type { ConnEvent, ConnHandle } from "../DriverModel.js"
import type { Poster } from "./poster.js"

export const TypeId: Connection.TypeId = Symbol.for("@effect-rdma/core/Connection") as Connection.TypeId

/**
 * A connection's machinery behind its public face: the posting kernel of its queue
 * pair (with its table and slots), which the operations post through.
 */
export class ConnectionImpl implements Connection.Connection {
  readonly [TypeId]: Connection.TypeId = TypeId
  constructor(
    readonly handle: ConnHandle,
    readonly privateData: Uint8Array,
    readonly events: Stream.Stream<ConnEvent>,
    readonly state: Effect.Effect<Connection.State>,
    /** Posts on the queue pair and reads its completions (internal/poster.ts). */
    readonly kernel: Poster
  ) {}
}

/** The machinery of a connection (every Connection is a ConnectionImpl: nothing else makes one). */
export const impl = (conn: Connection.Connection): ConnectionImpl => conn as ConnectionImpl

