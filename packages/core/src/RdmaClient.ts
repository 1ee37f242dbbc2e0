/**
 * A client for long-running services: it fetches the server's offer (where to connect, the regions'
 * descriptors, the admission token), connects, and keeps the connection up, reconnecting on loss
 * with your `Schedule` and fetching the offer again each time (a restarted server has new regions).
 * Its state is a `SubscriptionRef` you can watch. Operations name the server's regions by the names
 * in the offer and run on the current connection; while there is none they fail at once with
 * {@link NotConnectedError}, or wait at most the bound you chose.
 *
 * An operation is never retried: one that fails because the connection ended (a
 * `ConnectionClosedError`, or a `CompletionError`, after which a queue pair fails what follows)
 * reports it, its outcome unknown, and the client reconnects. Retry what is safe to repeat
 * (`Effect.retry` with `while: (e) => e._tag === "NotConnectedError"`, ...).
 *
 * Everything a session acquired (remote regions, the connection) is released when it ends, within
 * the connection's `timeout`; closing the client's scope stops the supervisor and closes the
 * session the same way.
 *
 * @since 1.0.0
 */
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type * as Stream from "effect/Stream"
import type * as SubscriptionRef from "effect/SubscriptionRef"
import * as Connection from "./Connection.js"
import type * as DescriptorExchange from "./DescriptorExchange.js"
import type { RdmaDriver } from "./Driver.js"
import * as internal from "./internal/client.js"
import * as errors from "./internal/clientErrors.js"
import { type Peer, Peer as PeerTag } from "./Peer.js"
import * as RdmaError from "./RdmaError.js"
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
export type RegionsWith<Regions extends RegionUsages, F extends Flag> = {
  [K in keyof Regions]: F extends FlagsOf<Regions[K]> ? K : never
}[keyof Regions] & string

/**
 * Where the client is: connecting for the first time, connected, waiting for (or making) its
 * `attempt`-th reconnect since the last connection, or closed (its scope ended, or its schedule did,
 * with the last failure).
 *
 * @since 1.0.0
 * @category models
 */
export type State =
  | { readonly _tag: "Connecting" }
  | { readonly _tag: "Connected"; readonly address: string; readonly port: number }
  | { readonly _tag: "Reconnecting"; readonly attempt: number; readonly lastError: unknown }
  | { readonly _tag: "Closed"; readonly lastError: unknown }

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
 * A reconnecting client.
 *
 * @since 1.0.0
 * @category models
 */
export interface RdmaClient<Regions extends RegionUsages> {
  readonly [TypeId]: TypeId
  readonly regions: Regions
  /** Its state; `changes` streams it (the current one first). */
  readonly stateRef: SubscriptionRef.SubscriptionRef<State>
  readonly state: Effect.Effect<State>
  readonly changes: Stream.Stream<State>
  /** The offer of the current connection, if connected (its `config`, ...). */
  readonly offer: Effect.Effect<Offer | undefined>
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
 * The offer lacks a region the client names: the session fails, and the schedule decides whether to
 * try again.
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
 * An option of {@link make} that is not what it takes (from untyped code): which one, and what it
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
export interface MakeOptions<Regions extends RegionUsages, E, R, Out, RS> {
  /** Fetches the offer, on every connect: bound it (`DescriptorExchange.fetch` has a timeout). */
  readonly offer: Effect.Effect<Offer, E, R>
  readonly regions: Regions
  /**
   * When to try again after a failed connect or a lost connection, fed the failure; its delays are
   * the waits between attempts, and its end closes the client. It starts over after each
   * connection. E.g. `Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("5 seconds")))`.
   */
  readonly reconnect: Schedule.Schedule<Out, unknown, RS>
  /** While disconnected, operations fail at once (`"fail"`, the default) or wait at most `wait`. */
  readonly whileDisconnected?: "fail" | { readonly wait: Duration.DurationInput } | undefined
  /** The connection's options (its `timeout` bounds the connect and the close). `privateData` is the offer's token. */
  readonly connection?: Omit<Connection.Options, "privateData"> | undefined
  /** The peer to connect from (its regions are the local ones the operations use). */
  readonly peer: Peer
  /** How often an idle connection's state is read, for an end that sent no event. Default 1000 ms. */
  readonly pollMillis?: number | undefined
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
export const make: <Regions extends RegionUsages, E, R, Out, RS>(
  options: MakeOptions<Regions, E, R, Out, RS>
) => Effect.Effect<RdmaClient<Regions>, InvalidOptionsError, R | RS | RdmaDriver | Scope.Scope> = internal.make

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
export const layer = <Id, Regions extends RegionUsages, E, R, Out, RS>(
  tag: Context.Tag<Id, RdmaClient<Regions>>,
  options: Omit<MakeOptions<Regions, E, R, Out, RS>, "peer">
): Layer.Layer<Id, InvalidOptionsError, R | RS | RdmaDriver | Peer> =>
  Layer.scoped(tag, Effect.flatMap(PeerTag, (peer) => make({ ...options, peer })))

/**
 * @since 1.0.0
 * @category models
 */
export interface WriteArgs<K extends string> extends Omit<Connection.WriteArgs, "dst"> {
  readonly dst: K
}

/**
 * @since 1.0.0
 * @category models
 */
export interface WriteManyArgs<K extends string> extends Omit<Connection.WriteManyArgs, "dst"> {
  readonly dst: K
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
export interface FlushArgs<K extends string> extends Omit<Connection.FlushArgs<"FLUSH_TYPE_VISIBILITY">, "dst"> {
  readonly dst: K
}

/**
 * `Connection.write` into the region named `dst`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const write = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: WriteArgs<RegionsWith<Regions, "WRITE_DST">>
): Effect.Effect<void, Connection.TransferError | NotConnectedError> =>
  internal.useRegion(client, "rpma_write", args.dst, (s, dst) =>
    // The fields named, not spread: a spread followed by another property builds a new hidden
    // class on every call, and the write's every later read of it misses V8's inline caches.
    Connection.write(s.connection, { dst, dstOffset: args.dstOffset, src: args.src, srcOffset: args.srcOffset, length: args.length }))

/**
 * `Connection.writeMany` into the region named `dst`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const writeMany = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: WriteManyArgs<RegionsWith<Regions, "WRITE_DST">>
): Effect.Effect<void, Connection.TransferError | NotConnectedError> =>
  internal.useRegion(client, "rpma_write", args.dst, (s, dst) =>
    Connection.writeMany(s.connection, { dst, src: args.src, spans: args.spans }))

/**
 * `Connection.read` from the region named `src`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const read = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: ReadArgs<RegionsWith<Regions, "READ_SRC">>
): Effect.Effect<void, Connection.TransferError | NotConnectedError> =>
  internal.useRegion(client, "rpma_read", args.src, (s, src) =>
    Connection.read(s.connection, { dst: args.dst, dstOffset: args.dstOffset, src, srcOffset: args.srcOffset, length: args.length }))

/**
 * `Connection.flush` of the region named `dst`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const flush = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: FlushArgs<RegionsWith<Regions, "FLUSH_TYPE_VISIBILITY">>
): Effect.Effect<void, Connection.FlushError | NotConnectedError> =>
  internal.useRegion(client, "rpma_flush", args.dst, (s, dst) =>
    Connection.flush(s.connection, { dst, offset: args.offset, length: args.length }))

/**
 * `Connection.send`, on the current connection.
 *
 * @since 1.0.0
 * @category operations
 */
export const send = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: Connection.SendArgs
): Effect.Effect<void, Connection.TransferError | NotConnectedError> =>
  internal.use(client, "rpma_send", (s) => Connection.send(s.connection, args))

/**
 * `Connection.recv`, on the current connection: waits for a message (bound it with a timeout).
 *
 * @since 1.0.0
 * @category operations
 */
export const recv = <Regions extends RegionUsages>(
  client: RdmaClient<Regions>,
  args: Connection.RecvArgs
): Effect.Effect<number, Connection.TransferError | NotConnectedError> =>
  internal.use(client, "rpma_recv", (s) => Connection.recv(s.connection, args))

/**
 * Runs `f` with the current connection and the offer's regions (for what the operations above do
 * not cover); an error that means the connection ended makes the client reconnect.
 *
 * @since 1.0.0
 * @category operations
 */
export const withConnection = <Regions extends RegionUsages, A, E extends { readonly _tag: string }>(
  client: RdmaClient<Regions>,
  f: (connection: Connection.Connection, regions: internal.Session["regions"]) => Effect.Effect<A, E>
): Effect.Effect<A, E | NotConnectedError> =>
  internal.use(client, "RdmaClient.withConnection", (s) => f(s.connection, s.regions))
