/**
 * What a remote region is inside: its public face (RemoteMr.ts, which rebuilds and deletes it) and
 * the driver's handle it keeps.
 */
import type { Descriptor } from "../Descriptor.js"
import type { RemoteMrHandle } from "../DriverModel.js"
import type * as RemoteMr from "../RemoteMr.js"
import type { Flag, Usage } from "../Usage.js"
import { PipeableBase } from "./resource.js"

export const TypeId: RemoteMr.TypeId = Symbol.for("@effect-rdma/core/RemoteMr") as RemoteMr.TypeId

export class RemoteRegion<F extends Flag> extends PipeableBase implements RemoteMr.RemoteMr<F> {
  readonly [TypeId]: RemoteMr.TypeId = TypeId
  constructor(
    readonly handle: RemoteMrHandle,
    readonly descriptor: Descriptor,
    readonly usage: Usage<F>,
    readonly size: bigint,
    readonly flushType: number
  ) {
    super()
  }
}

export const isRemoteMr = (u: unknown): u is RemoteMr.RemoteMr<Flag> => u instanceof RemoteRegion
