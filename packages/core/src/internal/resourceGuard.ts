/**
 * What an entry point answers when it is given something that is not the resource it takes (null,
 * undefined, a number; a type error in TypeScript, a real mistake in JavaScript): the refusal of a
 * NULL handle, tagged, where reading the resource's fields would throw. Where a peer goes, any
 * object is let through: one that is not a peer carries no handle the driver knows, and the driver
 * refuses it (the conformance suite's validation cases hand core bare handles this way). A
 * connection or an endpoint is read for more than its handle, so anything but one is refused.
 * An Effect that cannot fail (a resource's state, its close) dies instead, saying what it was given.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import type * as CmEndpoint from "../CmEndpoint.js"
import type * as Connection from "../Connection.js"
import {
  Errno,
  fromErrno,
  fromRpmaCode,
  type RdmaCmError,
  RpmaCode,
  type RpmaError,
  RpmaInvalidError
} from "../RdmaError.js"
import { isCmEndpoint } from "./cmEndpointId.js"
import { isConnection } from "./connectionImpl.js"

const isObject = (value: unknown): boolean => value !== null && typeof value === "object"

/** What a value is, in a refusal's words. */
export const kindOf = (value: unknown): string =>
  value === null ? "null" : isObject(value) ? "another object" : typeof value

/** librpma's answer to a NULL handle: RPMA_E_INVAL, saying which resource goes there. */
const nullHandle = (operation: string, what: string, value: unknown): RpmaError | undefined =>
  isObject(value)
    ? undefined
    : fromRpmaCode(RpmaCode.RPMA_E_INVAL, operation, `the ${what}, not ${kindOf(value)}`)

/** librpma's answer to a NULL peer. */
export const notAPeer = (operation: string, peer: unknown): RpmaError | undefined =>
  nullHandle(operation, "peer must be a Peer (Peer.make)", peer)

/** librpma's answer to a NULL region. */
export const notALocalMr = (operation: string, mr: unknown): RpmaError | undefined =>
  nullHandle(operation, "region must be a LocalMr (LocalMr.register, LocalMr.allocate)", mr)

/** What a `use` answers when it is given no function to run with the region: refused before registering. */
export const notAUse = (operation: string, f: unknown): RpmaError | undefined =>
  typeof f === "function"
    ? undefined
    : fromRpmaCode(RpmaCode.RPMA_E_INVAL, operation, `the use must be a function of the region, not ${kindOf(f)}`)

const CONNECTION = "a Connection (Connection.connect, Listener.accept)"
const ENDPOINT = "a CmEndpoint (CmEndpoint.make, CmListener.next)"

/** librdmacm's answer to a NULL endpoint: EINVAL. */
export const notAnEndpoint = (operation: string, endpoint: unknown): RdmaCmError | undefined =>
  isCmEndpoint(endpoint)
    ? undefined
    : fromErrno(Errno.EINVAL, operation, `the endpoint must be ${ENDPOINT}, not ${kindOf(endpoint)}`)

/**
 * librpma's answer to a NULL resource of a kind read for more than its handle (RPMA_E_INVAL):
 * anything that `is` does not recognize is refused, saying what `what` should have been.
 */
export const notTheResource = (
  operation: string,
  what: string,
  is: (u: unknown) => boolean,
  value: unknown
): RpmaInvalidError | undefined =>
  is(value) ? undefined : new RpmaInvalidError({ operation, detail: `the ${what}, not ${kindOf(value)}` })

/** librpma's answer to a NULL connection. */
export const notAConnection = (operation: string, conn: unknown): RpmaInvalidError | undefined =>
  isConnection(conn) ? undefined : notTheResource(operation, `connection must be ${CONNECTION}`, isConnection, conn)

/** A kind of resource: how one is told, and what the refusal says should have been given. */
export interface Kind<R> {
  readonly is: (u: unknown) => u is R
  readonly what: string
}

export const connectionKind: Kind<Connection.Connection> = { is: isConnection, what: CONNECTION }
export const endpointKind: Kind<CmEndpoint.CmEndpoint> = { is: isCmEndpoint, what: ENDPOINT }

/**
 * A resource's own Effect that cannot fail (its state, its close; a Stream's, unwrapped): on
 * anything else, a defect that names the call and what it was given.
 */
export const ownEffect = <R, A>(
  call: string,
  kind: Kind<R>,
  value: unknown,
  f: (resource: R) => Effect.Effect<A>
): Effect.Effect<A> =>
  kind.is(value)
    ? f(value)
    : Effect.die(new Cause.IllegalArgumentException(`${call} takes ${kind.what}, not ${kindOf(value)}`))

/**
 * `dual`'s test for a call whose data-last form starts with options or a handler: data-first when
 * the first argument is the resource, or is something neither could be (null, a number, a string),
 * which the data-first form then refuses as the resource it stands in for (a function returned
 * instead would fail far from the mistake).
 */
export const dataFirst = (is: (u: unknown) => boolean) => (args: IArguments): boolean => {
  const first = args[0]
  return is(first) || first === null ||
    (first !== undefined && typeof first !== "object" && typeof first !== "function")
}
