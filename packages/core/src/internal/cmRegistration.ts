/**
 * rdma_reg_msgs / rdma_reg_read / rdma_reg_write on what registers them (a bound identifier, or an
 * endpoint's own protection domain), and their release: the one place for both. A region's
 * deregistration waits for the requests in flight that name it (its owner, internal/owner.ts), and
 * what registered it is destroyed only after its last region is deregistered.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { CmMr } from "../CmId.js"
import type { RdmaDriver } from "../Driver.js"
import type { CmEpHandle, CmIdHandle, CmMrHandle, CmRegistrationKind } from "../DriverModel.js"
import * as Memory from "../Memory.js"
import type { MemoryRefusedError, RdmaCmError } from "../RdmaError.js"
import * as instrument from "./instrument.js"
import * as Owner from "./owner.js"
import * as pins from "./pins.js"
import { release } from "./release.js"

/** What registers regions: an identifier or an endpoint, with its handle and address. */
export interface Registrar {
  readonly handle: CmIdHandle | CmEpHandle
  readonly address: string
}

/** The C call of each kind. */
export const registrationCalls: Record<CmRegistrationKind, string> = {
  msgs: "rdma_reg_msgs",
  read: "rdma_reg_read",
  write: "rdma_reg_write"
}

/** The owner of a region: the requests in flight that name it. */
export const regionOwner = (mr: CmMr<any, any>): Owner.Owner =>
  Owner.of(mr, () => `a ${mr.memory.byteLength}-byte region from ${registrationCalls[mr.kind as CmRegistrationKind]}`)

/**
 * Registers `memory` on `on` as `kind`, scoped: deregistered when the scope closes and no
 * request in flight names it any more; `owner` (what registered it) is held until then.
 */
export const register = <K extends CmRegistrationKind, O extends Registrar>(
  kind: K,
  on: O,
  owner: Owner.Owner,
  memory: Uint8Array
): Effect.Effect<CmMr<K, O>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const deregister = (handle: CmMrHandle) =>
      release(
        "rdma_dereg_mr",
        () => `a ${memory.byteLength}-byte region from ${registrationCalls[kind]}`,
        Effect.tap(driver.cmDeregMr(handle), () => pins.unpin(memory)),
        () => pins.quarantine(memory)
      ).pipe(
        Effect.zipRight(instrument.registered(on.address, -memory.byteLength)),
        Effect.zipRight(instrument.released("rdma_dereg_mr")),
        Effect.zipRight(Owner.drop(owner))
      )
    return Effect.acquireRelease(
      Memory.validate(memory).pipe(
        Effect.flatMap((bytes) => driver.cmReg(on.handle, kind, bytes)),
        Effect.tap(() => {
          Owner.retain(owner)
          return pins.pin(memory)
        }),
        Effect.tap(() => instrument.registered(on.address, memory.byteLength)),
        Effect.flatMap((handle) =>
          driver.cmMrInfo(handle).pipe(
            Effect.map((info): CmMr<K, O> => ({ ...info, handle, kind, id: on, memory })),
            Effect.tapError(() => deregister(handle))
          )
        ),
        (registering) => instrument.registration(registrationCalls[kind], registering)
      ),
      (mr) => Owner.releaseWhenUnused(regionOwner(mr), deregister(mr.handle))
    )
  })
