/**
 * The RdmaRpc module's protocols: the librpma transport is internal/protocol.ts's, the librdmacm
 * one is built here from internal/cmChannel.ts on the same reconnecting client and accepting server.
 *
 * Declared and documented in RdmaRpc.ts.
 */
import { Admission, CmEndpoint, CmListener, Listener, Peer, type RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as RpcClient from "@effect/rpc/RpcClient"
import type * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type * as RdmaRpc from "../RdmaRpc.js"
import * as cmChannel from "./cmChannel.js"
import * as framing from "./framing.js"
import { ChannelError } from "./framing.js"
import * as protocol from "./protocol.js"

export const makeCmClientProtocol = (
  options: RdmaRpc.CmClientOptions
): Effect.Effect<
  RpcClient.Protocol["Type"],
  ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  Effect.gen(function*() {
    const settings = yield* cmChannel.settings(options)
    const endpoint = yield* protocol.fitReceives(settings.receives, options.endpoint, "maxRecvWr", "endpoint")
    const handshake = yield* protocol.handshakeBound(options.handshakeTimeout)
    const { address, port, token } = options
    return yield* protocol.reconnecting(
      (onMessage) =>
        Effect.gen(function*() {
          const privateData = token === undefined ? undefined : yield* Admission.privateData(token)
          const ep = yield* CmEndpoint.make(address, port, endpoint)
          // Every receive is posted before the connect: the server may send at once.
          const half = yield* cmChannel.prepare(ep, onMessage, settings)
          yield* CmEndpoint.establish(ep, privateData === undefined ? undefined : { privateData })
          return yield* half.open.pipe(protocol.withinHandshake(handshake, `the channel to ${address}:${port}`))
        }),
      options.retrySchedule
    )
  })

export const makeCmServerProtocol = (
  listener: CmListener.CmListener,
  options?: Omit<RdmaRpc.CmServerOptions, "transport" | "address" | "port" | "endpoint">
): Effect.Effect<
  RpcServer.Protocol["Type"],
  ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  overListener(
    listener,
    CmListener.isCmListener,
    "a CmListener (CmListener.make)",
    options,
    (copy) => cmServing(listener, copy)
  )

/** {@link makeCmServerProtocol} once its listener and options are checked. */
const cmServing: typeof makeCmServerProtocol = (listener, options) =>
  Effect.gen(function*() {
    const settings = yield* cmChannel.settings(options)
    const admission = options?.admission
    return yield* protocol.serving<CmEndpoint.CmEndpoint>({
      next: CmListener.next(listener),
      // Every receive is posted before the accept: the client may send at once.
      open: (request, onMessage) =>
        Effect.gen(function*() {
          const half = yield* cmChannel.prepare(request, onMessage, settings)
          yield* CmListener.accept(request, admission === undefined ? {} : { admission })
          return yield* half.open
        }),
      // The client's scope, closed next, rejects the request if it is still unanswered and
      // disconnects it if it was accepted (an accept refused by the admission rejected it already).
      reject: () => Effect.void
    }, options)
  })

// The public overloads (RdmaRpc.ts) give each transport its own requirements: only librpma's needs a Peer.

const describe = (value: unknown): string =>
  value === null ? "null" : typeof value === "string" ? JSON.stringify(value) : typeof value

/**
 * What makes options no options at all (not an object, no transport of the two, a retry schedule
 * that is no Schedule), refused as every other option out of range is: `RdmaChannelError` with
 * reason "Protocol", when the Effect runs, never thrown while it is made.
 */
const optionsProblem = (options: unknown, side: "client" | "server"): ChannelError | undefined => {
  if (options === null || typeof options !== "object") {
    return framing.protocol(`the options must be an object with a transport ("rpma" or "cm"), not ${describe(options)}`)
  }
  const { retrySchedule, transport } = options as { readonly transport?: unknown; readonly retrySchedule?: unknown }
  if (transport !== "rpma" && transport !== "cm") {
    return framing.protocol(`transport must be "rpma" or "cm", not ${describe(transport)}`)
  }
  if (retrySchedule !== undefined && !Schedule.isSchedule(retrySchedule)) {
    return framing.protocol(
      `retrySchedule must be a Schedule (e.g. Schedule.spaced("1 second")), not ${describe(retrySchedule)}`
    )
  }
  // A server's address and port are its listen's to refuse; a client's would only fail every dial.
  if (side === "client") {
    const target = options as { readonly address?: unknown; readonly port?: unknown; readonly offer?: unknown }
    if (transport === "rpma" && "offer" in target) {
      return Effect.isEffect(target.offer)
        ? undefined
        : framing.protocol(`offer must be an Effect that fetches the offer, not ${describe(target.offer)}`)
    }
    if (typeof target.address !== "string") {
      return framing.protocol(`address must be a string, not ${describe(target.address)}`)
    }
    if (!Number.isInteger(target.port) || (target.port as number) < 0 || (target.port as number) > 65535) {
      return framing.protocol(`port must be an integer from 0 to 65535, not ${String(target.port)}`)
    }
  }
  return undefined
}

const checked = <O, A, E, R>(
  options: O,
  side: "client" | "server",
  make: (copy: O) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | ChannelError, R> =>
  Effect.suspend((): Effect.Effect<A, E | ChannelError, R> => {
    // Read once, checked and used as that copy (a getter or Proxy trap that throws: refused).
    const copy = options !== null && typeof options === "object" ? readOnce(options) : options
    if (typeof copy === "string") return Effect.fail(framing.protocol(copy))
    const problem = optionsProblem(copy, side)
    return problem === undefined ? make(copy) : Effect.fail(problem)
  })

export const makeProtocolClient = <R>(
  options: RdmaRpc.ClientOptions<R>
): Effect.Effect<
  RpcClient.Protocol["Type"],
  ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | Peer.Peer | R
> =>
  checked(options, "client", (options) =>
    options.transport === "cm"
      ? makeCmClientProtocol(options)
      : Effect.flatMap(Peer.Peer, (peer) => protocol.makeReconnectingClientProtocol(peer, options)))

export const makeRpmaServerProtocol: typeof protocol.makeServerProtocol = (listener, options) =>
  overListener(
    listener,
    Listener.isListener,
    "a Listener (Listener.make)",
    options,
    (copy) =>
      Effect.zipRight(
        // Checked here, once: a server that made its own listener checked before it listened. This
        // constructor fails with ChannelErrors only: core's refusal is the cause of a "Protocol" one.
        Effect.mapError(
          protocol.servingProblem(listener.peer, listener.address, copy),
          (error) =>
            error._tag === "RdmaChannelError" ? error : new ChannelError({
              reason: "Protocol",
              detail: `the server's options are refused (${error.operation}): ${error.detail ?? error.message}`,
              cause: error
            })
        ),
        protocol.makeServerProtocol(listener, copy)
      )
  )

/**
 * A server over the caller's listener: anything but one, or options that are no object, are
 * refused as a protocol that cannot be made, not left to its accept loop.
 */
const overListener = <O extends object, A, E, R>(
  listener: unknown,
  isListener: (u: unknown) => boolean,
  what: string,
  options: O | undefined,
  make: (copy: O | undefined) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | ChannelError, R> =>
  Effect.suspend((): Effect.Effect<A, E | ChannelError, R> => {
    if (!isListener(listener)) {
      return Effect.fail(framing.protocol(`the listener must be ${what}, not ${describe(listener)}`))
    }
    if (options !== undefined && (options === null || typeof options !== "object")) {
      return Effect.fail(framing.protocol(`the options must be an object, not ${describe(options)}`))
    }
    if (options === undefined) return make(undefined)
    const copy = readOnce(options)
    return typeof copy === "string" ? Effect.fail(framing.protocol(copy)) : make(copy)
  })

/**
 * The options' values, read once into a plain object that the protocol uses from then on:
 * a getter or Proxy trap that throws is refused here, not met as a defect inside the accept loop.
 */
const readOnce = <O extends object>(options: O): O | string => {
  try {
    const copy: Record<string, unknown> = {}
    // for-in: inherited values too (options made with Object.create, say), as reading them would.
    for (const key in options) copy[key] = options[key]
    return copy as O
  } catch (cause) {
    return `the options cannot be read (${String(cause)}): give plain options`
  }
}

type ServerMade = Effect.Effect<
  RpcServer.Protocol["Type"],
  RdmaError.RdmaCmError | RdmaError.RpmaError | ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | Peer.Peer
>

export const makeProtocolServer = (options: RdmaRpc.ServerOptions): ServerMade =>
  checked(options, "server", (options): ServerMade =>
    options.transport === "cm"
      ? Effect.flatMap(
        Effect.flatMap(
          cmChannel.settings(options),
          (settings) => protocol.fitReceives(settings.receives, options.endpoint, "maxRecvWr", "endpoint")
        ),
        (endpoint) =>
          Effect.flatMap(
            CmListener.make(options.address, options.port, endpoint),
            (listener) => makeCmServerProtocol(listener, options)
          )
      )
      : Effect.gen(function*() {
        const peer = yield* Peer.Peer
        // Options that would refuse every client are refused before the listen (RpmaInvalidError,
        // as core gives; a non-Admission `admission`, a "Protocol" ChannelError).
        yield* protocol.servingProblem(peer, options.address, options)
        const endpoint = yield* Listener.make(peer, options.address, options.port)
        return yield* protocol.makeServerProtocol(endpoint, options)
      }))

export const layerProtocolClient = <R>(options: RdmaRpc.ClientOptions<R>) =>
  Layer.scoped(RpcClient.Protocol, makeProtocolClient(options))

export const layerProtocolServer = (options: RdmaRpc.ServerOptions) =>
  Layer.scoped(RpcServer.Protocol, makeProtocolServer(options))
