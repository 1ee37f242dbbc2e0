/**
 * The reconnecting client's errors, re-exported by `RdmaClient` (use them from there).
 */
import * as Data from "effect/Data"
import type { State } from "../RdmaClient.js"

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error ? String((error as { message: unknown }).message) : String(error)

const stateText = (state: State): string => {
  switch (state._tag) {
    case "Connecting":
      return "it is connecting for the first time"
    case "Connected":
      return "it was connected, and lost the connection just now"
    case "Reconnecting":
      return `it is reconnecting (attempt ${state.attempt}; the last failure: ${describe(state.lastError)})`
    case "Closed":
      return state.lastError === undefined
        ? "it is closed (its scope ended)"
        : `it is closed: its reconnect schedule ended (the last failure: ${describe(state.lastError)})`
  }
}

export class NotConnectedError extends Data.TaggedError("NotConnectedError")<{
  readonly operation: string
  /** The client's state when the operation gave up. */
  readonly state: State
  /** How long the operation waited for a connection (0: the client fails operations at once). */
  readonly waitedMs: number
}> {
  override get message(): string {
    const waited = this.waitedMs > 0
      ? `no connection came within ${this.waitedMs} ms`
      : this.state._tag === "Closed"
      ? "no connection will come"
      : "the client fails operations at once while disconnected (whileDisconnected: { wait } waits for one)"
    return `${this.operation}: the RDMA client is not connected: ${stateText(this.state)}; ${waited}`
  }
}

export class InvalidOfferError extends Data.TaggedError("InvalidOfferError")<{
  readonly detail: string
}> {
  override get message(): string {
    return `the offer does not fit the client: ${this.detail}`
  }
}
