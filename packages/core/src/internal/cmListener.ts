/**
 * Listeners of librdmacm's verbs API: rdma_listen, rdma_get_request (each request adopted as an
 * endpoint, internal/cmEndpoint.ts), rdma_accept and rdma_reject. A listener is destroyed after
 * the requests it handed out; those still unanswered when it closes are rejected first.
 *
 * Declared and documented in CmListener.ts.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { dual } from "effect/Function"
import { pipeArguments } from "effect/Pipeable"
import * as Predicate from "effect/Predicate"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type * as CmEndpoint from "../CmEndpoint.js"
import { ClientGoneError } from "../CmEndpointError.js"
import type * as CmListener from "../CmListener.js"
import type { Driver, RdmaDriver } from "../Driver.js"
import type { CmEpConfig, CmListenerHandle } from "../DriverModel.js"
import type * as Polling from "../Polling.js"
import type { RdmaCmError } from "../RdmaError.js"
import { Errno, fromErrno } from "../RdmaError.js"
import { AdmissionImpl, AdmissionRefusedError, decide, InvalidTokenError, refusalData } from "./admission.js"
import {
  adopt,
  type EndpointImpl,
  established,
  failedUnlessDone,
  impl,
  invalid,
  isCmEndpoint,
  privateDataProblem,
  withConfig
} from "./cmEndpoint.js"
import * as instrument from "./instrument.js"
import { type Keys, readCmSettings } from "./optionsOnce.js"
import * as Owner from "./owner.js"
import { release } from "./release.js"
import { dataFirst, notAnEndpoint } from "./resourceGuard.js"

const { ECONNABORTED, ETIMEDOUT } = Errno

/**
 * How an accept sent to the client ends without a connection on the client's account: it has gone
 * (the CM's rejection: ECONNABORTED), or it never finished the handshake within the bound (it gave
 * up and kept its endpoint, or is too slow: ETIMEDOUT). Either way only this request is spent; as
 * an RdmaCmError the ETIMEDOUT ended CmListener.serve while the listener stayed open (issue 34).
 */
const isClientsFailure = (error: RdmaCmError): boolean => error.errno === ECONNABORTED || error.errno === ETIMEDOUT

export const TypeId: CmListener.TypeId = Symbol.for("@effect-rdma/core/CmListener") as CmListener.TypeId

/** A listener, the settings of the requests it hands out, and those not answered yet. */
export class ListenerImpl implements CmListener.CmListener {
  readonly [TypeId]: CmListener.TypeId = TypeId
  /** Requests handed out and not answered yet: rejected when the listener closes. */
  readonly unanswered = new Set<EndpointImpl>()
  constructor(
    readonly handle: CmListenerHandle,
    readonly address: string,
    readonly port: number,
    readonly config: CmEpConfig,
    readonly polling: Polling.Polling
  ) {}
  pipe() {
    return pipeArguments(this, arguments)
  }
}

const listenerImpl = (listener: CmListener.CmListener): ListenerImpl => listener as ListenerImpl

export const isCmListener = (u: unknown): u is CmListener.CmListener => Predicate.hasProperty(u, TypeId)

/** The owner of a listener: the requests it handed out. */
const listenerOwner = (listener: ListenerImpl): Owner.Owner =>
  Owner.of(listener, () => `the rdma_cm listener on ${listener.address}:${listener.port}`)

/** rdma_listen on `address`:`port`, scoped: destroyed after the requests it handed out. */
export const make = (
  address: string,
  port: number,
  options?: CmEndpoint.Options
): Effect.Effect<CmListener.CmListener, RdmaCmError, RdmaDriver | Scope.Scope> =>
  withConfig("rdma_listen", options, (driver, config, polling) =>
    Effect.acquireRelease(
      Effect.map(driver.cmListen(address, port, config), (listening) =>
        new ListenerImpl(listening.handle, address, listening.port, config, polling)),
      (listener) =>
        Effect.gen(function*() {
          // Unanswered requests are rejected first: their clients learn now, not at their timeout.
          for (const request of [...listener.unanswered]) {
            yield* rejectOnClose(driver, request)
          }
          yield* Owner.releaseWhenUnused(
            listenerOwner(listener),
            release("rdma_destroy_ep", "an rdma_cm listener", driver.cmListenerDestroy(listener.handle))
          )
        })
    ))

/**
 * rdma_get_request: the next request, scoped (rejected when its scope closes unanswered,
 * then destroyed). Interruptible while it waits.
 */
export const next = (
  self: CmListener.CmListener
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        if (!isCmListener(self)) {
          return yield* instrument.refused(
            fromErrno(
              Errno.EINVAL,
              "rdma_get_request",
              `the listener must be a CmListener (CmListener.make), not ${self === null ? "null" : typeof self}`
            )
          )
        }
        const listener = listenerImpl(self)
        const handle = yield* restore(driver.cmGetRequest(listener.handle))
        const owner = listenerOwner(listener)
        Owner.retain(owner)
        const ep = yield* adopt(
          driver,
          handle,
          listener.config,
          "request",
          (ep) => ep.phase === "request" ? rejectOnClose(driver, ep) : Effect.void,
          Owner.drop(owner),
          listener.polling
        )
        ep.privateData = yield* Effect.orElseSucceed(driver.cmPrivateData(handle), () => new Uint8Array(0))
        listener.unanswered.add(ep)
        ep.listener = listener
        return ep
      })
    ))

export const requests = (
  self: CmListener.CmListener
): Stream.Stream<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> => Stream.repeatEffect(next(self))

const answered = (ep: EndpointImpl): void => {
  ep.listener?.unanswered.delete(ep)
  ep.listener = undefined
}

/** Why `admission` refuses the request `ep` at `now`, or undefined (admitted: the use is counted). */
const refusal = (
  admission: unknown,
  ep: EndpointImpl,
  now: number
): AdmissionRefusedError | InvalidTokenError | undefined => {
  if (!(admission instanceof AdmissionImpl)) {
    return new InvalidTokenError({ reason: "admission takes an Admission: make one with Admission.make(token)" })
  }
  // Answered already: the accept says so, and no use is spent.
  if (ep.phase !== "request" || ep.listener === undefined) return undefined
  const reason = decide(admission, ep.privateData, now)
  return reason === undefined
    ? undefined
    : new AdmissionRefusedError({ address: ep.listener.address, port: ep.listener.port, reason })
}

/**
 * The admission's decision on an unanswered request: admitted (the use counted), or rejected (its
 * client hears so at once) and failed with why.
 */
export const admit = (
  self: CmEndpoint.CmEndpoint,
  admission: unknown
): Effect.Effect<void, AdmissionRefusedError | InvalidTokenError, RdmaDriver> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const refused = refusal(admission, impl(self), now)
    if (refused === undefined) return Effect.void
    // A rejection that fails (the client has gone) changes nothing: the request is refused. It
    // says why (refusalData), for the client's error (RdmaClient's AdmissionRejectedError).
    const privateData = refused._tag === "AdmissionRefusedError" ? refusalData(refused.reason) : undefined
    return Effect.flatMap(
      instrument.driver,
      (driver) => Effect.zipRight(Effect.ignore(rejectWith(driver, self, privateData)), Effect.fail(refused))
    )
  })

/** rdma_accept, bounded by the listener's timeout; answers the request, connected. */
export const accept: {
  (
    self: CmEndpoint.CmEndpoint,
    options?: CmListener.AcceptOptions
  ): Effect.Effect<CmEndpoint.CmEndpoint, CmListener.AcceptErrorOf<{ admission: never }>, RdmaDriver>
  (
    options?: CmListener.AcceptOptions
  ): (
    self: CmEndpoint.CmEndpoint
  ) => Effect.Effect<CmEndpoint.CmEndpoint, CmListener.AcceptErrorOf<{ admission: never }>, RdmaDriver>
} = dual(
  dataFirst(isCmEndpoint),
  (
    self: CmEndpoint.CmEndpoint,
    given?: CmListener.AcceptOptions
  ): Effect.Effect<CmEndpoint.CmEndpoint, CmListener.AcceptErrorOf<{ admission: never }>, RdmaDriver> =>
    Effect.suspend(() => {
      if (!isCmEndpoint(self)) return instrument.refused(notAnEndpoint("rdma_accept", self)!)
      const read = readCmSettings(given, "rdma_accept", acceptKeys)
      if (Either.isLeft(read)) return Effect.fail(read.left)
      const options = read.right
      return options?.admission === undefined
        ? acceptAdmitted(self, options)
        : Effect.zipRight(admit(self, options.admission), acceptAdmitted(self, options))
    })
)

const acceptKeys: Keys<CmListener.AcceptOptions> = { privateData: true, admission: true }

const acceptAdmitted = (
  self: CmEndpoint.CmEndpoint,
  options?: CmListener.AcceptOptions
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError | ClientGoneError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const ep = impl(self)
    const privateData = options?.privateData
    const refused = privateDataProblem("rdma_accept", privateData, "accept") ??
      (ep.phase === "request"
        ? undefined
        : invalid("rdma_accept", `the endpoint is ${ep.phase}, not an unanswered request`))
    if (refused !== undefined) return Effect.fail(refused)
    answered(ep)
    ep.moveTo("connecting")
    return driver.cmAccept(ep.handle, privateData, ep.config.timeoutMs).pipe(
      Effect.catchIf(
        isClientsFailure,
        (cause) => Effect.fail(new ClientGoneError({ operation: "rdma_accept", cause }))
      ),
      Effect.zipRight(established(driver, ep, ep.privateData)),
      failedUnlessDone(ep),
      Effect.as(self)
    )
  })

/** rdma_reject; a request answered already is refused. */
export const reject: {
  (self: CmEndpoint.CmEndpoint, options?: CmListener.RejectOptions): Effect.Effect<void, RdmaCmError, RdmaDriver>
  (options?: CmListener.RejectOptions): (self: CmEndpoint.CmEndpoint) => Effect.Effect<void, RdmaCmError, RdmaDriver>
} = dual(
  dataFirst(isCmEndpoint),
  (self: CmEndpoint.CmEndpoint, given?: CmListener.RejectOptions): Effect.Effect<void, RdmaCmError, RdmaDriver> =>
    Effect.flatMap(instrument.driver, (driver) => {
      const read = readCmSettings(given, "rdma_reject", rejectKeys)
      return Either.isLeft(read) ? Effect.fail(read.left) : rejectWith(driver, self, read.right?.privateData)
    })
)

const rejectKeys: Keys<CmListener.RejectOptions> = { privateData: true }

const rejectWith = (
  driver: Driver,
  request: CmEndpoint.CmEndpoint,
  privateData?: Uint8Array
): Effect.Effect<void, RdmaCmError> =>
  Effect.suspend(() => {
    const notEndpoint = notAnEndpoint("rdma_reject", request)
    if (notEndpoint !== undefined) return instrument.refused(notEndpoint)
    const ep = impl(request)
    const refused = privateDataProblem("rdma_reject", privateData) ??
      (privateData !== undefined && privateData.byteLength > 148
        ? invalid("rdma_reject", `private data is ${privateData.byteLength} bytes; a rejection carries at most 148`)
        : ep.phase === "request"
        ? undefined
        : invalid("rdma_reject", `the endpoint is ${ep.phase}, not an unanswered request`))
    if (refused !== undefined) return Effect.fail(refused)
    answered(ep)
    ep.moveTo("rejected")
    return driver.cmReject(ep.handle, privateData)
  })

/** An unanswered request whose scope (or listener) closes: rejected without private data. */
const rejectOnClose = (driver: Driver, request: CmEndpoint.CmEndpoint): Effect.Effect<void> =>
  Effect.asVoid(release("rdma_reject", "an unanswered rdma_cm request", rejectWith(driver, request)))
