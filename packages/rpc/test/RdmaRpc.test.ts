/**
 * An @effect/rpc group served and called over RDMA on the simulated fabric: plain calls, typed
 * errors, streams, messages larger than a receive buffer and than the landing region, both
 * serializations, a server that goes away, admission by token, a connection lost under a call
 * that waits for its answer (found by the keepalive), and nothing left registered afterwards (the
 * ledger).
 */
import { Admission, CmListener, type Connection, type DescriptorExchange, Listener, Peer } from "@effect-rdma/core"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import type { RpcClientError } from "@effect/rpc/RpcClientError"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Layer, Queue, Ref, Schedule, Schema, Scope } from "effect"
import { cases } from "./cases.js"

for (const transport of ["rpma", "cm"] as const) {
  cases(
    SimulatedDriver.DEFAULT_ADDRESS,
    transport === "rpma" ? 7480 : 7580,
    (effect) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.asVoid, Effect.provide(SimulatedDriver.layer)),
    undefined,
    transport
  )
}

describe("@effect/rpc over RDMA: admission", () => {
  const Group = RpcGroup.make(Rpc.make("Ping", { success: Schema.String }))
  const address = SimulatedDriver.DEFAULT_ADDRESS
  const token = new Uint8Array(16).fill(7)

  it.effect("a server with an admission serves the client with its token and rejects one without", () =>
    Effect.scoped(Effect.gen(function*() {
      const admission = yield* Admission.make(token)
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Ping: () => Effect.succeed("pong") })),
          Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port: 7481, admission })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = (target: { readonly connection?: Connection.Options; readonly token?: Uint8Array }) =>
        RdmaRpc.layerProtocolClient({ transport: "rpma", address, port: 7481, retrySchedule: Schedule.stop, ...target })
          .pipe(
            Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack]),
            Layer.build,
            Effect.flatMap((protocol) => Effect.provide(RpcClient.make(Group), protocol))
          )
      const outsider = yield* client({ connection: { privateData: new Uint8Array([16, ...new Uint8Array(16)]) } })
      const refused = yield* Effect.flip(outsider.Ping())
      assert.strictEqual(refused._tag, "RpcClientError")
      assert.strictEqual((refused.cause as { _tag?: string })._tag, "ConnectionFailedError")
      const admitted = yield* client({ token })
      assert.strictEqual(yield* admitted.Ping(), "pong")
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("@effect/rpc over RDMA: keepalive", () => {
  const Group = RpcGroup.make(Rpc.make("Hang", { success: Schema.String }))
  const address = SimulatedDriver.DEFAULT_ADDRESS

  it.live("a call waiting for its answer fails with RpcClientError when the keepalive finds the connection lost", () =>
    Effect.scoped(Effect.gen(function*() {
      const channel = { keepAlive: "100 millis" as const }
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Hang: () => Effect.never })),
          Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port: 7482, ...channel })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({ transport: "rpma", address, port: 7482, ...channel }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      const call = yield* Effect.fork(client.Hang())
      // Nothing else is posted while the call waits: the next read is the keepalive's, and it loses the connection.
      yield* Effect.sleep("50 millis")
      yield* SimulatedDriver.fail({ operation: "rpma_read", nth: 1, loseConnection: true })
      const exit = yield* call.await.pipe(Effect.timeout("5 seconds"))
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      assert.strictEqual((error as { _tag?: string } | undefined)?._tag, "RpcClientError")
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("a keepAlive that is not a positive duration is refused with a message", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({ Hang: () => Effect.never })),
          Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port: 7483 })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const error = yield* Effect.flip(Layer.build(
        RdmaRpc.layerProtocolClient({ transport: "rpma", address, port: 7483, keepAlive: "0 millis" }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      ))
      assert.strictEqual(error._tag, "RdmaChannelError")
      assert.match(error.message, /keepAlive must be a positive duration/)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("@effect/rpc over RDMA: options that are no options", () => {
  it.effect("are refused with RdmaChannelError saying what is wrong, when the protocol is made, never thrown", () =>
    Effect.scoped(Effect.gen(function*() {
      const address = SimulatedDriver.DEFAULT_ADDRESS
      type Bad = never
      const clients: ReadonlyArray<readonly [unknown, RegExp]> = [
        [null, /the options must be an object/],
        [5, /the options must be an object/],
        [{ transport: "tcp", address, port: 7484 }, /transport must be "rpma" or "cm", not "tcp"/],
        [{ transport: "cm", address, port: -1 }, /port must be an integer from 0 to 65535/],
        [{ transport: "cm", address: 5, port: 7484 }, /address must be a string/],
        [{ transport: "rpma", offer: "later" }, /offer must be an Effect/],
        [{ transport: "cm", address, port: 7484, retrySchedule: 5 }, /retrySchedule must be a Schedule/]
      ]
      for (const [options, said] of clients) {
        const error = yield* Effect.flip(
          RdmaRpc.makeProtocolClient(options as Bad).pipe(
            Effect.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
          )
        )
        assert.strictEqual(error._tag, "RdmaChannelError")
        assert.match(error.message, said)
      }
      for (const options of [undefined, { transport: "tcp", address, port: 7484 }]) {
        const error = yield* Effect.flip(
          RdmaRpc.makeProtocolServer(options as Bad).pipe(
            Effect.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
          )
        )
        assert.strictEqual(error._tag, "RdmaChannelError")
      }
      // Options read once: a getter that throws as they are copied is refused, whichever it is.
      const trapped = new Proxy({ transport: "cm", address, port: 7484 }, {
        get: () => {
          throw new Error("a trap")
        }
      })
      const unread = yield* Effect.flip(
        RdmaRpc.makeProtocolClient(trapped as Bad).pipe(
          Effect.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      assert.match(unread.message, /the options cannot be read \(Error: a trap\)/)
      // Over the caller's listener: anything but one, or options that are no object, are refused
      // as the protocol is made, not left to its accept loop.
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7485)
      const cmListener = yield* CmListener.make(address, 7486)
      const overListeners: ReadonlyArray<readonly [Effect.Effect<unknown, { readonly message: string }, any>, RegExp]> =
        [
          [RdmaRpc.makeRpmaProtocolServer(null as Bad), /the listener must be a Listener \(Listener.make\), not null/],
          [RdmaRpc.makeRpmaProtocolServer(cmListener as Bad), /the listener must be a Listener/],
          [RdmaRpc.makeRpmaProtocolServer(listener, 5 as Bad), /the options must be an object, not number/],
          [RdmaRpc.makeCmProtocolServer(listener as Bad), /the listener must be a CmListener \(CmListener.make\)/],
          [RdmaRpc.makeCmProtocolServer(cmListener, null as Bad), /the options must be an object, not null/],
          [RdmaRpc.makeRpmaProtocolServer(listener, trapped as Bad), /the options cannot be read \(Error: a trap\)/],
          [RdmaRpc.makeCmProtocolServer(cmListener, trapped as Bad), /the options cannot be read \(Error: a trap\)/]
        ]
      for (const [made, said] of overListeners) {
        const error = yield* Effect.flip(made.pipe(Effect.provide(RpcSerialization.layerMsgPack)))
        assert.match(error.message, said)
      }
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("@effect/rpc over RDMA: recovery", () => {
  const Group = RpcGroup.make(
    Rpc.make("Add", { payload: { a: Schema.Number, b: Schema.Number }, success: Schema.Number }),
    Rpc.make("Hang", { success: Schema.String })
  )
  const address = SimulatedDriver.DEFAULT_ADDRESS
  const callers = Array.from({ length: 16 }, (_, i) => i)
  /** A server in a scope of its own; each Hang that starts is announced on `started`. */
  const serve = (port: number, started: Queue.Queue<void>, options?: Partial<RdmaRpc.RpmaServingOptions>) =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(
        RpcServer.layer(Group).pipe(
          Layer.provide(Group.toLayer({
            Add: ({ a, b }) => Effect.succeed(a + b),
            Hang: () => Effect.zipRight(Queue.offer(started, undefined), Effect.never)
          })),
          Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port, ...options })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        ),
        scope
      )
      return scope
    })
  const retried = <A>(call: Effect.Effect<A, RpcClientError>) =>
    call.pipe(
      Effect.retry({ schedule: Schedule.spaced("20 millis"), while: (e) => e._tag === "RpcClientError" }),
      Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error("no answer once the server was back") })
    )

  it.live("the client re-dials on its retrySchedule: a link cut fails the calls in flight with RpcClientError; later calls are served, across a server restart too", () =>
    Effect.scoped(Effect.gen(function*() {
      const started = yield* Queue.unbounded<void>()
      const first = yield* serve(7484, started)
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({
          transport: "rpma",
          address,
          port: 7484,
          keepAlive: "50 millis",
          retrySchedule: Schedule.spaced("20 millis")
        })
          .pipe(Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack]))
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* client.Add({ a: 1, b: 1 }), 2)
      const inFlight = yield* Effect.fork(
        Effect.forEach(callers, () => Effect.flip(client.Hang()), { concurrency: "unbounded" })
      )
      yield* Queue.takeN(started, callers.length)
      // The link is cut under the next keepalive read; the server is still there to re-dial.
      yield* SimulatedDriver.fail({ operation: "rpma_read", nth: 1, loseConnection: true })
      const failures = yield* Fiber.join(inFlight).pipe(Effect.timeout("10 seconds"))
      assert.deepStrictEqual(failures.map((e) => e._tag), callers.map(() => "RpcClientError"))
      const sums = yield* Effect.forEach(callers, (i) => retried(client.Add({ a: i, b: i })), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(sums, callers.map((i) => 2 * i))
      // The server goes away and comes back on the same port.
      yield* Scope.close(first, Exit.void)
      const second = yield* serve(7484, started)
      const again = yield* Effect.forEach(callers, (i) => retried(client.Add({ a: i, b: 1 })), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(again, callers.map((i) => i + 1))
      yield* Scope.close(second, Exit.void)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live("the client re-dials through its offer: each connect fetches it, with the admission token it carries", () =>
    Effect.scoped(Effect.gen(function*() {
      const started = yield* Queue.unbounded<void>()
      const current = yield* Ref.make<DescriptorExchange.Offer>({
        rdma: { address, port: 7485 },
        regions: {},
        config: {},
        token: new Uint8Array(16).fill(1)
      })
      const first = yield* serve(7485, started, { admission: yield* Admission.make(new Uint8Array(16).fill(1)) })
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({
          transport: "rpma",
          offer: Ref.get(current),
          retrySchedule: Schedule.spaced("20 millis")
        }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* retried(client.Add({ a: 1, b: 1 })), 2)
      yield* Scope.close(first, Exit.void)
      // The server comes back elsewhere with a new token: only the offer says so.
      const token = new Uint8Array(16).fill(2)
      const second = yield* serve(7486, started, { admission: yield* Admission.make(token) })
      yield* Ref.set(current, { rdma: { address, port: 7486 }, regions: {}, config: {}, token })
      assert.strictEqual(yield* retried(client.Add({ a: 2, b: 3 })), 5)
      yield* Scope.close(second, Exit.void)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.live("cm: a server scope closed ends the calls in flight and fails later ones with RpcClientError; the client re-dials and the reopened server serves it", () =>
    Effect.scoped(Effect.gen(function*() {
      const started = yield* Queue.unbounded<void>()
      const port = 7587
      const serveCm = Effect.gen(function*() {
        const scope = yield* Scope.make()
        yield* Layer.buildWithScope(
          RpcServer.layer(Group).pipe(
            Layer.provide(Group.toLayer({
              Add: ({ a, b }) => Effect.succeed(a + b),
              Hang: () => Effect.zipRight(Queue.offer(started, undefined), Effect.never)
            })),
            Layer.provide(RdmaRpc.layerProtocolServer({ transport: "cm", address, port })),
            Layer.provide(RpcSerialization.layerMsgPack)
          ),
          scope
        )
        return scope
      })
      const first = yield* serveCm
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({ transport: "cm", address, port, retrySchedule: Schedule.spaced("20 millis") })
          .pipe(Layer.provide(RpcSerialization.layerMsgPack))
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* client.Add({ a: 1, b: 1 }), 2)
      const inFlight = yield* Effect.fork(
        Effect.forEach(callers, () => Effect.exit(client.Hang()), { concurrency: "unbounded" })
      )
      yield* Queue.takeN(started, callers.length)
      yield* Scope.close(first, Exit.void)
      // The server interrupts its handlers as it closes (the call ends interrupted) or the connection
      // ends first (RpcClientError): either way no call waits on.
      const ends = yield* Fiber.join(inFlight).pipe(Effect.timeout("10 seconds"))
      assert.deepStrictEqual(ends.map(Exit.isFailure), callers.map(() => true))
      const refused = yield* Effect.flip(client.Add({ a: 1, b: 2 }).pipe(Effect.timeout("10 seconds")))
      assert.strictEqual(refused._tag, "RpcClientError")
      const second = yield* serveCm
      const again = yield* Effect.forEach(callers, (i) => retried(client.Add({ a: i, b: 1 })), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(again, callers.map((i) => i + 1))
      yield* Scope.close(second, Exit.void)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})
