/**
 * Endpoints of librdmacm's verbs API: their life (rdma_create_ep, rdma_connect, rdma_listen,
 * rdma_get_request, rdma_accept / rdma_reject, rdma_disconnect, rdma_destroy_ep) and the posting
 * kernel each one posts through (internal/poster.ts, over cmPostMany / cmArmCompletions).
 *
 * Release order is rdma_reg_msgs(3)'s: the endpoint is disconnected (its queue pair flushes what
 * is posted), the requests' outcomes are drained within the timeout, the regions are deregistered
 * (each once no request names it, internal/cmRegistration.ts), and only then is the endpoint
 * destroyed (its queue pair, then its identifier: Owner.releaseWhenUnused waits for the regions);
 * a listener is destroyed after the requests it handed out.
 *
 * Declared and documented in CmEndpoint.ts.
 */
import * as Duration from "effect/Duration"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as Runtime from "effect/Runtime"
import * as Scope from "effect/Scope"
import type * as CmEndpoint from "../CmEndpoint.js"
import { ClientGoneError } from "../CmEndpointError.js"
import { ConnectionClosedError, type OperationError } from "../ConnectionError.js"
import type { Driver, RdmaDriver } from "../Driver.js"
import type { CmEpConfig, CmEpHandle, CmWorkRequest } from "../DriverModel.js"
import * as DriverArguments from "../DriverArguments.js"
import { Errno, fromErrno, type RdmaCmError } from "../RdmaError.js"
import { boundedWait } from "./connection.js"
import { timeoutMillis } from "./connectionConfig.js"
import { PendingTable, runAll, Slots } from "./dataPath.js"
import * as instrument from "./instrument.js"
import { Operations } from "./operationTable.js"
import * as Owner from "./owner.js"
import { Poster } from "./poster.js"
import { release } from "./release.js"

const { ECONNABORTED, EINVAL } = Errno

/** What may be posted before the endpoint is connected or accepted. */
const RECEIVES: ReadonlySet<string> = new Set([Operations.cmRecv.name, Operations.cmRecvv.name])

/** Every default of an endpoint's settings filled in. */
export const toConfig = (options: CmEndpoint.Options | undefined): CmEpConfig => ({
  timeoutMs: timeoutMillis(options?.timeout),
  maxSendWr: options?.maxSendWr ?? 64,
  maxRecvWr: options?.maxRecvWr ?? 64,
  maxSendSge: options?.maxSendSge ?? 4,
  maxRecvSge: options?.maxRecvSge ?? 4,
  maxInlineData: options?.maxInlineData ?? 64
})

/** A setting that is not a positive integer, or a timeout that is not a non-negative one. */
const configProblem = (config: CmEpConfig): string | undefined => {
  for (const [name, value] of Object.entries(config)) {
    if (name === "timeoutMs") {
      if (!(value >= 0 && value <= 2 ** 31 - 1)) {
        return `timeout is ${Number.isNaN(value) ? "not a duration" : `${value} ms`}: it must be a duration from 0 to about 24 days (a Duration or a string such as "5 seconds")`
      }
      continue
    }
    const least = name === "maxInlineData" ? 0 : 1
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < least) {
      return `${name} is ${String(value)}: it must be an integer of at least ${least}`
    }
  }
  return undefined
}

/** The settings made and checked, then `use`d; refused with EINVAL before the driver is called. */
const withConfig = <A>(
  operation: string,
  options: CmEndpoint.Options | undefined,
  use: (driver: Driver, config: CmEpConfig) => Effect.Effect<A, RdmaCmError, Scope.Scope>
): Effect.Effect<A, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const config = toConfig(options)
    const refused = configProblem(config)
    return refused !== undefined ? Effect.fail(invalid(operation, refused)) : use(driver, config)
  })

const invalid = (operation: string, detail: string): RdmaCmError => fromErrno(EINVAL, operation, detail)

const privateDataProblem = (operation: string, privateData: unknown, side?: "connect" | "accept") => {
  const refused = DriverArguments.privateData(privateData, side)
  return refused === undefined ? undefined : invalid(operation, refused)
}

/** The kernel's queue calls of an endpoint: librdmacm's posting call and completion channels. */
const queueCalls = (driver: Driver) => ({
  name: driver.name,
  postMany: (ep: CmEpHandle, requests: ReadonlyArray<CmWorkRequest>) => driver.cmPostMany(ep, requests),
  armCompletions: driver.cmArmCompletions
})

/** The owner of an endpoint: its regions. */
export const endpointOwner = (ep: CmEndpoint.CmEndpoint): Owner.Owner =>
  Owner.of(ep, () => `the rdma_cm endpoint ${ep.info.localAddress}:${ep.info.localPort}`)

/** The owner of a listener: the requests it handed out. */
const listenerOwner = (listener: CmEndpoint.Listener): Owner.Owner =>
  Owner.of(listener, () => `the rdma_cm listener on ${listener.address}:${listener.port}`)

/** How requests fail once the endpoint has ended: closed, or lost (with why). */
const closedError = (reason: "CLOSED" | "LOST", cause?: unknown) => (operation: string, unsignalled?: boolean) =>
  new ConnectionClosedError(
    unsignalled === true ? { operation, reason, cause, unsignalled } : { operation, reason, cause }
  )

/** What an endpoint's operations reach: its kernel, its state, what was granted. */
export class EndpointImpl implements CmEndpoint.CmEndpoint {
  state: CmEndpoint.State
  /** The private data of its last connection event (the request's, the acceptance's). */
  privateData: Uint8Array = new Uint8Array(0)
  /** Stops the watch of its events (set once connected or accepted). */
  stopWatching: Effect.Effect<unknown> = Effect.void
  /** The listener that handed it out, while it is unanswered. */
  listener: CmEndpoint.Listener | undefined = undefined
  /** Set by the first {@link end}, done when it is. */
  ended: Deferred.Deferred<void> | undefined = undefined
  /** How its requests fail once it has ended (closed, or lost and why). */
  endedAs: (operation: string, unsignalled?: boolean) => ConnectionClosedError = closedError("CLOSED")
  constructor(
    readonly handle: CmEpHandle,
    readonly info: CmEndpoint.CmEndpoint["info"],
    readonly config: CmEpConfig,
    readonly kernel: Poster<CmWorkRequest>,
    readonly table: PendingTable<OperationError>,
    readonly sendSlots: Slots,
    readonly recvSlots: Slots,
    state: CmEndpoint.State
  ) {
    this.state = state
  }
  get address(): string {
    return this.info.localAddress
  }
}

/** The implementation behind a public endpoint. */
export const impl = (ep: CmEndpoint.CmEndpoint): EndpointImpl => ep as EndpointImpl

/**
 * Makes the endpoint of `handle` (created, or taken from a listener) and its kernel, scoped: its
 * close disconnects, drains, fails what is left, and destroys it once its regions are gone.
 * `onGone` runs after it is destroyed (a listener lets go of its request).
 */
const adopt = (
  driver: Driver,
  handle: CmEpHandle,
  config: CmEpConfig,
  state: CmEndpoint.State,
  onClose: (ep: EndpointImpl) => Effect.Effect<void>,
  onGone: Effect.Effect<void>
): Effect.Effect<EndpointImpl, RdmaCmError, Scope.Scope> =>
  Effect.gen(function*() {
    const destroy = release("rdma_destroy_ep", "an rdma_cm endpoint", driver.cmEpDestroy(handle)).pipe(
      Effect.zipRight(onGone)
    )
    const info = yield* Effect.tapError(driver.cmEpInfo(handle), () => destroy)
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const table = new PendingTable<OperationError>()
    const sendSlots = new Slots(config.maxSendWr)
    const recvSlots = new Slots(config.maxRecvWr)
    let ep: EndpointImpl | undefined = undefined
    const kernel = new Poster<CmWorkRequest>({
      driver: queueCalls(driver),
      queue: handle,
      completions: handle,
      table,
      sendSlots,
      recvSlots,
      refusal: (operation) =>
        ep === undefined || ep.state === "closed"
          ? (ep?.endedAs ?? closedError("CLOSED"))(operation)
          : ep.state === "connected" || RECEIVES.has(operation)
          ? undefined
          : invalid(operation, `the endpoint is ${ep.state}: post sends, reads and writes once it is connected ` +
            `(receives may be posted before)`),
      flushed: () => ep === undefined || ep.state !== "closed" ? undefined : ep.endedAs,
      lost: (cause) => {
        runFork(end(driver, ep!, cause))
      },
      run: (effect) => {
        runFork(effect)
      }
    })
    ep = new EndpointImpl(handle, info, config, kernel, table, sendSlots, recvSlots, state)
    const self = ep
    const close = Effect.gen(function*() {
      yield* onClose(self)
      yield* end(driver, self, undefined)
      yield* self.stopWatching
      kernel.stop()
      // Whatever an interrupted end left waiting fails now (a no-op if nothing is pending).
      table.failAll(self.endedAs)
      yield* runAll(table.releaseHeld())
      yield* Owner.releaseWhenUnused(endpointOwner(self), destroy)
    })
    yield* Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, close))
    return self
  })

/**
 * Whoever ends it first (its close, the peer's disconnect, a failed completion queue, the
 * watchdog): disconnected, what reports drained within the timeout, the rest failed. Later callers
 * wait for that first end to finish (bounded by the drain's timeout), so a close never destroys
 * the endpoint while the end another fiber started is still draining.
 */
const end = (d: Driver, ep: EndpointImpl, cause: unknown): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (ep.ended !== undefined) return Deferred.await(ep.ended)
    const ended = Deferred.unsafeMake<void>(FiberId.none)
    ep.ended = ended
    const wasConnected = ep.state === "connected"
    ep.state = "closed"
    ep.endedAs = closedError(cause === undefined ? "CLOSED" : "LOST", cause)
    ep.sendSlots.close()
    ep.recvSlots.close()
    return Effect.all([
      wasConnected ? release("rdma_disconnect", "an rdma_cm endpoint", d.cmDisconnect(ep.handle)) : Effect.void,
      d.cmPollCompletions(ep.handle).pipe(
        Effect.map((ready) => ep.kernel.dispatch(ready, ep.endedAs)),
        Effect.orElseSucceed(() => []),
        Effect.flatMap(runAll)
      ),
      // A queue pair never connected flushes nothing: its receives have no outcome to wait for.
      wasConnected ? boundedWait(ep.table.drained, ep.config.timeoutMs) : Effect.void,
      Effect.sync(() => ep.table.failAll(ep.endedAs))
    ], { discard: true }).pipe(Effect.ensuring(Deferred.succeed(ended, undefined)))
  })

/** rdma_create_ep with a queue pair, scoped; nothing connected yet. */
export const create = (
  address: string,
  port: number,
  options?: CmEndpoint.Options
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  withConfig("rdma_create_ep", options, (driver, config) =>
    Effect.uninterruptible(
      Effect.flatMap(
        driver.cmEpCreate(address, port, config),
        (handle) => adopt(driver, handle, config, "created", () => Effect.void, Effect.void)
      )
    ))

/** rdma_connect: bounded by the endpoint's timeout; interrupted, the endpoint stays to be closed. */
export const connect = (
  endpoint: CmEndpoint.CmEndpoint,
  privateData?: Uint8Array
): Effect.Effect<void, RdmaCmError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const ep = impl(endpoint)
    const refused = privateDataProblem("rdma_connect", privateData, "connect") ??
      (ep.state === "created" ? undefined : invalid("rdma_connect", `the endpoint is ${ep.state}: connect a new one`))
    if (refused !== undefined) return Effect.fail(refused)
    ep.state = "connecting"
    return driver.cmConnect(ep.handle, privateData, ep.config.timeoutMs).pipe(
      // Rejected: what the other side said with its rejection is kept, as an acceptance's is.
      Effect.tapError((error) =>
        error.errnoName === "ECONNREFUSED"
          ? Effect.ignore(Effect.map(driver.cmPrivateData(ep.handle), (data) => (ep.privateData = data)))
          : Effect.void
      ),
      Effect.zipRight(driver.cmPrivateData(ep.handle)),
      Effect.flatMap((data) => established(driver, ep, data)),
      Effect.onExit((exit) => Effect.sync(() => Exit.isFailure(exit) && ep.state === "connecting" && (ep.state = "failed")))
    )
  })

/**
 * Connected: receives posted before wait on its channel, and the peer's disconnect ends it. In one
 * uninterruptible step, so that its watchers are always known to the close that stops them.
 */
const established = (driver: Driver, ep: EndpointImpl, privateData: Uint8Array): Effect.Effect<void> =>
  Effect.uninterruptible(Effect.gen(function*() {
    ep.privateData = privateData
    ep.state = "connected"
    ep.kernel.ensureArmed()
    const watcher = yield* driver.cmNextEvent(ep.handle).pipe(
      Effect.repeat({ until: (event) => event === "DISCONNECTED" || event === "DEVICE_REMOVAL" }),
      Effect.matchEffect({
        onSuccess: (event) => end(driver, ep, event === "DISCONNECTED" ? undefined : new Error(`the device went away (${event})`)),
        // ECANCELED: destroyed; anything else: the event channel failed, and the endpoint with it.
        onFailure: (cause) => end(driver, ep, cause)
      }),
      Effect.interruptible,
      Effect.forkDaemon
    )
    // A read or a write with no completion within the timeout means the other side, or the path
    // to it, is gone (a cut link, a frozen host: the transport may retry far longer): the endpoint
    // is lost, and what waits fails now. Sends and receives wait on the other side's application.
    // Requests carry the watchdog's tick (stamped by the kernel), so the data path reads no clock.
    const period = Math.max(ep.config.timeoutMs / 10, 1)
    const watchdog = yield* Effect.sleep(Duration.millis(period)).pipe(
      Effect.zipRight(Effect.suspend(() => {
        ep.table.tick++
        const waited = (ep.table.oldestWait() - 1) * period
        return waited <= ep.config.timeoutMs ? Effect.void : end(
          driver,
          ep,
          new Error(`no completion for over ${Math.round(waited)} ms (timeout ${ep.config.timeoutMs} ms): the other side does not answer`)
        )
      })),
      Effect.repeat({ until: () => ep.state !== "connected" }),
      Effect.interruptible,
      Effect.forkDaemon
    )
    ep.stopWatching = Fiber.interruptAll([watcher, watchdog])
  }))

/** rdma_listen on `address`:`port`, scoped: destroyed after the requests it handed out. */
export const listen = (
  address: string,
  port: number,
  options?: CmEndpoint.Options
): Effect.Effect<CmEndpoint.Listener, RdmaCmError, RdmaDriver | Scope.Scope> =>
  withConfig("rdma_listen", options, (driver, config) =>
    Effect.acquireRelease(
      Effect.map(driver.cmListen(address, port, config), (listening): CmEndpoint.Listener => ({
        handle: listening.handle,
        address,
        port: listening.port,
        config,
        unanswered: new Set()
      })),
      (listener) =>
        Effect.gen(function*() {
          // Unanswered requests are rejected first: their clients learn now, not at their timeout.
          for (const request of [...listener.unanswered]) yield* rejectOnClose(driver, request)
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
  listener: CmEndpoint.Listener
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const handle = yield* restore(driver.cmGetRequest(listener.handle))
        const owner = listenerOwner(listener)
        Owner.retain(owner)
        const ep = yield* adopt(
          driver,
          handle,
          listener.config,
          "request",
          (ep) => ep.state === "request" ? rejectOnClose(driver, ep) : Effect.void,
          Owner.drop(owner)
        )
        ep.privateData = yield* Effect.orElseSucceed(driver.cmPrivateData(handle), () => new Uint8Array(0))
        listener.unanswered.add(ep)
        ep.listener = listener
        return ep
      })
    ))


const answered = (ep: EndpointImpl): void => {
  ep.listener?.unanswered.delete(ep)
  ep.listener = undefined
}

/** rdma_accept, bounded by the listener's timeout. */
export const accept = (
  request: CmEndpoint.CmEndpoint,
  privateData?: Uint8Array
): Effect.Effect<void, RdmaCmError | ClientGoneError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const ep = impl(request)
    const refused = privateDataProblem("rdma_accept", privateData, "accept") ??
      (ep.state === "request" ? undefined : invalid("rdma_accept", `the endpoint is ${ep.state}, not an unanswered request`))
    if (refused !== undefined) return Effect.fail(refused)
    answered(ep)
    ep.state = "connecting"
    return driver.cmAccept(ep.handle, privateData, ep.config.timeoutMs).pipe(
      Effect.catchIf(
        (error) => error.errno === ECONNABORTED,
        (cause) => Effect.fail(new ClientGoneError({ operation: "rdma_accept", cause }))
      ),
      Effect.zipRight(established(driver, ep, ep.privateData)),
      Effect.onExit((exit) => Effect.sync(() => Exit.isFailure(exit) && ep.state === "connecting" && (ep.state = "failed")))
    )
  })

/** rdma_reject; a request answered already is refused. */
export const reject = (
  request: CmEndpoint.CmEndpoint,
  privateData?: Uint8Array
): Effect.Effect<void, RdmaCmError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => rejectWith(driver, request, privateData))

const rejectWith = (
  driver: Driver,
  request: CmEndpoint.CmEndpoint,
  privateData?: Uint8Array
): Effect.Effect<void, RdmaCmError> =>
  Effect.suspend(() => {
    const ep = impl(request)
    const refused = privateDataProblem("rdma_reject", privateData) ??
      (privateData !== undefined && privateData.byteLength > 148
        ? invalid("rdma_reject", `private data is ${privateData.byteLength} bytes; a rejection carries at most 148`)
        : ep.state === "request"
        ? undefined
        : invalid("rdma_reject", `the endpoint is ${ep.state}, not an unanswered request`))
    if (refused !== undefined) return Effect.fail(refused)
    answered(ep)
    ep.state = "rejected"
    return driver.cmReject(ep.handle, privateData)
  })

/** An unanswered request whose scope (or listener) closes: rejected without private data. */
const rejectOnClose = (driver: Driver, request: CmEndpoint.CmEndpoint): Effect.Effect<void> =>
  Effect.asVoid(release("rdma_reject", "an unanswered rdma_cm request", rejectWith(driver, request)))
