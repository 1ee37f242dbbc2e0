/**
 * The reconnecting client: one supervisor fiber keeps a session (the offer, its remote regions, a
 * connection) up, and operations run on whatever session is current.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import * as Endpoint from "../Endpoint.js"
import type * as Peer from "../Peer.js"
import type * as RdmaClient from "../RdmaClient.js"
import * as RemoteMr from "../RemoteMr.js"
import * as Usage from "../Usage.js"
import { InvalidOptionsError } from "../RdmaError.js"
import { InvalidOfferError as InvalidOfferErrorImpl, NotConnectedError as NotConnectedErrorImpl } from "./clientErrors.js"
import * as instrument from "./instrument.js"

export const ClientTypeId: RdmaClient.TypeId = Symbol.for("@effect-rdma/core/RdmaClient") as RdmaClient.TypeId

/** What one connected session holds: released with the session's scope. */
export interface Session {
  readonly connection: Connection.Connection
  readonly regions: Readonly<Record<string, RemoteMr.RemoteMr<any>>>
  readonly offer: RdmaClient.Offer
  /** An operation saw the connection end: the supervisor reconnects. */
  readonly broken: Deferred.Deferred<Connection.ConnectionClosedError>
}

/** The client: its state, and the session operations run on. */
export class ClientImpl<Regions extends RdmaClient.RegionUsages> implements RdmaClient.RdmaClient<Regions> {
  readonly [ClientTypeId]: RdmaClient.TypeId = ClientTypeId
  session: Session | undefined = undefined
  /** Completed with the next session (or NotConnectedError once closed); replaced when it ends. */
  ready: Deferred.Deferred<Session, RdmaClient.NotConnectedError>
  constructor(
    readonly stateRef: SubscriptionRef.SubscriptionRef<RdmaClient.State>,
    readonly regions: Regions,
    readonly waitMillis: number,
    ready: Deferred.Deferred<Session, RdmaClient.NotConnectedError>,
    readonly notConnected: (operation: string, state: RdmaClient.State, waitedMs: number) => RdmaClient.NotConnectedError
  ) {
    this.ready = ready
  }
  get state(): Effect.Effect<RdmaClient.State> {
    return SubscriptionRef.get(this.stateRef)
  }
  get changes(): Stream.Stream<RdmaClient.State> {
    return this.stateRef.changes
  }
  get offer(): Effect.Effect<RdmaClient.Offer | undefined> {
    return Effect.sync(() => this.session?.offer)
  }
}


/** Errors that mean the connection under an operation is gone (the device then fails what follows). */
const endsConnection = (error: { readonly _tag: string }): boolean =>
  error._tag === "ConnectionClosedError" || error._tag === "CompletionError"

/**
 * Runs `f` on the current session; while there is none, fails at once or waits the
 * client's bound for one. An error that means the connection ended tells the supervisor.
 */
export const use = <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }>(
  client: RdmaClient.RdmaClient<Regions>,
  operation: string,
  f: (session: Session) => Effect.Effect<A, E>
): Effect.Effect<A, E | RdmaClient.NotConnectedError> => {
  const impl = client as unknown as ClientImpl<Regions>
  const run = (session: Session): Effect.Effect<A, E> =>
    Effect.tapError(f(session), (error) =>
      endsConnection(error)
        ? Deferred.succeed(
          session.broken,
          error._tag === "ConnectionClosedError"
            ? error as unknown as Connection.ConnectionClosedError
            : new Connection.ConnectionClosedError({ operation, reason: "LOST", cause: error })
        )
        : Effect.void)
  return Effect.suspend(() => {
    const session = impl.session
    if (session !== undefined) return run(session)
    if (impl.waitMillis <= 0) {
      return Effect.flatMap(impl.state, (state) => Effect.fail(impl.notConnected(operation, state, 0)))
    }
    return Deferred.await(impl.ready).pipe(
      Effect.timeout(Duration.millis(impl.waitMillis)),
      Effect.catchTag(
        "TimeoutException",
        () => Effect.flatMap(impl.state, (state) => Effect.fail(impl.notConnected(operation, state, impl.waitMillis)))
      ),
      Effect.flatMap(run)
    )
  })
}

/**
 * {@link use} with the session's region named `name`; a name that is not one of the
 * client's regions (from untyped code) is refused before anything is posted.
 */
export const useRegion = <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }>(
  client: RdmaClient.RdmaClient<Regions>,
  operation: string,
  name: string,
  f: (session: Session, region: RemoteMr.RemoteMr<any>) => Effect.Effect<A, E>
): Effect.Effect<A, E | Connection.OutOfRangeError | RdmaClient.NotConnectedError> =>
  Object.hasOwn(client.regions, name)
    ? use(client, operation, (session) => f(session, session.regions[name]!))
    : instrument.refused(
      new Connection.OutOfRangeError({
        operation,
        detail: `no region named ${JSON.stringify(name)}: the client's regions are ${
          Object.keys(client.regions).map((n) => JSON.stringify(n)).join(", ") || "none"
        }`
      })
    )

// The connection's end: its last event (CLOSED, LOST), or its state where it ended without one
// (its watchdog, a failed completion queue), polled.
const lostBy = (connection: Connection.Connection, poll: Duration.Duration) =>
  Effect.raceFirst(
    Stream.runDrain(connection.events),
    Effect.repeat(connection.state, { schedule: Schedule.spaced(poll), until: (state) => state !== "ESTABLISHED" })
  ).pipe(
    Effect.zipRight(connection.state),
    Effect.map((state) =>
      new Connection.ConnectionClosedError({ operation: "RdmaClient", reason: state === "LOST" ? "LOST" : "CLOSED" })
    )
  )

/** One session: fetch the offer, rebuild its regions, connect, serve until the connection ends. */
const session = <Regions extends RdmaClient.RegionUsages, E, R>(
  client: ClientImpl<Regions>,
  peer: Peer.Peer,
  fetchOffer: Effect.Effect<RdmaClient.Offer, E, R>,
  connectionOptions: RdmaClient.MakeOptions<Regions, E, R, unknown, never>["connection"],
  pollMillis: number,
  established: (session: Session) => Effect.Effect<void>,
  /** The session's connection ended (it was connected): the state becomes the first reconnect's. */
  ended: (lastError: unknown) => Effect.Effect<void>
) =>
  Effect.gen(function*() {
    const offer = yield* fetchOffer
    const regions: Record<string, RemoteMr.RemoteMr<any>> = {}
    for (const [name, usage] of Object.entries(client.regions)) {
      const bytes = offer.regions[name]
      if (bytes === undefined) {
        return yield* Effect.fail(
          new InvalidOfferErrorImpl({
            detail: `the offer has no region "${name}" (it has ${
              Object.keys(offer.regions).map((n) => `"${n}"`).join(", ") || "none"
            }): the server must offer every region named in the client's regions`
          })
        )
      }
      regions[name] = yield* RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(usage)))
    }
    const privateData = offer.token === undefined ? undefined : yield* Endpoint.tokenPrivateData(offer.token)
    const connection = yield* Connection.connect(peer, offer.rdma.address, offer.rdma.port, {
      ...connectionOptions,
      ...(privateData === undefined ? {} : { privateData })
    })
    const broken = yield* Deferred.make<Connection.ConnectionClosedError>()
    const current: Session = { connection, regions, offer, broken }
    // Its end, before the connection's close (which may wait out its timeout on a dead link):
    // operations from here on wait for the next session (or fail at once), never for this one, and
    // the state says so at once.
    yield* Effect.acquireRelease(established(current), (_, exit) =>
      Effect.flatMap(Deferred.make<Session, RdmaClient.NotConnectedError>(), (next) =>
        Effect.suspend(() => {
          if (client.session !== current) return Effect.void
          client.session = undefined
          client.ready = next
          return Exit.isSuccess(exit) ? ended(exit.value) : Effect.void
        })))
    return yield* Effect.raceFirst(Deferred.await(broken), lostBy(connection, Duration.millis(pollMillis)))
  })

/** The options' checks, for untyped callers: what is wrong, and what the option takes. */
const checkOptions = (options: RdmaClient.MakeOptions<any, any, any, any, any>): InvalidOptionsError | number => {
  const invalid = (option: string, detail: string) => new InvalidOptionsError({ module: "RdmaClient", option, detail })
  if (typeof options !== "object" || options === null) return invalid("object", "must be an object of options")
  if (!Effect.isEffect(options.offer)) return invalid("offer", "must be an Effect that fetches the offer")
  if (!Schedule.isSchedule(options.reconnect)) return invalid("reconnect", "must be a Schedule (e.g. Schedule.spaced(\"1 second\"))")
  if (typeof options.peer !== "object" || options.peer === null) return invalid("peer", "must be a Peer (Peer.make)")
  if (typeof options.regions !== "object" || options.regions === null) {
    return invalid("regions", "must be an object of region names and usages")
  }
  for (const [name, usage] of Object.entries(options.regions)) {
    if (Usage.validate(usage)._tag === "Left") return invalid(`regions.${name}`, `must be a Usage (Usage.combine(...)), not ${String(usage)}`)
  }
  if (options.pollMillis !== undefined && !(Number.isFinite(options.pollMillis) && options.pollMillis > 0)) {
    return invalid("pollMillis", `must be a positive number of milliseconds, not ${String(options.pollMillis)}`)
  }
  const disconnected = options.whileDisconnected
  if (disconnected === undefined || disconnected === "fail") return 0
  const wait = typeof disconnected === "object" && disconnected !== null
    ? Duration.decodeUnknown(disconnected.wait)
    : Option.none()
  if (Option.isNone(wait) || !Duration.isFinite(wait.value)) {
    return invalid("whileDisconnected", "must be \"fail\" or { wait: a finite duration } (e.g. { wait: \"2 seconds\" })")
  }
  return Duration.toMillis(wait.value)
}

export const make = <Regions extends RdmaClient.RegionUsages, E, R, Out, RS>(
  options: RdmaClient.MakeOptions<Regions, E, R, Out, RS>
): Effect.Effect<RdmaClient.RdmaClient<Regions>, RdmaClient.InvalidOptionsError, R | RS | RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const waitMillis = checkOptions(options)
    if (typeof waitMillis !== "number") return yield* Effect.fail(waitMillis)
    const peer = options.peer
    const stateRef = yield* SubscriptionRef.make<RdmaClient.State>({ _tag: "Connecting" })
    const notConnected = (operation: string, state: RdmaClient.State, waitedMs: number) =>
      new NotConnectedErrorImpl({ operation, state, waitedMs })
    const client = new ClientImpl<Regions>(
      stateRef,
      options.regions,
      waitMillis,
      yield* Deferred.make<Session, RdmaClient.NotConnectedError>(),
      notConnected
    )
    const pollMillis = options.pollMillis ?? 1000
    const setState = (state: RdmaClient.State) => SubscriptionRef.set(stateRef, state)

    const established = (current: Session) =>
      Effect.suspend(() => {
        client.session = current
        const { address, port } = current.offer.rdma
        return Effect.zipRight(Deferred.succeed(client.ready, current), setState({ _tag: "Connected", address, port }))
      })

    const closed = (lastError: unknown) => {
      const state: RdmaClient.State = { _tag: "Closed", lastError }
      return Effect.suspend(() => {
        client.session = undefined
        return Effect.zipRight(setState(state), Deferred.fail(client.ready, notConnected("RdmaClient", state, 0)))
      })
    }

    // A lost connection's first reconnect attempt, said as soon as the session ends.
    const ended = (lastError: unknown) => setState({ _tag: "Reconnecting", attempt: 1, lastError })

    const supervise = Effect.gen(function*() {
      const driver = yield* Schedule.driver(options.reconnect)
      let attempt = 0
      for (;;) {
        const outcome = yield* Effect.either(
          Effect.scoped(session(client, peer, options.offer, options.connection, pollMillis, established, ended))
        )
        if (Either.isRight(outcome)) {
          // It was connected: a new series of attempts, the schedule from its start.
          yield* driver.reset
          attempt = 0
        }
        const lastError: unknown = Either.isRight(outcome) ? outcome.right : outcome.left
        attempt++
        // After a lost connection the session's end has said so already.
        if (Either.isLeft(outcome)) yield* setState({ _tag: "Reconnecting", attempt, lastError })
        instrument.reconnectUnsafe(Either.isRight(outcome) ? "lost" : "failed")
        // The schedule's delay; its end closes the client.
        if (Either.isLeft(yield* Effect.either(driver.next(lastError as never)))) return yield* closed(lastError)
      }
    })

    // Added before the supervisor's fork, so run after it is interrupted (its session closed).
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(SubscriptionRef.get(stateRef), (state) => state._tag === "Closed" ? Effect.void : closed(undefined))
    )
    yield* Effect.forkScoped(Effect.interruptible(supervise))
    return client
  })
