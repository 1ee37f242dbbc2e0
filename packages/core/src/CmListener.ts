/**
 * Listeners of librdmacm's verbs API: rdma_listen, rdma_get_request, and the answer to each
 * request, rdma_accept or rdma_reject. A request is a {@link CmEndpoint.CmEndpoint} in state
 * `Connecting`: regions may be registered and receives posted on it before it is accepted, and
 * {@link accept} answers it connected. A server taking requests one after another, several at once,
 * is {@link serve}.
 *
 * Everything is scoped: a request is rejected when its scope closes unanswered, and a listener is
 * destroyed after the requests it handed out, those still unanswered rejected first.
 *
 * @since 1.0.0
 */
import type * as Effect from "effect/Effect"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type * as Admission from "./Admission.js"
import type * as CmEndpoint from "./CmEndpoint.js"
import * as errors from "./CmEndpointError.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/cmListener.js"
import * as serving from "./internal/cmServe.js"
import type { RdmaCmError } from "./RdmaError.js"

/**
 * @since 1.0.0
 * @category type ids
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 1.0.0
 * @category type ids
 */
export type TypeId = typeof TypeId

/**
 * A listener (rdma_listen) and the port it listens on.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmListener extends Pipeable {
  readonly [TypeId]: TypeId
  readonly address: string
  /** The port it listens on: the system's choice when 0 was asked for. */
  readonly port: number
}

/**
 * Whether a value is a listener.
 *
 * @since 1.0.0
 * @category refinements
 */
export const isCmListener: (u: unknown) => u is CmListener = internal.isCmListener

/**
 * What rdma_accept sends.
 *
 * @since 1.0.0
 * @category models
 */
export interface AcceptOptions {
  /** Private data for the client (at most 196 bytes). */
  readonly privateData?: Uint8Array | undefined
  /**
   * Accept only a request whose private data carries this admission's token with a use left
   * (`Admission.privateData(token)` on the client's side, as on the librpma path; compared in
   * constant time); any other is rejected and the accept fails with
   * {@link Admission.AdmissionRefusedError}. The rejection's private data says why, for the client
   * (`RdmaClient`'s `AdmissionRejectedError` reads it): the bytes `0x52 0x44 0x41 0x01`, then 0
   * (`WrongToken`), 1 (`TokenUsed`) or 2 (`TooSoon`). Without it, any host that reaches the port
   * gets a connection.
   */
  readonly admission?: Admission.Admission | undefined
}

/**
 * What an accept with options `O` can fail with: the admission's refusals only when it has one.
 *
 * @since 1.0.0
 * @category errors
 */
export type AcceptErrorOf<O> =
  | RdmaCmError
  | ClientGoneError
  | (O extends { readonly admission: Admission.Admission } ?
    Admission.AdmissionRefusedError | Admission.InvalidTokenError
    : never)

/**
 * What rdma_reject sends.
 *
 * @since 1.0.0
 * @category models
 */
export interface RejectOptions {
  /** Private data for the client, which its connect's error carries (at most 148 bytes). */
  readonly privateData?: Uint8Array | undefined
}

/**
 * How {@link serve} runs its handlers.
 *
 * @since 1.0.0
 * @category models
 */
export interface ServeOptions {
  /**
   * Requests handled at once; the next is taken from the listener only when a handler is done
   * (the others wait in the CM's backlog). Default `"unbounded"`.
   */
  readonly concurrency?: number | "unbounded" | undefined
  /**
   * Hand the handler only requests whose private data carries this admission's token with a use
   * left (see {@link AcceptOptions}); any other is rejected (saying why, as there) and logged at
   * debug level, and the server goes on. The handler's accept need not check again.
   */
  readonly admission?: Admission.Admission | undefined
}

/**
 * @since 1.0.0
 * @category errors
 */
export const ClientGoneError: typeof errors.ClientGoneError = errors.ClientGoneError
/**
 * An accept of a request whose client has gone (gave up, closed its endpoint, was killed): the
 * request is spent; take the next one.
 *
 * @since 1.0.0
 * @category errors
 */
export type ClientGoneError = errors.ClientGoneError

/**
 * rdma_listen on `address`:`port` (0: the system chooses; see `port`), scoped. `options` are the
 * settings of every request it hands out.
 *
 * @example
 * ```ts
 * import { CmEndpoint, CmListener } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Answers one client's messages with their length, until it disconnects.
 * const serveOne = (listener: CmListener.CmListener) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const request = yield* CmListener.next(listener)
 *     const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4096))
 *     const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4))
 *     // A receive posted before the accept: the client may send at once.
 *     let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *     const ep = yield* CmListener.accept(request)
 *     for (;;) {
 *       const { byteLength } = yield* next.completion
 *       next = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
 *       new DataView(outbox.memory.buffer).setUint32(0, byteLength, true)
 *       yield* CmEndpoint.send(ep, { src: outbox, length: 4 })
 *     }
 *   })).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))
 *
 * export const server = Effect.scoped(Effect.gen(function*() {
 *   const listener = yield* CmListener.make("192.168.77.1", 0)
 *   yield* Effect.logInfo(`listening on port ${listener.port}`)
 *   yield* Effect.forever(serveOne(listener))
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: (
  address: string,
  port: number,
  options?: CmEndpoint.Options
) => Effect.Effect<CmListener, RdmaCmError, RdmaDriver | Scope.Scope> = internal.make

/**
 * rdma_get_request: the next incoming request as an endpoint (state `Connecting`, the client's
 * private data in `privateData`), scoped: rejected when its scope closes unanswered. Receives may
 * be posted on it before {@link accept}. Waits until a request comes (interruptible).
 *
 * @since 1.0.0
 * @category constructors
 */
export const next: (
  self: CmListener
) => Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.next

/**
 * The incoming requests, as they arrive ({@link next} repeated): each lives in the stream's
 * scope, rejected when it closes if still unanswered.
 *
 * @since 1.0.0
 * @category constructors
 */
export const requests: (
  self: CmListener
) => Stream.Stream<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> = internal.requests

/**
 * rdma_accept with `privateData` (at most 196 bytes), waiting at most the listener's timeout;
 * answers the request, now connected. A request whose client has gone meanwhile, or did not finish
 * the handshake within the timeout (it gave up its connect but kept its endpoint, or is too slow),
 * fails with {@link ClientGoneError} (`cause`: the driver's ECONNABORTED or ETIMEDOUT): it is
 * spent, take the next one. With `admission`, a request without its token is rejected first
 * ({@link Admission.AdmissionRefusedError}).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Admission, CmEndpoint, CmListener } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * declare const listener: CmListener.CmListener
 * const token = new Uint8Array(randomBytes(16)) // sent to the client over TLS
 * const serveOne = Effect.gen(function*() {
 *   const admission = yield* Admission.make(token) // one connection
 *   const request = yield* CmListener.next(listener)
 *   return yield* CmListener.accept(request, { admission })
 * })
 * // The client: CmEndpoint.connect(address, port, { privateData: yield* Admission.privateData(token) })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const accept: {
  // Data-first first: an endpoint also matches the options (its privateData), so its overload goes first.
  <O extends AcceptOptions = {}>(
    request: CmEndpoint.CmEndpoint,
    options?: O
  ): Effect.Effect<CmEndpoint.CmEndpoint, AcceptErrorOf<O>, RdmaDriver>
  <O extends AcceptOptions = {}>(
    options?: O
  ): (request: CmEndpoint.CmEndpoint) => Effect.Effect<CmEndpoint.CmEndpoint, AcceptErrorOf<O>, RdmaDriver>
} = internal.accept

/**
 * rdma_reject with `privateData` (at most 148 bytes): the client's connect fails with ECONNREFUSED.
 *
 * @since 1.0.0
 * @category constructors
 */
export const reject: {
  // Data-first first: an endpoint also matches the options (its privateData), so its overload goes first.
  (request: CmEndpoint.CmEndpoint, options?: RejectOptions): Effect.Effect<void, RdmaCmError, RdmaDriver>
  (options?: RejectOptions): (request: CmEndpoint.CmEndpoint) => Effect.Effect<void, RdmaCmError, RdmaDriver>
} = internal.reject

/**
 * Serves a listener: every incoming request ({@link next}) goes to `handler` in a fiber and a scope
 * of its own, which the handler may use (regions, receives posted before {@link accept}). When the
 * handler ends, its scope closes: the request is rejected if it was not answered, disconnected and
 * destroyed if it was. At most `concurrency` requests are handled at once. With `admission`, only
 * requests that carry its token reach the handler: any other is rejected (its client hears so at
 * once), logged at debug level, and the server goes on.
 *
 * It runs until interrupted, or until it fails: with the listener's failure, or the first failure
 * of a handler (the others are interrupted, every request released), as @effect/platform's
 * `SocketServer.run` does. Catch in the handler what should not stop the server (a
 * `ConnectionClosedError` when the client leaves, say); a {@link ClientGoneError} from its accept
 * (the client gone, or not done with the handshake within the timeout) only ends that request.
 * Interrupted, it leaves nothing alive.
 *
 * Every request is an endpoint with a protection domain of its own: what a handler registers on it
 * is reachable over that client's connection only, so a client guessing rkeys reaches nothing of
 * another's (test-device/CmIsolation.test.ts). There is no shared form.
 *
 * @example
 * ```ts
 * import { CmEndpoint, CmListener } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * // Answers each client's messages with their length, eight clients at a time.
 * const answer = (request: CmEndpoint.CmEndpoint) =>
 *   Effect.gen(function*() {
 *     const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4096))
 *     const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(4))
 *     let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
 *     const ep = yield* CmListener.accept(request)
 *     for (;;) {
 *       const { byteLength } = yield* next.completion
 *       next = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
 *       new DataView(outbox.memory.buffer).setUint32(0, byteLength, true)
 *       yield* CmEndpoint.send(ep, { src: outbox, length: 4 })
 *     }
 *   }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))
 *
 * export const server = Effect.scoped(Effect.gen(function*() {
 *   const listener = yield* CmListener.make("192.168.77.1", 0)
 *   yield* Effect.logInfo(`listening on port ${listener.port}`)
 *   return yield* CmListener.serve(listener, answer, { concurrency: 8 })
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const serve: {
  <A, E, R>(
    handler: (request: CmEndpoint.CmEndpoint) => Effect.Effect<A, E, R>,
    options?: ServeOptions
  ): (
    self: CmListener
  ) => Effect.Effect<
    never,
    RdmaCmError | Admission.InvalidTokenError | Exclude<E, ClientGoneError>,
    RdmaDriver | Exclude<R, Scope.Scope>
  >
  <A, E, R>(
    self: CmListener,
    handler: (request: CmEndpoint.CmEndpoint) => Effect.Effect<A, E, R>,
    options?: ServeOptions
  ): Effect.Effect<
    never,
    RdmaCmError | Admission.InvalidTokenError | Exclude<E, ClientGoneError>,
    RdmaDriver | Exclude<R, Scope.Scope>
  >
} = serving.serve
