/**
 * A librpma peer: the protection domain of one RDMA device, found by the IP address it answers on.
 * Regions are registered with a peer and must be released before it; Scope order guarantees it
 * when the peer is acquired first.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type { RdmaDriver } from "./Driver.js"
import type { AddressKind } from "./DriverModel.js"
import * as handles from "./internal/handles.js"
import * as instrument from "./internal/instrument.js"
import { readRpmaSettings } from "./internal/optionsOnce.js"
import * as Owner from "./internal/owner.js"
import { isPeer as isPeerImpl, ownerOf, PeerImpl, TypeId as typeId } from "./internal/peer.js"
import { release } from "./internal/release.js"
import type { RpmaError } from "./RdmaError.js"

/**
 * What marks a {@link Peer}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = typeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * @since 1.0.0
 * @category guards
 */
export const isPeer: (u: unknown) => u is Peer = isPeerImpl

/**
 * @since 0.1.0
 * @category models
 */
export interface Peer extends Pipeable {
  readonly [TypeId]: TypeId
  /** The address the device was looked up by. */
  readonly address: string
}

/**
 * The peer a program works with, for the common case of one peer per process.
 *
 * @since 0.1.0
 * @category tags
 */
export const Peer: Context.Tag<Peer, Peer> = Context.GenericTag<Peer>("@effect-rdma/core/Peer")

/**
 * @since 0.1.0
 * @category models
 */
export interface MakeOptions {
  /** Whether `address` is this machine's ("local", the default) or a remote one to reach. */
  readonly kind?: AddressKind | undefined
}

/**
 * Looks up the device at `address` (rpma_utils_get_ibv_context) and creates a peer on it
 * (rpma_peer_new), deleted (rpma_peer_delete) when the scope closes, or, if regions, endpoints or
 * connections made with it outlive that scope, when the last of them is released.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (
  address: string,
  options?: MakeOptions
): Effect.Effect<Peer, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const read = readRpmaSettings(options, "rpma_utils_get_ibv_context", { kind: true })
    if (Either.isLeft(read)) return Effect.fail(read.left)
    return Effect.acquireRelease(
      driver.getIbvContext(address, read.right?.kind ?? "local").pipe(
        Effect.flatMap(driver.peerNew),
        Effect.map((handle): Peer => new PeerImpl(handle, address))
      ),
      (peer) =>
        Owner.releaseWhenUnused(
          ownerOf(peer),
          Effect.asVoid(release("rpma_peer_delete", ownerOf(peer).what, driver.peerDelete(handles.peer(peer))))
        )
    )
  })

/**
 * A Layer with one peer for the device at `address`, deleted when the layer is released.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // provideMerge: the program needs the driver too, not only the peer.
 * const PeerLive = Peer.layer("192.168.77.1").pipe(Layer.provideMerge(SimulatedDriver.layer))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer = (address: string, options?: MakeOptions): Layer.Layer<Peer, RpmaError, RdmaDriver> =>
  Layer.scoped(Peer, make(address, options))
