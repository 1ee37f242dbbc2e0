/**
 * How connecting and operations fail: the error classes, re-exported by `Connection` (use them
 * from there). A public module of their own so that the types a program infers from
 * `Connection.connect` and the operations name a module it can import.
 *
 * @since 1.0.0
 */
import * as Data from "effect/Data"
import type { ConnEvent } from "./DriverModel.js"
import type { CompletionError, RdmaCmError, RpmaError } from "./RdmaError.js"

/**
 * The connection could not be established: the other side rejected it, could not be reached, or
 * did not answer in time.
 *
 * @since 0.1.0
 * @category errors
 */
export class ConnectionFailedError extends Data.TaggedError("ConnectionFailedError")<{
  readonly address: string
  readonly port: number
  readonly event: ConnEvent | "TIMEOUT"
}> {
  override get message(): string {
    const why = this.event === "REJECTED"
      ? "the other side rejected it (nobody listens there, or it refused the request)"
      : this.event === "UNREACHABLE"
      ? "the address is unreachable"
      : this.event === "TIMEOUT"
      ? "it was not established in time"
      : `unexpected event ${this.event}`
    return `connection to ${this.address}:${this.port} failed: ${why}`
  }
}

/**
 * The connection is closed or lost: the operation was not done, or its outcome is unknown.
 *
 * @since 0.1.0
 * @category errors
 */
export class ConnectionClosedError extends Data.TaggedError("ConnectionClosedError")<{
  readonly operation: string
  readonly reason: "CLOSED" | "LOST"
  /** What ended the connection, when it was a failure (of its event channel or completion queue). */
  readonly cause?: unknown
  /**
   * The request was posted unsignalled (`completion: "onError"`) and had not reported when the
   * connection ended: it may have succeeded (which it never reports) or never run.
   */
  readonly unsignalled?: boolean | undefined
}> {
  override get message(): string {
    const ended = `the connection was ${this.reason === "LOST" ? "lost" : "closed"}`
    const head = this.unsignalled === true
      ? `${this.operation}: ${ended} before this unsignalled request (completion "onError") reported: its outcome is unknown (it may have succeeded, which an unsignalled request never reports, or never run)`
      : `${this.operation}: ${ended}`
    const cause =
      this.cause instanceof Error || (typeof this.cause === "object" && this.cause !== null && "message" in this.cause)
        ? String((this.cause as { message: unknown }).message)
        : undefined
    return cause === undefined ? head : `${head}: ${cause}`
  }
}

/**
 * An offset or length that does not fit a region, checked before anything is posted (librpma
 * checks neither, and silently truncates lengths above 2^32 - 1).
 *
 * @since 0.1.0
 * @category errors
 */
export class OutOfRangeError extends Data.TaggedError("OutOfRangeError")<{
  readonly operation: string
  readonly detail: string
}> {
  override get message(): string {
    return `${this.operation}: ${this.detail}`
  }
}

/**
 * Everything the posting kernel can fail a request with (the driver's refusals untyped):
 * librpma's, or librdmacm's for an endpoint's queue.
 *
 * @since 1.0.0
 * @category errors
 */
export type OperationError = CompletionError | ConnectionClosedError | OutOfRangeError | RpmaError | RdmaCmError
