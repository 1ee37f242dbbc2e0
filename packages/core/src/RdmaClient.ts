/**
 * A client for long-running services: it fetches the server's offer (where to connect, the regions'
 * descriptors, the admission token), connects, and keeps the connection up, reconnecting on loss
 * with your `Schedule` and fetching the offer again each time (a restarted server has new regions).
 * Its state is read with `client.state` and watched with `client.changes`; {@link awaitConnected}
 * waits for a connection. Operations name the server's regions by the names in the offer and run on
 * the current connection; while there is none they fail at once with {@link NotConnectedError}, or
 * wait at most the bound you chose (`whileDisconnected`).
 *
 * An operation is never retried: one that fails because the connection ended (a
 * `ConnectionClosedError`, or a `CompletionError`, after which a queue pair fails what follows)
 * reports it, its outcome unknown, and ends the session at once: the state leaves `Connected`, and
 * the next operation fails with {@link NotConnectedError} (or waits) instead of running on the dead
 * connection. Retry what is safe to repeat (`Effect.retry` with
 * `while: (e) => e._tag === "NotConnectedError"` and a short delay, `Schedule.spaced("10 millis")`):
 * a retry reaches the next session once it is up; one without delay spins, and starves the event
 * loop the reconnect runs on.
 *
 * A bad offer (not an object, regions missing or not descriptors, a config its schema refuses, a
 * getter that throws, an offer Effect that dies) is a failed attempt ({@link InvalidOfferError}),
 * followed by another on the schedule. A server that rejects the connection is an
 * {@link AdmissionRejectedError}: librpma's rejection carries no reason (a port nobody listens on is
 * rejected the same way), so it says what the client knows and is retried on the schedule; on
 * `"cm"` a server that says the token's uses are spent, of a token this client was admitted with,
 * ends the client (`Closed`).
 *
 * Everything a session acquired (remote regions, the connection) is released when it ends, within
 * the connection's `timeout`; closing the client's scope stops the supervisor and closes the
 * session the same way. Every delay and deadline (the schedule's, `whileDisconnected.wait`,
 * `pollMillis`) is the Effect Clock's: a `TestClock` drives them.
 *
 * Two transports, one supervision: `transport: "rpma"` (the default) connects a librpma
 * `Connection` from your `Peer`, the server's regions described in the offer; `transport: "cm"`
 * ({@link CmMakeOptions}) dials a librdmacm `CmEndpoint` to a `CmListener`, the offer's token as the
 * connect's private data (what `CmListener`'s admission reads), and takes the server's region keys
 * from its acceptance's private data ({@link acceptData} on the server's side: the server registers
 * its regions for each endpoint, so the keys exist only once the request has come). The state,
 * `changes`, {@link awaitConnected}, `offer`, the schedule, the disconnected policy and the
 * admission errors are the same on both; a cm server's admission says why it refused, so its
 * {@link AdmissionRejectedError} does too. On a cm client the operations are the endpoint's, run
 * with {@link withEndpoint}; `write`, `writeMany`, `read`, `flush`, `send`, `recv` and
 * {@link withConnection} are librpma's (they take `LocalMr`s of a `Peer`, and `RdmaStream`'s Sinks
 * a `Connection`) and fail on a cm client with {@link WrongTransportError} (a type error from typed
 * code); {@link withEndpoint} on an rpma client likewise.
 *
 * @since 1.0.0
 */
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { Pipeable } from "effect/Pipeable"
import type * as Schedule from "effect/Schedule"
import type * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type * as CmEndpoint from "./CmEndpoint.js"
import * as Connection from "./Connection.js"
import type * as DescriptorExchange from "./DescriptorExchange.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/client.js"
import * as errors from "./internal/clientErrors.js"
import * as cmClient from "./internal/cmClient.js"
import type { LocalMr } from "./LocalMr.js"
import { type Peer, Peer as PeerTag } from "./Peer.js"
import * as RdmaError from "./RdmaError.js"
import type { RemoteKey } from "./RemoteKey.js"
import type { RemoteMr } from "./RemoteMr.js"
import type { Flag, FlagsOf, Usage } from "./Usage.js"

/**
 * What the client connects with: `DescriptorExchange.Offer` (fetch it with
 * `DescriptorExchange.fetch`, or any Effect that returns one).
 *
 * @since 1.0.0
 * @category models
 */
export type Offer = DescriptorExchange.Offer

/**
 * The offer a session connected with, as the client read it: its `config` decoded by the client's
 * `config` schema (the offer's own record without one), and its regions those the client names.
 *
 * @since 1.0.0
 * @category models
 */
export interface ClientOffer<Config> {
  readonly rdma: { readonly address: string; readonly port: number }
  readonly regions: Readonly<Record<string, Uint8Array>>
  readonly config: Config
  readonly token: Uint8Array | undefined
}

/**
 * The regions the client uses, by their name in the offer, each with the usage it needs: checked
 * on every connect (`RemoteMr.require`), and what the operations accept (`write` takes a region
 * whose usage includes `WRITE_DST`, ...).
 *
 * @since 1.0.0
 * @category models
 */
export type RegionUsages = Readonly<Record<string, Usage<any>>>

/**
 * The names of the regions in `Regions` whose usage includes `F`.
 *
 * @since 1.0.0
 * @category models
 */
export type RegionsWith<Regions extends RegionUsages, F extends Flag> =
  & {
    [K in keyof Regions]: F extends FlagsOf<Regions[K]> ? K : never
  }[keyof Regions]
  & string

/**
 * Where the client is: connecting for the first time, connected, waiting for (or making) its
 * `attempt`-th reconnect since the last connection, or closed (its scope ended, its schedule did,
 * or the server said its token is spent: with the last failure).
 *
 * @since 1.0.0
 * @category models
 */
export type State =
  | { readonly _tag: "Connecting" }
  | Connected
  | { readonly _tag: "Reconnecting"; readonly attempt: number; readonly lastError: unknown }
  | { readonly _tag: "Closed"; readonly lastError: unknown }

/**
 * Connected, to the offer's address and port.
 *
 * @since 1.0.0
 * @category models
 */
export interface Connected {
  readonly _tag: "Connected"
  readonly address: string
  readonly port: number
}

/**
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = internal.ClientTypeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * What a client connects over: librpma's connections (`"rpma"`) or librdmacm's endpoints (`"cm"`).
 *
 * @since 1.0.0
 * @category models
 */
export type Transport = "rpma" | "cm"

/**
 * A reconnecting client: its transport, the regions it names, and its state, read-only.
 *
 * @since 1.0.0
 * @category models
 */
export interface RdmaClient<Regions extends RegionUsages, Config = Offer["config"], T extends Transport = "rpma">
  extends Pipeable
{
  readonly [TypeId]: TypeId
  readonly transport: T
  readonly regions: Regions
  /**
   * Its state now.
   *
   * @since 1.0.0
   */
  readonly state: Effect.Effect<State>
  /**
   * Its state, the current one first, then every change; it ends after `Closed`.
   *
   * @since 1.0.0
   */
  readonly changes: Stream.Stream<State>
  /**
   * The offer of the current connection (its `config`, typed by the client's `config` schema);
   * while disconnected, like an operation: {@link NotConnectedError} at once, or after waiting the
   * client's bound.
   *
   * @since 1.0.0
   */
  readonly offer: Effect.Effect<ClientOffer<Config>, NotConnectedError>
}

/**
 * An operation found no connection: at once (the client's default), or after waiting its bound. Its
 * `state` says why (connecting, reconnecting with the last failure, closed).
 *
 * @since 1.0.0
 * @category errors
 */
export const NotConnectedError: typeof errors.NotConnectedError = errors.NotConnectedError

/**
 * @since 1.0.0
 * @category errors
 */
export type NotConnectedError = errors.NotConnectedError

/**
 * The offer does not fit the client: it is not an object, lacks a region the client names or holds
 * something else there, its config does not decode with the client's `config` schema, reading it
 * threw, or the Effect fetching it died. The attempt fails, and the schedule decides whether to try
 * again; the message says what was wrong.
 *
 * @since 1.0.0
 * @category errors
 */
export const InvalidOfferError: typeof errors.InvalidOfferError = errors.InvalidOfferError

/**
 * @since 1.0.0
 * @category errors
 */
export type InvalidOfferError = errors.InvalidOfferError

/**
 * The server rejected the connection that carried the offer's token. `"Spent"` (`"cm"` transport):
 * the offer gave again a token this client was admitted with before, and the server says its uses
 * are spent (a token admits a bounded number of connections, one by default: the client closes
 * with this error, since every attempt would be refused the same way). Admitted means the server accepted the connection, whatever came after:
 * an attempt that then failed (on `"cm"`, an acceptance without the keys the client needs) spent
 * its token too. On the `"cm"` transport the server's admission says why it refused (its
 * rejection's private data): `"WrongToken"`, `"TokenUsed"` (by another client: a token this client
 * spent is `"Spent"`) or `"TooSoon"` (its window's uses are spent), each retried on the schedule.
 * librpma's rejection carries no reason (rpma_conn_req_delete sends no private data, and a port
 * nobody listens on is rejected the same way), nor does a cm server's that is not an admission's:
 * `"Unexplained"` (nobody listens, the token is wrong or expired, or its uses are spent: retried on
 * the schedule, so a server restarting with the same multi-use token takes the client back);
 * `admittedBefore` says the token is one this client was admitted with, whose own earlier use may
 * have spent it.
 *
 * @since 1.0.0
 * @category errors
 */
export const AdmissionRejectedError: typeof errors.AdmissionRejectedError = errors.AdmissionRejectedError

/**
 * @since 1.0.0
 * @category errors
 */
export type AdmissionRejectedError = errors.AdmissionRejectedError

/**
 * An operation of one transport called on a client of the other (from untyped code: typed code
 * cannot pass a cm client to `write`, nor an rpma client to {@link withEndpoint}): which operation,
 * and the client's transport.
 *
 * @since 1.0.0
 * @category errors
 */
export const WrongTransportError: typeof errors.WrongTransportError = errors.WrongTransportError

/**
 * @since 1.0.0
 * @category errors
 */
export type WrongTransportError = errors.WrongTransportError

/**
 * An option of {@link make} (or a key of {@link acceptData}) that is not what it takes (from untyped code): which one, and what it
 * takes.
 *
 * @since 1.0.0
 * @category errors
 */
export const InvalidOptionsError: typeof RdmaError.InvalidOptionsError = RdmaError.InvalidOptionsError

/**
 * @since 1.0.0
 * @category errors
 */
export type InvalidOptionsError = RdmaError.InvalidOptionsError

/**
 * How the client connects and reconnects.
 *
 * @since 1.0.0
 * @category models
 */
export interface MakeOptions<Regions extends RegionUsages, E, R, Out, RS, Config = Offer["config"]> {
  /** librpma's connections, the default; `"cm"` is {@link CmMakeOptions}. */
  readonly transport?: "rpma" | undefined
  /** Fetches the offer, on every connect: bound it (`DescriptorExchange.fetch` has a timeout). */
  readonly offer: Effect.Effect<Offer, E, R>
  readonly regions: Regions
  /**
   * Decodes the offer's `config` (what `client.offer` gives): an offer whose config it refuses is
   * an {@link InvalidOfferError}. Without it the config is the offer's record, unchecked.
   *
   * @since 1.0.0
   */
  readonly config?: Schema.Schema<Config, any> | undefined
  /**
   * When to try again after a failed connect or a lost connection, fed the failure; its delays are
   * the waits between attempts, and its end closes the client. It starts over after each
   * connection. E.g. `Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))`.
   */
  readonly reconnect: Schedule.Schedule<Out, unknown, RS>
  /**
   * While disconnected (connecting, reconnecting, or just after an operation saw the connection
   * end), operations and `client.offer` fail at once with {@link NotConnectedError} (`"fail"`,
   * the default) or wait at most `wait` for the next connection (then fail with it). Once closed
   * they fail at once either way.
   */
  readonly whileDisconnected?: "fail" | { readonly wait: Duration.DurationInput } | undefined
  /** The connection's options (its `timeout` bounds the connect and the close). `privateData` is the offer's token. */
  readonly connection?: Omit<Connection.Options, "privateData"> | undefined
  /** The peer to connect from (its regions are the local ones the operations use). */
  readonly peer: Peer
  /** How often an idle connection's state is read, for an end that sent no event. Default 1000 ms. */
  readonly pollMillis?: number | undefined
}

/**
 * The regions of a `"cm"` client: each a key of one access, writes (`Usage.WRITE_DST`) or reads
 * (`Usage.READ_SRC`), as a librdmacm region is registered for one (rdma_reg_write, rdma_reg_read).
 *
 * @since 1.0.0
 * @category models
 */
export type CmRegionUsages = Readonly<Record<string, Usage<"WRITE_DST"> | Usage<"READ_SRC">>>

/**
 * `Regions` where each region's usage is exactly one access: one of both, or with a flush type
 * (which a `Usage<"WRITE_DST">` also accepts, being a usage of more flags), is `never`, so such a
 * `regions` option does not compile.
 *
 * @since 1.0.0
 * @category models
 */
export type OneAccess<Regions> = {
  readonly [K in keyof Regions]: [FlagsOf<Regions[K]>] extends ["WRITE_DST"] ? Regions[K]
    : [FlagsOf<Regions[K]>] extends ["READ_SRC"] ? Regions[K]
    : never
}

/**
 * How a `"cm"` client connects and reconnects: {@link MakeOptions}' offer, config, schedule and
 * disconnected policy, over librdmacm endpoints. The offer gives the address, port, token and
 * config (its `regions` may be empty: nothing there is read); the server's keys for `regions` come
 * with each acceptance ({@link acceptData}), and one it lacks, or of the wrong access, is an
 * {@link InvalidOfferError}. There is no `peer`: each endpoint has a protection domain of its own.
 *
 * @since 1.0.0
 * @category models
 */
export interface CmMakeOptions<Regions extends RegionUsages, E, R, Out, RS, Config = Offer["config"]>
  extends Omit<MakeOptions<Regions, E, R, Out, RS, Config>, "transport" | "peer" | "connection">
{
  readonly transport: "cm"
  /** The endpoint's settings (its `timeout` bounds the connect and the close); the token is the offer's. */
  readonly endpoint?: CmEndpoint.Options | undefined
}

/**
 * A client whose supervisor runs until the scope closes.
 *
 * @example
 * ```ts
 * import { DescriptorExchange, Peer, RdmaClient, Usage } from "@effect-rdma/core"
 * import { Console, Effect, Schedule, Stream } from "effect"
 *
 * declare const tls: DescriptorExchange.TlsOptions // the server's CA; this client's key and certificate
 * export const program = Effect.gen(function*() {
 *   const client = yield* RdmaClient.make({
 *     peer: yield* Peer.Peer,
 *     offer: DescriptorExchange.fetch({ host: "kv.example", port: 7000, tls }),
 *     regions: { store: Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY) },
 *     reconnect: Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds"))),
 *     whileDisconnected: { wait: "2 seconds" }
 *   })
 *   // Its state changes, logged until the scope closes.
 *   yield* Effect.forkScoped(Stream.runForEach(client.changes, (state) => Console.log(state._tag)))
 * })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const make: {
  <Regions extends CmRegionUsages, E, R, Out, RS, Config = Offer["config"]>(
    options: CmMakeOptions<Regions, E, R, Out, RS, Config> & { readonly regions: OneAccess<Regions> }
  ): Effect.Effect<RdmaClient<Regions, Config, "cm">, InvalidOptionsError, R | RS | RdmaDriver | Scope.Scope>
  <Regions extends RegionUsages, E, R, Out, RS, Config = Offer["config"]>(
    options: MakeOptions<Regions, E, R, Out, RS, Config>
  ): Effect.Effect<RdmaClient<Regions, Config>, InvalidOptionsError, R | RS | RdmaDriver | Scope.Scope>
} = (options: any): any =>
  Effect.suspend((): Effect.Effect<unknown, InvalidOptionsError, any> => {
    let transport: unknown
    try {
      transport = typeof options === "object" && options !== null ? options.transport : undefined
    } catch (cause) {
      // A getter or Proxy trap that throws: refused, not thrown as the Effect is made.
      return Effect.fail(
        internal.invalidOption("transport", `could not be read (${String(cause)}): give plain options`)
      )
    }
    return transport === "cm" ? cmClient.make(options) : internal.make(options)
  })

/**
 * Waits until the client is connected (at once if it is), and gives where to. Fails with
 * {@link NotConnectedError} once the client is closed. It waits without bound: bound it with
 * `Effect.timeout`; it is interruptible.
 *
 * @example
 * ```ts
 * import { RdmaClient } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * declare const client: RdmaClient.RdmaClient<{}>
 * export const ready = RdmaClient.awaitConnected(client).pipe(Effect.timeout("10 seconds"))
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const awaitConnected: <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any, Transport>
) => Effect.Effect<Connected, NotConnectedError> = internal.awaitConnected

/**
 * The client as a Layer of your own Tag, connecting from the `Peer` service.
 *
 * @example
 * ```ts
 * import { Context } from "effect"
 * import { RdmaClient, Usage } from "@effect-rdma/core"
 *
 * const regions = { store: Usage.combine(Usage.WRITE_DST, Usage.READ_SRC) }
 * class Store extends Context.Tag("Store")<Store, RdmaClient.RdmaClient<typeof regions>>() {}
 * declare const options: Omit<RdmaClient.MakeOptions<typeof regions, never, never, unknown, never>, "regions" | "peer">
 * export const StoreLive = RdmaClient.layer(Store, { ...options, regions })
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layer: {
  <Id, Regions extends CmRegionUsages, E, R, Out, RS, Config = Offer["config"]>(
    tag: Context.Tag<Id, RdmaClient<Regions, Config, "cm">>,
    options: CmMakeOptions<Regions, E, R, Out, RS, Config> & { readonly regions: OneAccess<Regions> }
  ): Layer.Layer<Id, InvalidOptionsError, R | RS | RdmaDriver>
  <Id, Regions extends RegionUsages, E, R, Out, RS, Config = Offer["config"]>(
    tag: Context.Tag<Id, RdmaClient<Regions, Config>>,
    options: Omit<MakeOptions<Regions, E, R, Out, RS, Config>, "peer">
  ): Layer.Layer<Id, InvalidOptionsError, R | RS | RdmaDriver | Peer>
} = (tag: Context.Tag<any, any>, options: any): Layer.Layer<any, InvalidOptionsError, any> =>
  Layer.scoped(
    tag,
    typeof options === "object" && options !== null && options.transport === "cm"
      ? cmClient.make(options)
      : Effect.flatMap(PeerTag, (peer) => internal.make({ ...options, peer }))
  )

/**
 * @since 1.0.0
 * @category models
 */
export interface WriteArgs<K extends string> extends Omit<Connection.WriteArgs, "dst"> {
  readonly dst: K
}

/**
 * The batch as `RdmaClient.writeMany` took it before it took an array of {@link WriteArgs}.
 *
 * @deprecated Give `writeMany` an array of writes, each naming its `dst`, as `Connection.writeMany` takes one.
 * @since 1.0.0
 * @category models
 */
export interface WriteManyArgs<K extends string> {
  readonly dst: K
  readonly src: LocalMr<"WRITE_SRC">
  /** The writes: `length` bytes from `srcOffset` of `src` to `dstOffset` of `dst`, each. */
  readonly spans: Iterable<{ readonly dstOffset: number; readonly srcOffset: number; readonly length: number }>
}

/**
 * @since 1.0.0
 * @category models
 */
export interface ReadArgs<K extends string> extends Omit<Connection.ReadArgs, "src"> {
  readonly src: K
}

/**
 * @since 1.0.0
 * @category models
 */
export type FlushArgs<K extends string, P extends string = never> =
  | {
    readonly dst: K
    /** Default 0: as `Connection.flush` names it. */
    readonly dstOffset?: number | undefined
    /** @deprecated The old name of `dstOffset`, read only when `dstOffset` is not given. */
    readonly offset?: number | undefined
    readonly length: number
    /** Default `"visibility"`. */
    readonly type?: "visibility" | undefined
  }
  | {
    /** A region the client's `regions` give `FLUSH_TYPE_PERSISTENT`. */
    readonly dst: P
    readonly dstOffset?: number | undefined
    /** @deprecated The old name of `dstOffset`, read only when `dstOffset` is not given. */
    readonly offset?: number | undefined
    readonly length: number
    readonly type: "persistent"
  }

/**
 * `Connection.write` into the region named `dst`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const write = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: WriteArgs<RegionsWith<Regions, "WRITE_DST">>
): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError> =>
  internal.withArgs("rpma_write", args, (args) =>
    internal.useRegion(client, "rpma_write", args.dst, (s, dst) =>
      // The fields named, not spread: a spread followed by another property builds a new hidden
      // class on every call, and the write's every later read of it misses V8's inline caches.
      Connection.write(s.connection, {
        dst,
        dstOffset: args.dstOffset,
        src: args.src,
        srcOffset: args.srcOffset,
        length: args.length
      })))

/**
 * `Connection.writeMany` on the current connection: an array of writes, each into the region its
 * `dst` names, posted as one batch (a name that is not one of the client's regions refuses the
 * whole batch before anything is posted). The older form, `{ dst, src, spans }`, is still taken.
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany: {
  <Regions extends RegionUsages>(
    client: RdmaClient<Regions, any>,
    writes: ReadonlyArray<WriteArgs<RegionsWith<Regions, "WRITE_DST">>>
  ): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError>
  /** @deprecated Give an array of writes, each naming its `dst`. */
  <Regions extends RegionUsages>(
    client: RdmaClient<Regions, any>,
    args: WriteManyArgs<RegionsWith<Regions, "WRITE_DST">>
  ): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError>
} = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: ReadonlyArray<WriteArgs<string>> | WriteManyArgs<string>
): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError> =>
  Array.isArray(args)
    ? internal.use(client, "rpma_write", (s) => {
      const writes: Array<Connection.WriteArgs> = new Array(args.length)
      for (let i = 0; i < args.length; i++) {
        const w = args[i] as WriteArgs<string>
        // Not an object: Connection.writeMany refuses it as such, naming its place.
        if (w === null || typeof w !== "object") {
          writes[i] = w
          continue
        }
        const name = w.dst
        if (typeof name !== "string" || !Object.hasOwn(client.regions, name)) {
          return Effect.fail(
            new Connection.OutOfRangeError({
              operation: "rpma_write",
              detail: `write ${i} of the batch: no region named ${JSON.stringify(name)}: the client's regions are ${
                Object.keys(client.regions).map((n) => JSON.stringify(n)).join(", ") || "none"
              }`
            })
          )
        }
        writes[i] = {
          dst: s.regions[name]!,
          dstOffset: w.dstOffset,
          src: w.src,
          srcOffset: w.srcOffset,
          length: w.length,
          // Read to be refused: a batch carries no immediate data.
          imm: w.imm
        }
      }
      return Connection.writeMany(s.connection, writes)
    })
    : internal.withArgs("rpma_write", args as WriteManyArgs<string>, (args) =>
      internal.useRegion(
        client,
        "rpma_write",
        args.dst,
        (s, dst) =>
          Array.isArray(args.spans)
            ? Connection.writeMany(s.connection, args.spans.map((span) => ({ dst, src: args.src, ...span })))
            : Effect.fail(
              new Connection.OutOfRangeError({ operation: "rpma_write", detail: "the spans must be an array" })
            )
      ))

/**
 * `Connection.read` from the region named `src`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const read = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: ReadArgs<RegionsWith<Regions, "READ_SRC">>
): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError> =>
  internal.withArgs("rpma_read", args, (args) =>
    internal.useRegion(
      client,
      "rpma_read",
      args.src,
      (s, src) =>
        Connection.read(s.connection, {
          dst: args.dst,
          dstOffset: args.dstOffset,
          src,
          srcOffset: args.srcOffset,
          length: args.length
        })
    ))

/**
 * `Connection.flush` of the region named `dst`, on the current connection: `dstOffset` and `type`
 * as `Connection.flush` takes them.
 *
 * @since 1.0.0
 * @category operations
 */
export const flush = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: FlushArgs<RegionsWith<Regions, "FLUSH_TYPE_VISIBILITY">, RegionsWith<Regions, "FLUSH_TYPE_PERSISTENT">>
): Effect.Effect<void, Connection.FlushError | NotConnectedError | WrongTransportError> =>
  internal.withArgs("rpma_flush", args, (args) =>
    internal.useRegion(
      client,
      "rpma_flush",
      args.dst,
      (s, dst) =>
        Connection.flush(s.connection, {
          dst,
          dstOffset: args.dstOffset ?? args.offset,
          length: args.length,
          type: args.type
        } as Connection.FlushArgs)
    ))

/**
 * `Connection.send`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const send = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: Connection.SendArgs
): Effect.Effect<void, Connection.TransferError | NotConnectedError | WrongTransportError> =>
  internal.use(client, "rpma_send", (s) => Connection.send(s.connection, args))

/**
 * `Connection.recv`, on the current connection: waits for a message (bound it with a timeout).
 *
 * @since 1.0.0
 * @category operations
 */
export const recv = <Regions extends RegionUsages>(
  client: RdmaClient<Regions, any>,
  args: Connection.RecvArgs
): Effect.Effect<number, Connection.TransferError | NotConnectedError | WrongTransportError> =>
  internal.use(client, "rpma_recv", (s) => Effect.map(Connection.recv(s.connection, args), (c) => c.byteLength))

/**
 * The session's remote regions, by the client's names, each typed with the usage the client gave
 * it (checked on connect).
 *
 * @since 1.0.0
 * @category models
 */
export type SessionRegions<Regions extends RegionUsages> = {
  readonly [K in keyof Regions]: RemoteMr<FlagsOf<Regions[K]>>
}

/**
 * Runs `f` with the current connection, its regions (typed by the client's usages) and the client's
 * peer, for what the operations above do not cover, e.g. an `RdmaStream` Sink; the driver the
 * client was made with is provided. An error that means the connection ended ends the session at
 * once and the client reconnects.
 *
 * Nothing is replayed: `f` runs on one session. If the connection ends under it, `f` fails with
 * that error and what it did since its last completed operation is unknown (a Sink has consumed
 * chunks that may not have landed); run it again, from what the server says it has, once
 * reconnected.
 *
 * @example
 * ```ts
 * import { RdmaClient, RdmaStream, Usage } from "@effect-rdma/core"
 * import { Effect, Schedule, Stream } from "effect"
 *
 * declare const client: RdmaClient.RdmaClient<{ log: Usage.Usage<"WRITE_DST"> }>
 * declare const records: Stream.Stream<Uint8Array>
 * // The log written from its start on the current session; on a lost connection, again on the next.
 * export const written = RdmaClient.withConnection(client, (conn, regions, peer) =>
 *   Stream.run(records, RdmaStream.writeRange(peer, conn, { dst: regions.log }))
 * ).pipe(Effect.retry({ schedule: Schedule.spaced("100 millis"), times: 5 }))
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const withConnection: <Regions extends RegionUsages, A, E extends { readonly _tag: string }, R>(
  client: RdmaClient<Regions, any>,
  f: (connection: Connection.Connection, regions: SessionRegions<Regions>, peer: Peer) => Effect.Effect<A, E, R>
) => Effect.Effect<A, E | NotConnectedError | WrongTransportError, Exclude<R, RdmaDriver>> = internal.withConnection

/**
 * The key access a `"cm"` client's region usage asks for: `"write"` for `Usage.WRITE_DST`, else `"read"`.
 *
 * @since 1.0.0
 * @category models
 */
export type AccessOf<U> = "WRITE_DST" extends FlagsOf<U> ? "write" : "read"

/**
 * A `"cm"` session's keys of the server's regions, by the client's names, each of the access its
 * usage asks for (checked on connect).
 *
 * @since 1.0.0
 * @category models
 */
export type SessionKeys<Regions extends RegionUsages> = {
  readonly [K in keyof Regions]: RemoteKey<AccessOf<Regions[K]>>
}

/**
 * {@link withConnection} for a `"cm"` client: runs `f` with the current session's `CmEndpoint` and
 * the server's keys (typed by the client's usages); the driver the client was made with is
 * provided. Its operations are the endpoint's (`CmEndpoint.write`, `read`, `send`, `recv`, `call`,
 * ...): local regions are registered on the endpoint (`CmEndpoint.registerMessages`), which lives
 * as long as the session, so register them in `f` (`Effect.scoped`), or send plain bytes inline. An
 * error that means the connection ended ends the session at once and the client reconnects;
 * nothing is replayed, as with {@link withConnection}.
 *
 * @example
 * ```ts
 * import { CmEndpoint, RdmaClient, Usage } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * declare const client: RdmaClient.RdmaClient<{ log: Usage.Usage<"WRITE_DST"> }, any, "cm">
 * // Eight bytes into the server's region, inline (no local region needed).
 * export const stamp = (bytes: Uint8Array) =>
 *   RdmaClient.withEndpoint(client, (ep, keys) => CmEndpoint.write(ep, { dst: keys.log, src: bytes, length: 8 }))
 * ```
 *
 * @since 1.0.0
 * @category operations
 */
export const withEndpoint: <Regions extends RegionUsages, A, E extends { readonly _tag: string }, R>(
  client: RdmaClient<Regions, any, "cm">,
  f: (endpoint: CmEndpoint.CmEndpoint, keys: SessionKeys<Regions>) => Effect.Effect<A, E, R>
) => Effect.Effect<A, E | NotConnectedError | WrongTransportError, Exclude<R, RdmaDriver>> = cmClient.withEndpoint

/**
 * The server's side of a `"cm"` client: the private data of `CmListener.accept` that carries the
 * keys of its regions, by the names the client's `regions` use (each `RemoteKey.make(region)`: a
 * region of rdma_reg_write for a client's `Usage.WRITE_DST`, of rdma_reg_read for `Usage.READ_SRC`).
 * An acceptance carries at most 196 bytes: each key takes 25 and its name's UTF-8 bytes, after 5;
 * keys that do not fit, or that are not keys, are an {@link InvalidOptionsError}.
 *
 * @example
 * ```ts
 * import { Admission, CmEndpoint, CmListener, RdmaClient, RemoteKey } from "@effect-rdma/core"
 * import { Effect } from "effect"
 *
 * declare const admission: Admission.Admission
 * // Each client's own region, its key sent with the acceptance.
 * export const serveOne = (request: CmEndpoint.CmEndpoint) =>
 *   Effect.gen(function*() {
 *     const log = yield* CmEndpoint.registerWrite(request, new Uint8Array(4096))
 *     const privateData = yield* RdmaClient.acceptData({ log: RemoteKey.make(log) })
 *     const ep = yield* CmListener.accept(request, { admission, privateData })
 *     yield* CmEndpoint.awaitClosed(ep)
 *   })
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const acceptData: (
  keys: Readonly<Record<string, RemoteKey>>
) => Effect.Effect<Uint8Array, InvalidOptionsError> = cmClient.acceptData
