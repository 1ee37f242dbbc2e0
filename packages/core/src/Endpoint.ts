/**
 * A listening endpoint (`struct rpma_ep`): incoming connection requests arrive as a Stream; each
 * is accepted (a scoped {@link Connection.Connection}) or rejected. Requests left unanswered are
 * rejected when the endpoint shuts down with its scope.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { timingSafeEqual } from "node:crypto"
import type * as Connection from "./Connection.js"
import { type ConnReqHandle, type EndpointHandle, RdmaDriver } from "./Driver.js"
import * as DriverArguments from "./DriverArguments.js"
import * as internalConnection from "./internal/connection.js"
import { privateDataRefusal, toConfig } from "./internal/connectionConfig.js"
import { OutOfRangeError } from "./ConnectionError.js"
import * as instrument from "./internal/instrument.js"
import { Operations } from "./internal/operationTable.js"
import * as Owner from "./internal/owner.js"
import { submitRecv, toCompletion } from "./internal/posting.js"
import * as srq from "./internal/srq.js"
import { release } from "./internal/release.js"
import { ownerOf, type Peer } from "./Peer.js"
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
    const refused = DriverArguments.queueSizes(config)
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
 * @since 0.4.0
 * @category constants
 */
export const MAX_TOKEN: number = DriverArguments.PRIVATE_DATA_LIMIT.connect - 1

/**
 * A token refused when it was set ({@link admission}, {@link tokenPrivateData}): not bytes, empty,
 * all zeros (an unfilled buffer, which a client that sends nothing would match) or longer than
 * {@link MAX_TOKEN}.
 *
 * @since 0.4.0
 * @category errors
 */
export class InvalidTokenError extends Data.TaggedError("InvalidTokenError")<{ readonly reason: string }> {
  override get message(): string {
    return `admission token refused: ${this.reason}`
  }
}

/**
 * A request refused by {@link acceptIfToken}: its private data did not carry the token
 * (`WrongToken`), or carried a single-use token already used (`TokenUsed`). The request was
 * rejected, so its client learned it at once.
 *
 * @since 0.3.0
 * @category errors
 */
export class AdmissionRefusedError extends Data.TaggedError("AdmissionRefusedError")<{
  readonly address: string
  readonly port: number
  /** @since 0.4.0 */
  readonly reason: "WrongToken" | "TokenUsed"
}> {
  override get message(): string {
    const what = this.reason === "TokenUsed" ? "carried a single-use token already used" : "did not carry the expected token"
    return `a connection request on ${this.address}:${this.port} ${what}: rejected`
  }
}

/**
 * @since 0.4.0
 * @category symbols
 */
export const AdmissionTypeId: unique symbol = Symbol.for("@effect-rdma/core/Endpoint/Admission")

/**
 * @since 0.4.0
 * @category symbols
 */
export type AdmissionTypeId = typeof AdmissionTypeId

/**
 * An admission token, checked when it was set ({@link admission}): what {@link acceptIfToken}
 * compares a request's private data with.
 *
 * @since 0.4.0
 * @category models
 */
export interface Admission {
  readonly [AdmissionTypeId]: AdmissionTypeId
  /** Whether it admits one connection only. */
  readonly singleUse: boolean
}

/**
 * @since 0.4.0
 * @category models
 */
export interface AdmissionOptions {
  /**
   * Admit one connection only: the first request that carries the token uses it up, whether or
   * not its connection then succeeds (a retry needs a new token). Default false.
   */
  readonly singleUse?: boolean | undefined
}

// The wire form, what a client sends as private data: one byte with the token's length, then the
// token. rdma_cm pads private data with zeros, so without the length a token's trailing zeros
// (or an all-zero token) would match a client that never sent them.
interface AdmissionState extends Admission {
  readonly expected: Uint8Array
  used: boolean
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

/**
 * The private data a client sends to be admitted with `token` (`Connection.connect(peer, address,
 * port, { privateData })`): one byte holding the token's length (1 to {@link MAX_TOKEN}), then the
 * token's bytes. A client in C sends the same: `buf[0] = len; memcpy(buf + 1, token, len);` then
 * `struct rpma_conn_private_data pdata = { buf, len + 1 }` to `rpma_conn_req_connect`. Fails with
 * {@link InvalidTokenError} for a token {@link admission} would refuse.
 *
 * @since 0.4.0
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
 * {@link DescriptorExchange} offer). An empty or all-zero token, or one that is too long, fails
 * here with {@link InvalidTokenError}. The token is copied: changing the array later changes
 * nothing.
 *
 * @since 0.4.0
 * @category constructors
 */
export const admission = (
  token: Uint8Array,
  options?: AdmissionOptions
): Effect.Effect<Admission, InvalidTokenError> =>
  Effect.map(tokenPrivateData(token), (expected): AdmissionState => ({
    [AdmissionTypeId]: AdmissionTypeId,
    singleUse: options?.singleUse === true,
    expected,
    used: false
  }))

const isAdmission = (value: unknown): value is AdmissionState =>
  typeof value === "object" && value !== null && AdmissionTypeId in value && "expected" in value

/**
 * Admission: accepts the request only if its private data carries the token exactly (as
 * {@link tokenPrivateData} encodes it: its length, then its bytes; anything after is not
 * looked at), compared in constant time; otherwise rejects it at once and fails with
 * {@link AdmissionRefusedError}. RDMA itself authenticates nobody: without such a check any host
 * that reaches the port gets a connection, and a connection may reach every region of the peer
 * whose rkey it guesses. Give each client its own Peer (its own protection domain) and endpoint for
 * the regions it may reach, and a single-use token.
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
 *   const admission = yield* Endpoint.admission(token, { singleUse: true })
 *   const req = yield* Endpoint.next(ep)
 *   return yield* Endpoint.acceptIfToken(req, admission)
 * })
 * // The client: Connection.connect(peer, address, port, { privateData: yield* Endpoint.tokenPrivateData(token) })
 * ```
 *
 * @since 0.3.0
 * @category constructors
 */
export const acceptIfToken = (
  req: ConnectionRequest,
  admission: Admission,
  options?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.suspend((): Effect.Effect<
    Connection.Connection,
    RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
    RdmaDriver | Scope.Scope
  > => {
    const refuse = (error: AdmissionRefusedError | InvalidTokenError) => Effect.zipRight(reject(req), Effect.fail(error))
    if (!isAdmission(admission)) {
      return refuse(new InvalidTokenError({ reason: "acceptIfToken takes an Admission: make one with Endpoint.admission(token)" }))
    }
    const { expected } = admission
    const presented = req.privateData.subarray(0, expected.byteLength)
    // The whole token is compared whatever differs first: no timing to learn it from.
    const carried = presented.byteLength === expected.byteLength && timingSafeEqual(presented, expected)
    const reason = !carried ? "WrongToken" : admission.singleUse && admission.used ? "TokenUsed" : undefined
    if (reason !== undefined) {
      return refuse(new AdmissionRefusedError({ address: req.endpoint.address, port: req.endpoint.port, reason }))
    }
    if (admission.singleUse) admission.used = true
    return accept(req, options)
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
 * @since 0.3.0
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
