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
import { type CmMrHandle, type CmRegistrationKind } from "../DriverModel.js"
import * as Memory from "../Memory.js"
import type { MemoryRefusedError, RdmaCmError } from "../RdmaError.js"
import { endpointOwner } from "./cmEndpoint.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import * as Owner from "./owner.js"
import * as pins from "./pins.js"
import { release } from "./release.js"

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
                Effect.map((info): CmEndpoint.Region<K> => {
                  // The handle is the region's own, not on its public type (handles.cmRegion reads it).
                  const region: CmEndpoint.Region<K> & handles.Handled<CmMrHandle> = {
                    ...info,
                    handle,
                    kind,
                    endpoint,
                    memory
                  }
                  return region
                }),
                Effect.tapError(() => deregister(memory, handle))
              )
            )
          )
        ),
        (registering) => instrument.registration(registrationCalls[kind], registering)
      ),
      (mr) => Owner.releaseWhenUnused(regionOwner(mr), deregister(mr.memory, handles.cmRegion(mr)))
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
