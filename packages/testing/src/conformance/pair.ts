/**
 * The connected pair the connection cases start from, in two halves: the server half (a peer, a
 * region it exposes, an endpoint, one accepted connection) and the client half (a peer, a
 * connection to the server, the exposed region as a remote one). In one process the halves run
 * side by side ({@link connectedPair}); across two hosts (packages/native/test-pair) each runs on
 * its own host and the descriptor travels between them.
 */
import {
  Connection,
  type Descriptor,
  Listener,
  LocalMr,
  Peer,
  type RdmaError,
  RemoteMr,
  Usage
} from "@effect-rdma/core"
import type { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"

/** What the server's region allows the client: write to it, flush it, read it back. */
export const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

export type Exposed = "WRITE_DST" | "READ_SRC" | "FLUSH_TYPE_VISIBILITY"

/** The exposed region's size. */
export const TARGET_SIZE = 65536

/** Each side's options; each sends private data ("hello", "welcome") unless its options say otherwise. */
export interface PairOptions {
  readonly server?: Connection.Options | undefined
  readonly client?: Connection.Options | undefined
}

const bytes = (s: string) => new TextEncoder().encode(s)

// The halves' types are written out: inferred, their declarations would name core's internal
// module that declares ConnectionFailedError, which the published package does not export.

export interface ServerHalf {
  readonly peer: Peer.Peer
  readonly target: LocalMr.LocalMr<Exposed>
  readonly ep: Listener.Listener
  readonly server: Connection.Connection
}

export interface ClientHalf {
  readonly peer: Peer.Peer
  readonly client: Connection.Connection
  readonly remote: RemoteMr.RemoteMr<Exposed>
}

export type ServerHalfError = RdmaError.RpmaError | RdmaError.MemoryRefusedError | Connection.ConnectionFailedError

export type ClientHalfError =
  | RdmaError.RpmaError
  | Connection.ConnectionFailedError
  | Descriptor.InvalidDescriptorError
  | RemoteMr.MissingUsageError

/**
 * The server half: `listening` is told the exposed region's descriptor once the endpoint
 * listens, before the connection is accepted.
 */
export const serverHalf = <E, R>(
  address: string,
  port: number,
  options: Connection.Options | undefined,
  listening: (descriptor: Uint8Array) => Effect.Effect<void, E, R>
): Effect.Effect<ServerHalf, E | ServerHalfError, Scope.Scope | R | RdmaDriver> =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const target = yield* LocalMr.allocate(peer, TARGET_SIZE, exposed)
    const ep = yield* Listener.make(peer, address, port)
    yield* listening(yield* LocalMr.descriptor(target))
    const server = yield* Listener.acceptNext(ep, { privateData: bytes("welcome"), ...options })
    return { peer, target, ep, server }
  })

/** The client half: connects to `serverAddress:port`, whose region `descriptor` describes. */
export const clientHalf = (
  address: string,
  serverAddress: string,
  port: number,
  descriptor: Uint8Array,
  options?: Connection.Options
): Effect.Effect<ClientHalf, ClientHalfError, Scope.Scope | RdmaDriver> =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const client = yield* Connection.connect(peer, serverAddress, port, { privateData: bytes("hello"), ...options })
    const remote = yield* RemoteMr.fromDescriptor(descriptor).pipe(Effect.flatMap(RemoteMr.require(exposed)))
    return { peer, client, remote }
  })

/** Both halves in one process, on one device: the server's side runs in a fiber of the caller's scope. */
export const connectedPair = (
  address: string,
  port: number,
  options?: PairOptions
): Effect.Effect<
  {
    readonly serverPeer: Peer.Peer
    readonly clientPeer: Peer.Peer
    readonly ep: Listener.Listener
    readonly target: LocalMr.LocalMr<Exposed>
    readonly server: Connection.Connection
    readonly client: Connection.Connection
    readonly remote: RemoteMr.RemoteMr<Exposed>
  },
  unknown,
  Scope.Scope | RdmaDriver
> =>
  Effect.gen(function*() {
    const listening = yield* Deferred.make<Uint8Array, unknown>()
    const serving = yield* Effect.fork(
      serverHalf(address, port, options?.server, (descriptor) => Deferred.succeed(listening, descriptor)).pipe(
        // A server half that fails before it listens must not leave the client waiting.
        Effect.onError((cause) => Deferred.failCause(listening, cause))
      )
    )
    const descriptor = yield* Deferred.await(listening)
    const { client, peer: clientPeer, remote } = yield* clientHalf(address, address, port, descriptor, options?.client)
    const { ep, peer: serverPeer, server, target } = yield* Fiber.join(serving)
    return { serverPeer, clientPeer, ep, target, server, client, remote }
  })
