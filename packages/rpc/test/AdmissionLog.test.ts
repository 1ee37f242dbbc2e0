/**
 * What the server logs about a client it does not take, on both transports: a request its admission
 * refuses (a wrong token) is the server working as designed and is logged at debug level, as
 * `Listener.serve` logs it, with no cause; a handshake that does not finish in time is a warning.
 */
import { Admission, CmEndpoint, Connection, Peer } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import {
  Cause,
  Effect,
  ExecutionStrategy,
  Exit,
  Fiber,
  Layer,
  Logger,
  LogLevel,
  Queue,
  Schedule,
  Schema,
  Scope,
  TestClock
} from "effect"

const Group = RpcGroup.make(Rpc.make("Ping", { success: Schema.String }))
const address = SimulatedDriver.DEFAULT_ADDRESS
const token = new Uint8Array(16).fill(7)
const wrongToken = new Uint8Array(16).fill(1)

type ProtocolNeeds = Driver.RdmaDriver | RpcSerialization.RpcSerialization

interface Entry {
  readonly level: LogLevel.LogLevel
  readonly message: string
  readonly cause: Cause.Cause<unknown>
}

/** A server's log lines about its clients (`RDMA RPC: client ...`), as they are written. */
const capture = Effect.gen(function*() {
  const entries = yield* Queue.unbounded<Entry>()
  const logger = Logger.make(({ cause, logLevel, message }) => {
    const text = (Array.isArray(message) ? message : [message]).map(String).join(" ")
    if (text.startsWith("RDMA RPC: client")) Queue.unsafeOffer(entries, { level: logLevel, message: text, cause })
  })
  return {
    /** The next entry written (bounded by the test's timeout). */
    next: Queue.take(entries),
    layer: Layer.merge(Logger.replace(Logger.defaultLogger, logger), Logger.minimumLogLevel(LogLevel.All))
  }
})

for (const [transport, port] of [["rpma", 7495], ["cm", 7595]] as const) {
  const cm = transport === "cm"

  /** A server with an admission, in a scope of its own. */
  const serve = Effect.gen(function*() {
    const admission = yield* Admission.make(token, { uses: 10 })
    const protocol: Layer.Layer<RpcServer.Protocol, unknown, ProtocolNeeds> = cm
      ? RdmaRpc.layerProtocolServer({ transport: "cm", address, port, admission, handshakeTimeout: "2 seconds" })
      : RdmaRpc.layerProtocolServer({ transport: "rpma", address, port, admission, handshakeTimeout: "2 seconds" })
        .pipe(Layer.provide(Peer.layer(address)))
    const serverScope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    yield* Layer.buildWithScope(
      RpcServer.layer(Group).pipe(
        Layer.provide(Group.toLayer({ Ping: () => Effect.succeed("pong") })),
        Layer.provide(protocol),
        Layer.provide(RpcSerialization.layerMsgPack)
      ),
      serverScope
    )
    return serverScope
  })

  /** A call by an RPC client that sends `clientToken`, and does not dial again. */
  const call = (clientToken: Uint8Array) => {
    const protocol: Layer.Layer<RpcClient.Protocol, unknown, ProtocolNeeds> = cm
      ? RdmaRpc.layerProtocolClient({
        transport: "cm",
        address,
        port,
        token: clientToken,
        retrySchedule: Schedule.stop
      })
      : RdmaRpc.layerProtocolClient({
        transport: "rpma",
        address,
        port,
        token: clientToken,
        retrySchedule: Schedule.stop
      }).pipe(Layer.provide(Peer.layer(address)))
    return Effect.gen(function*() {
      const built = yield* Layer.build(protocol.pipe(Layer.provide(RpcSerialization.layerMsgPack)))
      const client = yield* Effect.provide(RpcClient.make(Group), built)
      return yield* client.Ping()
    }).pipe(Effect.scoped)
  }

  /** A client with the right token that connects and then says nothing: its handshake never finishes. */
  const silent = Effect.gen(function*() {
    const privateData = yield* Admission.privateData(token)
    if (cm) {
      const ep = yield* CmEndpoint.make(address, port)
      yield* CmEndpoint.establish(ep, { privateData })
      return CmEndpoint.awaitClosed(ep)
    }
    const conn = yield* Connection.connect(yield* Peer.make(address), address, port, { privateData })
    return Connection.awaitClosed(conn)
  })

  describe(`@effect/rpc over RDMA (${transport}): what the server logs about a client it does not take`, () => {
    it.live("a wrong token's refusal is logged at debug level, not as a warning, saying which client and why", () =>
      Effect.gen(function*() {
        const logs = yield* capture
        yield* Effect.gen(function*() {
          const serverScope = yield* serve
          const refused = yield* Effect.flip(call(wrongToken))
          assert.strictEqual((refused as { readonly _tag?: unknown })._tag, "RpcClientError")
          const entry = yield* logs.next
          assert.strictEqual(entry.level, LogLevel.Debug, `${entry.level.label}: ${entry.message}`)
          assert.match(entry.message, /^RDMA RPC: client \d+ was not admitted \(WrongToken\): /)
          assert.include(entry.message, `${address}:${port}`)
          assert.isTrue(Cause.isEmpty(entry.cause), "logged without its cause (no stack)")
          // The server goes on: a client with the token is served.
          assert.strictEqual(yield* call(token), "pong")
          yield* Scope.close(serverScope, Exit.void)
        }).pipe(Effect.provide(logs.layer))
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))

    it.effect("a handshake that does not finish within handshakeTimeout is still a warning", () =>
      Effect.gen(function*() {
        const logs = yield* capture
        yield* Effect.gen(function*() {
          const serverScope = yield* serve
          const ended = yield* Effect.fork(yield* silent)
          yield* TestClock.adjust("2 seconds")
          yield* Fiber.join(ended)
          // Written before the client's scope closed, its connection with it.
          const entry = yield* logs.next
          assert.strictEqual(entry.level, LogLevel.Warning, `${entry.level.label}: ${entry.message}`)
          assert.match(entry.message, /^RDMA RPC: client \d+ was not accepted/)
          assert.include(Cause.pretty(entry.cause), "handshakeTimeout")
          yield* Scope.close(serverScope, Exit.void)
        }).pipe(Effect.provide(logs.layer))
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedDriver.layer)))
  })
}
