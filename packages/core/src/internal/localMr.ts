/**
 * What a local region is inside: its public face (LocalMr.ts, which registers and releases it) and
 * the driver's handle and registration it keeps.
 */
import type * as MetricLabel from "effect/MetricLabel"
import type { Driver } from "../Driver.js"
import type { MrHandle } from "../DriverModel.js"
import type * as LocalMr from "../LocalMr.js"
import type * as Peer from "../Peer.js"
import type { Flag, Usage } from "../Usage.js"
import * as Owner from "./owner.js"
import { PipeableBase } from "./resource.js"

export const TypeId: LocalMr.TypeId = Symbol.for("@effect-rdma/core/LocalMr") as LocalMr.TypeId

/**
 * How each region was registered: its release goes to the same driver, traced or not as the
 * registration was, with the same metric labels; read from the region, not from the releasing fiber.
 */
export interface Registration {
  readonly driver: Driver
  readonly labels: ReadonlyArray<MetricLabel.MetricLabel>
}

/**
 * A region as LocalMr.ts's `acquire` makes it. Its registration is a private field, not an entry in
 * a WeakMap: a WeakMap entry per registration cost more than the rest of the bookkeeping (its
 * ephemeron table grows with every short-lived region until a GC clears it).
 */
export class Region<F extends Flag> extends PipeableBase implements LocalMr.LocalMr<F> {
  readonly [TypeId]: LocalMr.TypeId = TypeId
  readonly #registration: Registration
  /** Its scope closed: the deregistration is asked for (it may wait for requests in flight). */
  released = false
  constructor(
    readonly handle: MrHandle,
    readonly peer: Peer.Peer,
    readonly memory: Uint8Array,
    readonly usage: Usage<F>,
    readonly address: bigint,
    readonly size: number,
    registration: Registration
  ) {
    super()
    this.#registration = registration
  }
  static registrationOf(mr: Region<any>): Registration {
    return mr.#registration
  }
}

export const isLocalMr = (u: unknown): u is LocalMr.LocalMr => u instanceof Region

/** A region whose scope has closed: nothing may use it from here on. */
export const isReleased = (u: unknown): boolean => u instanceof Region && u.released

/** The requests in flight that use a region: it is deregistered after the last completes. */
export const ownerOf = (mr: LocalMr.LocalMr<any>): Owner.Owner => Owner.of(mr, () => `a ${mr.size}-byte region`)
