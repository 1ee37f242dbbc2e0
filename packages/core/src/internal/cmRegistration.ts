/**
 * rdma_reg_msgs / rdma_reg_read / rdma_reg_write on an endpoint's own protection domain, and their
 * release. A region's deregistration waits for the requests in flight that name it (its owner,
 * internal/owner.ts), and its endpoint is destroyed only after its last region is deregistered.
 */
import * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type * as Scope from "effect/Scope"
import type * as CmEndpoint from "../CmEndpoint.js"
import { type RdmaDriver } from "../Driver.js"
import { type CmMrHandle, type CmMrInfo, type CmRegistrationKind } from "../DriverModel.js"
import * as Memory from "../Memory.js"
import type { MemoryRefusedError, RdmaCmError } from "../RdmaError.js"
import { endpointOwner } from "./cmEndpoint.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import * as Owner from "./owner.js"
import * as pins from "./pins.js"
import { release } from "./release.js"
import { PipeableBase } from "./resource.js"
import { notAnEndpoint } from "./resourceGuard.js"

export const RegionTypeId: CmEndpoint.RegionTypeId = Symbol.for(
  "@effect-rdma/core/CmEndpoint/Region"
) as CmEndpoint.RegionTypeId

/** A region behind its public face, with its handle (not on its public type: handles.cmRegion reads it). */
export class RegionImpl<K extends CmRegistrationKind> extends PipeableBase
  implements CmEndpoint.Region<K>, handles.Handled<CmMrHandle>
{
  readonly [RegionTypeId]: CmEndpoint.RegionTypeId = RegionTypeId
  /** Its scope closed: the deregistration is asked for (it may wait for requests in flight). */
  released = false
  readonly address: bigint
  readonly length: number
  readonly lkey: number
  readonly rkey: number
  constructor(
    info: CmMrInfo,
    readonly handle: CmMrHandle,
    readonly kind: K,
    readonly endpoint: CmEndpoint.CmEndpoint,
    readonly memory: Uint8Array
  ) {
    super()
    this.address = info.address
    this.length = info.length
    this.lkey = info.lkey
    this.rkey = info.rkey
  }
}

export const isRegion = (u: unknown): u is CmEndpoint.Region => u instanceof RegionImpl

/** A region whose scope has closed: nothing may use it from here on. */
export const isReleased = (u: unknown): boolean => u instanceof RegionImpl && u.released

/** The C call of each kind. */
export const registrationCalls: Record<CmRegistrationKind, string> = {
  msgs: "rdma_reg_msgs",
  read: "rdma_reg_read",
  write: "rdma_reg_write"
}

/** The owner of a region: the requests in flight that name it. */
export const regionOwner = (mr: CmEndpoint.Region): Owner.Owner =>
  Owner.of(mr, () => `a ${mr.memory.byteLength}-byte region from ${registrationCalls[mr.kind]}`)

/**
 * Registers `memory` on `endpoint` as `kind`, scoped: deregistered when the scope closes and no
 * request in flight names it any more; the endpoint's owner is held until then.
 */
const register = <K extends CmRegistrationKind>(
  kind: K,
  endpoint: CmEndpoint.CmEndpoint,
  given: Uint8Array
): Effect.Effect<CmEndpoint.Region<K>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const refused = notAnEndpoint(registrationCalls[kind], endpoint)
    if (refused !== undefined) return Effect.fail(refused)
    const owner = endpointOwner(endpoint)
    const deregister = (memory: Uint8Array, handle: CmMrHandle) =>
      release(
        "rdma_dereg_mr",
        () => `a ${memory.byteLength}-byte region from ${registrationCalls[kind]}`,
        Effect.tap(driver.cmDeregMr(handle), () => pins.unpin(memory)),
        () => pins.quarantine(memory)
      ).pipe(
        Effect.zipRight(instrument.registered(endpoint.address, -memory.byteLength)),
        Effect.zipRight(instrument.released("rdma_dereg_mr")),
        Effect.zipRight(Owner.drop(owner))
      )
    return Effect.acquireRelease(
      // From here on, the real view: its length is the region's, whatever the given one's getters say.
      Memory.validate(given).pipe(
        Effect.flatMap((memory) =>
          driver.cmReg(handles.cmEndpoint(endpoint), kind, memory).pipe(
            Effect.tap(() => {
              Owner.retain(owner)
              return pins.pin(memory)
            }),
            Effect.tap(() => instrument.registered(endpoint.address, memory.byteLength)),
            Effect.flatMap((handle) =>
              driver.cmMrInfo(handle).pipe(
                Effect.map((info): CmEndpoint.Region<K> => new RegionImpl(info, handle, kind, endpoint, memory)),
                Effect.tapError(() => deregister(memory, handle))
              )
            )
          )
        ),
        (registering) => instrument.registration(registrationCalls[kind], registering)
      ),
      (mr) =>
        Effect.suspend(() => {
          ;(mr as RegionImpl<K>).released = true
          return Owner.releaseWhenUnused(regionOwner(mr), deregister(mr.memory, handles.cmRegion(mr)))
        })
    )
  })

type Register<K extends CmRegistrationKind> = {
  (memory: Uint8Array): (
    self: CmEndpoint.CmEndpoint
  ) => Effect.Effect<CmEndpoint.Region<K>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
  (
    self: CmEndpoint.CmEndpoint,
    memory: Uint8Array
  ): Effect.Effect<CmEndpoint.Region<K>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope>
}

const registerAs = <K extends CmRegistrationKind>(kind: K): Register<K> =>
  dual(2, (self: CmEndpoint.CmEndpoint, memory: Uint8Array) => register(kind, self, memory))

export const registerMessages: Register<"msgs"> = registerAs("msgs")
export const registerRead: Register<"read"> = registerAs("read")
export const registerWrite: Register<"write"> = registerAs("write")
