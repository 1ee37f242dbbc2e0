/**
 * A librpma listener (`struct rpma_ep`) and its connection requests: what they are inside, and
 * their life. Requests left unanswered are rejected when the listener shuts down with its scope.
 *
 * Declared and documented in Listener.ts.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import * as StreamM from "effect/Stream"
import type * as Connection from "../Connection.js"
import { OutOfRangeError } from "../ConnectionError.js"
import { RdmaDriver } from "../Driver.js"
import { type ConnReqHandle, type EndpointHandle } from "../DriverModel.js"
import type * as Listener from "../Listener.js"
import type { Peer } from "../Peer.js"
import { fromRpmaCode, RpmaCode, type RpmaError, RpmaInvalidError } from "../RdmaError.js"
import { AdmissionImpl, AdmissionRefusedError, decide, InvalidTokenError } from "./admission.js"
import * as internalConnection from "./connection.js"
import { connectionKeys, privateDataRefusal, queueSizesProblem, readSettings, toConfig } from "./connectionConfig.js"
import * as handles from "./handles.js"
import * as instrument from "./instrument.js"
import { Operations } from "./operationTable.js"
import type { Keys } from "./optionsOnce.js"
import * as Owner from "./owner.js"
import { ownerOf } from "./peer.js"
import * as polling from "./polling.js"
import { submitRecv, toCompletion } from "./posting.js"
import { release } from "./release.js"
import { PipeableBase } from "./resource.js"
import { type Kind, notAPeer, notTheResource, ownEffect } from "./resourceGuard.js"
import * as srq from "./srq.js"

export const TypeId: Listener.TypeId = Symbol.for("@effect-rdma/core/Listener") as Listener.TypeId

export const RequestTypeId: Listener.RequestTypeId = Symbol.for(
  "@effect-rdma/core/Listener/ConnectionRequest"
) as Listener.RequestTypeId

/** A listener's machinery: its handle and the requests it took that are not answered yet. */
export class ListenerImpl extends PipeableBase implements Listener.Listener {
  readonly [TypeId]: Listener.TypeId = TypeId
  readonly unanswered = new Set<RequestImpl>()
  constructor(
    readonly handle: EndpointHandle,
    readonly peer: Peer,
    readonly address: string,
    readonly port: number
  ) {
    super()
  }
}

/** A request's machinery: its handle, the receives posted on it, its shared receive queue. */
export class RequestImpl extends PipeableBase implements Listener.ConnectionRequest {
  readonly [RequestTypeId]: Listener.RequestTypeId = RequestTypeId
  constructor(
    readonly handle: ConnReqHandle,
    readonly privateData: Uint8Array,
    readonly listener: ListenerImpl,
    /** Receives posted before the request is answered; the connection takes them over. */
    readonly prepared: internalConnection.Prepared,
    /** The shared receive queue the request was taken with: its connection uses it. */
    readonly sharedReceiveQueue: Connection.Options["sharedReceiveQueue"]
  ) {
    super()
  }
}

export const isListener = (u: unknown): u is Listener.Listener => u instanceof ListenerImpl

export const isConnectionRequest = (u: unknown): u is Listener.ConnectionRequest => u instanceof RequestImpl

const implOf = (listener: Listener.Listener) => listener as ListenerImpl

/** librpma's answer to a NULL listener (an endpoint): RPMA_E_INVAL. */
export const notAListener = (operation: string, value: unknown) =>
  notTheResource(operation, "listener must be a Listener (Listener.make)", isListener, value)

/** librpma's answer to a NULL connection request: RPMA_E_INVAL. */
export const notARequest = (operation: string, value: unknown) =>
  notTheResource(operation, "request must be a ConnectionRequest (Listener.next)", isConnectionRequest, value)
const requestKind: Kind<Listener.ConnectionRequest> = {
  is: isConnectionRequest,
  what: "a ConnectionRequest (Listener.next)"
}
const requestOf = (req: Listener.ConnectionRequest) => req as RequestImpl

export const make = (
  peer: Peer,
  address: string,
  port: number
): Effect.Effect<Listener.Listener, RpmaError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const notPeer = notAPeer("rpma_ep_listen", peer)
    if (notPeer !== undefined) return Effect.fail(notPeer)
    return Effect.acquireRelease(
      Effect.map(driver.epListen(handles.peer(peer), address, port), (handle) => {
        Owner.retain(ownerOf(peer))
        return new ListenerImpl(handle, peer, address, port)
      }),
      (listener) =>
        Effect.forEach(listener.unanswered, (req) => reject(req), { discard: true }).pipe(
          Effect.zipRight(
            release(
              "rpma_ep_shutdown",
              `the listener on ${address}:${listener.port}`,
              driver.epShutdown(listener.handle)
            )
          ),
          Effect.zipRight(Owner.drop(ownerOf(peer))),
          Effect.provideService(RdmaDriver, driver)
        )
    )
  })

export const next = (
  listener: Listener.Listener,
  given?: Connection.Options
): Effect.Effect<Listener.ConnectionRequest, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const notListener = notAListener("rpma_ep_next_conn_req", listener)
    if (notListener !== undefined) return instrument.refused(notListener)
    const read = readSettings(given, "rpma_ep_next_conn_req")
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    const ep = implOf(listener)
    const config = toConfig(options)
    // The queue pair is made with the request: what its connection could not live with is refused now.
    const refused = queueSizesProblem(config)
    if (refused !== undefined) return Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_cfg", refused))
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(driver.epNextConnReq(ep.handle, config)), (handle) => {
        let req: RequestImpl | undefined
        // Receives are posted on the request only while it is unanswered.
        const unanswered = (operation: string) =>
          req !== undefined && ep.unanswered.has(req) ? undefined : new RpmaInvalidError({
            operation,
            detail: "the request was already accepted or rejected (or its listener shut down): post on its connection"
          })
        return Effect.zipWith(
          driver.connReqPrivateData(handle),
          internalConnection.prepare(driver, handle, config, unanswered),
          (privateData, prepared) => {
            req = new RequestImpl(handle, privateData, ep, prepared, options?.sharedReceiveQueue)
            ep.unanswered.add(req)
            return req
          }
        ).pipe(Effect.tapError(() => Effect.ignore(driver.connReqDelete(handle))))
      })
    )
  })

export const requests = (
  listener: Listener.Listener,
  options?: Connection.Options
): Stream.Stream<Listener.ConnectionRequest, RpmaError, RdmaDriver> => StreamM.repeatEffect(next(listener, options))

export const reject = (request: Listener.ConnectionRequest): Effect.Effect<void, never, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) =>
    ownEffect("Listener.reject", requestKind, request, (request) => {
      const req = requestOf(request)
      return req.listener.unanswered.delete(req)
        ? Effect.zipRight(
          release("rpma_conn_req_delete", "a connection request", driver.connReqDelete(req.handle)),
          internalConnection.failPrepared(req.prepared)
        )
        : Effect.void
    }))

/** What an admission that is none is refused with, before or instead of any decision. */
export const notAnAdmission = (admission: unknown): InvalidTokenError | undefined =>
  admission instanceof AdmissionImpl
    ? undefined
    : new InvalidTokenError({ reason: "admission takes an Admission: make one with Admission.make(token)" })

/**
 * The admission decision on `req` (see {@link decide}): the time its use was spent at,
 * or the request is rejected and this fails saying why.
 */
export const admit = (request: Listener.ConnectionRequest, admission: unknown) =>
  Effect.flatMap(
    Clock.currentTimeMillis,
    (now): Effect.Effect<number, AdmissionRefusedError | InvalidTokenError, RdmaDriver> => {
      const req = requestOf(request)
      const refuse = (error: AdmissionRefusedError | InvalidTokenError) =>
        Effect.zipRight(reject(req), Effect.fail(error))
      const notOne = notAnAdmission(admission)
      if (notOne !== undefined) return refuse(notOne)
      const reason = decide(admission as AdmissionImpl, req.privateData, now)
      return reason === undefined
        ? Effect.succeed(now)
        : refuse(new AdmissionRefusedError({ address: req.listener.address, port: req.listener.port, reason }))
    }
  )

const acceptChecked = (
  request: Listener.ConnectionRequest,
  options: Listener.AcceptOptions | undefined
): Effect.Effect<Connection.Connection, RpmaError | Connection.ConnectionFailedError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.suspend(() => {
      const req = requestOf(request)
      const refused = privateDataRefusal(options?.privateData, "accept")
      if (refused !== undefined) return Effect.fail(refused)
      // Answered when open takes the request, past its checks of the options (an accept they refuse
      // leaves the request unanswered); from there a refused accept consumes (rejects) it.
      const answer = Effect.suspend(() =>
        req.listener.unanswered.delete(req) ? Effect.succeed(req.handle) : Effect.fail(
          fromRpmaCode(
            RpmaCode.RPMA_E_INVAL,
            "rpma_conn_req_connect",
            "the request was already accepted or rejected (or its listener shut down)"
          )
        )
      )
      const { address, peer, port } = req.listener
      return polling.resolve(options?.polling, internalConnection.pollingRefusal, (setting) =>
        Effect.zipRight(
          srq.usedBy(req.sharedReceiveQueue),
          internalConnection.open(
            driver,
            peer,
            answer,
            options?.privateData,
            { address, port },
            toConfig(options),
            setting,
            req.prepared
          )
        ))
    }))

/** An accept's settings: the connection's and its admission. */
export const acceptKeys: Keys<Listener.AcceptOptions> = { ...connectionKeys, admission: true }

export const accept = (
  request: Listener.ConnectionRequest,
  given?: Listener.AcceptOptions
): Effect.Effect<
  Connection.Connection,
  Listener.AcceptError,
  RdmaDriver | Scope.Scope
> =>
  Effect.suspend(() => {
    if (!isConnectionRequest(request)) return instrument.refused(notARequest("rpma_conn_req_connect", request)!)
    const read = readSettings(given, "rpma_conn_req_connect", acceptKeys)
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    return options?.admission === undefined
      ? acceptChecked(request, options)
      : Effect.zipRight(admit(request, options.admission), acceptChecked(request, options))
  })

export const acceptNext = (
  listener: Listener.Listener,
  given?: Listener.AcceptOptions
): Effect.Effect<Connection.Connection, Listener.AcceptError, RdmaDriver | Scope.Scope> =>
  // Read once for both: the request is made with the same settings it is accepted with.
  Effect.flatMap(readSettings(given, "rpma_ep_next_conn_req", acceptKeys), (options) =>
    Effect.flatMap(
      next(listener, options),
      (req) => Effect.tapError(accept(req, options), () => reject(req)) // reject: a no-op once answered
    ))

export const postRecv = (
  request: Listener.ConnectionRequest,
  args: Connection.RecvArgs
): Effect.Effect<Connection.Posted, Connection.TransferError> => {
  const notRequest = notARequest(Operations.connReqRecv.name, request)
  if (notRequest !== undefined) return Effect.suspend(() => instrument.refused(notRequest))
  const { prepared } = requestOf(request)
  return submitRecv(prepared.kernel, Operations.connReqRecv, args, () =>
    // Nothing completes before the request is accepted: a full queue would wait for good.
    prepared.recvSlots.available > 0 ? undefined : new OutOfRangeError({
      operation: Operations.connReqRecv.name,
      detail: `the receive queue is full (${prepared.recvSlots.size} receives): accept the request before posting more`
    }), toCompletion)
}
