/**
 * Options that would fail every client are refused when the layer is built, not met by each client:
 * the channel options' upper bounds (both transports, server and client), and a `"rpma"` server's
 * `connection`, `isolation`, `ports` and `admission`.
 */
import { Listener, Peer } from "@effect-rdma/core"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schedule, Schema } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const Group = RpcGroup.make(
  Rpc.make("Add", { payload: { a: Schema.Number, b: Schema.Number }, success: Schema.Number })
)
const Handlers = Group.toLayer({ Add: ({ a, b }) => Effect.succeed(a + b) })
type Bad = never

const GiB = 2 ** 30
const channelCases = (transport: "rpma" | "cm"): ReadonlyArray<readonly [string, object, RegExp]> => {
  const least = transport === "rpma" ? 2 : 3
  return [
    [
      "inlineSize 2^40",
      { inlineSize: 2 ** 40 },
      /inlineSize must be an integer from 72 to 1073741824, got 1099511627776/
    ],
    ["inlineSize 2^31", { inlineSize: 2 ** 31 }, /inlineSize must be an integer from 72 to 1073741824, got 2147483648/],
    [
      "receives 1e9",
      { receives: 1e9 },
      new RegExp(`receives must be an integer from ${least} to 65536, got 1000000000`)
    ],
    [
      "receives 65537",
      { receives: 65537 },
      new RegExp(`receives must be an integer from ${least} to 65536, got 65537`)
    ],
    ["sends 1e9", { sends: 1e9 }, /sends must be an integer from 1 to 65536, got 1000000000/],
    [
      "receives × inlineSize over 2^31 - 1",
      { inlineSize: GiB, receives: least },
      /receives × inlineSize must be at most 2147483647 bytes, got .*: lower receives or inlineSize/
    ],
    [
      "sends × inlineSize over 2^31 - 1",
      { inlineSize: GiB / 2, receives: least, sends: 4 },
      /sends × inlineSize must be at most 2147483647 bytes, got 4 × 536870912 = 2147483648: lower sends or inlineSize/
    ],
    ...(transport === "rpma"
      ? [
        [
          "landingSize 2^40",
          { landingSize: 2 ** 40 },
          /landingSize must be an integer from 1 to 2147483647, got 1099511627776/
        ] as const,
        ["landingSize 2^31", { landingSize: 2 ** 31 }, /landingSize must be an integer from 1 to 2147483647/] as const
      ]
      : [])
  ]
}

// A Peer for both: the "cm" transport needs none, and takes none from it.
const support = Layer.merge(Peer.layer(address), RpcSerialization.layerMsgPack)

describe("RdmaRpc: channel options out of range fail the layer at build", () => {
  for (const transport of ["rpma", "cm"] as const) {
    for (const side of ["server", "client"] as const) {
      it.effect(`${transport} ${side}`, () =>
        Effect.gen(function*() {
          let port = transport === "rpma" ? 7900 : 7950
          for (const [name, options, said] of channelCases(transport)) {
            port++
            const layer = side === "server"
              ? RpcServer.layer(Group).pipe(
                Layer.provide(Handlers),
                Layer.provide(RdmaRpc.layerProtocolServer({ transport, address, port, ...options } as Bad)),
                Layer.provide(support)
              )
              : RdmaRpc.layerProtocolClient(
                { transport, address, port, retrySchedule: Schedule.stop, ...options } as Bad
              )
                .pipe(Layer.provide(support))
            const error = yield* Effect.scoped(Layer.build(layer)).pipe(
              Effect.flip,
              Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new Error(`${name}: timed out`) }),
              Effect.orElseFail(() => new Error(`${name}: the layer was built`))
            )
            const { _tag, message, reason } = error as { _tag: string; message: string; reason?: string }
            assert.strictEqual(_tag, "RdmaChannelError", name)
            assert.strictEqual(reason, "Protocol", name)
            assert.match(message, said, name)
          }
        }).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
    }
  }

  it.effect("the bounds themselves are taken", () =>
    Effect.gen(function*() {
      for (const transport of ["rpma", "cm"] as const) {
        const bounds = {
          receives: 65536,
          sends: 65536,
          inlineSize: 32767,
          ...(transport === "rpma" ? { landingSize: 2 ** 31 - 1 } : {})
        }
        // Nothing listens: the layer is built all the same, its options taken.
        yield* Effect.scoped(Layer.build(
          RdmaRpc.layerProtocolClient(
            { transport, address, port: 7998, retrySchedule: Schedule.stop, ...bounds } as Bad
          )
            .pipe(Layer.provide(support))
        ))
      }
    }).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("RdmaRpc: a \"rpma\" server's client options are checked before it listens", () => {
  const cases: ReadonlyArray<readonly [string, object, string, RegExp]> = [
    ["connection.polling", { connection: { polling: { budget: "nope" } } }, "RpmaInvalidError", /polling's budget/],
    ["connection.timeout", { connection: { timeout: -1 } }, "RpmaInvalidError", /timeout/],
    ["connection.sendQueueSize", { connection: { sendQueueSize: 0 } }, "RpmaInvalidError", /sendQueueSize 0/],
    [
      "connection.privateData",
      { connection: { privateData: new Uint8Array(197) } },
      "RpmaInvalidError",
      /private data is 197 bytes/
    ],
    [
      "isolation",
      { isolation: "bogus" },
      "RpmaInvalidError",
      /isolation must be "perClient" \(the default\) or "shared", not "bogus"/
    ],
    ["ports [0]", { ports: [0] }, "RpmaInvalidError", /ports must be \{ from, to \}/],
    ["ports from > to", { ports: { from: 7920, to: 7910 } }, "RpmaInvalidError", /from 7920 is after to 7910/],
    ["admission", { admission: 5 }, "RdmaChannelError", /admission must be an Admission/]
  ]

  it.effect("each bad option fails the layer at build, and nothing is left listening", () =>
    Effect.gen(function*() {
      let port = 7800
      for (const [name, options, tag, said] of cases) {
        port++
        const server = RpcServer.layer(Group).pipe(
          Layer.provide(Handlers),
          Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port, ...options } as Bad)),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
        const error = yield* Effect.scoped(Layer.build(server)).pipe(
          Effect.flip,
          Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new Error(`${name}: timed out`) }),
          Effect.orElseFail(() => new Error(`${name}: the server was built`))
        )
        assert.strictEqual((error as { _tag: string })._tag, tag, name)
        assert.match((error as { message: string }).message, said, name)
        // Refused before the listen: the port is free.
        yield* Effect.scoped(Effect.flatMap(Peer.make(address), (peer) => Listener.make(peer, address, port)))
      }
    }).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("over the caller's listener, each is a \"Protocol\" RdmaChannelError with core's refusal", () =>
    Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7890)
      for (const [name, options, tag, said] of cases) {
        const error = yield* RdmaRpc.makeRpmaProtocolServer(listener, options as Bad).pipe(
          Effect.scoped,
          Effect.provide(RpcSerialization.layerMsgPack),
          Effect.flip,
          Effect.orElseFail(() => new Error(`${name}: the server was made`))
        )
        assert.strictEqual(error._tag, "RdmaChannelError", name)
        assert.strictEqual((error as { reason?: string }).reason, "Protocol", name)
        assert.match(error.message, said, name)
        if (tag === "RpmaInvalidError") assert.strictEqual((error.cause as { _tag?: string })._tag, tag, name)
      }
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("good options still serve", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(
        RpcServer.layer(Group).pipe(
          Layer.provide(Handlers),
          Layer.provide(RdmaRpc.layerProtocolServer({
            transport: "rpma",
            address,
            port: 7891,
            connection: {
              timeout: "3 seconds",
              sendQueueSize: 32,
              polling: "adaptive",
              privateData: new Uint8Array(8)
            },
            isolation: "perClient",
            ports: { from: 7892, to: 7899 }
          })),
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({ transport: "rpma", address, port: 7891 }).pipe(
          Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
        )
      )
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* client.Add({ a: 2, b: 3 }), 5)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("RdmaRpc: a \"rpma\" channel's receives and its connection's receive queue", () => {
  const serve = (port: number, options: { readonly receives?: number; readonly connection?: object }) =>
    RpcServer.layer(Group).pipe(
      Layer.provide(Handlers),
      Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port, ...options })),
      Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
    )
  const clientOf = (port: number, options: { readonly receives?: number; readonly connection?: object }) =>
    RdmaRpc.layerProtocolClient({ transport: "rpma", address, port, retrySchedule: Schedule.stop, ...options }).pipe(
      Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
    )

  it.live("more receives than the default queue holds: the queue is sized for them, and calls are answered", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(serve(7893, { receives: 128 }))
      const protocol = yield* Layer.build(clientOf(7893, { receives: 128 }))
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* client.Add({ a: 2, b: 3 }).pipe(Effect.timeout("20 seconds")), 5)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("a receive queue given smaller than the receives fails the layer at build, on both sides", () =>
    Effect.scoped(Effect.gen(function*() {
      const options = { receives: 32, connection: { receiveQueueSize: 16 } }
      for (const layer of [serve(7894, options), clientOf(7894, options)]) {
        const error = yield* Effect.flip(Effect.scoped(Layer.build(layer)))
        assert.strictEqual((error as { _tag: string })._tag, "RdmaChannelError")
        assert.match((error as Error).message, /receives \(32\) must fit the connection's receiveQueueSize \(16\)/)
      }
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})

describe("RdmaRpc: a \"cm\" channel's receives and its endpoint's receive queue", () => {
  const serve = (port: number, options: { readonly receives?: number; readonly endpoint?: object }) =>
    RpcServer.layer(Group).pipe(
      Layer.provide(Handlers),
      Layer.provide(RdmaRpc.layerProtocolServer({ transport: "cm", address, port, ...options })),
      Layer.provide(RpcSerialization.layerMsgPack)
    )
  const clientOf = (port: number, options: { readonly receives?: number; readonly endpoint?: object }) =>
    RdmaRpc.layerProtocolClient({ transport: "cm", address, port, retrySchedule: Schedule.stop, ...options }).pipe(
      Layer.provide(RpcSerialization.layerMsgPack)
    )

  it.live("more receives than the default queue holds: the queue is sized for them, and calls are answered", () =>
    Effect.scoped(Effect.gen(function*() {
      yield* Layer.build(serve(7895, { receives: 128 }))
      const protocol = yield* Layer.build(clientOf(7895, { receives: 128 }))
      const client = yield* Effect.provide(RpcClient.make(Group), protocol)
      assert.strictEqual(yield* client.Add({ a: 2, b: 3 }).pipe(Effect.timeout("20 seconds")), 5)
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))

  it.effect("a receive queue given smaller than the receives fails the layer at build, on both sides", () =>
    Effect.scoped(Effect.gen(function*() {
      const options = { receives: 32, endpoint: { maxRecvWr: 16 } }
      for (const layer of [serve(7896, options), clientOf(7896, options)]) {
        const error = yield* Effect.flip(Effect.scoped(Layer.build(layer)))
        assert.strictEqual((error as { _tag: string })._tag, "RdmaChannelError")
        assert.match((error as Error).message, /receives \(32\) must fit the endpoint's maxRecvWr \(16\)/)
      }
    })).pipe(Ledger.checked, Effect.provide(SimulatedDriver.layer)))
})
