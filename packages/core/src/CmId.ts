/**
 * librdmacm: a communication identifier bound to a local address, and the message, read and
 * write regions registered on it (rdma_reg_msgs, rdma_reg_read, rdma_reg_write). Regions are
 * deregistered (rdma_dereg_mr) before their identifier is destroyed.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { RdmaDriver } from "./Driver.js"
import type { CmEpHandle, CmIdHandle, CmMrHandle, CmMrInfo, CmRegistrationKind } from "./DriverModel.js"
import { register } from "./internal/cmRegistration.js"
import * as instrument from "./internal/instrument.js"
import * as Owner from "./internal/owner.js"
import { release } from "./internal/release.js"
import type { MemoryRefusedError, RdmaCmError } from "./RdmaError.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface CmId {
  readonly handle: CmIdHandle
  readonly address: string
}

/**
 * A region registered on an identifier, or on an endpoint (`O`, see CmEndpoint.ts). `K` says which
 * call made it: "msgs" regions can be posted with rdma_post_send / rdma_post_recv and be the local
 * side of a read or a write, "read" ones are only the target of a remote read, "write" ones of a
 * remote write.
 *
 * @since 0.1.0
 * @category models
 */
export interface CmMr<
  K extends CmRegistrationKind = CmRegistrationKind,
  O extends { readonly handle: CmIdHandle | CmEpHandle; readonly address: string } = CmId
> extends CmMrInfo {
  readonly handle: CmMrHandle
  readonly kind: K
  /** What it is registered on: its identifier, or its endpoint. */
  readonly id: O
  readonly memory: Uint8Array
}

/**
 * Creates an identifier bound to `address` (rdma_getaddrinfo + rdma_create_ep) with its own
 * protection domain; destroyed when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (address: string): Effect.Effect<CmId, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.acquireRelease(
      Effect.map(
        driver.cmCreateId(address),
        (handle): CmId => ({ handle, address })
      ),
      (id) =>
        Owner.releaseWhenUnused(
          ownerOf(id),
          Effect.asVoid(release("rdma_destroy_ep", ownerOf(id).what, driver.cmDestroyId(id.handle)))
        )
    ))

/** Its regions: the id is destroyed after the last of them is deregistered. */
const ownerOf = (id: CmId) => Owner.of(id, () => `the rdma_cm id bound to ${id.address}`)

const registerAs = <K extends CmRegistrationKind>(kind: K) =>
(id: CmId, memory: Uint8Array): Effect.Effect<CmMr<K>, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  register(kind, id, ownerOf(id), memory)

/**
 * rdma_reg_msgs: buffers to post with rdma_post_send / rdma_post_recv.
 *
 * @since 0.1.0
 * @category constructors
 */
export const registerMessages: (
  id: CmId,
  memory: Uint8Array
) => Effect.Effect<CmMr<"msgs">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("msgs")

/**
 * rdma_reg_read: memory a remote peer may read.
 *
 * @since 0.1.0
 * @category constructors
 */
export const registerRead: (
  id: CmId,
  memory: Uint8Array
) => Effect.Effect<CmMr<"read">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("read")

/**
 * rdma_reg_write: memory a remote peer may write.
 *
 * @since 0.1.0
 * @category constructors
 */
export const registerWrite: (
  id: CmId,
  memory: Uint8Array
) => Effect.Effect<CmMr<"write">, RdmaCmError | MemoryRefusedError, RdmaDriver | Scope.Scope> = registerAs("write")
