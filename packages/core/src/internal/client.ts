/**
 * The reconnecting client: one supervisor fiber keeps a session (the offer, its remote regions, a
 * connection) up, and operations run on whatever session is current. The supervision (the state
 * machine, the schedule, the session's serving) is the transports' one; how a session connects is
 * the transport's: librpma's here, librdmacm's in cmClient.ts.
 */
import * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import { pipeArguments } from "effect/Pipeable"
import * as Predicate from "effect/Predicate"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import * as Admission from "../Admission.js"
import * as CmEndpoint from "../CmEndpoint.js"
import * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import type * as Peer from "../Peer.js"
import type * as RdmaClient from "../RdmaClient.js"
import { InvalidOptionsError } from "../RdmaError.js"
import type * as RemoteKey from "../RemoteKey.js"
import * as RemoteMr from "../RemoteMr.js"
import * as Usage from "../Usage.js"
import {
  AdmissionRejectedError as AdmissionRejectedErrorImpl,
  describe,
  InvalidOfferError as InvalidOfferErrorImpl,
  NotConnectedError as NotConnectedErrorImpl,
  WrongTransportError as WrongTransportErrorImpl
} from "./clientErrors.js"
import * as instrument from "./instrument.js"
import { malformed } from "./operations.js"

export const ClientTypeId: RdmaClient.TypeId = Symbol.for("@effect-rdma/core/RdmaClient") as RdmaClient.TypeId

/** What one connected session holds, whatever its transport: released with the session's scope. */
interface SessionOf<T extends RdmaClient.Transport> {
  readonly transport: T
  readonly offer: RdmaClient.ClientOffer<any>
  /** An operation saw the connection end: the supervisor reconnects. */
  readonly broken: Deferred.Deferred<Connection.ConnectionClosedError>
}

/** A librpma session: a connection of the client's peer, and the server's regions from the offer. */
export interface RpmaSession extends SessionOf<"rpma"> {
  readonly connection: Connection.Connection
  readonly regions: Readonly<Record<string, RemoteMr.RemoteMr<any>>>
}

/** A librdmacm session: an endpoint, and the server's keys from its acceptance. */
export interface CmSession extends SessionOf<"cm"> {
  readonly endpoint: CmEndpoint.CmEndpoint
  readonly keys: Readonly<Record<string, RemoteKey.RemoteKey>>
}

export type Session = RpmaSession | CmSession

/** A session's link as its transport made it, before the client serves it. */
export type Link = Omit<RpmaSession, "offer" | "broken"> | Omit<CmSession, "offer" | "broken">

const notConnected = (operation: string, state: RdmaClient.State, waitedMs: number) =>
  new NotConnectedErrorImpl({ operation, state, waitedMs })

/**
 * The client's state machine: the current session (operations run on it), the state users
 * read, and the Deferred operations wait on while there is no session. Each transition is one
 * synchronous step, so that no operation sees a session the state no longer calls connected.
 */
export class ClientImpl<
  Regions extends RdmaClient.RegionUsages,
  Config,
  T extends RdmaClient.Transport = RdmaClient.Transport
> implements RdmaClient.RdmaClient<Regions, Config, T> {
  readonly [ClientTypeId]: RdmaClient.TypeId = ClientTypeId
  session: Session | undefined = undefined
  /** Completed with the next session, or failed once closed; replaced when a session ends. */
  ready: Deferred.Deferred<Session, RdmaClient.NotConnectedError> = Deferred.unsafeMake(FiberId.none)
  /** The token the server last admitted (see {@link admitted}): offered again and refused as used, it is spent. */
  admittedWith: Uint8Array | undefined = undefined
  constructor(
    readonly stateRef: SubscriptionRef.SubscriptionRef<RdmaClient.State>,
    readonly regions: Regions,
    readonly waitMillis: number,
    readonly peer: Peer.Peer,
    /** The driver it was made with, for the user's code in withConnection. */
    readonly driver: Context.Context<RdmaDriver>,
    readonly transport: T
  ) {}
  get state(): Effect.Effect<RdmaClient.State> {
    return SubscriptionRef.get(this.stateRef)
  }
  /** Ends after Closed, as a connection's changes end after its last state: no state follows it. */
  get changes(): Stream.Stream<RdmaClient.State> {
    return Stream.takeUntil(this.stateRef.changes, (state) => state._tag === "Closed")
  }
  get offer(): Effect.Effect<RdmaClient.ClientOffer<Config>, RdmaClient.NotConnectedError> {
    return useSession(this, "RdmaClient.offer", (session) => Effect.succeed(session.offer))
  }
  pipe() {
    return pipeArguments(this, arguments)
  }
  /** The session waited for: the current one, or the next (again if it ended before this ran). */
  get awaitSession(): Effect.Effect<Session, RdmaClient.NotConnectedError> {
    return Effect.suspend(() =>
      this.session !== undefined
        ? Effect.succeed(this.session)
        : Effect.zipRight(Deferred.await(this.ready), this.awaitSession)
    )
  }
  /**
   * The server admitted the attempt with `offer`'s token: one of its uses is spent from here on,
   * whatever becomes of the attempt (an acceptance the client then refuses spent one too).
   */
  admitted(offer: RdmaClient.ClientOffer<unknown>): Effect.Effect<void> {
    return Effect.sync(() => {
      this.admittedWith = offer.token
    })
  }
  established(current: Session): Effect.Effect<void> {
    return Effect.suspend(() => {
      this.session = current
      const { address, port } = current.offer.rdma
      return Effect.zipRight(Deferred.succeed(this.ready, current), this.setState({ _tag: "Connected", address, port }))
    })
  }
  /**
   * `current` ended: from here on operations wait for the next session (or fail at once), and the
   * state, if `lastError` says why, is the first reconnect's. A no-op once another step retired it.
   */
  retire(current: Session, lastError: Option.Option<unknown>): Effect.Effect<void> {
    return Effect.suspend(() => {
      if (this.session !== current) return Effect.void
      this.session = undefined
      this.ready = Deferred.unsafeMake(FiberId.none)
      return Option.match(lastError, {
        onNone: () => Effect.void,
        onSome: (error) => this.setState({ _tag: "Reconnecting", attempt: 1, lastError: error })
      })
    })
  }
  /** An operation saw `current`'s connection end: retired at once, and its supervisor told. */
  lost(current: Session, error: Connection.ConnectionClosedError): Effect.Effect<void> {
    return Effect.zipRight(this.retire(current, Option.some(error)), Deferred.succeed(current.broken, error))
  }
  closed(lastError: unknown): Effect.Effect<void> {
    const state: RdmaClient.State = { _tag: "Closed", lastError }
    return Effect.suspend(() => {
      this.session = undefined
      // Operations already waiting wait on the last Deferred: failed too (a no-op where it holds the
      // session just retired). Later ones find a Deferred of its own, failed.
      const waited = this.ready
      this.ready = Deferred.unsafeMake(FiberId.none)
      const error = notConnected("RdmaClient", state, 0)
      return Effect.zipRight(
        this.setState(state),
        Effect.zipRight(Deferred.fail(waited, error), Deferred.fail(this.ready, error))
      )
    })
  }
  setState(state: RdmaClient.State): Effect.Effect<void> {
    return SubscriptionRef.set(this.stateRef, state)
  }
}

/** Errors that mean the connection under an operation is gone (the device then fails what follows). */
const endsConnection = (error: { readonly _tag: string }): boolean =>
  error._tag === "ConnectionClosedError" || error._tag === "CompletionError"

/**
 * Runs `f` on the current session, whatever its transport; while there is none, fails at once or
 * waits the client's bound for one. An error that means the connection ended retires the session at
 * once (the next operation does not run on it) and tells the supervisor.
 */
export const useSession = <
  Regions extends RdmaClient.RegionUsages,
  A,
  E extends { readonly _tag: string },
  R = never,
  S extends Session = Session
>(
  client: RdmaClient.RdmaClient<Regions, any, any>,
  operation: string,
  f: (session: S) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | RdmaClient.NotConnectedError, R> => {
  const impl = client as unknown as ClientImpl<Regions, unknown>
  const run = (session: Session): Effect.Effect<A, E, R> =>
    Effect.tapError(f(session as S), (error) =>
      endsConnection(error)
        ? impl.lost(
          session,
          error._tag === "ConnectionClosedError"
            ? error as unknown as Connection.ConnectionClosedError
            : new Connection.ConnectionClosedError({ operation, reason: "LOST", cause: error })
        )
        : Effect.void)
  const gaveUp = (waitedMs: number) =>
    Effect.flatMap(impl.state, (state) => Effect.fail(notConnected(operation, state, waitedMs)))
  return Effect.suspend(() => {
    const session = impl.session
    if (session !== undefined) return run(session)
    if (impl.waitMillis <= 0) return gaveUp(0)
    return impl.awaitSession.pipe(
      Effect.timeout(Duration.millis(impl.waitMillis)),
      Effect.catchTags({
        TimeoutException: () => gaveUp(impl.waitMillis),
        // Closed while it waited: no connection will come.
        NotConnectedError: () => gaveUp(0)
      }),
      Effect.flatMap(run)
    )
  })
}

/** A transport's operation called on a client of the other (from untyped code). */
export const wrongTransport = (operation: string, transport: RdmaClient.Transport) =>
  instrument.refused(new WrongTransportErrorImpl({ operation, transport }))

const isClient = (u: unknown): boolean => Predicate.hasProperty(u, ClientTypeId)

/**
 * Anything but a client where one goes (a type error in TypeScript): a defect that names the call.
 * Not a NotConnectedError, which says "wait or retry": a retry policy would spin on it for good.
 */
const notAClient = (operation: string, client: unknown): Effect.Effect<never> =>
  Effect.die(
    new Cause.IllegalArgumentException(
      `the client of ${operation} must be an RdmaClient (RdmaClient.make, RdmaClient.layer), not ${
        client === null ? "null" : typeof client === "object" ? "another object" : typeof client
      }`
    )
  )

/**
 * A client operation's arguments, read when it runs: anything but an object is refused as the
 * connection's operations refuse it (OutOfRangeError), never thrown while the Effect is made.
 */
export const withArgs = <Args, A, E>(
  operation: string,
  args: Args,
  f: (args: Args) => Effect.Effect<A, E>
): Effect.Effect<A, E | Connection.OutOfRangeError> =>
  Effect.suspend((): Effect.Effect<A, E | Connection.OutOfRangeError> => {
    const refused = malformed(operation, args)
    return refused === undefined ? f(args) : instrument.refused(refused)
  })

/** {@link useSession} for the operations of one transport: on a client of the other, refused. */
export const useOn =
  <T extends RdmaClient.Transport>(transport: T) =>
  <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }, R = never>(
    client: RdmaClient.RdmaClient<Regions, any, any>,
    operation: string,
    f: (session: Extract<Session, { readonly transport: T }>) => Effect.Effect<A, E, R>
  ): Effect.Effect<A, E | RdmaClient.NotConnectedError | RdmaClient.WrongTransportError, R> => {
    if (!isClient(client)) return notAClient(operation, client)
    const actual = (client as unknown as ClientImpl<Regions, unknown>).transport as RdmaClient.Transport
    return actual === transport ? useSession(client, operation, f) : wrongTransport(operation, actual)
  }

/** {@link useSession} for librpma's operations. */
export const use: <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }, R = never>(
  client: RdmaClient.RdmaClient<Regions, any, any>,
  operation: string,
  f: (session: RpmaSession) => Effect.Effect<A, E, R>
) => Effect.Effect<A, E | RdmaClient.NotConnectedError | RdmaClient.WrongTransportError, R> = useOn("rpma")

/**
 * {@link use} for code of the user's: given the session's connection, its regions (typed
 * by the client's usages) and the client's peer, with the driver the client was made with (a Sink
 * of RdmaStream needs it).
 */
export const withConnection = <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }, R>(
  client: RdmaClient.RdmaClient<Regions, any>,
  f: (
    connection: Connection.Connection,
    regions: RdmaClient.SessionRegions<Regions>,
    peer: Peer.Peer
  ) => Effect.Effect<A, E, R>
): Effect.Effect<
  A,
  E | RdmaClient.NotConnectedError | RdmaClient.WrongTransportError,
  Exclude<R, RdmaDriver>
> => {
  const impl = client as unknown as ClientImpl<Regions, unknown>
  return use(
    client,
    "RdmaClient.withConnection",
    (s) => Effect.provide(f(s.connection, s.regions as RdmaClient.SessionRegions<Regions>, impl.peer), impl.driver)
  )
}

/** Waits for the client to be connected: fails once it is closed. */
export const awaitConnected = <Regions extends RdmaClient.RegionUsages>(
  client: RdmaClient.RdmaClient<Regions, any, any>
): Effect.Effect<RdmaClient.Connected, RdmaClient.NotConnectedError> =>
  Effect.suspend(() =>
    isClient(client)
      ? (client as unknown as ClientImpl<Regions, unknown>).awaitSession
      : notAClient("RdmaClient.awaitConnected", client)
  ).pipe(
    Effect.map((session): RdmaClient.Connected => ({ _tag: "Connected", ...session.offer.rdma })),
    Effect.mapError((error) => notConnected("RdmaClient.awaitConnected", error.state, 0))
  )

/**
 * {@link use} with the session's region named `name`; a name that is not one of the
 * client's regions (from untyped code) is refused before anything is posted.
 */
export const useRegion = <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }>(
  client: RdmaClient.RdmaClient<Regions>,
  operation: string,
  name: string,
  f: (session: RpmaSession, region: RemoteMr.RemoteMr<any>) => Effect.Effect<A, E>
): Effect.Effect<
  A,
  E | Connection.OutOfRangeError | RdmaClient.NotConnectedError | RdmaClient.WrongTransportError
> =>
  !isClient(client)
    ? notAClient(operation, client)
    : Object.hasOwn(client.regions, name)
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
// (its watchdog, a failed completion queue), polled. Both transports say it in the same words.
const lostBy = (
  link: { readonly awaitClosed: Effect.Effect<unknown>; readonly state: Effect.Effect<string> },
  poll: Duration.Duration
) =>
  Effect.raceFirst(
    link.awaitClosed,
    Effect.repeat(link.state, {
      schedule: Schedule.spaced(poll),
      until: (state) => state !== "Connected"
    })
  ).pipe(
    Effect.zipRight(link.state),
    Effect.map((state) =>
      new Connection.ConnectionClosedError({ operation: "RdmaClient", reason: state === "Lost" ? "LOST" : "CLOSED" })
    )
  )

export const invalidOffer = (detail: string) => Effect.fail(new InvalidOfferErrorImpl({ detail }))

/**
 * The offer as the client uses it, read once into plain values (a getter or Proxy read later could
 * say something else): its shape checked, the client's regions picked, its config decoded. Whatever
 * does not fit, or throws while read, is an {@link RdmaClient.InvalidOfferError}: a failed attempt.
 */
export const readOffer = <Config>(
  offer: unknown,
  names: ReadonlyArray<string>,
  decodeConfig: ((config: unknown) => Either.Either<Config, ParseResult.ParseError>) | undefined
): Effect.Effect<RdmaClient.ClientOffer<Config>, RdmaClient.InvalidOfferError> => {
  try {
    if (typeof offer !== "object" || offer === null) {
      return invalidOffer(`it is ${offer === null ? "null" : typeof offer}, not an object { rdma, regions, config }`)
    }
    const { config, rdma, regions, token } = offer as Record<string, unknown>
    if (typeof rdma !== "object" || rdma === null) return invalidOffer("its rdma is not { address, port }")
    const { address, port } = rdma as Record<string, unknown>
    if (
      typeof address !== "string" || !(Number.isInteger(port) && (port as number) >= 0 && (port as number) <= 65535)
    ) {
      return invalidOffer(
        `its rdma is not { address: a string, port: 0 to 65535 } (address ${String(address)}, port ${String(port)})`
      )
    }
    if (typeof regions !== "object" || regions === null) {
      return invalidOffer(
        `its regions are ${regions === null ? "null" : typeof regions}, not an object of descriptors by name`
      )
    }
    const picked: Record<string, Uint8Array> = {}
    for (const name of names) {
      const bytes = Object.hasOwn(regions, name) ? (regions as Record<string, unknown>)[name] : undefined
      if (!(bytes instanceof Uint8Array)) {
        return invalidOffer(
          bytes === undefined
            ? `the offer has no region "${name}" (it has ${
              Object.keys(regions).map((n) => `"${n}"`).join(", ") || "none"
            }): the server must offer every region named in the client's regions`
            : `its region "${name}" is not a descriptor (a Uint8Array)`
        )
      }
      picked[name] = bytes
    }
    if (token !== undefined && !(token instanceof Uint8Array)) return invalidOffer("its token is not a Uint8Array")
    const decoded = decodeConfig === undefined ? Either.right(config as Config) : decodeConfig(config)
    if (Either.isLeft(decoded)) {
      return invalidOffer(
        `its config does not fit the client's config schema: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}`
      )
    }
    return Effect.succeed({ rdma: { address, port: port as number }, regions: picked, config: decoded.right, token })
  } catch (thrown) {
    return invalidOffer(`reading it threw: ${describe(thrown)}`)
  }
}

/**
 * What a rejection of the offer's `token` means to the client: the reason the server said (a
 * librdmacm admission's), or none (librpma's rejection carries none: rpma_conn_req_delete sends no
 * private data, and a port nobody listens on is rejected the same way). A token it was admitted
 * with before is spent only when the server says its uses are: a rejection that says nothing may be
 * a server restarting with the same multi-use token, so it is retried on the schedule.
 */
export const admissionRejected = (
  offer: RdmaClient.ClientOffer<unknown>,
  token: Uint8Array,
  admittedWith: Uint8Array | undefined,
  said: Admission.AdmissionRefusedError["reason"] | undefined,
  cause: unknown
): RdmaClient.AdmissionRejectedError => {
  const again = admittedWith !== undefined && admittedWith.byteLength === token.byteLength &&
    admittedWith.every((byte, i) => byte === token[i])
  const reason = said === undefined ? "Unexplained" : said === "TokenUsed" && again ? "Spent" : said
  return new AdmissionRejectedErrorImpl({ ...offer.rdma, reason, cause, admittedBefore: again })
}

/** What a rejected connect means to the client: with a token, an admission refusal. */
const rejection = (offer: RdmaClient.ClientOffer<unknown>, admittedWith: Uint8Array | undefined) =>
(
  error: Connection.ConnectionFailedError
): Effect.Effect<never, Connection.ConnectionFailedError | RdmaClient.AdmissionRejectedError> =>
  error.event !== "REJECTED" || offer.token === undefined
    ? Effect.fail(error)
    : Effect.fail(admissionRejected(offer, offer.token, admittedWith, undefined, error))

/** The offer, fetched and read ({@link readOffer}); `names`: the regions it must describe. */
export const fetchOffer = <Config, E, R>(
  offer: Effect.Effect<RdmaClient.Offer, E, R>,
  names: ReadonlyArray<string>,
  decodeConfig: ((config: unknown) => Either.Either<Config, ParseResult.ParseError>) | undefined
) =>
  Effect.flatMap(
    offer.pipe(Effect.catchAllDefect((defect) => invalidOffer(`fetching it died: ${describe(defect)}`))),
    (fetched) => readOffer(fetched, names, decodeConfig)
  )

/**
 * Serves a session its transport connected: it is the current one until its connection ends (or
 * an operation sees it end), then retired; the supervisor is given why.
 */
export const serve = <Regions extends RdmaClient.RegionUsages, Config>(
  client: ClientImpl<Regions, Config>,
  offer: RdmaClient.ClientOffer<Config>,
  link: Link,
  pollMillis: number
): Effect.Effect<Connection.ConnectionClosedError, never, Scope.Scope> =>
  Effect.gen(function*() {
    const broken = yield* Deferred.make<Connection.ConnectionClosedError>()
    const current = { ...link, offer, broken } as Session
    // Its end, before the connection's close (which may wait out its timeout on a dead link):
    // operations from here on wait for the next session (or fail at once), never for this one, and
    // the state says so at once.
    yield* Effect.acquireRelease(
      client.established(current),
      (_, exit) => client.retire(current, Exit.isSuccess(exit) ? Option.some(exit.value) : Option.none())
    )
    const ends = link.transport === "rpma"
      ? { awaitClosed: Connection.awaitClosed(link.connection), state: Connection.state(link.connection) }
      : { awaitClosed: CmEndpoint.awaitClosed(link.endpoint), state: CmEndpoint.state(link.endpoint) }
    return yield* Effect.raceFirst(Deferred.await(broken), lostBy(ends, Duration.millis(pollMillis)))
  })

/** One librpma session: fetch the offer, rebuild its regions, connect, serve until the connection ends. */
const session = <Regions extends RdmaClient.RegionUsages, Config, E, R>(
  client: ClientImpl<Regions, Config>,
  options: Pick<RdmaClient.MakeOptions<Regions, E, R, unknown, never, Config>, "offer" | "connection" | "peer">,
  decodeConfig: ((config: unknown) => Either.Either<Config, ParseResult.ParseError>) | undefined,
  pollMillis: number
) =>
  Effect.gen(function*() {
    const offer = yield* fetchOffer(options.offer, Object.keys(client.regions), decodeConfig)
    const regions: Record<string, RemoteMr.RemoteMr<any>> = {}
    for (const [name, usage] of Object.entries(client.regions)) {
      regions[name] = yield* RemoteMr.fromDescriptor(offer.regions[name]!).pipe(Effect.flatMap(RemoteMr.require(usage)))
    }
    const privateData = offer.token === undefined ? undefined : yield* Admission.privateData(offer.token)
    const connection = yield* Connection.connect(options.peer, offer.rdma.address, offer.rdma.port, {
      ...options.connection,
      ...(privateData === undefined ? {} : { privateData })
    }).pipe(Effect.catchTag("ConnectionFailedError", rejection(offer, client.admittedWith)))
    yield* client.admitted(offer)
    return yield* serve(client, offer, { transport: "rpma", connection, regions }, pollMillis)
  })

/** The options both transports take. */
export type SharedOptions<Regions extends RdmaClient.RegionUsages, E, R, Out, RS, Config> = Omit<
  RdmaClient.MakeOptions<Regions, E, R, Out, RS, Config>,
  "peer" | "transport" | "connection"
>

export const invalidOption = (option: string, detail: string) =>
  new InvalidOptionsError({ module: "RdmaClient", option, detail })

/**
 * The options' checks both transports share, for untyped callers: what is wrong, and what the
 * option takes; else how long an operation waits for a connection.
 */
export const checkOptions = (
  options: SharedOptions<any, any, any, any, any, any>
): InvalidOptionsError | number => {
  const invalid = invalidOption
  if (typeof options !== "object" || options === null) return invalid("object", "must be an object of options")
  if (!Effect.isEffect(options.offer)) return invalid("offer", "must be an Effect that fetches the offer")
  if (!Schedule.isSchedule(options.reconnect)) {
    return invalid("reconnect", "must be a Schedule (e.g. Schedule.spaced(\"1 second\"))")
  }
  if (typeof options.regions !== "object" || options.regions === null) {
    return invalid("regions", "must be an object of region names and usages")
  }
  for (const [name, usage] of Object.entries(options.regions)) {
    if (Usage.validate(usage)._tag === "Left") {
      return invalid(`regions.${name}`, `must be a Usage (Usage.combine(...)), not ${String(usage)}`)
    }
  }
  if (options.config !== undefined && !Schema.isSchema(options.config)) {
    return invalid("config", "must be a Schema of the offer's config (e.g. Schema.Struct({ slots: Schema.Number }))")
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
    return invalid(
      "whileDisconnected",
      "must be \"fail\" or { wait: a finite duration } (e.g. { wait: \"2 seconds\" })"
    )
  }
  return Duration.toMillis(wait.value)
}

/** The librpma client: its own checks, then the shared supervision. */
export const make = <Regions extends RdmaClient.RegionUsages, E, R, Out, RS, Config>(
  options: RdmaClient.MakeOptions<Regions, E, R, Out, RS, Config>
): Effect.Effect<
  RdmaClient.RdmaClient<Regions, Config>,
  RdmaClient.InvalidOptionsError,
  R | RS | RdmaDriver | Scope.Scope
> =>
  Effect.suspend(() => {
    if (
      typeof options === "object" && options !== null && (typeof options.peer !== "object" || options.peer === null)
    ) {
      return Effect.fail(invalidOption("peer", "must be a Peer (Peer.make)"))
    }
    return supervised(
      options,
      "rpma",
      options?.peer,
      (client, decodeConfig, pollMillis) => session(client, options, decodeConfig, pollMillis)
    )
  })

/**
 * A client of either transport: `connect` makes and serves one session (fails: a failed attempt;
 * succeeds with why the connection ended), which the supervisor runs again on the schedule.
 */
export const supervised = <
  Regions extends RdmaClient.RegionUsages,
  E,
  R,
  Out,
  RS,
  Config,
  T extends RdmaClient.Transport
>(
  options: SharedOptions<Regions, E, R, Out, RS, Config>,
  transport: T,
  peer: Peer.Peer | undefined,
  connect: (
    client: ClientImpl<Regions, Config>,
    decodeConfig: ((config: unknown) => Either.Either<Config, ParseResult.ParseError>) | undefined,
    pollMillis: number
  ) => Effect.Effect<Connection.ConnectionClosedError, unknown, R | RdmaDriver | Scope.Scope>
): Effect.Effect<
  RdmaClient.RdmaClient<Regions, Config, T>,
  RdmaClient.InvalidOptionsError,
  R | RS | RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const waitMillis = checkOptions(options)
    if (typeof waitMillis !== "number") return yield* Effect.fail(waitMillis)
    const client = new ClientImpl<Regions, Config, T>(
      yield* SubscriptionRef.make<RdmaClient.State>({ _tag: "Connecting" }),
      options.regions,
      waitMillis,
      peer as Peer.Peer,
      yield* Effect.context<RdmaDriver>(),
      transport
    )
    const decodeConfig = options.config === undefined ? undefined : Schema.decodeUnknownEither(options.config)
    const attempt = Effect.scoped(connect(client, decodeConfig, options.pollMillis ?? 1000)).pipe(
      // A defect (in code the client runs for you) is a failed attempt too, never the supervisor's end.
      Effect.catchAllDefect(Effect.fail),
      Effect.either
    )

    const supervise = Effect.gen(function*() {
      const driver = yield* Schedule.driver(options.reconnect)
      let attempts = 0
      for (;;) {
        const outcome = yield* attempt
        if (Either.isRight(outcome)) {
          // It was connected: a new series of attempts, the schedule from its start.
          yield* driver.reset
          attempts = 0
        }
        const lastError: unknown = Either.isRight(outcome) ? outcome.right : outcome.left
        // A spent token the offer gives again is refused again: no attempt can succeed.
        if (lastError instanceof AdmissionRejectedErrorImpl && lastError.reason === "Spent") {
          return yield* client.closed(lastError)
        }
        attempts++
        // After a lost connection the session's end has said so already.
        if (Either.isLeft(outcome)) yield* client.setState({ _tag: "Reconnecting", attempt: attempts, lastError })
        instrument.reconnectUnsafe(Either.isRight(outcome) ? "lost" : "failed")
        // The schedule's delay (the Clock's); its end closes the client.
        if (Either.isLeft(yield* Effect.either(driver.next(lastError as never)))) return yield* client.closed(lastError)
      }
    })

    // Added before the supervisor's fork, so run after it is interrupted (its session closed).
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(client.state, (state) => state._tag === "Closed" ? Effect.void : client.closed(undefined))
    )
    yield* Effect.forkScoped(Effect.interruptible(supervise))
    return client
  })
