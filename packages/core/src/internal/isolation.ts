/**
 * Isolation: a listener on a peer of its own per client (its first request answered, then it stops
 * listening), and the rendezvous that hands a client such a listener's port and a one-time token.
 *
 * Declared and documented in Admission.ts.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import type * as Admission from "../Admission.js"
import type * as Connection from "../Connection.js"
import { ConnectionFailedError } from "../ConnectionError.js"
import type { RdmaDriver } from "../Driver.js"
import type * as Listener from "../Listener.js"
import { make as makePeer, type Peer } from "../Peer.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import {
  type AdmissionRefusedError,
  InvalidTokenError,
  make as makeAdmission,
  privateData,
  refund
} from "./admission.js"
import * as internalConnection from "./connection.js"
import { readSettings, toConfig } from "./connectionConfig.js"
import * as instrument from "./instrument.js"
import {
  accept,
  acceptKeys,
  admit,
  make as listen,
  next,
  notAnAdmission,
  notARequest,
  reject,
  type RequestImpl
} from "./listener.js"
import type { Keys } from "./optionsOnce.js"
import * as rendezvousAnswer from "./rendezvousAnswer.js"
import { notTheResource } from "./resourceGuard.js"

export class IsolatedImpl implements Admission.Isolated {
  /** Whether its one request was taken. */
  taken = false
  constructor(
    readonly peer: Peer,
    readonly address: string,
    readonly port: number,
    readonly listener: Listener.Listener,
    /** Stops listening (rpma_ep_shutdown); the connection, if any, lives on. */
    readonly stopListening: Effect.Effect<void>
  ) {}
}

const isIsolated = (u: unknown): u is IsolatedImpl => u instanceof IsolatedImpl

export class RendezvousImpl extends IsolatedImpl implements Admission.Rendezvous {
  constructor(isolated: IsolatedImpl, readonly admission: Admission.Admission) {
    super(isolated.peer, isolated.address, isolated.port, isolated.listener, isolated.stopListening)
  }
}

export const listenIsolated = (
  address: string,
  port: number
): Effect.Effect<Admission.Isolated, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    // Made first, so released after the listener and its connection (Scope order).
    const peer = yield* makePeer(address)
    const listening = yield* Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential))
    const listener = yield* Scope.extend(listen(peer, address, port), listening)
    return new IsolatedImpl(peer, address, port, listener, Scope.close(listening, Exit.void))
  })

export const acceptIsolated = (
  isolated: Admission.Isolated,
  admission: Admission.Admission,
  given?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  Listener.AcceptError,
  RdmaDriver | Scope.Scope
> =>
  Effect.suspend(() => {
    const notIsolated = notTheResource(
      "rpma_ep_next_conn_req",
      "isolated listener must be one Admission.listenIsolated or Admission.rendezvous made",
      isIsolated,
      isolated
    )
    // Refused before a client comes, whom it would otherwise reject.
    const refused = notIsolated ?? notAnAdmission(admission)
    if (refused !== undefined) return Effect.fail(refused)
    const read = readSettings(given, "rpma_ep_next_conn_req")
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    const own = isolated as IsolatedImpl
    if (own.taken) {
      return Effect.fail(fromRpmaCode(
        RpmaCode.RPMA_E_INVAL,
        "rpma_ep_next_conn_req",
        `the isolated listener on ${own.address}:${own.port} answered its one request already: make another with Admission.listenIsolated`
      ))
    }
    own.taken = true
    return Effect.flatMap(next(own.listener, options), (req) => accept(req, { ...options, admission })).pipe(
      Effect.ensuring(own.stopListening)
    )
  })

const ONE_TIME_TOKEN = 16

/** An isolated listener on the first free port of `ports`, in a scope of its own (closed if none is free). */
const listenIsolatedIn = (
  address: string,
  ports: Admission.PortRange
): Effect.Effect<IsolatedImpl, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.suspend(() => {
    const range: { readonly from?: unknown; readonly to?: unknown } = typeof ports === "object" && ports !== null
      ? ports
      : {}
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
    const attempt = (port: number): Effect.Effect<IsolatedImpl, RpmaError, RdmaDriver | Scope.Scope> =>
      Effect.flatMap(Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential)), (own) =>
        listenIsolated(address, port).pipe(
          Effect.map((isolated) =>
            isolated as IsolatedImpl
          ),
          Scope.extend(own),
          Effect.onExit((exit) => Exit.isSuccess(exit) ? Effect.void : Scope.close(own, exit)),
          // A port in use (by another client's listener, or another program): the next one.
          Effect.catchTag("RpmaProviderError", (error) => port < to ? attempt(port + 1) : Effect.fail(error))
        ))
    return attempt(from)
  })

/**
 * The rendezvous for a request taken from a well-known listener: admitted by `gate` (if any), an
 * isolated listener made for it on a free port of `ports`, the request accepted with that port and
 * a one-time token as its answer and closed at once.
 */
const rendezvousFor = (
  req: Listener.ConnectionRequest,
  gate: Admission.Admission | undefined,
  ports: Admission.PortRange,
  options?: Connection.Options
): Effect.Effect<
  RendezvousImpl,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const { address } = (req as RequestImpl).listener
    // Admitted before anything is made for it: a refused request costs no peer.
    const spent = gate === undefined ? undefined : yield* admit(req, gate)
    // No port free (or no range): the server's failure, so the client keeps its use to try again.
    const isolated = yield* Effect.tapError(
      listenIsolatedIn(address, ports),
      () => Effect.zipRight(gate === undefined || spent === undefined ? Effect.void : refund(gate, spent), reject(req))
    )
    const token = new Uint8Array(randomBytes(ONE_TIME_TOKEN))
    const oneTime = yield* makeAdmission(token)
    const answer = rendezvousAnswer.encode(isolated.port, yield* privateData(token))
    // Accepted to carry the answer, closed at once: the client has it once it is connected.
    // Admitted above already (options may carry the gate as `admission`: not a second time).
    yield* Effect.scoped(accept(req, { ...options, admission: undefined, privateData: answer })).pipe(
      Effect.tapError(() => isolated.stopListening)
    )
    return new RendezvousImpl(isolated, oneTime)
  })

export const rendezvous = (
  listener: Listener.Listener,
  gate: Admission.Admission,
  ports: Admission.PortRange,
  given?: Connection.Options
): Effect.Effect<
  Admission.Rendezvous,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.flatMap(
    readSettings(given, "rpma_ep_next_conn_req"),
    (options) => Effect.flatMap(next(listener, options), (req) => rendezvousFor(req, gate, ports, options))
  )

export const connectIsolated = (
  peer: Peer,
  address: string,
  port: number,
  token: Uint8Array,
  given?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const options = yield* readSettings(given, "rpma_conn_req_new")
    const wire = yield* privateData(token)
    const answer = yield* Effect.scoped(Effect.map(
      internalConnection.connectDirect(peer, address, port, { ...options, privateData: wire }),
      (conn) => rendezvousAnswer.decode(conn.privateData)
    ))
    if (answer === undefined) {
      return yield* new InvalidTokenError({
        reason:
          `the server on ${address}:${port} answered without a port and one-time token: is it a rendezvous listener?`
      })
    }
    return yield* internalConnection.connectDirect(peer, address, answer.port, {
      ...options,
      privateData: answer.privateData
    })
  })

/** How many ports after its own a listener's clients are isolated on by default (one per handshake under way). */
export const DEFAULT_PORTS = 64

/** The ports a listener's isolated clients get by default: the {@link DEFAULT_PORTS} after its own. */
export const defaultPorts = (listener: Listener.Listener): Admission.PortRange => ({
  from: listener.port + 1,
  to: Math.min(65535, listener.port + DEFAULT_PORTS)
})

/** What is wrong with how a server isolates its clients, or undefined. */
export const isolationProblem = (listener: Listener.Listener, options?: Listener.ClientOptions): string | undefined => {
  const isolation: unknown = options?.isolation ?? "perClient"
  if (isolation !== "perClient" && isolation !== "shared") {
    return `isolation must be "perClient" (the default) or "shared", not ${String(JSON.stringify(isolation))}`
  }
  if (isolation === "shared" || options?.ports !== undefined) return undefined
  return listener.port < 65535 ?
    undefined :
    `a listener on port 65535 has no port after it to isolate clients on: give ports ({ from, to }), or isolation: "shared"`
}

/** A client's settings: an accept's and how it is isolated. */
export const clientKeys: Keys<Listener.ClientOptions> = { ...acceptKeys, isolation: true, ports: true }

export const acceptClient = (
  request: Listener.ConnectionRequest,
  given?: Listener.ClientOptions
): Effect.Effect<Listener.Client, Listener.AcceptError, RdmaDriver | Scope.Scope> =>
  Effect.suspend(() => {
    const notRequest = notARequest("rpma_conn_req_connect", request)
    if (notRequest !== undefined) return instrument.refused(notRequest)
    const read = readSettings(given, "rpma_conn_req_connect", clientKeys)
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    const listener = (request as RequestImpl).listener
    const problem = isolationProblem(listener, options)
    if (problem !== undefined) {
      return Effect.zipRight(
        reject(request),
        Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_ep_listen", problem))
      )
    }
    if (options?.isolation === "shared") {
      return Effect.map(accept(request, options), (connection) => ({ connection, peer: listener.peer }))
    }
    const ports = options?.ports ?? defaultPorts(listener)
    return Effect.gen(function*() {
      const made = yield* rendezvousFor(request, options?.admission, ports, options)
      // The client connects again at once; one that does not is dropped after the time it had to
      // connect and the time the accept has (the connection's timeout, each).
      const bound = Duration.times(Duration.millis(toConfig(options).timeoutMs), 2)
      const connection = yield* Effect.timeoutFail(acceptIsolated(made, made.admission, options), {
        duration: bound,
        onTimeout: () => new ConnectionFailedError({ address: made.address, port: made.port, event: "TIMEOUT" })
      })
      return { connection, peer: made.peer }
    })
  })
