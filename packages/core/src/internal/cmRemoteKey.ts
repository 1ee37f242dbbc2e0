/**
 * The other side's region on librdmacm's path: a remote key, and its bytes. Layout (24 bytes,
 * little-endian): version u8 (1), access u8 (1: read, 2: write), two reserved bytes (0), rkey
 * u32, address u64, length u64. Decoding trusts nothing: every field is checked, and a refusal
 * names the field.
 *
 * Declared and documented in RemoteKey.ts.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import type * as CmEndpoint from "../CmEndpoint.js"
import { InvalidRemoteKeyError } from "../CmEndpointError.js"
import type * as RemoteKey from "../RemoteKey.js"
import { isRegion } from "./cmRegistration.js"
import * as widths from "./fieldWidths.js"

export const VERSION = 1
export const SIZE = 24

const accessCodes = { read: 1, write: 2 } as const
const accessOf: Record<number, "read" | "write"> = { 1: "read", 2: "write" }

/** What makes `key` no key to encode, or undefined. */
const keyProblem = (key: unknown): string | undefined => {
  if (typeof key !== "object" || key === null) {
    return `takes a RemoteKey (RemoteKey.make, RemoteKey.decode), not ${widths.shown(key)}`
  }
  const { access, address, length, rkey } = key as Record<string, unknown>
  if (access !== "read" && access !== "write") {
    return `its access must be "read" or "write", not ${widths.shown(access)}`
  }
  return widths.u32Problem("rkey", rkey) ?? widths.u64Problem("address", address) ??
    widths.u64Problem("length", length)
}

/** Refuses what `call` cannot make a key of: its caller's mistake, said as such. */
const refuse = (call: string, problem: string): never => {
  throw new Cause.IllegalArgumentException(`${call} ${problem}`)
}

export const encode = (key: RemoteKey.RemoteKey): Uint8Array => {
  const problem = keyProblem(key)
  if (problem !== undefined) refuse("RemoteKey.encode:", problem)
  const bytes = new Uint8Array(SIZE)
  const view = new DataView(bytes.buffer)
  view.setUint8(0, VERSION)
  view.setUint8(1, accessCodes[key.access])
  view.setUint32(4, key.rkey, true)
  view.setBigUint64(8, key.address, true)
  view.setBigUint64(16, key.length, true)
  return bytes
}

/** The key, or the field that is wrong and why. */
const read = (
  bytes: unknown
): RemoteKey.RemoteKey | { readonly field: RemoteKey.Field; readonly detail: string } => {
  if (!(bytes instanceof Uint8Array)) return { field: "bytes", detail: "a remote key must be a Uint8Array" }
  if (bytes.byteLength !== SIZE) {
    return {
      field: "bytes",
      detail: `a remote key has exactly ${SIZE} bytes, not ${bytes.byteLength}: it was cut or padded in transit ` +
        `(rdma_cm private data is padded: slice it to ${SIZE})`
    }
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const version = view.getUint8(0)
  if (version !== VERSION) {
    return { field: "version", detail: `version ${version} is not ${VERSION}: the other side runs another format` }
  }
  const access = accessOf[view.getUint8(1)]
  if (access === undefined) {
    return { field: "access", detail: `access byte ${view.getUint8(1)} is neither 1 (read) nor 2 (write)` }
  }
  if (view.getUint16(2, true) !== 0) return { field: "reserved", detail: "the reserved bytes 2-3 must be 0" }
  const rkey = view.getUint32(4, true)
  const address = view.getBigUint64(8, true)
  const length = view.getBigUint64(16, true)
  if (length === 0n) return { field: "length", detail: "the length is 0: the key reaches no memory" }
  if (address + length > 2n ** 64n) {
    return { field: "address", detail: "address + length passes 2^64: the region wraps around and cannot exist" }
  }
  return { address, length, rkey, access }
}

export const decode = (bytes: Uint8Array): Effect.Effect<RemoteKey.RemoteKey, InvalidRemoteKeyError> =>
  Effect.suspend(() => {
    const decoded = read(bytes)
    return "field" in decoded ? Effect.fail(new InvalidRemoteKeyError(decoded)) : Effect.succeed(decoded)
  })

export const make = <A extends RemoteKey.Access>(region: CmEndpoint.Region<A>): RemoteKey.RemoteKey<A> => {
  if (!isRegion(region)) {
    refuse("RemoteKey.make:", `takes a region of CmEndpoint.registerRead or registerWrite, not ${widths.shown(region)}`)
  }
  if (region.kind !== "read" && region.kind !== "write") {
    refuse(
      "RemoteKey.make:",
      `takes a region of registerRead or registerWrite: one of rdma_reg_${region.kind} has no remote key`
    )
  }
  return { address: region.address, length: BigInt(region.length), rkey: region.rkey, access: region.kind }
}

export const require =
  <A extends RemoteKey.Access>(access: A) =>
  (key: RemoteKey.RemoteKey): Effect.Effect<RemoteKey.RemoteKey<A>, InvalidRemoteKeyError> =>
    typeof key !== "object" || key === null
      ? Effect.fail(
        new InvalidRemoteKeyError({
          field: "access",
          detail: `${widths.shown(key)} is no key: decode one with RemoteKey.decode`
        })
      )
      : key.access === access
      ? Effect.succeed(key as RemoteKey.RemoteKey<A>)
      : Effect.fail(
        new InvalidRemoteKeyError({
          field: "access",
          detail:
            `the key allows a remote ${key.access}, not a ${access}: ask for a key of a region from rdma_reg_${access}`
        })
      )
