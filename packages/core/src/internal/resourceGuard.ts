/**
 * What an entry point answers when it is given something that is not the resource it takes (null,
 * undefined, a number; a type error in TypeScript, a real mistake in JavaScript): the refusal of a
 * NULL handle, tagged, where reading the resource's fields would throw. Where a peer goes, any
 * object is let through: one that is not a peer carries no handle the driver knows, and the driver
 * refuses it (the conformance suite's validation cases hand core bare handles this way). An
 * endpoint is read for more than its handle, so anything but an endpoint is refused.
 */
import { Errno, fromErrno, fromRpmaCode, type RdmaCmError, RpmaCode, type RpmaError } from "../RdmaError.js"
import { isCmEndpoint } from "./cmEndpoint.js"

const isObject = (value: unknown): boolean => value !== null && typeof value === "object"

const kindOf = (value: unknown): string => value === null ? "null" : typeof value

/** librpma's answer to a NULL peer: RPMA_E_INVAL. */
export const notAPeer = (operation: string, peer: unknown): RpmaError | undefined =>
  isObject(peer)
    ? undefined
    : fromRpmaCode(RpmaCode.RPMA_E_INVAL, operation, `the peer must be a Peer (Peer.make), not ${kindOf(peer)}`)

/** librdmacm's answer to a NULL endpoint: EINVAL. */
export const notAnEndpoint = (operation: string, endpoint: unknown): RdmaCmError | undefined =>
  isCmEndpoint(endpoint)
    ? undefined
    : fromErrno(
      Errno.EINVAL,
      operation,
      `the endpoint must be a CmEndpoint (CmEndpoint.make, CmListener.next), not ${
        isObject(endpoint) ? "another object" : kindOf(endpoint)
      }`
    )
