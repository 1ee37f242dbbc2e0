/**
 * Endpoints of librdmacm's verbs API: their life (rdma_create_ep, rdma_connect, rdma_disconnect,
 * rdma_destroy_ep), their state, and the posting kernel each one posts through
 * (internal/poster.ts, over cmPostMany / cmArmCompletions). Requests taken from a listener are
 * endpoints too, adopted here by internal/cmListener.ts.
 *
 * Release order is rdma_reg_msgs(3)'s: the endpoint is disconnected (its queue pair flushes what
 * is posted), the requests' outcomes are drained within the timeout, the regions are deregistered
 * (each once no request names it, internal/cmRegistration.ts), and only then is the endpoint
 * destroyed (its queue pair, then its identifier: Owner.releaseWhenUnused waits for the regions).
 *
 * Declared and documented in CmEndpoint.ts.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import { dual } from "effect/Function"
import { pipeArguments } from "effect/Pipeable"
import * as PubSub from "effect/PubSub"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type * as CmEndpoint from "../CmEndpoint.js"
import type { ConnectionClosedError, OperationError } from "../ConnectionError.js"
import { type Driver, type RdmaDriver } from "../Driver.js"
import * as DriverArguments from "../DriverArguments.js"
import { type CmEpConfig, type CmEpHandle, type CmWorkRequest } from "../DriverModel.js"
import type * as Polling from "../Polling.js"
import { Errno, fromErrno, type RdmaCmError } from "../RdmaError.js"
import { isCmEndpoint, TypeId } from "./cmEndpointId.js"
import { timeoutMillis } from "./connectionConfig.js"
import { PendingTable, runAll, Slots } from "./dataPath.js"
import * as instrument from "./instrument.js"
import { Operations } from "./operationTable.js"
import { type Keys, readCmSettings } from "./optionsOnce.js"
import * as Owner from "./owner.js"
import * as polling from "./polling.js"
import type { Poster } from "./poster.js"
import { closedError, settle, startPoster, watchdog, watchEvents } from "./queueLife.js"
import { release } from "./release.js"
import { dataFirst, endpointKind, notAnEndpoint, ownEffect } from "./resourceGuard.js"

export { isCmEndpoint, TypeId }

const { EINVAL } = Errno

/** What may be posted before the endpoint is connected or accepted. */
const RECEIVES: ReadonlySet<string> = new Set([Operations.cmRecv.name, Operations.cmRecvv.name])

/**
 * Where an endpoint is, in the words its refusals use: made and not yet connected
 * (`created`), an incoming request not yet answered (`request`), connecting or accepting,
 * connected, rejected, its connect or accept failed, ending (`closing`), ended. The public
 * {@link CmEndpoint.State} is derived from it.
 */
export type Phase = "created" | "request" | "connecting" | "connected" | "rejected" | "failed" | "closing" | "closed"

const isFinal = (state: CmEndpoint.State): boolean => state === "Closed" || state === "Lost"

/** Every default of an endpoint's settings filled in. */
export const toConfig = (options: CmEndpoint.Options | undefined): CmEpConfig => ({
  timeoutMs: timeoutMillis(options?.timeout),
  maxSendWr: options?.maxSendWr ?? 64,
  maxRecvWr: options?.maxRecvWr ?? 64,
  maxSendSge: options?.maxSendSge ?? 4,
  maxRecvSge: options?.maxRecvSge ?? 4,
  maxInlineData: options?.maxInlineData ?? 64,
  retryCount: options?.retryCount,
  rnrRetryCount: options?.rnrRetryCount,
  responderResources: options?.responderResources,
  initiatorDepth: options?.initiatorDepth
})

/** rdma_conn_param's fields and their largest values (the retries are 3 bits, the depths 8); absent: the defaults. */
const CONN_PARAM_MAX: Partial<Record<string, number>> = {
  retryCount: 7,
  rnrRetryCount: 7,
  responderResources: 255,
  initiatorDepth: 255
}

/** A setting that is not a positive integer, or a timeout that is not a positive one (as a connection's). */
const configProblem = (config: CmEpConfig): string | undefined => {
  for (const [name, value] of Object.entries(config)) {
    if (name === "timeoutMs") {
      if (!(value >= 1 && value <= 2 ** 31 - 1)) {
        return `timeout is ${
          Number.isNaN(value) ? "not a duration (or a negative one)" : `${value} ms`
        }: it must be a duration from 1 ms to about 24 days (a Duration or a string such as "5 seconds")`
      }
      continue
    }
    const most = CONN_PARAM_MAX[name]
    if (most !== undefined) {
      if (value !== undefined && !(Number.isSafeInteger(value) && value >= 0 && value <= most)) {
        return `${name} is ${String(value)}: it must be an integer from 0 to ${most} (rdma_conn_param)`
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

/** Every endpoint setting, read once where an endpoint is made. */
export const endpointKeys: Keys<CmEndpoint.Options> = {
  timeout: true,
  maxSendWr: true,
  maxRecvWr: true,
  maxSendSge: true,
  maxRecvSge: true,
  maxInlineData: true,
  retryCount: true,
  rnrRetryCount: true,
  responderResources: true,
  initiatorDepth: true,
  polling: true
}

/** The settings made and checked, then `use`d; refused with EINVAL before the driver is called. */
export const withConfig = <A>(
  operation: string,
  given: CmEndpoint.Options | undefined,
  use: (driver: Driver, config: CmEpConfig, polling: Polling.Polling) => Effect.Effect<A, RdmaCmError, Scope.Scope>
): Effect.Effect<A, RdmaCmError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const read = readCmSettings(given, operation, endpointKeys)
    if (Either.isLeft(read)) return Effect.fail(read.left)
    const options = read.right
    const config = toConfig(options)
    const refused = configProblem(config)
    if (refused !== undefined) return Effect.fail(invalid(operation, refused))
    return polling.resolve(options?.polling, (detail) =>
      invalid(operation, detail), (setting) =>
      use(driver, config, setting))
  })

export const invalid = (operation: string, detail: string): RdmaCmError => fromErrno(EINVAL, operation, detail)

/** Private data a connect, an accept or a reject cannot carry, refused before anything is sent. */
export const privateDataProblem = (operation: string, privateData: unknown, side?: "connect" | "accept") => {
  const refused = DriverArguments.privateData(privateData, side)
  return refused === undefined ? undefined : invalid(operation, refused)
}

/** The kernel's queue calls of an endpoint: librdmacm's posting call and completion channels. */
const queueCalls = (driver: Driver) => ({
  name: driver.name,
  postMany: (ep: CmEpHandle, requests: ReadonlyArray<CmWorkRequest>) => driver.cmPostMany(ep, requests),
  armCompletions: driver.cmArmCompletions,
  spinCompletions: driver.cmSpinCompletions
})

/** The owner of an endpoint: its regions. */
export const endpointOwner = (ep: CmEndpoint.CmEndpoint): Owner.Owner =>
  Owner.of(ep, () => `the rdma_cm endpoint ${ep.info.localAddress}:${ep.info.localPort}`)

/** What hands a request out and hears when it is answered (internal/cmListener.ts). */
export interface RequestSource {
  readonly unanswered: Set<EndpointImpl>
  /** Where it listens: what a refused request's error names. */
  readonly address: string
  readonly port: number
}

/** What an endpoint's operations reach: its kernel, its state, what was granted. */
export class EndpointImpl implements CmEndpoint.CmEndpoint {
  readonly [TypeId]: CmEndpoint.TypeId = TypeId
  /** Where it is; moved by {@link EndpointImpl.moveTo} only, which publishes the public state. */
  phase: Phase
  /** The private data of its last connection event (the request's, the acceptance's). */
  privateData: Uint8Array = new Uint8Array(0)
  /** Stops the watch of its events (set once connected or accepted). */
  stopWatching: Effect.Effect<unknown> = Effect.void
  /** The listener that handed it out, while it is unanswered. */
  listener: RequestSource | undefined = undefined
  /** Set by the first {@link end}, done when it is. */
  ended: Deferred.Deferred<void> | undefined = undefined
  /** How its requests fail once it has ended (closed, or lost and why). */
  endedAs: (operation: string, unsignalled?: boolean) => ConnectionClosedError = closedError("CLOSED")
  /** How it ended: closed (either side's disconnect, or never connected) or lost. */
  outcome: "Closed" | "Lost" = "Closed"
  /** The public state last published: final (and then fixed) once Closed or Lost. */
  current: CmEndpoint.State
  /** Its close before its destroy: rejects an unanswered request, then ends it. Set by {@link adopt}. */
  shutdown: Effect.Effect<void> = Effect.void
  constructor(
    readonly handle: CmEpHandle,
    readonly info: CmEndpoint.CmEndpoint["info"],
    readonly config: CmEpConfig,
    readonly kernel: Poster<CmWorkRequest>,
    readonly table: PendingTable<OperationError>,
    readonly sendSlots: Slots,
    readonly recvSlots: Slots,
    phase: Phase,
    /** Every change of the public state, for {@link changes}. */
    readonly states: PubSub.PubSub<CmEndpoint.State>,
    /** The final state, for {@link awaitClosed}. */
    readonly final: Deferred.Deferred<CmEndpoint.State>
  ) {
    this.phase = phase
    this.current = publicState(phase, this.outcome)
  }
  get address(): string {
    return this.info.localAddress
  }
  /** Whether it has ended or is ending: what is posted now fails with {@link endedAs}. */
  get isEnded(): boolean {
    return this.ended !== undefined
  }
  /** Moves to `phase` and publishes the public state if it changed (a final one stays). */
  moveTo(phase: Phase): void {
    this.phase = phase
    if (isFinal(this.current)) return
    const state = publicState(phase, this.outcome)
    if (state === this.current) return
    this.current = state
    this.states.unsafeOffer(state)
    if (isFinal(state)) Deferred.unsafeDone(this.final, Exit.succeed(state))
  }
  pipe() {
    return pipeArguments(this, arguments)
  }
}

const publicState = (phase: Phase, outcome: "Closed" | "Lost"): CmEndpoint.State => {
  switch (phase) {
    case "connected":
      return "Connected"
    case "closing":
      return "Closing"
    case "closed":
      return outcome
    case "rejected":
    case "failed":
      return "Closed"
    default:
      return "Connecting"
  }
}

/** The implementation behind a public endpoint. */
export const impl = (ep: CmEndpoint.CmEndpoint): EndpointImpl => ep as EndpointImpl

/**
 * Makes the endpoint of `handle` (created, or taken from a listener) and its kernel,
 * scoped: its close (`onClose`, then its end) disconnects, drains and fails what is left, and its
 * scope's finalizer destroys it once its regions are gone. `onGone` runs after it is destroyed (a
 * listener lets go of its request).
 */
export const adopt = (
  driver: Driver,
  handle: CmEpHandle,
  config: CmEpConfig,
  phase: Phase,
  onClose: (ep: EndpointImpl) => Effect.Effect<void>,
  onGone: Effect.Effect<void>,
  pollingSetting: Polling.Polling
): Effect.Effect<EndpointImpl, RdmaCmError, Scope.Scope> =>
  Effect.gen(function*() {
    const destroy = release("rdma_destroy_ep", "an rdma_cm endpoint", driver.cmEpDestroy(handle)).pipe(
      Effect.zipRight(onGone)
    )
    const info = yield* Effect.tapError(driver.cmEpInfo(handle), () => destroy)
    const table = new PendingTable<OperationError>()
    const sendSlots = new Slots(config.maxSendWr)
    const recvSlots = new Slots(config.maxRecvWr)
    let ep: EndpointImpl | undefined = undefined
    const kernel = yield* startPoster<CmWorkRequest>((fork) => ({
      driver: queueCalls(driver),
      queue: handle,
      completions: handle,
      polling: polling.spinner(pollingSetting),
      table,
      sendSlots,
      recvSlots,
      refusal: (operation) =>
        ep === undefined || ep.isEnded
          ? (ep?.endedAs ?? closedError("CLOSED"))(operation)
          : ep.phase === "connected" || RECEIVES.has(operation)
          ? undefined
          : invalid(
            operation,
            `the endpoint is ${ep.phase}: post sends, reads and writes once it is connected ` +
              `(receives may be posted before)`
          ),
      flushed: () => ep === undefined || !ep.isEnded ? undefined : ep.endedAs,
      lost: (cause) => {
        fork(end(driver, ep!, cause))
      }
    }))
    const states = yield* PubSub.unbounded<CmEndpoint.State>()
    const final = Deferred.unsafeMake<CmEndpoint.State>(FiberId.none)
    ep = new EndpointImpl(handle, info, config, kernel, table, sendSlots, recvSlots, phase, states, final)
    const self = ep
    self.shutdown = Effect.zipRight(Effect.suspend(() => onClose(self)), end(driver, self, undefined))
    const finalize = Effect.gen(function*() {
      yield* self.shutdown
      yield* self.stopWatching
      kernel.stop()
      // Whatever an interrupted end left waiting fails now (a no-op if nothing is pending).
      table.failAll(self.endedAs)
      yield* runAll(table.releaseHeld())
      yield* Owner.releaseWhenUnused(endpointOwner(self), destroy)
    })
    yield* Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, finalize))
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
    const wasConnected = ep.phase === "connected"
    if (cause !== undefined) ep.outcome = "Lost"
    ep.moveTo("closing")
    ep.endedAs = closedError(cause === undefined ? "CLOSED" : "LOST", cause)
    ep.sendSlots.close()
    ep.recvSlots.close()
    return Effect.zipRight(
      wasConnected ? release("rdma_disconnect", "an rdma_cm endpoint", d.cmDisconnect(ep.handle)) : Effect.void,
      settle({
        poster: ep.kernel,
        table: ep.table,
        poll: d.cmPollCompletions(ep.handle),
        failedAs: ep.endedAs,
        // A queue pair never connected flushes nothing: its receives have no outcome to wait for.
        drainMs: wasConnected ? ep.config.timeoutMs : undefined
      })
    ).pipe(
      Effect.ensuring(Effect.zipRight(Effect.sync(() => ep.moveTo("closed")), Deferred.succeed(ended, undefined)))
    )
  })

/** rdma_create_ep with a queue pair, scoped; nothing connected yet. */
export const make = (
  address: string,
  port: number,
  options?: CmEndpoint.Options
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  withConfig("rdma_create_ep", options, (driver, config, setting) =>
    Effect.uninterruptible(
      Effect.flatMap(
        driver.cmEpCreate(address, port, config),
        (handle) => adopt(driver, handle, config, "created", () => Effect.void, Effect.void, setting)
      )
    ))

const establishKeys: Keys<CmEndpoint.EstablishOptions> = { privateData: true }

/** rdma_connect: bounded by the endpoint's timeout; interrupted, the endpoint stays to be closed. */
export const establish: {
  (self: CmEndpoint.CmEndpoint, options?: CmEndpoint.EstablishOptions): Effect.Effect<void, RdmaCmError, RdmaDriver>
  (options?: CmEndpoint.EstablishOptions): (self: CmEndpoint.CmEndpoint) => Effect.Effect<void, RdmaCmError, RdmaDriver>
} = dual(
  dataFirst(isCmEndpoint),
  (self: CmEndpoint.CmEndpoint, given?: CmEndpoint.EstablishOptions): Effect.Effect<void, RdmaCmError, RdmaDriver> =>
    Effect.flatMap(instrument.driver, (driver) => {
      const notEndpoint = notAnEndpoint("rdma_connect", self)
      if (notEndpoint !== undefined) return instrument.refused(notEndpoint)
      const read = readCmSettings(given, "rdma_connect", establishKeys)
      if (Either.isLeft(read)) return Effect.fail(read.left)
      const ep = impl(self)
      const privateData = read.right?.privateData
      const refused = privateDataProblem("rdma_connect", privateData, "connect") ??
        (ep.phase === "created" ? undefined : invalid("rdma_connect", `the endpoint is ${ep.phase}: connect a new one`))
      if (refused !== undefined) return Effect.fail(refused)
      ep.moveTo("connecting")
      return driver.cmConnect(ep.handle, privateData, ep.config.timeoutMs).pipe(
        // Rejected: what the other side said with its rejection is kept, as an acceptance's is.
        Effect.tapError((error) =>
          error.errnoName === "ECONNREFUSED"
            ? Effect.ignore(Effect.map(driver.cmPrivateData(ep.handle), (data) => (ep.privateData = data)))
            : Effect.void
        ),
        Effect.zipRight(driver.cmPrivateData(ep.handle)),
        Effect.flatMap((data) => established(driver, ep, data)),
        failedUnlessDone(ep)
      )
    })
)

/** A connect or an accept that did not succeed leaves the endpoint failed (unless it ended meanwhile). */
export const failedUnlessDone = (ep: EndpointImpl) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.onExit(
    effect,
    (exit) => Effect.sync(() => Exit.isFailure(exit) && ep.phase === "connecting" && ep.moveTo("failed"))
  )

/** rdma_create_ep then rdma_connect. */
export const connect = (
  address: string,
  port: number,
  given?: CmEndpoint.ConnectOptions
): Effect.Effect<CmEndpoint.CmEndpoint, RdmaCmError, RdmaDriver | Scope.Scope> =>
  // Read once for both: the endpoint is made and connected with the same settings.
  Effect.flatMap(
    readCmSettings(given, "rdma_create_ep", { ...endpointKeys, ...establishKeys }),
    (options) => Effect.tap(make(address, port, options), (ep) => establish(ep, options))
  )

/**
 * Connected: receives posted before wait on its channel, and the peer's disconnect ends
 * it. In one uninterruptible step, so that its watchers are always known to the close that stops
 * them. An endpoint closed while it connected stays closed.
 */
export const established = (driver: Driver, ep: EndpointImpl, privateData: Uint8Array): Effect.Effect<void> =>
  Effect.uninterruptible(Effect.gen(function*() {
    ep.privateData = privateData
    if (ep.isEnded) return
    ep.moveTo("connected")
    ep.kernel.ensureArmed()
    const watcher = yield* watchEvents({
      next: driver.cmNextEvent(ep.handle),
      isLast: (event) => event === "DISCONNECTED" || event === "DEVICE_REMOVAL",
      onLast: (event) =>
        end(driver, ep, event === "DISCONNECTED" ? undefined : new Error(`the device went away (${event})`)),
      // ECANCELED: destroyed; anything else: the event channel failed, and the endpoint with it.
      onFailure: (cause) => end(driver, ep, cause)
    })
    // Lost once a read or a write waits past the timeout: what waits fails now.
    const timer = yield* watchdog({
      table: ep.table,
      timeoutMs: ep.config.timeoutMs,
      watching: () => ep.phase === "connected",
      lost: (cause) => end(driver, ep, cause)
    })
    ep.stopWatching = Fiber.interruptAll([watcher, timer])
  }))

export const state = (self: CmEndpoint.CmEndpoint): Effect.Effect<CmEndpoint.State> =>
  Effect.suspend(() => ownEffect("CmEndpoint.state", endpointKind, self, (ep) => Effect.succeed(impl(ep).current)))

/** The current state, then each change, ending with the final one. */
export const changes = (self: CmEndpoint.CmEndpoint): Stream.Stream<CmEndpoint.State> =>
  Stream.unwrap(
    Effect.suspend(() => ownEffect("CmEndpoint.changes", endpointKind, self, (ep) => Effect.succeed(stateChanges(ep))))
  )

const stateChanges = (self: CmEndpoint.CmEndpoint): Stream.Stream<CmEndpoint.State> =>
  Stream.unwrapScoped(Effect.map(PubSub.subscribe(impl(self).states), (later) => {
    const now = impl(self).current
    return isFinal(now) ? Stream.make(now) : Stream.make(now).pipe(
      Stream.concat(Stream.fromQueue(later)),
      // A change published between the subscription and the read above comes twice.
      Stream.changes,
      Stream.takeUntil(isFinal)
    )
  }))

export const awaitClosed = (self: CmEndpoint.CmEndpoint): Effect.Effect<CmEndpoint.State> =>
  Effect.suspend(() => ownEffect("CmEndpoint.awaitClosed", endpointKind, self, (ep) => Deferred.await(impl(ep).final)))

export const close = (self: CmEndpoint.CmEndpoint): Effect.Effect<void> =>
  Effect.suspend(() => ownEffect("CmEndpoint.close", endpointKind, self, (ep) => impl(ep).shutdown))
