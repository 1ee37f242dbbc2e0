/**
 * Isolation: a listener on a peer of its own per client (its first request answered, then it stops
 * listening), and the rendezvous that hands a client such a listener's port and a one-time token.
 *
 * Declared and documented in Admission.ts.
 */
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import type * as Admission from "../Admission.js"
import type * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import type * as Listener from "../Listener.js"
import { make as makePeer, type Peer } from "../Peer.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import {
  type AdmissionRefusedError,
  InvalidTokenError,
  make as makeAdmission,
  MAX_TOKEN,
  privateData,
  refund
} from "./admission.js"
import * as internalConnection from "./connection.js"
import { accept, admit, make as listen, next, reject } from "./listener.js"

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
  options?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  Listener.AcceptError,
  RdmaDriver | Scope.Scope
> =>
  Effect.suspend(() => {
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

// The rendezvous answer, a well-known listener's accept private data: the port (2 bytes, big
// endian), then the one-time token as privateData encodes it (its length, then its bytes).
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

export const rendezvous = (
  listener: Listener.Listener,
  gate: Admission.Admission,
  ports: Admission.PortRange,
  options?: Connection.Options
): Effect.Effect<
  Admission.Rendezvous,
  RpmaError | Connection.ConnectionFailedError | AdmissionRefusedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const req = yield* next(listener, options)
    // Admitted before anything is made for it: a refused request costs no peer.
    const spent = yield* admit(req, gate)
    // No port free (or no range): the server's failure, so the client keeps its use to try again.
    const isolated = yield* Effect.tapError(
      listenIsolatedIn(listener.address, ports),
      () => Effect.zipRight(refund(gate, spent), reject(req))
    )
    const token = new Uint8Array(randomBytes(ONE_TIME_TOKEN))
    const oneTime = yield* makeAdmission(token)
    const answer = rendezvousAnswer(isolated.port, yield* privateData(token))
    // Accepted to carry the answer, closed at once: the client has it once it is connected.
    yield* Effect.scoped(accept(req, { ...options, privateData: answer })).pipe(
      Effect.tapError(() => isolated.stopListening)
    )
    return new RendezvousImpl(isolated, oneTime)
  })

export const connectIsolated = (
  peer: Peer,
  address: string,
  port: number,
  token: Uint8Array,
  options?: Connection.Options
): Effect.Effect<
  Connection.Connection,
  RpmaError | Connection.ConnectionFailedError | InvalidTokenError,
  RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const wire = yield* privateData(token)
    const answer = yield* Effect.scoped(Effect.map(
      internalConnection.connect(peer, address, port, { ...options, privateData: wire }),
      (conn) => readAnswer(conn.privateData)
    ))
    if (answer === undefined) {
      return yield* new InvalidTokenError({
        reason:
          `the server on ${address}:${port} answered without a port and one-time token: is it a rendezvous listener?`
      })
    }
    const own = yield* privateData(answer.token)
    return yield* internalConnection.connect(peer, address, answer.port, { ...options, privateData: own })
  })
