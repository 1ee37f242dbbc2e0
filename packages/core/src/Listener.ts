/**
 * A librpma listener (`struct rpma_ep`, was `Endpoint`): incoming connection requests arrive one
 * by one ({@link next}) or as a Stream ({@link requests}); each is accepted (a scoped
 * {@link Connection.Connection}) or rejected. {@link serve} runs a whole server: each client
 * accepted, handled and released in a fiber of its own. Requests left unanswered are rejected when
 * the listener shuts down with its scope.
 *
 * @since 1.0.0
 */
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import { dual } from "effect/Function"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type * as Admission from "./Admission.js"
import type * as Connection from "./Connection.js"
import type { RdmaDriver } from "./Driver.js"
import * as isolation from "./internal/isolation.js"
import * as internal from "./internal/listener.js"
import * as serving from "./internal/listenerServe.js"
import { dataFirst } from "./internal/resourceGuard.js"
import type { Peer } from "./Peer.js"
import type { RpmaError } from "./RdmaError.js"

/**
 * What marks a {@link Listener}.
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
 * What marks a {@link ConnectionRequest}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const RequestTypeId: unique symbol = internal.RequestTypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type RequestTypeId = typeof RequestTypeId

/**
 * A listener: where it listens, and the peer whose protection domain its connections share.
 *
 * @since 1.0.0
 * @category models
 */
export interface Listener extends Pipeable {
  readonly [TypeId]: TypeId
  readonly peer: Peer
  readonly address: string
  readonly port: number
}

/**
 * An incoming request: accept it with {@link accept} or refuse it with {@link reject}.
 *
 * @since 1.0.0
 * @category models
 */
export interface ConnectionRequest extends Pipeable {
  readonly [RequestTypeId]: RequestTypeId
  /** What the client sent with its request (rdma_cm private data: unauthenticated, padded). */
  readonly privateData: Uint8Array
}

/**
 * How to accept a request: the connection's settings, and the admission its private data must
 * carry a token of (the request is rejected otherwise, and the accept fails with
 * {@link Admission.AdmissionRefusedError}).
 *
 * @since 1.0.0
 * @category models
 */
export interface AcceptOptions extends Connection.Options {
  /**
   * Accept only a request whose private data carries this admission's token with a use left
   * (compared in constant time). RDMA itself authenticates nobody: without such a check any host
   * that reaches the port gets a connection, and a connection may reach every region of the peer
   * whose rkey it guesses.
   */
  readonly admission?: Admission.Admission | undefined
}

/**
 * What an accept can fail with: the request or the options refused, the connection not
 * established, or (with an admission) the token not carried or spent.
 *
 * @since 1.0.0
 * @category errors
 */
export type AcceptError =
  | RpmaError
  | Connection.ConnectionFailedError
  | Admission.AdmissionRefusedError
  | Admission.InvalidTokenError

/**
 * What an accept with options `O` can fail with: the admission's refusals only when it has one.
 *
 * @since 1.0.0
 * @category errors
 */
export type AcceptErrorOf<O> = O extends { readonly admission: Admission.Admission } ? AcceptError
  : RpmaError | Connection.ConnectionFailedError

/**
 * @since 1.0.0
 * @category guards
 */
export const isListener: (u: unknown) => u is Listener = internal.isListener

/**
 * @since 1.0.0
 * @category guards
 */
export const isConnectionRequest: (u: unknown) => u is ConnectionRequest = internal.isConnectionRequest

/**
 * Listens on `address`:`port` (rpma_ep_listen); shut down (rpma_ep_shutdown) with the scope.
 * The port must be 1 to 65535: librpma cannot report a port the system chose.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, Listener, Peer } from "@effect-rdma/core"
 *
 * // Accept every client; each connection lives until its client closes it.
 * const server = Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const listener = yield* Listener.make(peer, "192.168.77.1", 7471)
 *   return yield* Listener.serve(listener, (conn) => Connection.awaitClosed(conn))
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: (
  peer: Peer,
  address: string,
  port: number
) => Effect.Effect<Listener, RpmaError, RdmaDriver | Scope.Scope> = internal.make

/**
 * Waits for the next incoming connection request; accept it with {@link accept} or refuse it with
 * {@link reject} (left unanswered, it is rejected when the listener shuts down). `options` make
 * the request's queue pair (its queue sizes, its shared receive queue): give its accept the same.
 *
 * @since 1.0.0
 * @category constructors
 */
export const next: {
  (listener: Listener, options?: Connection.Options): Effect.Effect<ConnectionRequest, RpmaError, RdmaDriver>
  (options?: Connection.Options): (listener: Listener) => Effect.Effect<ConnectionRequest, RpmaError, RdmaDriver>
} = dual(dataFirst(internal.isListener), internal.next)

/**
 * The incoming connection requests, as they arrive.
 *
 * @since 1.0.0
 * @category streams
 */
export const requests: {
  (listener: Listener, options?: Connection.Options): Stream.Stream<ConnectionRequest, RpmaError, RdmaDriver>
  (options?: Connection.Options): (listener: Listener) => Stream.Stream<ConnectionRequest, RpmaError, RdmaDriver>
} = dual(dataFirst(internal.isListener), internal.requests)

/**
 * Accepts a request (rpma_conn_req_connect) and waits for the connection to be established; with
 * `admission`, only if the request carries its token (else rejected: the client hears so at once).
 * The connection lives in the listener's peer, with every other connection accepted there: to give
 * a client memory it alone can reach, accept it with {@link acceptClient} (or {@link serve}).
 * Private data longer than an accept carries (196 bytes), or options a connection cannot live
 * with, are refused (RpmaInvalidError) with the request left unanswered: accept it again with
 * other options, or reject it.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Admission, Listener } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * declare const listener: Listener.Listener
 * const token = new Uint8Array(randomBytes(16)) // sent to the client over TLS
 * const serveOne = Effect.gen(function*() {
 *   const admission = yield* Admission.make(token) // one connection
 *   const req = yield* Listener.next(listener)
 *   return yield* Listener.accept(req, { admission })
 * })
 * // The client: Connection.connect(peer, address, port, { privateData: yield* Admission.privateData(token) })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const accept: {
  <O extends AcceptOptions = {}>(
    request: ConnectionRequest,
    options?: O
  ): Effect.Effect<Connection.Connection, AcceptErrorOf<O>, RdmaDriver | Scope.Scope>
  <O extends AcceptOptions = {}>(
    options?: O
  ): (request: ConnectionRequest) => Effect.Effect<Connection.Connection, AcceptErrorOf<O>, RdmaDriver | Scope.Scope>
} = dual(dataFirst(internal.isConnectionRequest), internal.accept)

/**
 * Waits for the next incoming request and accepts it: the common case of a client at a time. If
 * the accept is refused, the request is rejected: its client hears so at once (use {@link next}
 * and {@link accept} to accept a refused request again). A server of many clients is {@link serve}.
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptNext: {
  <O extends AcceptOptions = {}>(
    listener: Listener,
    options?: O
  ): Effect.Effect<Connection.Connection, AcceptErrorOf<O>, RdmaDriver | Scope.Scope>
  <O extends AcceptOptions = {}>(
    options?: O
  ): (listener: Listener) => Effect.Effect<Connection.Connection, AcceptErrorOf<O>, RdmaDriver | Scope.Scope>
} = dual(dataFirst(internal.isListener), internal.acceptNext)

/**
 * Rejects a request (rpma_conn_req_delete); a no-op once it is answered.
 *
 * @since 1.0.0
 * @category constructors
 */
export const reject: (request: ConnectionRequest) => Effect.Effect<void, never, RdmaDriver> = internal.reject

/**
 * rpma_conn_req_recv: posts a receive on an incoming request before it is accepted, so that the
 * client's first message never waits for the server (librpma's 08, 10, 11 and 12 servers do this).
 * The receive's outcome is known once the request is accepted: await `completion` on the result.
 * If the request is rejected, or its connection fails, the receive fails with
 * {@link Connection.ConnectionClosedError}; its region stays registered until then.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Listener, LocalMr } from "@effect-rdma/core"
 *
 * declare const listener: Listener.Listener
 * declare const inbox: LocalMr.LocalMr<"RECV">
 * const program = Effect.gen(function*() {
 *   const req = yield* Listener.next(listener)
 *   const first = yield* Listener.postRecv(req, { dst: inbox, offset: 0, length: 64 })
 *   yield* Listener.accept(req)
 *   const arrived = yield* first.completion
 *   return arrived.byteLength
 * })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const postRecv: {
  (
    args: Connection.RecvArgs
  ): (request: ConnectionRequest) => Effect.Effect<Connection.Posted, Connection.TransferError>
  (request: ConnectionRequest, args: Connection.RecvArgs): Effect.Effect<Connection.Posted, Connection.TransferError>
} = dual(2, internal.postRecv)

/**
 * Whether each client gets memory it alone can reach (`"perClient"`, the default) or every client
 * shares the listener's peer (`"shared"`).
 *
 * - `"perClient"`: a client's request on the listener is answered (a rendezvous,
 *   `Admission.rendezvous`) with the port of a listener of its own, on a new `Peer` (a protection
 *   domain of its own) on a free port of `ports`, and a one-time token; `Connection.connect`
 *   follows that answer, so clients change nothing. The client's connection lives in that
 *   protection domain: it reaches what is registered with its {@link Client} `peer` (the `Peer`
 *   its handler is given) and nothing else, whatever rkeys it guesses (the device refuses them:
 *   `IBV_WC_REM_ACCESS_ERR`). Register nothing a client may not reach on the listener's own peer.
 * - `"shared"`: every connection lives in the listener's peer's protection domain. A connected peer
 *   can then read and write every region registered with that peer, any other client's included,
 *   within the usage it was registered for, by guessing its address and rkey (a few hundred tries
 *   on Soft-RoCE). Choose it only for regions every client may reach (one table all clients
 *   share), or for clients you trust alike.
 *
 * @since 1.0.0
 * @category models
 */
export type Isolation = "perClient" | "shared"

/**
 * How {@link acceptClient} accepts a client: the accept's settings, and how it is isolated.
 *
 * @since 1.0.0
 * @category models
 */
export interface ClientOptions extends AcceptOptions {
  /** A protection domain per client (`"perClient"`, the default), or the listener's for all (`"shared"`). See {@link Isolation}. */
  readonly isolation?: Isolation | undefined
  /**
   * The ports an isolated client's own listener may take, `{ from, to }` both included: each is
   * in use from the client's request until its connection is made, so the range bounds the
   * handshakes under way at once (not the clients connected). Default: the 64 ports after the
   * listener's own. A range with no free port rejects the request (its client may try again).
   */
  readonly ports?: Admission.PortRange | undefined
}

/**
 * A client accepted: its connection, and the peer it lives in (with `"perClient"`, a peer of its own,
 * deleted after the connection with the scope; with `"shared"`, the listener's). Register what the
 * client may reach with `peer`.
 *
 * @since 1.0.0
 * @category models
 */
export interface Client {
  readonly connection: Connection.Connection
  readonly peer: Peer
}

/**
 * Accepts a request as {@link serve} does, isolated by default (see {@link Isolation}): with
 * `admission`, only if the request carries its token; then, isolated, the request is answered with
 * the port of a listener on a peer of the client's own and the client's second request there is
 * accepted (waiting at most twice the connection's `timeout`), else the request is accepted on
 * this listener. Fails as {@link accept} does; a bad `isolation` or `ports` is an RpmaInvalidError
 * (and the request is rejected).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Listener, LocalMr, Usage } from "@effect-rdma/core"
 *
 * declare const listener: Listener.Listener
 * const serveOne = Effect.gen(function*() {
 *   const req = yield* Listener.next(listener)
 *   const { connection, peer } = yield* Listener.acceptClient(req)
 *   // Reachable by this client only: it lives in peer's protection domain.
 *   const inbox = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_DST)
 *   return { connection, inbox }
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptClient: (
  request: ConnectionRequest,
  options?: ClientOptions
) => Effect.Effect<Client, AcceptError, RdmaDriver | Scope.Scope> = isolation.acceptClient

/**
 * How {@link serve} takes and accepts its clients.
 *
 * @since 1.0.0
 * @category models
 */
export interface ServeOptions extends ClientOptions {
  /**
   * Clients handled at once; the next request is taken from the listener only when a handler is
   * done (the others wait in the listener's backlog). Default `"unbounded"`.
   */
  readonly concurrency?: number | "unbounded" | undefined
  /**
   * How long a client's accept may take, up to its connection being established: a client that
   * takes longer is dropped (its request released) and the server goes on. Default: the
   * connection's `timeout`.
   */
  readonly handshakeTimeout?: Duration.DurationInput | undefined
}

/**
 * Serves a listener: every incoming request is accepted as {@link acceptClient} accepts it (with
 * `admission`, only if it carries the token; isolated by default: a protection domain of its own
 * per client, see {@link Isolation}) and its connection goes to `handler` in a fiber and a scope of
 * its own, which the handler may use (regions, receives). The handler's `Peer` is the client's:
 * register there what the client may reach (a region of another peer is out of the connection's
 * reach, its own sends and receives included). When the handler ends, its scope closes and the
 * connection (and, isolated, its peer) with it. At most `concurrency` clients are handled at once. A client refused by the admission, or
 * gone (or too slow) before its connection was established, costs only its own request: logged
 * at debug level, and the server goes on. So does a request the provider could not set up
 * (`RpmaProviderError` from rpma_ep_next_conn_req, as when a client has just gone): logged as a
 * warning; 64 of those in a row, with no request taken between, are the listener's failure.
 *
 * It runs until interrupted, or until it fails: with the listener's failure, or the first failure
 * of a handler (the others are interrupted, every connection closed), as @effect/platform's
 * `SocketServer.run` does. Catch in the handler what should not stop the server (a
 * `ConnectionClosedError` when the client leaves, say). Interrupted, it leaves nothing alive.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
 *
 * // Answers each client's messages with their length, eight clients at a time.
 * const answer = (conn: Connection.Connection) =>
 *   Effect.gen(function*() {
 *     const peer = yield* Peer.Peer
 *     const inbox = yield* LocalMr.allocate(peer, 4096, Usage.RECV)
 *     const outbox = yield* LocalMr.allocate(peer, 4, Usage.SEND)
 *     for (;;) {
 *       const { byteLength } = yield* Connection.recv(conn, { dst: inbox })
 *       new DataView(outbox.memory.buffer).setUint32(0, byteLength, true)
 *       yield* Connection.send(conn, { src: outbox, length: 4 })
 *     }
 *   }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))
 *
 * export const server = Effect.scoped(Effect.gen(function*() {
 *   const listener = yield* Listener.make(yield* Peer.Peer, "192.168.77.1", 7471)
 *   // Each client in a protection domain of its own (its Peer, above): none reaches another's inbox.
 *   return yield* Listener.serve(listener, answer, { concurrency: 8 })
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const serve: {
  <A, E, R>(
    listener: Listener,
    handler: (conn: Connection.Connection) => Effect.Effect<A, E, R>,
    options?: ServeOptions
  ): Effect.Effect<never, RpmaError | Admission.InvalidTokenError | E, RdmaDriver | Exclude<R, Scope.Scope | Peer>>
  <A, E, R>(
    handler: (conn: Connection.Connection) => Effect.Effect<A, E, R>,
    options?: ServeOptions
  ): (
    listener: Listener
  ) => Effect.Effect<never, RpmaError | Admission.InvalidTokenError | E, RdmaDriver | Exclude<R, Scope.Scope | Peer>>
} = dual(dataFirst(internal.isListener), serving.serve)
