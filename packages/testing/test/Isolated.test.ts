// Issue 19, item 7: an isolated endpoint answers one request, the first, and then stops listening,
// so no one who reaches its port later (a stranger first, or the client again) joins its peer.
import { Connection, Endpoint, Peer } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

const tagOf = <A, E>(exit: Exit.Exit<A, E>): string =>
  Exit.isSuccess(exit) ? "success" : String((Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string })?._tag)

describe("isolated endpoints", () => {
  it.effect("a stranger's request first: refused (WrongToken), and the endpoint stops listening, so the client must get a new one", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(4, 4, 1)
      const isolated = yield* Endpoint.listenIsolated(address, 7471)
      const answering = yield* Effect.fork(Effect.exit(Effect.scoped(
        Endpoint.acceptIsolated(isolated, yield* Endpoint.admission(token))
      )))
      const client = yield* Peer.make(address)
      const stranger = yield* Effect.exit(Effect.scoped(Connection.connect(client, address, 7471)))
      const answered = yield* Fiber.join(answering)
      assert.strictEqual(tagOf(answered), "AdmissionRefusedError")
      assert.strictEqual(tagOf(stranger), "ConnectionFailedError")
      const privateData = yield* Endpoint.tokenPrivateData(token)
      const late = yield* Effect.exit(Effect.scoped(Connection.connect(client, address, 7471, { privateData })))
      assert.strictEqual(tagOf(late), "ConnectionFailedError", "nothing listens after the first request")
    })))

  it.effect("its peer is its own, and outlives the listener while the connection lives; all is released with the scope", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(8, 1)
      const shared = yield* Peer.make(address)
      const isolated = yield* Endpoint.listenIsolated(address, 7472)
      assert.notStrictEqual(isolated.peer.handle, shared.handle)
      assert.strictEqual(isolated.port, 7472)
      const answering = yield* Effect.fork(Endpoint.acceptIsolated(isolated, yield* Endpoint.admission(token)))
      const conn = yield* Connection.connect(shared, address, 7472, { privateData: yield* Endpoint.tokenPrivateData(token) })
      const served = yield* Fiber.join(answering)
      assert.strictEqual(yield* served.state, "ESTABLISHED")
      assert.strictEqual(yield* conn.state, "ESTABLISHED")
    })))

  it.effect("listenIsolated on a port in use or port 0 fails with the listen's error and leaves nothing", () =>
    inWorld(Effect.gen(function*() {
      yield* Endpoint.listen(yield* Peer.make(address), address, 7473)
      assert.strictEqual(tagOf(yield* Effect.exit(Effect.scoped(Endpoint.listenIsolated(address, 7473)))), "RpmaProviderError")
      assert.strictEqual(tagOf(yield* Effect.exit(Effect.scoped(Endpoint.listenIsolated(address, 0)))), "RpmaInvalidError")
    })))
})
