/**
 * Options are read once, where a call starts (internal/optionsOnce.ts): options whose getter or
 * Proxy trap throws are the call's tagged refusal, naming the option, with nothing made; and a
 * getter is read once, so it cannot pass a check with one value and be used with another.
 */
import {
  Admission,
  CmEndpoint,
  CmListener,
  Connection,
  Listener,
  Memory,
  Peer,
  RegistrationCache,
  SharedReceiveQueue
} from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const live = Effect.flatMap(Driver.RdmaDriver, (d) => d.live)

/** Options whose every read throws, naming the key read. */
const trapped = <O>(): O =>
  new Proxy({}, {
    get: (_, key) => {
      throw new Error(`no ${String(key)} here`)
    },
    ownKeys: () => {
      throw new Error("no keys here")
    }
  }) as O

/** The failure's tag and message. */
const refusal = <A, E extends { readonly _tag: string; readonly message: string }, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.flip(Effect.scoped(effect)), (e) => ({ tag: e._tag, message: e.message }))

describe("options read once", () => {
  it.effect("options that cannot be read are each call's tagged refusal, naming the option; nothing is made", () =>
    Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7620)
      const cases = [
        ["Peer.make", refusal(Peer.make(address, trapped())), "RpmaInvalidError", "kind threw"],
        [
          "Connection.connect",
          refusal(Connection.connect(peer, address, 7620, trapped())),
          "RpmaInvalidError",
          "timeout threw"
        ],
        ["Listener.next", refusal(Listener.next(listener, trapped())), "RpmaInvalidError", "timeout threw"],
        ["Listener.acceptNext", refusal(Listener.acceptNext(listener, trapped())), "RpmaInvalidError", "timeout threw"],
        [
          "Listener.serve",
          refusal(Listener.serve(listener, () => Effect.void, trapped())),
          "RpmaInvalidError",
          "timeout threw"
        ],
        [
          "Admission.connectIsolated",
          refusal(Admission.connectIsolated(peer, address, 7620, Uint8Array.of(1), trapped())),
          "RpmaInvalidError",
          "timeout threw"
        ],
        [
          "Admission.make",
          refusal(Admission.make(Uint8Array.of(1), trapped())),
          "InvalidTokenError",
          "singleUse threw"
        ],
        ["CmEndpoint.make", refusal(CmEndpoint.make(address, 7621, trapped())), "RdmaCmError", "timeout threw"],
        ["CmEndpoint.connect", refusal(CmEndpoint.connect(address, 7621, trapped())), "RdmaCmError", "timeout threw"],
        ["CmListener.make", refusal(CmListener.make(address, 7621, trapped())), "RdmaCmError", "timeout threw"],
        ["Memory.mapFile", refusal(Memory.mapFile(trapped())), "MapFileError", "path threw"],
        [
          "SharedReceiveQueue.make",
          refusal(SharedReceiveQueue.make(peer, trapped())),
          "RpmaInvalidError",
          "receiveQueueSize threw"
        ],
        [
          "RegistrationCache.make",
          refusal(RegistrationCache.make(peer, trapped())),
          "InvalidOptionsError",
          "idleTimeToLive"
        ]
      ] as const
      for (const [call, refused, tag, names] of cases) {
        const { message, tag: got } = yield* refused
        assert.strictEqual(got, tag, call)
        assert.include(message, names, call)
        assert.include(message, "could not be read", call)
      }
      const after = yield* live
      assert.strictEqual(after.connections, 0)
      assert.strictEqual(after.cmEndpoints, 0)
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))

  it.effect("a librdmacm listener's accept, reject and serve refuse options that cannot be read; the request stays to answer", () =>
    Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 7622)
      const client = yield* Effect.fork(Effect.scoped(CmEndpoint.connect(address, 7622)))
      const request = yield* CmListener.next(listener)
      for (
        const [call, refused] of [
          ["accept", refusal(CmListener.accept(request, trapped()))],
          ["reject", refusal(CmListener.reject(request, trapped()))]
        ] as const
      ) {
        const { message, tag } = yield* refused
        assert.strictEqual(tag, "RdmaCmError", call)
        assert.include(message, "privateData threw", call)
      }
      yield* CmListener.accept(request)
      yield* Fiber.join(client)
      const served = yield* refusal(CmListener.serve(listener, () => Effect.void, trapped()))
      assert.strictEqual(served.tag, "RdmaCmError")
      assert.include(served.message, "concurrency threw")
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))

  it.effect("each setting's getter is read once, however many steps use it", () =>
    Effect.gen(function*() {
      const reads = new Map<string, number>()
      const counted = <O extends object>(values: O): O =>
        new Proxy(values, {
          get: (target, key, receiver) => {
            reads.set(String(key), (reads.get(String(key)) ?? 0) + 1)
            return Reflect.get(target, key, receiver)
          }
        })
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7623)
      const accepting = yield* Effect.fork(Listener.acceptNext(listener, counted({ sendQueueSize: 32 })))
      const conn = yield* Connection.connect(
        peer,
        address,
        7623,
        counted<Connection.Options>({ sendQueueSize: 16, timeout: "5 seconds" })
      )
      yield* Fiber.join(accepting)
      assert.strictEqual(yield* Connection.state(conn), "Connected")
      // Two calls (the connect and the accept), each reading its sendQueueSize once.
      assert.strictEqual(reads.get("sendQueueSize"), 2)
      assert.strictEqual(reads.get("timeout"), 2)
      reads.clear()
      const cmListener = yield* CmListener.make(address, 7624)
      const cmClient = yield* Effect.fork(CmEndpoint.connect(address, 7624, counted({ maxSendWr: 8 })))
      yield* CmListener.accept(yield* CmListener.next(cmListener))
      yield* Fiber.join(cmClient)
      assert.strictEqual(reads.get("maxSendWr"), 1)
      assert.strictEqual(reads.get("privateData"), 1)
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))
})
