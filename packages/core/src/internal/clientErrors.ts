/**
 * The reconnecting client's errors, re-exported by `RdmaClient` (use them from there).
 */
import * as Data from "effect/Data"
import type { State } from "../RdmaClient.js"

/** A failure as the client's messages say it: its message, if it has one. */
export const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error
    ? String((error as { message: unknown }).message)
    : String(error)

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
        : state.lastError instanceof AdmissionRejectedError && state.lastError.reason === "Spent"
        ? `it is closed: ${describe(state.lastError)}`
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

export class AdmissionRejectedError extends Data.TaggedError("AdmissionRejectedError")<{
  readonly address: string
  readonly port: number
  /**
   * `"Spent"`: the server says the token's uses are spent, and this client was admitted with it
   * before (ends the client); `"WrongToken"`, `"TokenUsed"`, `"TooSoon"`: what a librdmacm server's
   * admission said (`"cm"` transport); `"Unexplained"`: the rejection said nothing (librpma's never
   * does), retried.
   */
  readonly reason: "Spent" | "WrongToken" | "TokenUsed" | "TooSoon" | "Unexplained"
  readonly cause: unknown
  /** The token is one this client was admitted with before (its own earlier use may have spent it). */
  readonly admittedBefore?: boolean | undefined
}> {
  override get message(): string {
    const head = `the server at ${this.address}:${this.port} rejected the connection carrying the offer's token`
    switch (this.reason) {
      case "Spent":
        return `${head}, a token this client was admitted with before: the server says its uses are spent (Admission.make admits one connection unless given more uses), and a spent token is not retried; the server's offer must carry a new token for each connection, or admit more uses`
      case "WrongToken":
        return `${head}: the server says it is not the token it expects (retried on the reconnect schedule, with the offer fetched again)`
      case "TokenUsed":
        return `${head}: the server says its uses are spent, by another client (retried on the reconnect schedule, with the offer fetched again)`
      case "TooSoon":
        return `${head}: the server says its uses in its window are spent (retried on the reconnect schedule)`
      case "Unexplained":
        return this.admittedBefore === true
          ? `${head}; the rejection carries no reason: nobody listens there (a server restarting), or this client's earlier connection spent the token (Admission.make admits one connection unless given more uses: give each offer a new token, or admit more uses), or it is wrong or expired (librpma's rejection never says which; retried on the reconnect schedule)`
          : `${head}; the rejection carries no reason: nobody listens there, the token is wrong or expired, or another client spent it (librpma's rejection never says which; retried on the reconnect schedule)`
    }
  }
}

export class WrongTransportError extends Data.TaggedError("WrongTransportError")<{
  readonly operation: string
  /** The client's transport. */
  readonly transport: "rpma" | "cm"
}> {
  override get message(): string {
    return this.transport === "cm"
      ? `${this.operation} runs on a librpma connection, and this client's transport is "cm" (librdmacm endpoints): use RdmaClient.withEndpoint`
      : `${this.operation} runs on a librdmacm endpoint, and this client's transport is "rpma" (librpma connections): make the client with transport: "cm", or use RdmaClient.withConnection`
  }
}
