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
import type * as Scope from "effect/Scope"
import type * as RdmaRpc from "../RdmaRpc.js"
import * as cmChannel from "./cmChannel.js"
import type { ChannelError } from "./framing.js"
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
    const handshake = yield* protocol.handshakeBound(options.handshakeTimeout)
    const { address, port, token } = options
    return yield* protocol.reconnecting(
      (onMessage) =>
        Effect.gen(function*() {
          const privateData = token === undefined ? undefined : yield* Admission.privateData(token)
          const ep = yield* CmEndpoint.make(address, port, options.endpoint)
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

export const makeProtocolClient = <R>(
  options: RdmaRpc.ClientOptions<R>
): Effect.Effect<
  RpcClient.Protocol["Type"],
  ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | Peer.Peer | R
> =>
  options.transport === "cm"
    ? makeCmClientProtocol(options)
    : Effect.flatMap(Peer.Peer, (peer) => protocol.makeReconnectingClientProtocol(peer, options))

export const makeRpmaServerProtocol = protocol.makeServerProtocol

export const makeProtocolServer = (
  options: RdmaRpc.ServerOptions
): Effect.Effect<
  RpcServer.Protocol["Type"],
  RdmaError.RdmaCmError | RdmaError.RpmaError | ChannelError,
  Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver | Peer.Peer
> =>
  options.transport === "cm"
    ? Effect.flatMap(
      CmListener.make(options.address, options.port, options.endpoint),
      (listener) => makeCmServerProtocol(listener, options)
    )
    : Effect.gen(function*() {
      const peer = yield* Peer.Peer
      const endpoint = yield* Listener.make(peer, options.address, options.port)
      return yield* protocol.makeServerProtocol(endpoint, options)
    })

export const layerProtocolClient = <R>(options: RdmaRpc.ClientOptions<R>) =>
  Layer.scoped(RpcClient.Protocol, makeProtocolClient(options))

export const layerProtocolServer = (options: RdmaRpc.ServerOptions) =>
  Layer.scoped(RpcServer.Protocol, makeProtocolServer(options))
