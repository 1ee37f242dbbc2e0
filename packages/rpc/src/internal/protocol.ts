/**
 * @effect/rpc's client and server protocols over RDMA channels: messages are encoded with the
 * layer's RpcSerialization and carried whole by a channel per connection.
 *
 * Declared and documented in RdmaRpc.ts (the `"rpma"` transport's; the shared client and server
 * loops serve the `"cm"` transport too).
 */
import { Admission, Connection, Listener, type Peer, RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import * as RpcClient from "@effect/rpc/RpcClient"
import { RpcClientError } from "@effect/rpc/RpcClientError"
import { type FromClientEncoded, type FromServerEncoded, ResponseDefectEncoded } from "@effect/rpc/RpcMessage"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import type * as RdmaRpc from "../RdmaRpc.js"
import * as channel from "./channel.js"

const encoder = new TextEncoder()
const toBytes = (encoded: Uint8Array | string): Uint8Array =>
  typeof encoded === "string" ? encoder.encode(encoded) : encoded

/** The `_tag`s each side takes from the other: anything else is not an RPC message. */
const fromClientTags: ReadonlySet<string> = new Set<FromClientEncoded["_tag"]>([
  "Request",
  "Ack",
  "Interrupt",
  "Ping",
  "Eof"
])
const fromServerTags: ReadonlySet<string> = new Set<FromServerEncoded["_tag"]>(["Chunk", "Exit", "Defect", "Pong"])

/**
 * Decodes one message and hands each of its items to `f`, in order. A message that does not
 * decode, or an item that is not one of `tags`' messages, fails with a `"Protocol"` ChannelError,
 * which ends the channel: the other side does not speak this protocol.
 */
const decodeEach = <A>(
  parser: RpcSerialization.Parser,
  tags: ReadonlySet<string>,
  message: Uint8Array,
  f: (item: A) => Effect.Effect<void>
): Effect.Effect<void, channel.ChannelError> => {
  let items: ReadonlyArray<unknown>
  try {
    items = parser.decode(message)
  } catch (cause) {
    return Effect.fail(
      new channel.ChannelError({
        reason: "Protocol",
        detail: `a message that does not decode (${String(cause)})`,
        cause
      })
    )
  }
  // A message is whole: one that yields nothing was cut short, and a streaming parser (msgpack)
  // would keep it and append every later message to it, waiting for its end.
  if (items.length === 0) {
    return Effect.fail(
      new channel.ChannelError({ reason: "Protocol", detail: "a message that does not decode: it is incomplete" })
    )
  }
  for (const item of items) {
    const tag = typeof item === "object" && item !== null ? (item as { readonly _tag?: unknown })._tag : undefined
    if (typeof tag !== "string" || !tags.has(tag)) {
      return Effect.fail(
        new channel.ChannelError({
          reason: "Protocol",
          detail: `a message that is not an RPC message (${item === null ? "null" : typeof item}${
            typeof tag === "string" ? ` tagged ${JSON.stringify(tag.slice(0, 40))}` : ""
          })`
        })
      )
    }
  }
  // Most messages hold one item: no loop of Effects for it.
  return items.length === 1 ? f(items[0] as A) : Effect.forEach(items, (item) => f(item as A), { discard: true })
}

const clientError = (message: string, cause: unknown) => new RpcClientError({ reason: "Protocol", message, cause })

const endCause = (exit: Exit.Exit<void, channel.ChannelError>): unknown =>
  Exit.isFailure(exit) ? Cause.squash(exit.cause) : new Error("the server closed the connection")

const sendEncoded = (ch: channel.Channel, parser: RpcSerialization.Parser, request: FromClientEncoded) =>
  Effect.suspend(() => {
    const encoded = parser.encode(request)
    if (encoded === undefined) return Effect.void
    return Effect.mapError(ch.send(toBytes(encoded)), (cause) => clientError(cause.message, cause))
  })

/** @effect/rpc's socket protocol's default: 500 ms, growing by half each time, at most 5 s apart. */
const defaultRetrySchedule = Schedule.exponential("500 millis", 1.5).pipe(Schedule.union(Schedule.spaced("5 seconds")))

export const handshakeBound = (
  value: Duration.DurationInput | undefined
): Effect.Effect<Duration.Duration, channel.ChannelError> => {
  const bound = Duration.decodeUnknown(value ?? "10 seconds")
  return Option.isSome(bound) && Duration.isFinite(bound.value) && Duration.toMillis(bound.value) > 0
    ? Effect.succeed(bound.value)
    : Effect.fail(
      new channel.ChannelError({
        reason: "Protocol",
        detail: `handshakeTimeout must be a positive, finite duration, got ${String(value)}`
      })
    )
}

/** Bounds a handshake by the Clock, failing with a `"Timeout"` ChannelError that says what did not finish. */
export const withinHandshake = (bound: Duration.Duration, what: string) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.timeoutFail(effect, {
    duration: bound,
    onTimeout: () =>
      new channel.ChannelError({
        reason: "Timeout",
        detail: `${what} did not finish within handshakeTimeout (${Duration.format(bound)})`
      })
  })

/**
 * A client protocol that connects, and connects again after every failed connect or lost
 * connection, waiting as `retrySchedule` says (fed the failure; it starts over after each
 * connection). A lost connection fails the requests still waiting with an `RpcClientError`, as
 * @effect/rpc's socket protocol does; while there is no connection, a request fails at once with
 * the last failure, except before the first connect has finished, when it waits for it.
 */
export const makeReconnectingClientProtocol = <R>(
  peer: Peer.Peer,
  options: RdmaRpc.RpmaClientOptions<R>
): Effect.Effect<
  RpcClient.Protocol["Type"],
  channel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
> =>
  Effect.gen(function*() {
    const connection = yield* fitReceives(
      (yield* channel.settings(options)).receives,
      options.connection,
      "receiveQueueSize",
      "connection"
    )
    const handshake = yield* handshakeBound(options.handshakeTimeout)
    const target = "offer" in options
      ? Effect.map(options.offer, (offer) => ({ ...offer.rdma, token: offer.token }))
      : Effect.succeed(options)
    return yield* reconnecting(
      (onMessage) =>
        Effect.gen(function*() {
          const { address, port, token } = yield* target
          const privateData = token === undefined ? undefined : yield* Admission.privateData(token)
          const conn = yield* Connection.connect(peer, address, port, {
            ...(privateData === undefined ? {} : { privateData }),
            ...connection
          })
          return yield* channel.make(peer, conn, onMessage, options).pipe(
            withinHandshake(handshake, `the channel to ${address}:${port}`)
          )
        }),
      options.retrySchedule
    )
  })

/**
 * One connection of a client, from dial to open channel, whose messages go to `onMessage`: what
 * each transport does in its own way (librpma's connect and channel, librdmacm's endpoint and
 * channel). The rest of the client protocol is {@link reconnecting}'s.
 */
export type Dial<R> = (
  onMessage: (message: Uint8Array) => Effect.Effect<void, channel.ChannelError>
) => Effect.Effect<channel.Channel, unknown, Scope.Scope | Driver.RdmaDriver | R>

/**
 * A client protocol that dials, and dials again after every failed dial or lost connection,
 * waiting as `retrySchedule` says (fed the failure; it starts over after each connection). A lost
 * connection fails the requests still waiting with an `RpcClientError`, as @effect/rpc's socket
 * protocol does; while there is no connection, a request fails at once with the last failure,
 * except before the first dial has finished, when it waits for it.
 */
export const reconnecting = <R>(
  dial: Dial<R>,
  retrySchedule: Schedule.Schedule<unknown, unknown> | undefined
): Effect.Effect<
  RpcClient.Protocol["Type"],
  never,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | R
> =>
  RpcClient.Protocol.make((writeResponse) =>
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      let current: { readonly ch: channel.Channel; readonly parser: RpcSerialization.Parser } | undefined
      let lastError: RpcClientError | undefined
      const firstAttempt = yield* Deferred.make<void>()

      /** One connection, from dial to end: fails with why it ended (or could not start). */
      const session = Effect.gen(function*() {
        const parser = serialization.unsafeMake()
        const ch = yield* dial((message) =>
          decodeEach<FromServerEncoded>(parser, fromServerTags, message, writeResponse)
        )
        current = { ch, parser }
        lastError = undefined
        yield* Deferred.succeed(firstAttempt, undefined)
        const exit = yield* Effect.exit(Deferred.await(ch.closed))
        return yield* Effect.fail(endCause(exit))
      }).pipe(
        // Before the connection's close: the calls waiting learn at once.
        Effect.tapErrorCause((cause) =>
          Effect.suspend(() => {
            if (Cause.isInterruptedOnly(cause)) return Effect.void
            // Cleared first: a request sent from now on cannot be one of those failed below.
            current = undefined
            lastError = clientError("The RDMA connection ended or could not be made", Cause.squash(cause))
            return Effect.zipRight(
              writeResponse({ _tag: "ClientProtocolError", error: lastError }),
              Deferred.succeed(firstAttempt, undefined)
            )
          })
        ),
        Effect.scoped
      )
      yield* session.pipe(
        Effect.retry(retrySchedule ?? defaultRetrySchedule),
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause)
            ? Effect.void
            : Effect.logWarning("RDMA RPC: the client stopped reconnecting", cause)
        ),
        Effect.interruptible,
        Effect.forkScoped
      )

      const send = (request: FromClientEncoded): Effect.Effect<void, RpcClientError> =>
        Effect.suspend(() => {
          if (current !== undefined) return sendEncoded(current.ch, current.parser, request)
          if (lastError !== undefined) return Effect.fail(lastError)
          // The first connect has not finished: bounded by the connection's timeout and handshakeTimeout.
          return Effect.zipRight(Deferred.await(firstAttempt), send(request))
        })
      return { send, supportsAck: true, supportsTransferables: false }
    })
  )

const handshakesAtOnce = (value: number | undefined): Effect.Effect<number, channel.ChannelError> => {
  const n = value ?? 64
  return Number.isSafeInteger(n) && n > 0
    ? Effect.succeed(n)
    : Effect.fail(
      new channel.ChannelError({
        reason: "Protocol",
        detail: `maxHandshakes must be a positive integer, got ${String(value)}`
      })
    )
}

const showOption = (value: unknown): string => {
  try {
    return typeof value === "string" ? JSON.stringify(value) : DriverArguments.show(value)
  } catch {
    return typeof value
  }
}

/**
 * What would refuse every client of a `"rpma"` server, found before it takes any (else each client
 * is refused, with a warning, and the server looks healthy). Core has no check of these options
 * apart from a request's accept, so core is let refuse them where it can without one:
 *
 * - `connection`: a connect with those settings (its private data left out) to port 0 of `address`,
 *   which core checks the settings of first (timeout, queue sizes, polling: the checks an accept
 *   makes) and the driver then refuses for its port before any request is made: nothing is dialed.
 *   Core's refusal is the failure, an `RpmaInvalidError` (as `Listener.acceptClient` gives). The
 *   private data is checked with the accept's limit (`DriverArguments.privateData`), as the accept does.
 * - `isolation` and `ports` (when isolated): an `RpmaInvalidError` of rpma_ep_listen, as
 *   `Listener.acceptClient` refuses them, each port by `DriverArguments.port`.
 * - `admission`: not an `Admission` is a `"Protocol"` ChannelError (core's refusal, an
 *   `InvalidTokenError`, is no error the server's constructors fail with).
 */
export const servingProblem = (
  peer: Peer.Peer,
  address: unknown,
  options: RdmaRpc.RpmaServingOptions | undefined
): Effect.Effect<void, RdmaError.RpmaError | channel.ChannelError, Driver.RdmaDriver> =>
  Effect.suspend((): Effect.Effect<void, RdmaError.RpmaError | channel.ChannelError, Driver.RdmaDriver> => {
    const invalid = (operation: string, detail: string) =>
      Effect.fail(RdmaError.fromRpmaCode(RdmaError.RpmaCode.RPMA_E_INVAL, operation, detail))
    const admission: unknown = options?.admission
    if (admission !== undefined && !Admission.isAdmission(admission)) {
      return Effect.fail(
        new channel.ChannelError({
          reason: "Protocol",
          detail: `admission must be an Admission (Admission.make(token)), not ${showOption(admission)}`
        })
      )
    }
    const isolation: unknown = options?.isolation
    if (isolation !== undefined && isolation !== "perClient" && isolation !== "shared") {
      return invalid(
        "rpma_ep_listen",
        `isolation must be "perClient" (the default) or "shared", not ${showOption(isolation)}`
      )
    }
    if (isolation !== "shared" && options?.ports !== undefined) {
      let refused: string | undefined
      try {
        const ports: unknown = options.ports
        const { from, to } = (typeof ports === "object" && ports !== null ? ports : {}) as {
          readonly from?: unknown
          readonly to?: unknown
        }
        refused = DriverArguments.port(from) ?? DriverArguments.port(to) ??
          ((from as number) <= (to as number) ? undefined : `from ${String(from)} is after to ${String(to)}`)
        if (refused !== undefined) {
          refused = `ports must be { from, to } of 1 to 65535, from <= to, not ${showOption(ports)}: ${refused}`
        }
      } catch (cause) {
        refused = `ports cannot be read (${String(cause)}): give plain options`
      }
      if (refused !== undefined) return invalid("rpma_ep_listen", refused)
    }
    const given: unknown = options?.connection
    if (typeof given !== "object" || given === null || typeof address !== "string") return Effect.void
    let settings: Connection.Options
    let privateData: unknown
    try {
      privateData = (given as Connection.Options).privateData
      settings = { ...(given as Connection.Options), privateData: undefined }
    } catch (cause) {
      return invalid("rpma_conn_req_connect", `connection cannot be read (${String(cause)}): give plain options`)
    }
    const privateDataRefused = privateData === undefined
      ? undefined
      : DriverArguments.privateData(privateData, "accept")
    if (privateDataRefused !== undefined) return invalid("rpma_conn_req_connect", privateDataRefused)
    // The probe's own refusal: its port, which the driver checks after the settings core checked.
    const portRefused = DriverArguments.port(0)
    return Connection.connect(peer, address, 0, settings).pipe(
      Effect.scoped,
      Effect.asVoid,
      Effect.catchAll((error) =>
        error._tag === "RpmaInvalidError" && error.detail !== portRefused ? Effect.fail(error) : Effect.void
      )
    )
  })

/** A connection's (or an endpoint's) receive queue unless its options say otherwise (core's default). */
const DEFAULT_RECEIVE_QUEUE = 64

/**
 * The connection (or endpoint) options a channel of `receives` runs on. The channel posts all its
 * receives before it says HELLO, so they must fit the receive queue: one more would wait for a slot
 * only a message frees, and no message comes before HELLO (a hang). Not given, the queue is sized
 * for them; given smaller, refused. `key`: the queue's option, `receiveQueueSize` (librpma) or
 * `maxRecvWr` (librdmacm); `where`: the options' name in the protocol's options.
 */
export const fitReceives = <O extends object>(
  receives: number,
  options: O | undefined,
  key: "receiveQueueSize" | "maxRecvWr",
  where: "connection" | "endpoint"
): Effect.Effect<O | undefined, channel.ChannelError> => {
  let given: unknown
  try {
    given = (options as Record<string, unknown> | undefined)?.[key]
  } catch {
    // Unreadable: core refuses such options where the connection is made, saying so.
    return Effect.succeed(options)
  }
  if (given === undefined) {
    return Effect.succeed(receives <= DEFAULT_RECEIVE_QUEUE ? options : { ...options, [key]: receives } as O)
  }
  return typeof given === "number" && given < receives
    ? Effect.fail(
      new channel.ChannelError({
        reason: "Protocol",
        detail: `receives (${receives}) must fit the ${where}'s ${key} (${given}): ` +
          `raise ${where}.${key} to ${receives} or more, or lower receives`
      })
    )
    : Effect.succeed(options)
}

export const makeServerProtocol = (
  endpoint: Listener.Listener,
  options?: RdmaRpc.RpmaServingOptions
): Effect.Effect<
  RpcServer.Protocol["Type"],
  channel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  Effect.gen(function*() {
    const connection = yield* fitReceives(
      (yield* channel.settings(options)).receives,
      options?.connection,
      "receiveQueueSize",
      "connection"
    )
    return yield* serving<Listener.ConnectionRequest>({
      next: Listener.next(endpoint, connection),
      // Isolated by default: the client's channel and its regions live in a peer of its own.
      open: (req, onMessage) =>
        Effect.flatMap(
          Listener.acceptClient(req, {
            ...connection,
            admission: options?.admission,
            isolation: options?.isolation,
            ports: options?.ports
          }),
          ({ connection: conn, peer }) => channel.make(peer, conn, onMessage, options)
        ),
      reject: Listener.reject
    }, options)
  })

/**
 * What a server takes its clients with, in each transport's own way: the next request (in the
 * client's scope), its accept and open channel (in the client's scope, within handshakeTimeout),
 * and its rejection when that fails. The rest of the server protocol is {@link serving}'s.
 */
export interface Accepting<Req> {
  readonly next: Effect.Effect<Req, unknown, Driver.RdmaDriver | Scope.Scope>
  readonly open: (
    req: Req,
    onMessage: (message: Uint8Array) => Effect.Effect<void, channel.ChannelError>
  ) => Effect.Effect<channel.Channel, unknown, Driver.RdmaDriver | Scope.Scope>
  readonly reject: (req: Req) => Effect.Effect<void, never, Driver.RdmaDriver>
}

/**
 * The admission's refusal that `cause` is, if it is one and nothing else: a request whose private
 * data did not carry the token, or carried a spent one (`Admission.AdmissionRefusedError`).
 */
const admissionRefusal = (cause: Cause.Cause<unknown>): Admission.AdmissionRefusedError | undefined => {
  if (Cause.isDie(cause) || Cause.isInterrupted(cause)) return undefined
  const failures = Chunk.toReadonlyArray(Cause.failures(cause))
  return failures.length > 0 && failures.every((error) => error instanceof Admission.AdmissionRefusedError)
    ? failures[0] as Admission.AdmissionRefusedError
    : undefined
}

/** The server protocol over `transport`: one client per request, each in a fiber and a scope of its own. */
export const serving = <Req>(
  transport: Accepting<Req>,
  options: {
    readonly handshakeTimeout?: Duration.DurationInput | undefined
    readonly maxHandshakes?: number | undefined
  } | undefined
): Effect.Effect<
  RpcServer.Protocol["Type"],
  channel.ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  Effect.gen(function*() {
    const handshake = yield* handshakeBound(options?.handshakeTimeout)
    const handshakes = yield* Effect.makeSemaphore(yield* handshakesAtOnce(options?.maxHandshakes))
    return yield* RpcServer.Protocol.make((writeRequest) =>
      Effect.gen(function*() {
        const serialization = yield* RpcSerialization.RpcSerialization
        const disconnects = yield* Mailbox.make<number>()
        const scope = yield* Effect.scope
        const clients = new Map<number, { readonly send: (response: FromServerEncoded) => Effect.Effect<void> }>()
        const clientIds = new Set<number>()
        let nextId = 0

        /** Accepts `req` and opens its channel, within handshakeTimeout. */
        const open = (req: Req, id: number, clientScope: Scope.CloseableScope) =>
          Effect.gen(function*() {
            const parser = serialization.unsafeMake()
            // The client may call as soon as its channel is open, before this side's own HELLO has
            // completed and `open` returned: its requests wait until it is registered below, or their
            // answers would find no client to go to and be dropped (the call waiting on for ever).
            const registered = yield* Deferred.make<void>()
            const ch = yield* Scope.extend(
              transport.open(
                req,
                (message) =>
                  Effect.zipRight(
                    Deferred.await(registered),
                    decodeEach<FromClientEncoded>(
                      parser,
                      fromClientTags,
                      message,
                      (request) => writeRequest(id, request)
                    )
                  )
              ),
              clientScope
            )
            return { ch, parser, registered }
          }).pipe(
            withinHandshake(handshake, `client ${id}'s handshake`),
            Effect.tapError(() => transport.reject(req))
          )

        /** One client, from its connection request to its end, in its scope. */
        const serve = (req: Req, clientScope: Scope.CloseableScope) =>
          Effect.gen(function*() {
            const id = nextId++
            // Its handshake's permit (taken with the request) is given back however the handshake ends.
            const opened = yield* Effect.exit(open(req, id, clientScope)).pipe(Effect.ensuring(handshakes.release(1)))
            if (Exit.isFailure(opened)) {
              // Logged first: the reason is known now, and the close may wait for the endpoint's drain.
              // A request the admission refused is the server doing its job (a client with a wrong or
              // spent token), logged at debug level as Listener.serve does; any other failure (a
              // handshake that broke the protocol or did not finish in time) is worth a warning.
              const refused = admissionRefusal(opened.cause)
              yield* refused === undefined
                ? Effect.logWarning(`RDMA RPC: client ${id} was not accepted`, opened.cause)
                : Effect.logDebug(`RDMA RPC: client ${id} was not admitted (${refused.reason}): ${refused.message}`)
              return yield* Effect.uninterruptible(Scope.close(clientScope, Exit.void))
            }
            const { ch, parser, registered } = opened.value
            clients.set(id, {
              send: (response) =>
                Effect.suspend(() => {
                  let encoded: Uint8Array | string | undefined
                  try {
                    encoded = parser.encode(response)
                  } catch (cause) {
                    encoded = parser.encode(ResponseDefectEncoded(cause))
                  }
                  // A client that is gone gets nothing more: its disconnect is reported by its channel.
                  return encoded === undefined ? Effect.void : Effect.ignore(ch.send(toBytes(encoded)))
                })
            })
            clientIds.add(id)
            yield* Deferred.succeed(registered, undefined)
            const ended = yield* Effect.exit(Deferred.await(ch.closed))
            clients.delete(id)
            clientIds.delete(id)
            // A client that broke the rules, or did not answer in time, is worth a warning; one that went away is not.
            if (Exit.isFailure(ended) && !Cause.isInterruptedOnly(ended.cause)) {
              const error = Cause.squash(ended.cause)
              const dropped = error instanceof channel.ChannelError &&
                (error.reason === "Protocol" || error.reason === "Timeout")
              yield* (dropped ? Effect.logWarning : Effect.logDebug)(`RDMA RPC: client ${id} dropped`, ended.cause)
            }
            // Uninterruptible: a server closing meanwhile waits for this close (a close interrupted
            // here would leave the client's endpoint to finish after the server's listener).
            yield* Effect.zipRight(disconnects.offer(id), Scope.close(clientScope, Exit.void)).pipe(
              Effect.uninterruptible
            )
          })

        // Each request is served by a fiber of its own: a client slow to connect keeps nobody waiting.
        // A request is taken only with a handshake permit: at most maxHandshakes are under way. The
        // request lives in its client's scope, made before it is taken.
        const take = Effect.gen(function*() {
          const clientScope = yield* Scope.fork(scope, ExecutionStrategy.sequential)
          const req = yield* Scope.extend(transport.next, clientScope).pipe(
            Effect.onError(() => Effect.zipRight(handshakes.release(1), Scope.close(clientScope, Exit.void)))
          )
          yield* Effect.forkIn(serve(req, clientScope), scope)
        })
        yield* handshakes.take(1).pipe(
          Effect.zipRight(take),
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : Effect.logWarning("RDMA RPC: taking a connection request failed", cause)
          ),
          Effect.forever,
          Effect.interruptible,
          Effect.forkIn(scope)
        )

        return {
          disconnects,
          send: (clientId: number, response: FromServerEncoded) => {
            const client = clients.get(clientId)
            return client === undefined ? Effect.void : client.send(response)
          },
          end: (_clientId: number) => Effect.void,
          clientIds: Effect.sync(() => clientIds as ReadonlySet<number>),
          initialMessage: Effect.succeed(Option.none()),
          supportsAck: true,
          supportsTransferables: false,
          supportsSpanPropagation: true
        }
      })
    )
  })
