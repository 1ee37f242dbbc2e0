/**
 * The other side's region on librdmacm's path: its address, length, rkey and the access it allows,
 * made from a region of rdma_reg_read / rdma_reg_write ({@link make}) and carried as 24 bytes
 * ({@link encode}, {@link decode}: private data, or a message). Decoding trusts nothing: every field
 * is checked and a refusal names it; {@link require} then narrows what the key allows, as
 * `RemoteMr.require` does on librpma's path.
 *
 * @example
 * ```ts
 * import { CmEndpoint, RemoteKey } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Writes a message into the region whose key the server sent with its acceptance.
 * const put = (ep: CmEndpoint.CmEndpoint, src: CmEndpoint.MessageRegion) =>
 *   RemoteKey.decode(ep.privateData.subarray(0, 24)).pipe(
 *     Effect.flatMap(RemoteKey.require("write")),
 *     Effect.flatMap((dst) => CmEndpoint.write(ep, { src, dst, length: src.memory.byteLength }))
 *   )
 * ```
 *
 * @since 1.0.0
 */
import type * as Effect from "effect/Effect"
import type * as CmEndpoint from "./CmEndpoint.js"
import * as errors from "./CmEndpointError.js"
import * as internal from "./internal/cmRemoteKey.js"

/**
 * What a key lets the other side do with the region: read it (rdma_reg_read) or write it
 * (rdma_reg_write).
 *
 * @since 1.0.0
 * @category models
 */
export type Access = "read" | "write"

/**
 * The other side's region as a key: address, length, rkey and the access it allows.
 *
 * @since 1.0.0
 * @category models
 */
export interface RemoteKey<A extends Access = Access> {
  readonly address: bigint
  readonly length: bigint
  readonly rkey: number
  readonly access: A
}

/**
 * The field of a remote key's bytes that {@link decode} refused.
 *
 * @since 1.0.0
 * @category models
 */
export type Field = errors.InvalidRemoteKeyError["field"]

/**
 * @since 1.0.0
 * @category errors
 */
export const InvalidRemoteKeyError: typeof errors.InvalidRemoteKeyError = errors.InvalidRemoteKeyError
/**
 * Bytes that are not a remote key, or a key without the access required, with the field that is
 * wrong.
 *
 * @since 1.0.0
 * @category errors
 */
export type InvalidRemoteKeyError = errors.InvalidRemoteKeyError

/**
 * The key the other side needs to read (or write) a region of rdma_reg_read (rdma_reg_write).
 * Anything else (a region of rdma_reg_msgs, which has none; no region) throws an
 * `IllegalArgumentException` (effect's `Cause`).
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: <A extends Access>(region: CmEndpoint.Region<A>) => RemoteKey<A> = internal.make

/**
 * A remote key's bytes (24, versioned) to send to the other side. A key whose fields do not fit
 * (an access other than "read" or "write", an rkey wider than 32 bits, an address or length that is
 * no 64-bit bigint) throws an `IllegalArgumentException` saying which.
 *
 * @since 1.0.0
 * @category encoding
 */
export const encode: (key: RemoteKey) => Uint8Array = internal.encode

/**
 * A remote key from the bytes the other side sent, every field checked (a refusal names it); then
 * {@link require} narrows what it allows.
 *
 * @since 1.0.0
 * @category encoding
 */
export const decode: (bytes: Uint8Array) => Effect.Effect<RemoteKey, InvalidRemoteKeyError> = internal.decode

/**
 * Checks that a remote key allows `access` and narrows its type.
 *
 * @since 1.0.0
 * @category refinements
 */
export const require: <A extends Access>(
  access: A
) => (key: RemoteKey) => Effect.Effect<RemoteKey<A>, InvalidRemoteKeyError> = internal.require
