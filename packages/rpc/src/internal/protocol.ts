/**
 * @effect/rpc's client and server protocols over RDMA channels: messages are encoded with the
 * layer's RpcSerialization and carried whole by a channel per connection.
 *
 * Declared and documented in RdmaRpcClient.ts and RdmaRpcServer.ts.
 */
import { Connection, Endpoint, Peer, type RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as RpcClient from "@effect/rpc/RpcClient"
import { RpcClientError } from "@effect/rpc/RpcClientError"
import { type FromClientEncoded, type FromServerEncoded, ResponseDefectEncoded } from "@effect/rpc/RpcMessage"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as channel from "./channel.js"

const encoder = new TextEncoder()
const toBytes = (encoded: Uint8Array | string): Uint8Array => typeof encoded === "string" ? encoder.encode(encoded) : encoded

/** Decodes one message and hands each of its items to `f`, in order; a message that fails to decode goes to `onDefect`. */
const decodeEach = <A>(
  parser: RpcSerialization.Parser,
  message: Uint8Array,
  f: (item: A) => Effect.Effect<void>,
  onDefect: (cause: unknown) => Effect.Effect<void>
): Effect.Effect<void> => {
  let items: ReadonlyArray<unknown>
  try {
    items = parser.decode(message)
  } catch (cause) {
    return onDefect(cause)
  }
  return Effect.forEach(items, (item) => f(item as A), { discard: true })
}

export interface ClientOptions extends channel.ChannelOptions {}

export const makeClientProtocol = (
  peer: Peer.Peer,
  conn: Connection.Connection,
  options?: ClientOptions
): Effect.Effect<RpcClient.Protocol["Type"], channel.ChannelError, Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver> =>
  RpcClient.Protocol.make((writeResponse) =>
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      const parser = serialization.unsafeMake()
      const protocolError = (message: string, cause: unknown) =>
        writeResponse({
          _tag: "ClientProtocolError",
          error: new RpcClientError({ reason: "Protocol", message, cause })
        })
      const ch = yield* channel.make(
        peer,
        conn,
        (message) =>
          decodeEach<FromServerEncoded>(parser, message, writeResponse, (cause) => protocolError("Error decoding message", cause)),
        options
      )
      // The connection's end fails every request still waiting, as a closed socket does.
      yield* Deferred.await(ch.closed).pipe(
        Effect.exit,
        Effect.flatMap((exit) =>
          protocolError(
            "The RDMA connection ended",
            Exit.isFailure(exit) ? Cause.squash(exit.cause) : new Error("the server closed the connection")
          )
        ),
        Effect.forkScoped
      )
      return {
        send(request: FromClientEncoded) {
          return Effect.suspend(() => {
            const encoded = parser.encode(request)
            if (encoded === undefined) return Effect.void
            return Effect.mapError(
              ch.send(toBytes(encoded)),
              (cause) => new RpcClientError({ reason: "Protocol", message: cause.message, cause })
            )
          })
        },
        supportsAck: true,
        supportsTransferables: false
      }
    })
  )

export interface ClientLayerOptions extends ClientOptions {
  readonly address: string
  readonly port: number
  readonly connection?: Connection.Options | undefined
}

export const layerClientProtocol = (
  options: ClientLayerOptions
): Layer.Layer<
  RpcClient.Protocol,
  channel.ChannelError | Connection.ConnectionFailedError | RdmaError.RpmaError,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  Layer.scoped(
    RpcClient.Protocol,
    Effect.gen(function*() {
      const peer = yield* Peer.Peer
      const conn = yield* Connection.connect(peer, options.address, options.port, options.connection)
      return yield* makeClientProtocol(peer, conn, options)
    })
  )

export interface ServerOptions extends channel.ChannelOptions {
  /** Options of each accepted connection. */
  readonly connection?: Connection.Options | undefined
  /** Accept only requests that carry its token (Endpoint.acceptIfToken); others are rejected. */
  readonly admission?: Endpoint.Admission | undefined
}

export const makeServerProtocol = (
  endpoint: Endpoint.Endpoint,
  options?: ServerOptions
): Effect.Effect<RpcServer.Protocol["Type"], never, Scope.Scope | RpcSerialization.RpcSerialization | Driver.RdmaDriver> =>
  RpcServer.Protocol.make((writeRequest) =>
    Effect.gen(function*() {
      const serialization = yield* RpcSerialization.RpcSerialization
      const disconnects = yield* Mailbox.make<number>()
      const scope = yield* Effect.scope
      const clients = new Map<number, { readonly send: (response: FromServerEncoded) => Effect.Effect<void> }>()
      const clientIds = new Set<number>()
      let nextId = 0

      /** One client: its connection in a scope of its own, closed when the connection ends. */
      const serve = Effect.gen(function*() {
        const clientScope = yield* Scope.fork(scope, ExecutionStrategy.sequential)
        const admission = options?.admission
        const accepting = admission === undefined
          ? Endpoint.acceptNext(endpoint, options?.connection)
          : Effect.flatMap(Endpoint.next(endpoint, options?.connection), (req) =>
            Effect.tapError(Endpoint.acceptIfToken(req, admission, options?.connection), () => Endpoint.reject(req)))
        const conn = yield* Scope.extend(accepting, clientScope).pipe(
          Effect.tapError(() => Scope.close(clientScope, Exit.void))
        )
        const id = nextId++
        const parser = serialization.unsafeMake()
        // The client may call as soon as its channel is open, before this side's own HELLO has
        // completed and `make` returned: its requests wait until it is registered below, or their
        // answers would find no client to go to and be dropped (the call waiting on for ever).
        const registered = yield* Deferred.make<void>()
        const opened = yield* Scope.extend(
          channel.make(
            endpoint.peer,
            conn,
            (message) =>
              Effect.zipRight(
                Deferred.await(registered),
                decodeEach<FromClientEncoded>(
                  parser,
                  message,
                  (request) => writeRequest(id, request),
                  (cause) => Effect.logWarning(`RDMA RPC: a message from client ${id} could not be decoded`, cause)
                )
              ),
            options
          ),
          clientScope
        ).pipe(Effect.exit)
        if (Exit.isFailure(opened)) {
          yield* Scope.close(clientScope, Exit.void)
          return yield* Effect.logWarning("RDMA RPC: a client's channel could not be opened", opened.cause)
        }
        const ch = opened.value
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
        yield* Deferred.await(ch.closed).pipe(
          Effect.exit,
          Effect.zipRight(Effect.suspend(() => {
            clients.delete(id)
            clientIds.delete(id)
            return Effect.zipRight(disconnects.offer(id), Scope.close(clientScope, Exit.void))
          })),
          Effect.forkIn(scope)
        )
      })

      yield* serve.pipe(
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logWarning("RDMA RPC: accepting a client failed", cause)
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

export interface ServerLayerOptions extends ServerOptions {
  readonly address: string
  readonly port: number
}

export const layerServerProtocol = (
  options: ServerLayerOptions
): Layer.Layer<
  RpcServer.Protocol,
  RdmaError.RpmaError,
  Peer.Peer | RpcSerialization.RpcSerialization | Driver.RdmaDriver
> =>
  Layer.scoped(
    RpcServer.Protocol,
    Effect.gen(function*() {
      const peer = yield* Peer.Peer
      const endpoint = yield* Endpoint.listen(peer, options.address, options.port)
      return yield* makeServerProtocol(endpoint, options)
    })
  )
