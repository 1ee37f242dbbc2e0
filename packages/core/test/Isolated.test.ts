// Issue 19, item 7: an isolated endpoint answers one request, the first, and then stops listening,
// so no one who reaches its port later (a stranger first, or the client again) joins its peer.
import { Admission, Connection, Descriptor, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

const tagOf = <A, E>(exit: Exit.Exit<A, E>): string =>
  Exit.isSuccess(exit)
    ? "success"
    : String((Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string })?._tag)

describe("isolated endpoints", () => {
  it.effect("a stranger's request first: refused (WrongToken), and the endpoint stops listening, so the client must get a new one", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(4, 4, 1)
      const isolated = yield* Admission.listenIsolated(address, 7471)
      const answering = yield* Effect.fork(Effect.exit(Effect.scoped(
        Admission.acceptIsolated(isolated, yield* Admission.make(token))
      )))
      const client = yield* Peer.make(address)
      const stranger = yield* Effect.exit(Effect.scoped(Connection.connect(client, address, 7471)))
      const answered = yield* Fiber.join(answering)
      assert.strictEqual(tagOf(answered), "AdmissionRefusedError")
      assert.strictEqual(tagOf(stranger), "ConnectionFailedError")
      const privateData = yield* Admission.privateData(token)
      const late = yield* Effect.exit(Effect.scoped(Connection.connect(client, address, 7471, { privateData })))
      assert.strictEqual(tagOf(late), "ConnectionFailedError", "nothing listens after the first request")
    })))

  it.effect("its peer is its own, and outlives the listener while the connection lives; all is released with the scope", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(8, 1)
      const shared = yield* Peer.make(address)
      const isolated = yield* Admission.listenIsolated(address, 7472)
      assert.notStrictEqual(Driver.handleOf(isolated.peer), Driver.handleOf(shared))
      assert.strictEqual(isolated.port, 7472)
      const answering = yield* Effect.fork(Admission.acceptIsolated(isolated, yield* Admission.make(token)))
      const conn = yield* Connection.connect(shared, address, 7472, {
        privateData: yield* Admission.privateData(token)
      })
      const served = yield* Fiber.join(answering)
      assert.strictEqual(yield* Connection.state(served), "Connected")
      assert.strictEqual(yield* Connection.state(conn), "Connected")
    })))

  it.effect("acceptIsolated given no isolated listener, or no admission, fails at once; the listener still answers its one request", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(6, 2)
      const admission = yield* Admission.make(token)
      for (const notIsolated of [null, 5, "listener", {}]) {
        const error = yield* Effect.flip(Effect.scoped(Admission.acceptIsolated(notIsolated as never, admission)))
        assert.strictEqual(error._tag, "RpmaInvalidError")
        assert.include(error.message, "the isolated listener must be one Admission.listenIsolated")
      }
      const isolated = yield* Admission.listenIsolated(address, 7472)
      for (const notAdmission of [null, 5, {}, token]) {
        // No client is waiting: the refusal comes before any request would.
        const error = yield* Effect.flip(Effect.scoped(Admission.acceptIsolated(isolated, notAdmission as never)))
        assert.strictEqual(error._tag, "InvalidTokenError")
        assert.include(error.message, "admission takes an Admission")
      }
      const answering = yield* Effect.fork(Effect.scoped(Admission.acceptIsolated(isolated, admission)))
      const client = yield* Peer.make(address)
      const privateData = yield* Admission.privateData(token)
      const connected = yield* Effect.exit(Effect.scoped(Connection.connect(client, address, 7472, { privateData })))
      assert.strictEqual(tagOf(connected), "success")
      assert.strictEqual(tagOf(yield* Fiber.await(answering)), "success")
    })))

  it.effect("listenIsolated on a port in use or port 0 fails with the listen's error and leaves nothing", () =>
    inWorld(Effect.gen(function*() {
      yield* Listener.make(yield* Peer.make(address), address, 7473)
      assert.strictEqual(
        tagOf(yield* Effect.exit(Effect.scoped(Admission.listenIsolated(address, 7473)))),
        "RpmaProviderError"
      )
      assert.strictEqual(
        tagOf(yield* Effect.exit(Effect.scoped(Admission.listenIsolated(address, 0)))),
        "RpmaInvalidError"
      )
    })))
})

describe("rendezvous", () => {
  it.effect("a client with the well-known token gets an isolated endpoint of its own, reaches what it was given there, and the token's uses bound how often", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(5, 1, 5, 1)
      const wellKnown = yield* Listener.make(yield* Peer.make(address), address, 7480)
      const gate = yield* Admission.make(token, { uses: 2 })
      const clientPeer = yield* Peer.make(address)
      const ports = { from: 7481, to: 7490 }
      const session = Effect.gen(function*() {
        const serving = yield* Effect.fork(Effect.gen(function*() {
          const made = yield* Admission.rendezvous(wellKnown, gate, ports)
          const given = yield* LocalMr.allocate(made.peer, 64, Usage.READ_SRC)
          given.memory.fill(made.port % 251)
          const conn = yield* Admission.acceptIsolated(made, made.admission, {
            privateData: yield* LocalMr.descriptor(given)
          })
          return { made, conn }
        }))
        const conn = yield* Admission.connectIsolated(clientPeer, address, 7480, token)
        const { made } = yield* Fiber.join(serving)
        const src = yield* Effect.flatMap(
          RemoteMr.fromDescriptor(conn.privateData.subarray(0, Descriptor.SIZE)),
          RemoteMr.require(Usage.READ_SRC)
        )
        const dst = yield* LocalMr.allocate(clientPeer, 64, Usage.READ_DST)
        yield* Connection.read(conn, { dst, src, length: 64 })
        assert.isTrue(dst.memory.every((b) => b === made.port % 251), "the client read the region it was given")
        assert.notStrictEqual(Driver.handleOf(made.peer), Driver.handleOf(wellKnown.peer), "its own peer")
        return made.port
      })
      const first = yield* session
      const second = yield* session
      // The first client's endpoint stopped listening once it connected: its port serves the next.
      assert.deepStrictEqual([first, second], [7481, 7481])
      // The token's two uses are spent: refused at the well-known endpoint, before anything is made.
      const refusing = yield* Effect.fork(Effect.exit(Admission.rendezvous(wellKnown, gate, ports)))
      const client = yield* Effect.exit(Effect.scoped(Admission.connectIsolated(clientPeer, address, 7480, token)))
      const refused = yield* Fiber.join(refusing)
      assert.strictEqual(tagOf(refused), "AdmissionRefusedError")
      assert.strictEqual(tagOf(client), "ConnectionFailedError")
    })))

  it.effect("a well-known endpoint that is not a rendezvous: the client fails with InvalidTokenError and connects nowhere else", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(7, 7)
      const plain = yield* Listener.make(yield* Peer.make(address), address, 7491)
      const serving = yield* Effect.fork(
        Effect.flatMap(Listener.next(plain), (req) => Listener.accept(req, { privateData: Uint8Array.of(0, 0, 0) }))
      )
      const client = yield* Effect.exit(
        Effect.scoped(Admission.connectIsolated(yield* Peer.make(address), address, 7491, token))
      )
      yield* Fiber.join(serving)
      assert.strictEqual(tagOf(client), "InvalidTokenError")
    })))

  it.effect("a range with no free port, or not a range: the request is rejected and nothing is left", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(3, 3)
      const peer = yield* Peer.make(address)
      const wellKnown = yield* Listener.make(peer, address, 7492)
      yield* Listener.make(peer, address, 7493)
      const gate = yield* Admission.make(token, { uses: 9 })
      for (
        const [ports, tag] of [
          [{ from: 7493, to: 7493 }, "RpmaProviderError"],
          [{ from: 9, to: 8 }, "RpmaInvalidError"],
          [{ from: 1.5, to: 8 }, "RpmaInvalidError"],
          [undefined as unknown as Admission.PortRange, "RpmaInvalidError"]
        ] as const
      ) {
        const serving = yield* Effect.fork(Effect.exit(Effect.scoped(Admission.rendezvous(wellKnown, gate, ports))))
        const client = yield* Effect.exit(Effect.scoped(Admission.connectIsolated(peer, address, 7492, token)))
        assert.strictEqual(tagOf(yield* Fiber.join(serving)), tag, JSON.stringify(ports))
        assert.strictEqual(tagOf(client), "ConnectionFailedError", JSON.stringify(ports))
      }
    })))

  it.effect("a request the server could not serve (no free port) gives its use back: the client's retry is admitted", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(6, 6)
      const peer = yield* Peer.make(address)
      const wellKnown = yield* Listener.make(peer, address, 7494)
      yield* Listener.make(peer, address, 7495)
      const gate = yield* Admission.make(token) // one use
      const attempt = (ports: Admission.PortRange) =>
        Effect.gen(function*() {
          const serving = yield* Effect.fork(Effect.exit(Effect.scoped(
            Effect.flatMap(Admission.rendezvous(wellKnown, gate, ports), (made) =>
              Admission.acceptIsolated(made, made.admission))
          )))
          const client = yield* Effect.exit(Effect.scoped(Admission.connectIsolated(peer, address, 7494, token)))
          return [tagOf(yield* Fiber.join(serving)), tagOf(client)]
        })
      assert.deepStrictEqual(yield* attempt({ from: 7495, to: 7495 }), ["RpmaProviderError", "ConnectionFailedError"])
      // The retry, once the server has a port: admitted with the same single-use token.
      assert.deepStrictEqual(yield* attempt({ from: 7496, to: 7496 }), ["success", "success"])
      // The token's one use is now spent.
      assert.deepStrictEqual(yield* attempt({ from: 7496, to: 7496 }), [
        "AdmissionRefusedError",
        "ConnectionFailedError"
      ])
    })))
})
