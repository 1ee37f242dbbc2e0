/**
 * A listening endpoint (`struct rpma_ep`): incoming connection requests arrive as a Stream; each
 * is accepted (a scoped {@link Connection.Connection}) or rejected. Requests left unanswered are
 * rejected when the endpoint shuts down with its scope.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { randomBytes, timingSafeEqual } from "node:crypto"
import type * as Connection from "./Connection.js"
import { RdmaDriver } from "./Driver.js"
import { type ConnReqHandle, type EndpointHandle } from "./DriverModel.js"
import * as DriverArguments from "./DriverArguments.js"
import * as internalConnection from "./internal/connection.js"
import { privateDataRefusal, queueSizesProblem, toConfig } from "./internal/connectionConfig.js"
import { OutOfRangeError } from "./ConnectionError.js"
import * as instrument from "./internal/instrument.js"
import { Operations } from "./internal/operationTable.js"
import * as Owner from "./internal/owner.js"
import { submitRecv, toCompletion } from "./internal/posting.js"
import * as srq from "./internal/srq.js"
import { release } from "./internal/release.js"
import { make as makePeer, ownerOf, type Peer } from "./Peer.js"
import { fromRpmaCode, RpmaCode, type RpmaError, RpmaInvalidError } from "./RdmaError.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Endpoint {
  readonly handle: EndpointHandle
  readonly peer: Peer
  readonly address: string
  readonly port: number
  /** @internal */
  readonly unanswered: Set<ConnectionRequest>
}

/**
 * An incoming request: accept it with {@link accept} or refuse it with {@link reject}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ConnectionRequest {
  readonly handle: ConnReqHandle
  /** What the client sent with its request (rdma_cm private data: unauthenticated, padded). */
  readonly privateData: Uint8Array
  /** @internal */
  readonly endpoint: Endpoint
  /** @internal Receives posted before the request is answered; the connection takes them over. */
  readonly prepared: internalConnection.Prepared
  /** @internal The shared receive queue the request was taken with: its connection uses it. */
  readonly sharedReceiveQueue: Connection.Options["sharedReceiveQueue"]
}

/**
 * Listens on `address`:`port` (rpma_ep_listen); shut down (rpma_ep_shutdown) with the scope.
 * The port must be 1 to 65535: librpma cannot report a port the system chose.
 *
 * @example
 * ```ts
 * import { Effect, Stream } from "effect"
 * import { Endpoint, Peer } from "@effect-rdma/core"
 *
 * // Accept every client; each connection lives until its client closes it.
 * const serve = Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const ep = yield* Endpoint.listen(peer, "192.168.77.1", 7471)
 *   yield* Endpoint.requests(ep).pipe(
 *     Stream.runForEach((req) =>
 *       Effect.forkScoped(Effect.scoped(Effect.flatMap(Endpoint.accept(req), (conn) => Stream.runDrain(conn.events))))
 *     )
 *   )
 * })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const listen = (
  peer: Peer,
  address: string,
  port: number
): Effect.Effect<Endpoint, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.acquireRelease(
      Effect.map(driver.epListen(peer.handle, address, port), (handle): Endpoint => {
        Owner.retain(ownerOf(peer))
        return { handle, peer, address, port, unanswered: new Set() }
      }),
      (ep) =>
        Effect.forEach(ep.unanswered, (req) => reject(req), { discard: true }).pipe(
          Effect.zipRight(release("rpma_ep_shutdown", `the endpoint on ${address}:${ep.port}`, driver.epShutdown(ep.handle))),
          Effect.zipRight(Owner.drop(ownerOf(peer))),
          Effect.provideService(RdmaDriver, driver)
        )
    ))

/**
 * Waits for the next incoming connection request; accept it with {@link accept} or refuse it with
 * {@link reject} (left unanswered, it is rejected when the endpoint shuts down).
 *
 * @since 0.1.0
 * @category constructors
 */
export const next = (
  ep: Endpoint,
  options?: Connection.Options
): Effect.Effect<ConnectionRequest, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const config = toConfig(options)
    // The queue pair is made with the request: what its connection could not live with is refused now.
    const refused = queueSizesProblem(config)
    if (refused !== undefined) return Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_cfg", refused))
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(driver.epNextConnReq(ep.handle, config)), (handle) => {
        let req: ConnectionRequest | undefined
        // Receives are posted on the request only while it is unanswered.
        const unanswered = (operation: string) =>
          req !== undefined && ep.unanswered.has(req) ? undefined : new RpmaInvalidError({
            operation,
            detail: "the request was already accepted or rejected (or its endpoint shut down): post on its connection"
          })
        return Effect.zipWith(
          driver.connReqPrivateData(handle),
          internalConnection.prepare(driver, handle, config, unanswered),
          (privateData, prepared): ConnectionRequest => {
            req = { handle, privateData, endpoint: ep, prepared, sharedReceiveQueue: options?.sharedReceiveQueue }
            ep.unanswered.add(req)
            return req
          }
        ).pipe(Effect.tapError(() => Effect.ignore(driver.connReqDelete(handle))))
      })
    )
  })

/**
 * The incoming connection requests, as they arrive.
 *
 * @since 0.1.0
 * @category streams
 */
export const requests = (
  ep: Endpoint,
  options?: Connection.Options
): Stream.Stream<ConnectionRequest, RpmaError, RdmaDriver> => Stream.repeatEffect(next(ep, options))

/**
 * Accepts a request (rpma_conn_req_connect) and waits for the connection to be established.
 * Private data longer than an accept carries (196 bytes), or options a connection cannot live
 * with, are refused (RpmaInvalidError) with the request left unanswered: accept it again with
 * other options, or reject it.
 *
 * @since 0.1.0
 * @category constructors
 */
export const accept = (
  req: ConnectionRequest,
  options?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError,
  RdmaDriver | Scope.Scope
> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.suspend(() => {
      const refused = privateDataRefusal(options?.privateData, "accept")
      if (refused !== undefined) return Effect.fail(refused)
      // Answered when open takes the request, past its checks of the options (an accept they refuse
      // leaves the request unanswered); from there a refused accept consumes (rejects) it.
      const answer = Effect.suspend(() =>
        req.endpoint.unanswered.delete(req) ? Effect.succeed(req.handle) : Effect.fail(
          fromRpmaCode(
            RpmaCode.RPMA_E_INVAL,
            "rpma_conn_req_connect",
            "the request was already accepted or rejected (or its endpoint shut down)"
          )
        )
      )
      return Effect.zipRight(srq.usedBy(req.sharedReceiveQueue), internalConnection.open(
        driver,
        req.endpoint.peer,
        answer,
        options?.privateData,
        { address: req.endpoint.address, port: req.endpoint.port },
        toConfig(options),
        req.prepared
      ))
    }))

/**
 * Waits for the next incoming request and accepts it: the common case of a server that takes
 * whoever connects. If the accept is refused, the request is rejected: its client hears so at
 * once (use {@link next} and {@link accept} to accept a refused request again).
 *
 * @since 0.1.0
 * @category constructors
 */
export const acceptNext = (
  ep: Endpoint,
  options?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError,
  RdmaDriver | Scope.Scope
> =>
  Effect.flatMap(
    next(ep, options),
    (req) => Effect.tapError(accept(req, options), () => reject(req)) // reject: a no-op once answered
  )

/**
 * The longest admission token: a connection request's private data (56 bytes on RoCE,
 * `DriverArguments.PRIVATE_DATA_LIMIT.connect`) less the byte that carries the token's length.
 *
 * @since 1.0.0
 * @category constants
 */
export const MAX_TOKEN: number = DriverArguments.PRIVATE_DATA_LIMIT.connect - 1

/**
 * The most connections one token admits ({@link AdmissionOptions} `uses`), in all or per window:
 * a budget, not a way to make a token unlimited (a larger `uses` is an {@link InvalidTokenError}).
 * A client that needs more gets a new token over the authenticated channel.
 *
 * @since 1.0.0
 * @category constants
 */
export const MAX_TOKEN_USES = 65_535

/**
 * A token refused when it was set ({@link admission}, {@link tokenPrivateData}): not bytes, empty,
 * all zeros (an unfilled buffer, which a client that sends nothing would match) or longer than
 * {@link MAX_TOKEN}.
 *
 * @since 1.0.0
 * @category errors
 */
export class InvalidTokenError extends Data.TaggedError("InvalidTokenError")<{ readonly reason: string }> {
  override get message(): string {
    return `admission token refused: ${this.reason}`
  }
}

/**
 * A request refused by {@link acceptIfToken}: its private data did not carry the token
 * (`WrongToken`), or carried a token whose uses are spent: all of them (`TokenUsed`), or all of
 * its window's (`TooSoon`: the budget renews as the window moves on). The request was rejected, so
 * its client learned it at once.
 *
 * @since 1.0.0
 * @category errors
 */
export class AdmissionRefusedError extends Data.TaggedError("AdmissionRefusedError")<{
  readonly address: string
  readonly port: number
  /** @since 1.0.0 */
  readonly reason: "WrongToken" | "TokenUsed" | "TooSoon"
}> {
  override get message(): string {
    const what = this.reason === "TokenUsed"
      ? "carried a token whose uses are spent"
      : this.reason === "TooSoon"
      ? "carried a token whose uses in its window are spent (try again later)"
      : "did not carry the expected token"
    return `a connection request on ${this.address}:${this.port} ${what}: rejected`
  }
}

/**
 * @since 1.0.0
 * @category symbols
 */
export const AdmissionTypeId: unique symbol = Symbol.for("@effect-rdma/core/Endpoint/Admission")

/**
 * @since 1.0.0
 * @category symbols
 */
export type AdmissionTypeId = typeof AdmissionTypeId

/**
 * An admission token, checked when it was set ({@link admission}): what {@link acceptIfToken}
 * compares a request's private data with, and how many connections it admits.
 *
 * @since 1.0.0
 * @category models
 */
export interface Admission {
  readonly [AdmissionTypeId]: AdmissionTypeId
  /** Whether it admits one connection only. */
  readonly singleUse: boolean
  /**
   * How many connections it admits: in all, or, with a {@link window}, in any window.
   *
   * @since 1.0.0
   */
  readonly uses: number
  /**
   * The window its uses are counted in (sliding), or undefined: counted over its lifetime.
   *
   * @since 1.0.0
   */
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
export interface AdmissionOptions {
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
   *
   * @since 1.0.0
   */
  readonly uses?: number | undefined
  /**
   * Count `uses` in a sliding window of this length (e.g. `"1 minute"`) instead of over the
   * token's lifetime.
   *
   * @since 1.0.0
   */
  readonly window?: Duration.DurationInput | undefined
}

// The wire form, what a client sends as private data: one byte with the token's length, then the
// token. rdma_cm pads private data with zeros, so without the length a token's trailing zeros
// (or an all-zero token) would match a client that never sent them.
interface AdmissionState extends Admission {
  readonly expected: Uint8Array
  /** When each counted use was admitted (ms, the Clock's): the window's, or all of them. */
  readonly admittedAt: Array<number>
}

const tokenProblem = (token: unknown): string | undefined =>
  !(token instanceof Uint8Array)
    ? `a token is a Uint8Array, not ${token === null ? "null" : typeof token}`
    : token.byteLength === 0
    ? "it is empty: use random bytes, e.g. randomBytes(16)"
    : token.byteLength > MAX_TOKEN
    ? `it is ${token.byteLength} bytes; a connection request carries at most ${MAX_TOKEN} with its length byte`
    : token.every((byte) => byte === 0)
    ? `its ${token.byteLength} bytes are all zero (an unfilled buffer?): use random bytes, e.g. randomBytes(16)`
    : undefined

// The budget the options give, or what is wrong with them.
const budgetOf = (
  options: AdmissionOptions | undefined
): { readonly uses: number; readonly window: Duration.Duration | undefined } | string => {
  const { singleUse, uses, window } = options ?? {}
  if (singleUse === true && uses !== undefined && uses !== 1) return `singleUse admits 1 connection, not uses: ${uses}`
  if (uses === undefined && singleUse === false) {
    return "a token admits a bounded number of connections: with singleUse false give uses (and a window), e.g. { uses: 10, window: \"1 minute\" }"
  }
  if (uses !== undefined && !(Number.isSafeInteger(uses) && uses >= 1)) {
    return `uses is how many connections the token admits, a positive integer, not ${String(uses)}`
  }
  if (uses !== undefined && uses > MAX_TOKEN_USES) {
    return `uses is at most ${MAX_TOKEN_USES} (there is no unlimited token), not ${uses}: give a client that needs more a new token`
  }
  if (window === undefined) return { uses: uses ?? 1, window: undefined }
  const length = Duration.decodeUnknown(window)
  if (Option.isNone(length) || !Duration.isFinite(length.value) || Duration.toMillis(length.value) <= 0) {
    return `window is a positive, finite duration (e.g. "1 minute"), not ${String(window)}`
  }
  return { uses: uses ?? 1, window: length.value }
}

/**
 * The private data a client sends to be admitted with `token` (`Connection.connect(peer, address,
 * port, { privateData })`): one byte holding the token's length (1 to {@link MAX_TOKEN}), then the
 * token's bytes. A client in C sends the same: `buf[0] = len; memcpy(buf + 1, token, len);` then
 * `struct rpma_conn_private_data pdata = { buf, len + 1 }` to `rpma_conn_req_connect`. Fails with
 * {@link InvalidTokenError} for a token {@link admission} would refuse.
 *
 * @since 1.0.0
 * @category constructors
 */
export const tokenPrivateData = (token: Uint8Array): Effect.Effect<Uint8Array, InvalidTokenError> =>
  Effect.suspend(() => {
    const problem = tokenProblem(token)
    if (problem !== undefined) return Effect.fail(new InvalidTokenError({ reason: problem }))
    const wire = new Uint8Array(1 + token.byteLength)
    wire[0] = token.byteLength
    wire.set(token, 1)
    return Effect.succeed(wire)
  })

/**
 * Sets an admission token for {@link acceptIfToken}: 1 to {@link MAX_TOKEN} random bytes that
 * the client received over an authenticated channel (e.g. the `token` of a
 * {@link DescriptorExchange} offer), admitting one connection unless `options` give it more
 * (`uses`, in all or per `window`). An empty or all-zero token, one that is too long, or a budget
 * that is not a positive number of uses fails here with {@link InvalidTokenError}. The token is
 * copied: changing the array later changes nothing.
 *
 * @since 1.0.0
 * @category constructors
 */
export const admission = (
  token: Uint8Array,
  options?: AdmissionOptions
): Effect.Effect<Admission, InvalidTokenError> =>
  Effect.flatMap(tokenPrivateData(token), (expected) => {
    const budget = budgetOf(options)
    if (typeof budget === "string") return Effect.fail(new InvalidTokenError({ reason: budget }))
    return Effect.succeed<AdmissionState>({
      [AdmissionTypeId]: AdmissionTypeId,
      singleUse: budget.uses === 1 && budget.window === undefined,
      uses: budget.uses,
      window: budget.window,
      expected,
      admittedAt: []
    })
  })

// A connection admitted, or why not.
type Admitting = Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
>

const isAdmission = (value: unknown): value is AdmissionState =>
  typeof value === "object" && value !== null && AdmissionTypeId in value && "expected" in value

/**
 * Admission: accepts the request only if its private data carries the token exactly (as
 * {@link tokenPrivateData} encodes it: its length, then its bytes; anything after is not
 * looked at), compared in constant time, and the token has a use left; otherwise rejects it at
 * once and fails with {@link AdmissionRefusedError}. RDMA itself authenticates nobody: without such
 * a check any host that reaches the port gets a connection, and a connection may reach every region
 * of the peer whose rkey it guesses. To keep each client's regions out of every other client's
 * reach, serve it on an endpoint of its own with {@link listenIsolated}.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Endpoint } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * declare const ep: Endpoint.Endpoint
 * const token = new Uint8Array(randomBytes(16)) // sent to the client over TLS
 * const serveOne = Effect.gen(function*() {
 *   const admission = yield* Endpoint.admission(token) // one connection
 *   const req = yield* Endpoint.next(ep)
 *   return yield* Endpoint.acceptIfToken(req, admission)
 * })
 * // The client: Connection.connect(peer, address, port, { privateData: yield* Endpoint.tokenPrivateData(token) })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptIfToken = (
  req: ConnectionRequest,
  admission: Admission,
  options?: Connection.Options
): Admitting => Effect.zipRight(admit(req, admission), accept(req, options))

// The admission decision: the request carries the token and the token has a use left (counted
// now, and returned: the time it was spent at), or it is rejected and this fails saying why.
const admit = (req: ConnectionRequest, admission: Admission) =>
  Effect.flatMap(Clock.currentTimeMillis, (now): Effect.Effect<number, AdmissionRefusedError | InvalidTokenError, RdmaDriver> => {
    const refuse = (error: AdmissionRefusedError | InvalidTokenError) => Effect.zipRight(reject(req), Effect.fail(error))
    if (!isAdmission(admission)) {
      return refuse(new InvalidTokenError({ reason: "acceptIfToken takes an Admission: make one with Endpoint.admission(token)" }))
    }
    const { admittedAt, expected, uses, window } = admission
    const presented = req.privateData.subarray(0, expected.byteLength)
    // The whole token is compared whatever differs first: no timing to learn it from.
    const carried = presented.byteLength === expected.byteLength && timingSafeEqual(presented, expected)
    if (window !== undefined) {
      const since = now - Duration.toMillis(window)
      while (admittedAt.length > 0 && admittedAt[0]! <= since) admittedAt.shift()
    }
    const reason = !carried
      ? "WrongToken"
      : admittedAt.length >= uses
      ? (window === undefined ? "TokenUsed" : "TooSoon")
      : undefined
    if (reason !== undefined) {
      return refuse(new AdmissionRefusedError({ address: req.endpoint.address, port: req.endpoint.port, reason }))
    }
    admittedAt.push(now)
    return Effect.succeed(now)
  })

// Gives back a use that admit spent at `at`, when the server, not the client, could not serve it.
const refund = (admission: Admission, at: number) =>
  Effect.sync(() => {
    const { admittedAt } = admission as AdmissionState
    const index = admittedAt.lastIndexOf(at)
    if (index >= 0) admittedAt.splice(index, 1)
  })

/**
 * Rejects a request (rpma_conn_req_delete).
 *
 * @since 0.1.0
 * @category constructors
 */
export const reject = (req: ConnectionRequest): Effect.Effect<void, never, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.suspend(() =>
      req.endpoint.unanswered.delete(req)
        ? Effect.zipRight(
          release("rpma_conn_req_delete", "a connection request", driver.connReqDelete(req.handle)),
          internalConnection.failPrepared(req.prepared)
        )
        : Effect.void
    ))

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
 * import { Endpoint, LocalMr } from "@effect-rdma/core"
 *
 * declare const ep: Endpoint.Endpoint
 * declare const inbox: LocalMr.LocalMr<"RECV">
 * const program = Effect.gen(function*() {
 *   const req = yield* Endpoint.next(ep)
 *   const first = yield* Endpoint.recv(req, { dst: inbox, offset: 0, length: 64 })
 *   yield* Endpoint.accept(req)
 *   const arrived = yield* first.completion
 *   return arrived.byteLength
 * })
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const recv = (
  req: ConnectionRequest,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Posted, Connection.TransferError> =>
  submitRecv(req.prepared.kernel, Operations.connReqRecv, args, () =>
    // Nothing completes before the request is accepted: a full queue would wait for good.
    req.prepared.recvSlots.available > 0 ? undefined : new OutOfRangeError({
      operation: Operations.connReqRecv.name,
      detail: `the receive queue is full (${req.prepared.recvSlots.size} receives): accept the request before posting more`
    }), toCompletion)

/**
 * An endpoint for one client, on a peer of its own: a protection domain that only that client's
 * connection shares, so it can reach nothing but what is registered with {@link Isolated.peer},
 * whatever rkeys it guesses (the device refuses an rkey of another protection domain:
 * `IBV_WC_REM_ACCESS_ERR`). Its first connection request is answered with {@link acceptIsolated},
 * and then it stops listening: no second connection, however it is asked for, ever joins the
 * protection domain. (librpma gives an incoming connection the protection domain of the peer its
 * endpoint listens on, hence a peer and an endpoint, on a port of its own, per client.)
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
  /** @internal */
  readonly endpoint: Endpoint
  /** @internal Stops listening (rpma_ep_shutdown); the connection, if any, lives on. */
  readonly stopListening: Effect.Effect<void>
  /** @internal Whether its one request was taken. */
  taken: boolean
}

/**
 * Makes an {@link Isolated} endpoint: a new peer on the device at `address` (this machine's) and an
 * endpoint on it listening on `address`:`port` until {@link acceptIsolated} answers its first
 * request (or the scope closes). Register what the client may reach with its `peer`, send the
 * client the descriptors, the port and a token over an authenticated channel
 * ({@link DescriptorExchange}), then accept. The peer is deleted after the scope closes and its
 * connection and regions are gone.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Endpoint, LocalMr, Usage } from "@effect-rdma/core"
 * import { randomBytes } from "node:crypto"
 *
 * // One client: its own protection domain, its own port, one connection.
 * declare const offerOverTls: (offer: { port: number; token: Uint8Array; descriptor: Uint8Array }) => Effect.Effect<void>
 * const serveClient = (port: number) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const isolated = yield* Endpoint.listenIsolated("192.168.77.1", port)
 *     const inbox = yield* LocalMr.allocate(isolated.peer, 4096, Usage.WRITE_DST)
 *     const token = new Uint8Array(randomBytes(16))
 *     yield* offerOverTls({ port: isolated.port, token, descriptor: yield* LocalMr.descriptor(inbox) })
 *     const conn = yield* Endpoint.acceptIsolated(isolated, yield* Endpoint.admission(token))
 *     // ... serve conn; the client reaches inbox and nothing else.
 *   }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const listenIsolated = (
  address: string,
  port: number
): Effect.Effect<Isolated, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    // Made first, so released after the endpoint and its connection (Scope order).
    const peer = yield* makePeer(address)
    const listening = yield* Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential))
    const endpoint = yield* Scope.extend(listen(peer, address, port), listening)
    const stopListening = Scope.close(listening, Exit.void)
    return { peer, address, port, endpoint, stopListening, taken: false }
  })

/**
 * Answers an {@link Isolated} endpoint's first connection request, and stops it listening: the
 * request is accepted if it carries `admission`'s token with a use left ({@link acceptIfToken}),
 * else rejected (the client hears so at once) and this fails with {@link AdmissionRefusedError}.
 * Either way no other request is taken: a refused one means someone else reached the port first, so
 * give the client a new endpoint and token. A second call fails with RpmaInvalidError. The wait for
 * the request is as long as the caller lets it be: bound it (`Effect.timeout`).
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptIsolated = (
  isolated: Isolated,
  admission: Admission,
  options?: Connection.Options
): Admitting =>
  Effect.suspend(() => {
    if (isolated.taken) {
      return Effect.fail(fromRpmaCode(
        RpmaCode.RPMA_E_INVAL,
        "rpma_ep_next_conn_req",
        `the isolated endpoint on ${isolated.address}:${isolated.port} answered its one request already: make another with Endpoint.listenIsolated`
      ))
    }
    isolated.taken = true
    return Effect.flatMap(next(isolated.endpoint, options), (req) => acceptIfToken(req, admission, options)).pipe(
      Effect.ensuring(isolated.stopListening)
    )
  })

/**
 * The ports {@link rendezvous} listens on for the isolated endpoints it makes: `from` to `to`,
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
 * What {@link rendezvous} made for one client: its isolated endpoint, and the one-time admission
 * that client was given for it. Register what the client may reach with `peer`, then accept with
 * `Endpoint.acceptIsolated(made, made.admission)`.
 *
 * @since 1.0.0
 * @category models
 */
export interface Rendezvous extends Isolated {
  readonly admission: Admission
}

// The rendezvous answer, a well-known endpoint's accept private data: the port (2 bytes, big
// endian), then the one-time token as tokenPrivateData encodes it (its length, then its bytes).
const ONE_TIME_TOKEN = 16

const rendezvousAnswer = (port: number, wire: Uint8Array): Uint8Array => {
  const answer = new Uint8Array(2 + wire.byteLength)
  new DataView(answer.buffer).setUint16(0, port)
  answer.set(wire, 2)
  return answer
}

const readAnswer = (answer: Uint8Array): { readonly port: number; readonly token: Uint8Array } | undefined => {
  if (answer.byteLength < 4) return undefined
  const port = new DataView(answer.buffer, answer.byteOffset).getUint16(0)
  const length = answer[2]!
  if (port === 0 || length === 0 || length > MAX_TOKEN || answer.byteLength < 3 + length) return undefined
  return { port, token: answer.slice(3, 3 + length) }
}

/** An isolated endpoint on the first free port of `ports`, in a scope of its own (closed if none is free). */
const listenIsolatedIn = (address: string, ports: PortRange): Effect.Effect<Isolated, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.suspend(() => {
    const range: { readonly from?: unknown; readonly to?: unknown } = typeof ports === "object" && ports !== null ? ports : {}
    const { from, to } = range
    if (
      !(typeof from === "number" && typeof to === "number" && Number.isInteger(from) && Number.isInteger(to) &&
        from >= 1 && from <= to && to <= 65535)
    ) {
      return Effect.fail(fromRpmaCode(
        RpmaCode.RPMA_E_INVAL,
        "rpma_ep_listen",
        `ports must be { from, to }, integers with 1 <= from <= to <= 65535, not ${String(JSON.stringify(ports))}`
      ))
    }
    const attempt = (port: number): Effect.Effect<Isolated, RpmaError, RdmaDriver | Scope.Scope> =>
      Effect.flatMap(Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential)), (own) =>
        listenIsolated(address, port).pipe(
          Scope.extend(own),
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Scope.close(own, exit)),
          // A port in use (by another client's endpoint, or another program): the next one.
          Effect.catchTag("RpmaProviderError", (error) => port < to ? attempt(port + 1) : Effect.fail(error))
        ))
    return attempt(from)
  })

/**
 * The server's side of a rendezvous: a client that {@link connectIsolated} to the well-known
 * endpoint `ep` with `gate`'s token (which it got from an authenticated channel, e.g. a
 * {@link DescriptorExchange} offer that every client gets) is given an isolated endpoint of its own
 * ({@link listenIsolated}) on a free port of `ports` and a new random single-use token for it, in
 * the accept's private data; the well-known connection then closes. Nothing is registered on `ep`'s
 * peer, so that connection reaches nothing. A request refused by `gate` fails this with
 * {@link AdmissionRefusedError}, and bounds how often one token gets a new endpoint (its `uses`
 * and `window`). When no port of `ports` is free the request is rejected, this fails with the
 * listen's error, and the use goes back to the token: the client may try again. The returned
 * {@link Rendezvous} lives with the scope.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Endpoint, LocalMr, Usage } from "@effect-rdma/core"
 *
 * declare const wellKnown: Endpoint.Endpoint // its port and token are in the DescriptorExchange offer
 * declare const gate: Endpoint.Admission // e.g. { uses: 100, window: "1 minute" }
 * const serveNext = Effect.scoped(Effect.gen(function*() {
 *   const made = yield* Endpoint.rendezvous(wellKnown, gate, { from: 20000, to: 20999 })
 *   const inbox = yield* LocalMr.allocate(made.peer, 4096, Usage.WRITE_DST)
 *   const conn = yield* Endpoint.acceptIsolated(made, made.admission, { privateData: yield* LocalMr.descriptor(inbox) })
 *   // ... serve conn: the client reaches inbox and nothing else.
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const rendezvous = (
  ep: Endpoint,
  gate: Admission,
  ports: PortRange,
  options?: Connection.Options
): Effect.Effect<
  Rendezvous,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const req = yield* next(ep, options)
    // Admitted before anything is made for it: a refused request costs no peer.
    const spent = yield* admit(req, gate)
    // No port free (or no range): the server's failure, so the client keeps its use to try again.
    const isolated = yield* Effect.tapError(listenIsolatedIn(ep.address, ports), () => Effect.zipRight(refund(gate, spent), reject(req)))
    const token = new Uint8Array(randomBytes(ONE_TIME_TOKEN))
    const oneTime = yield* admission(token)
    const privateData = rendezvousAnswer(isolated.port, yield* tokenPrivateData(token))
    // Accepted to carry the answer, closed at once: the client has it once it is connected.
    yield* Effect.scoped(accept(req, { ...options, privateData })).pipe(Effect.tapError(() => isolated.stopListening))
    return { ...isolated, admission: oneTime }
  })

/**
 * The client's side of a {@link rendezvous}: connects to the well-known endpoint at
 * `address`:`port` with `token` (as {@link tokenPrivateData} encodes it), reads the port and
 * one-time token of its own isolated endpoint from the server's answer, and connects there. The
 * returned connection's `privateData` is what the server accepted it with (e.g. descriptors).
 * An answer that is not a rendezvous answer fails with {@link InvalidTokenError}.
 *
 * @since 1.0.0
 * @category constructors
 */
export const connectIsolated = (
  peer: Peer,
  address: string,
  port: number,
  token: Uint8Array,
  options?: Connection.Options
): Effect.Effect<Connection.Connection, RpmaError | Connection.ConnectionFailedError | InvalidTokenError, RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const wire = yield* tokenPrivateData(token)
    const answer = yield* Effect.scoped(Effect.map(
      internalConnection.connect(peer, address, port, { ...options, privateData: wire }),
      (conn) => readAnswer(conn.privateData)
    ))
    if (answer === undefined) {
      return yield* new InvalidTokenError({
        reason: `the server on ${address}:${port} answered without a port and one-time token: is it a rendezvous endpoint?`
      })
    }
    const privateData = yield* tokenPrivateData(answer.token)
    return yield* internalConnection.connect(peer, address, answer.port, { ...options, privateData })
  })
