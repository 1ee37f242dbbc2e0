/**
 * A remote memory region (`struct rpma_mr_remote`), rebuilt from a descriptor another peer sent.
 * The descriptor is validated strictly before librpma sees it; the usage the sender claimed is
 * checked at run time with {@link require}, after which the type says what the region allows.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import * as Descriptors from "./Descriptor.js"
import type { Descriptor, InvalidDescriptorError } from "./Descriptor.js"
import type { RdmaDriver } from "./Driver.js"
import type { RemoteMrHandle } from "./DriverModel.js"
import * as handles from "./internal/handles.js"
import * as instrument from "./internal/instrument.js"
import { release } from "./internal/release.js"
import * as internal from "./internal/remoteMr.js"
import type { RpmaError } from "./RdmaError.js"
import * as Usages from "./Usage.js"
import type { Flag, Usage } from "./Usage.js"

/**
 * What marks a {@link RemoteMr}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * @since 1.0.0
 * @category guards
 */
export const isRemoteMr: (u: unknown) => u is RemoteMr<Flag> = internal.isRemoteMr

/**
 * @since 0.1.0
 * @category models
 */
export interface RemoteMr<F extends Flag = never> extends Pipeable {
  readonly [TypeId]: TypeId
  /** The decoded descriptor: address, length, rkey and usage, as the remote peer described them. */
  readonly descriptor: Descriptor
  readonly usage: Usage<F>
  /** rpma_mr_remote_get_size. */
  readonly size: bigint
  /** rpma_mr_remote_get_flush_type: the FLUSH_TYPE_* bits the remote region supports. */
  readonly flushType: number
}

/**
 * A remote region that can be the destination of an RDMA write.
 *
 * @since 0.1.0
 * @category models
 */
export type WriteDestination = RemoteMr<"WRITE_DST">
/**
 * A remote region that can be the source of an RDMA read.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadSource = RemoteMr<"READ_SRC">

/**
 * A remote region does not allow what the caller needs.
 *
 * @since 0.1.0
 * @category errors
 */
export class MissingUsageError extends Data.TaggedError("MissingUsageError")<{
  readonly required: number
  readonly actual: number
}> {
  override get message(): string {
    return `the remote region was registered for ${Usages.format(this.actual)}, which lacks ` +
      `${Usages.format(this.required & ~this.actual)}: ask its owner to register it for ${Usages.format(this.required)}`
  }
}

/**
 * Rebuilds a remote region from a descriptor (rpma_mr_remote_from_descriptor); deleted
 * (rpma_mr_remote_delete) when the scope closes. The descriptor must be exactly 21 bytes with a
 * non-zero usage and length and no address overflow, unless `{ lenient: true }` asks for
 * librpma's own rules.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromDescriptor = (
  bytes: Uint8Array,
  options?: Descriptors.DecodeOptions
): Effect.Effect<RemoteMr, InvalidDescriptorError | RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(
    Descriptors.decode(bytes, options),
    (descriptor) =>
      Effect.flatMap(instrument.driver, (driver) =>
        Effect.acquireRelease(
          Effect.flatMap(driver.mrRemoteFromDescriptor(bytes), (handle) =>
            Effect.all({ size: driver.mrRemoteGetSize(handle), flushType: driver.mrRemoteGetFlushType(handle) }).pipe(
              Effect.map(({ flushType, size }): RemoteMr =>
                new internal.RemoteRegion(handle, descriptor, descriptor.usage, size, flushType)
              ),
              Effect.tapError(() => deleteRemote(driver.mrRemoteDelete, handle))
            )),
          (mr) => deleteRemote(driver.mrRemoteDelete, handles.remoteMr(mr))
        ))
  )

const deleteRemote = (remoteDelete: (mr: RemoteMrHandle) => Effect.Effect<void, RpmaError>, handle: RemoteMrHandle) =>
  release("rpma_mr_remote_delete", "a remote region", remoteDelete(handle))

/**
 * Checks that a remote region allows `usage` and narrows its type.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { RemoteMr, Usage } from "@effect-rdma/core"
 *
 * const target = (bytes: Uint8Array) =>
 *   RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
 * // Effect<RemoteMr<"WRITE_DST">, InvalidDescriptorError | RpmaError | MissingUsageError, ...>
 * ```
 *
 * @since 0.1.0
 * @category refinements
 */
export const require =
  <G extends Flag>(usage: Usage<G>) =>
  <F extends Flag>(mr: RemoteMr<F>): Effect.Effect<RemoteMr<F | G>, MissingUsageError> =>
    Usages.includes(mr.usage, usage)
      ? Effect.succeed(mr as RemoteMr<F | G>)
      : Effect.fail(new MissingUsageError({ required: usage, actual: mr.usage }))
