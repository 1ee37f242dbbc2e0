/**
 * How librdmacm's path refuses a request, an accept or a remote key: the error classes, re-exported
 * by `CmEndpoint`, `CmListener` and `RemoteKey` (use them from there). A module of their own so that
 * the implementation and the declarations share them without a cycle.
 *
 * @since 1.0.0
 */
import * as Data from "effect/Data"

/**
 * A region (or remote key) the request cannot use, refused before anything is posted: a region
 * from rdma_reg_read / rdma_reg_write posted locally (`Kind`: only a remote side's target), a
 * region of another endpoint (`OtherEndpoint`: registered on another protection domain), more
 * segments than the queue pair was made for (`TooManySegments`).
 *
 * @since 1.0.0
 * @category errors
 */
export class CmRegionError extends Data.TaggedError("CmRegionError")<{
  readonly operation: string
  readonly reason: "Kind" | "OtherEndpoint" | "TooManySegments"
  readonly detail: string
}> {
  override get message(): string {
    return `${this.operation}: ${this.detail}`
  }
}

/**
 * The other side's device refused the remote key of a read or a write (IBV_WC_REM_ACCESS_ERR): the
 * key is forged or stale, its region was deregistered, or it does not allow this access.
 *
 * @since 1.0.0
 * @category errors
 */
export class RemoteKeyRefusedError extends Data.TaggedError("RemoteKeyRefusedError")<{
  readonly operation: string
}> {
  override get message(): string {
    return `${this.operation}: the other side refused the remote key (IBV_WC_REM_ACCESS_ERR): it is not one it ` +
      `gave for this access, its region is gone, or the range is outside it; ask the other side for a fresh key`
  }
}

/**
 * An accept of a request whose client has gone: it gave up (its connect timed out or was
 * interrupted), destroyed its endpoint, or was killed, before the connection was established. The
 * device says so with the CM's rejection (rdma_accept's EINVAL, or a REJ ending the accept's wait):
 * `cause` is the driver's RdmaCmError ECONNABORTED. A client that gave up but keeps its endpoint
 * is unknown to the CM, so the accept waits until its timeout: `cause` is then ETIMEDOUT. The
 * request is spent: nothing is to be done with it but let its scope release it, and take the next
 * one.
 *
 * @since 1.0.0
 * @category errors
 */
export class ClientGoneError extends Data.TaggedError("ClientGoneError")<{
  readonly operation: string
  readonly cause: unknown
}> {
  override get message(): string {
    return `${this.operation}: the client that asked has gone (it gave up, closed its endpoint, was killed, or did not finish the handshake within the timeout) ` +
      `before the connection was established; this request is spent (its scope releases it): call CmListener.next ` +
      `for the next one`
  }
}

/**
 * Bytes that are not a remote key, with the field that is wrong.
 *
 * @since 1.0.0
 * @category errors
 */
export class InvalidRemoteKeyError extends Data.TaggedError("InvalidRemoteKeyError")<{
  readonly field: "bytes" | "version" | "access" | "reserved" | "length" | "address"
  readonly detail: string
}> {
  override get message(): string {
    return `invalid remote key (${this.field}): ${this.detail}`
  }
}
