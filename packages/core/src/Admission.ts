/**
 * Admission (was in `Endpoint`): tokens that admit a client to a {@link Listener.Listener}, and
 * what isolates clients from each other. A client sends its token as a connection request's private
 * data ({@link privateData}); `Listener.accept` and `Listener.serve` with `{ admission }` accept a
 * request only if it carries the token with a use left.
 *
 * RDMA itself authenticates nobody, and a connection may reach every region of the peer whose rkey
 * it guesses: to keep each client's regions out of every other client's reach, serve it on a
 * listener of its own ({@link listenIsolated}, {@link rendezvous}).
 *
 * @since 1.0.0
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Connection from "./Connection.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/admission.js"
import * as isolation from "./internal/isolation.js"
import type * as Listener from "./Listener.js"
import type { Peer } from "./Peer.js"
import type { RpmaError } from "./RdmaError.js"

/**
 * The longest admission token: a connection request's private data (56 bytes on RoCE,
 * `DriverArguments.PRIVATE_DATA_LIMIT.connect`) less the byte that carries the token's length.
 *
 * @since 1.0.0
 * @category constants
 */
export const MAX_TOKEN: number = internal.MAX_TOKEN

/**
 * The most connections one token admits ({@link Options} `uses`), in all or per window: a budget,
 * not a way to make a token unlimited (a larger `uses` is an {@link InvalidTokenError}). A client
 * that needs more gets a new token over the authenticated channel.
 *
 * @since 1.0.0
 * @category constants
 */
export const MAX_TOKEN_USES: number = internal.MAX_TOKEN_USES

/**
 * A token refused when it was set ({@link make}, {@link privateData}): not bytes, empty, all
 * zeros (an unfilled buffer, which a client that sends nothing would match) or longer than
 * {@link MAX_TOKEN}.
 *
 * @since 1.0.0
 * @category errors
 */
export const InvalidTokenError: typeof internal.InvalidTokenError = internal.InvalidTokenError

/**
 * @since 1.0.0
 * @category errors
 */
export type InvalidTokenError = internal.InvalidTokenError

/**
 * A request refused by an admission: its private data did not carry the token (`WrongToken`), or
 * carried a token whose uses are spent: all of them (`TokenUsed`), or all of its window's
 * (`TooSoon`: the budget renews as the window moves on). The request was rejected, so its client
 * learned it at once.
 *
 * @since 1.0.0
 * @category errors
 */
export const AdmissionRefusedError: typeof internal.AdmissionRefusedError = internal.AdmissionRefusedError

/**
 * @since 1.0.0
 * @category errors
 */
export type AdmissionRefusedError = internal.AdmissionRefusedError

/**
 * What marks an {@link Admission}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * An admission token, checked when it was set ({@link make}): what an accept with `{ admission }`
 * compares a request's private data with, and how many connections it admits.
 *
 * @since 1.0.0
 * @category models
 */
export interface Admission extends Pipeable {
  readonly [TypeId]: TypeId
  /** Whether it admits one connection only. */
  readonly singleUse: boolean
  /** How many connections it admits: in all, or, with a {@link window}, in any window. */
  readonly uses: number
  /** The window its uses are counted in (sliding), or undefined: counted over its lifetime. */
  readonly window: Duration.Duration | undefined
}

/**
 * How many connections a token admits. Every token's are bounded, so that a peer that learned it
 * cannot reconnect with it without limit (e.g. to try rkeys again after each failed guess, which
 * ends its connection): one by default.
 *
 * @since 1.0.0
 * @category models
 */
export interface Options {
  /**
   * Admit one connection only (the default, the same as `uses: 1`): the first request that carries
   * the token uses it up, whether or not its connection then succeeds (a retry needs a new token).
   * `false` needs a `uses` of its own.
   */
  readonly singleUse?: boolean | undefined
  /**
   * How many connections the token admits, a positive integer up to {@link MAX_TOKEN_USES}: in
   * all, or, with `window`, in any `window` (a client that reconnects after a failure). Each
   * request that carries the token and is accepted counts, whether or not its connection then
   * succeeds. Default 1.
   */
  readonly uses?: number | undefined
  /** Count `uses` in a sliding window of this length (e.g. `"1 minute"`) instead of over the token's lifetime. */
  readonly window?: Duration.DurationInput | undefined
}

/**
 * @since 1.0.0
 * @category guards
 */
export const isAdmission: (u: unknown) => u is Admission = internal.isAdmission

/**
 * Sets an admission token (was `Endpoint.admission`): 1 to {@link MAX_TOKEN} random bytes that the
 * client received over an authenticated channel (e.g. the `token` of a `DescriptorExchange`
 * offer), admitting one connection unless `options` give it more (`uses`, in all or per
 * `window`). An empty or all-zero token, one that is too long, or a budget that is not a positive
 * number of uses fails here with {@link InvalidTokenError}. The token is copied: changing the
 * array later changes nothing.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Admission, Connection, Listener } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * declare const listener: Listener.Listener
 * declare const handler: (conn: Connection.Connection) => Effect.Effect<void>
 * const token = new Uint8Array(randomBytes(16)) // sent to the clients over TLS
 * const server = Effect.gen(function*() {
 *   const admission = yield* Admission.make(token, { uses: 100, window: "1 minute" })
 *   return yield* Listener.serve(listener, handler, { admission })
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: (token: Uint8Array, options?: Options) => Effect.Effect<Admission, InvalidTokenError> = internal.make

/**
 * The private data a client sends to be admitted with `token` (was `Endpoint.tokenPrivateData`; given as
 * `Connection.connect(peer, address, port, { privateData })`): one byte holding the token's length
 * (1 to {@link MAX_TOKEN}), then the token's bytes. A client in C sends the same:
 * `buf[0] = len; memcpy(buf + 1, token, len);` then
 * `struct rpma_conn_private_data pdata = { buf, len + 1 }` to `rpma_conn_req_connect`. Fails with
 * {@link InvalidTokenError} for a token {@link make} would refuse.
 *
 * @since 1.0.0
 * @category constructors
 */
export const privateData: (token: Uint8Array) => Effect.Effect<Uint8Array, InvalidTokenError> = internal.privateData

/**
 * A listener for one client, on a peer of its own: a protection domain that only that client's
 * connection shares, so it can reach nothing but what is registered with its `peer`, whatever
 * rkeys it guesses (the device refuses an rkey of another protection domain:
 * `IBV_WC_REM_ACCESS_ERR`). Its first connection request is answered with {@link acceptIsolated},
 * and then it stops listening: no second connection, however it is asked for, ever joins the
 * protection domain. (librpma gives an incoming connection the protection domain of the peer its
 * listener listens on, hence a peer and a listener, on a port of its own, per client.)
 *
 * @since 1.0.0
 * @category models
 */
export interface Isolated {
  /** The client's own peer: register there what the client may reach, and nothing else. */
  readonly peer: Peer
  readonly address: string
  /** The port to give the client, with its token, over the authenticated channel. */
  readonly port: number
}

/**
 * Makes an {@link Isolated} listener: a new peer on the device at `address` (this machine's) and a
 * listener on it on `address`:`port` until {@link acceptIsolated} answers its first request (or
 * the scope closes). Register what the client may reach with its `peer`, send the client the
 * descriptors, the port and a token over an authenticated channel (`DescriptorExchange`), then
 * accept. The peer is deleted after the scope closes and its connection and regions are gone.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Admission, LocalMr, Usage } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * // One client: its own protection domain, its own port, one connection.
 * declare const offerOverTls: (offer: { port: number; token: Uint8Array; descriptor: Uint8Array }) => Effect.Effect<void>
 * const serveClient = (port: number) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const isolated = yield* Admission.listenIsolated("192.168.77.1", port)
 *     const inbox = yield* LocalMr.allocate(isolated.peer, 4096, Usage.WRITE_DST)
 *     const token = new Uint8Array(randomBytes(16))
 *     yield* offerOverTls({ port: isolated.port, token, descriptor: yield* LocalMr.descriptor(inbox) })
 *     const conn = yield* Admission.acceptIsolated(isolated, yield* Admission.make(token))
 *     // ... serve conn; the client reaches inbox and nothing else.
 *   }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const listenIsolated: (
  address: string,
  port: number
) => Effect.Effect<Isolated, RpmaError, RdmaDriver | Scope.Scope> = isolation.listenIsolated

/**
 * Answers an {@link Isolated} listener's first connection request, and stops it listening: the
 * request is accepted if it carries `admission`'s token with a use left, else rejected (the client
 * hears so at once) and this fails with {@link AdmissionRefusedError}. Either way no other request
 * is taken: a refused one means someone else reached the port first, so give the client a new
 * listener and token. A second call fails with RpmaInvalidError. The wait for the request is as
 * long as the caller lets it be: bound it (`Effect.timeout`).
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptIsolated: (
  isolated: Isolated,
  admission: Admission,
  options?: Connection.Options
) => Effect.Effect<Connection.Connection, Listener.AcceptError, RdmaDriver | Scope.Scope> = isolation.acceptIsolated

/**
 * The ports {@link rendezvous} listens on for the isolated listeners it makes: `from` to `to`,
 * both included (each is in use for one client at a time, until its connection is made).
 *
 * @since 1.0.0
 * @category models
 */
export interface PortRange {
  readonly from: number
  readonly to: number
}

/**
 * What {@link rendezvous} made for one client: its isolated listener, and the one-time admission
 * that client was given for it. Register what the client may reach with `peer`, then accept with
 * `Admission.acceptIsolated(made, made.admission)`.
 *
 * @since 1.0.0
 * @category models
 */
export interface Rendezvous extends Isolated {
  readonly admission: Admission
}

/**
 * The server's side of a rendezvous: a client that {@link connectIsolated} to the well-known
 * listener with `gate`'s token (which it got from an authenticated channel, e.g. a
 * `DescriptorExchange` offer that every client gets) is given an isolated listener of its own
 * ({@link listenIsolated}) on a free port of `ports` and a new random single-use token for it, in
 * the accept's private data; the well-known connection then closes. Nothing is registered on the
 * well-known listener's peer, so that connection reaches nothing. A request refused by `gate` fails
 * this with {@link AdmissionRefusedError}, and bounds how often one token gets a new listener (its
 * `uses` and `window`). When no port of `ports` is free the request is rejected, this fails with
 * the listen's error, and the use goes back to the token: the client may try again. The returned
 * {@link Rendezvous} lives with the scope.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Admission, Listener, LocalMr, Usage } from "@effect-rdma/core"
 *
 * declare const wellKnown: Listener.Listener // its port and token are in the DescriptorExchange offer
 * declare const gate: Admission.Admission // e.g. { uses: 100, window: "1 minute" }
 * const serveNext = Effect.scoped(Effect.gen(function*() {
 *   const made = yield* Admission.rendezvous(wellKnown, gate, { from: 20000, to: 20999 })
 *   const inbox = yield* LocalMr.allocate(made.peer, 4096, Usage.WRITE_DST)
 *   const conn = yield* Admission.acceptIsolated(made, made.admission, { privateData: yield* LocalMr.descriptor(inbox) })
 *   // ... serve conn: the client reaches inbox and nothing else.
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const rendezvous: (
  listener: Listener.Listener,
  gate: Admission,
  ports: PortRange,
  options?: Connection.Options
) => Effect.Effect<
  Rendezvous,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> = isolation.rendezvous

/**
 * The client's side of a {@link rendezvous}: connects to the well-known listener at
 * `address`:`port` with `token` (as {@link privateData} encodes it), reads the port and one-time
 * token of its own isolated listener from the server's answer, and connects there. The returned
 * connection's `privateData` is what the server accepted it with (e.g. descriptors). An answer
 * that is not a rendezvous answer fails with {@link InvalidTokenError}.
 *
 * @since 1.0.0
 * @category constructors
 */
export const connectIsolated: (
  peer: Peer,
  address: string,
  port: number,
  token: Uint8Array,
  options?: Connection.Options
) => Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> = isolation.connectIsolated
