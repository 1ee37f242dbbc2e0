/**
 * Listener.serve on the simulated driver: each client accepted and handled in its own scope,
 * several at once within the concurrency bound, a client refused by the admission costing only its
 * request, a failing handler ending the server, and interruption; every resource accounted for by
 * the leak ledger after each case.
 */
import { Admission, Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Data, Deferred, Effect, Exit, Fiber, Schedule, type Scope } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const text = (bytes: Uint8Array, length = bytes.byteLength) => new TextDecoder().decode(bytes.subarray(0, length))
const bytesOf = (s: string) => new TextEncoder().encode(s)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

class Boom extends Data.TaggedError("Boom")<{}> {}

/**
 * Receives one message and sends it back upper-cased (the receive posted with the answer: `reply`),
 * with regions of the handler's Peer: the client's own.
 */
const shout = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    const peer = yield* Peer.Peer
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 64, Usage.SEND)
    const { byteLength } = yield* Connection.recv(conn, { dst: inbox })
    outbox.memory.set(bytesOf(text(inbox.memory, byteLength).toUpperCase()))
    yield* Connection.send(conn, { src: outbox, length: byteLength })
  })

/** A client that sends `message` and returns the answer: `call` posts the answer's receive first. */
const ask = (peer: Peer.Peer, port: number, message: string, options?: Connection.Options) =>
  Effect.scoped(Effect.gen(function*() {
    const conn = yield* Connection.connect(peer, address, port, options)
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 64, Usage.SEND)
    outbox.memory.set(bytesOf(message))
    const answer = yield* Connection.call(conn, { send: { src: outbox, length: message.length }, recv: { dst: inbox } })
    return text(inbox.memory, answer.byteLength)
  }))

/** Waits (bounded) until only `n` connections are alive (the clients' and the server's). */
const connectionsSettle = (n: number) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    d.live.pipe(
      Effect.repeat({ until: (live) => live.connections === n, schedule: Schedule.spaced("5 millis") }),
      Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new Error(`connections alive besides ${n}`) })
    ))

describe("Listener.serve", () => {
  it.live("accepts each client and handles it in its own scope, several at once; each released when its handler ends", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7601)
      const server = yield* Effect.fork(Listener.serve(listener, shout, { concurrency: 2 }))
      const answers = yield* Effect.all(["one", "two", "three", "four"].map((m) => ask(peer, listener.port, m)), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(answers, ["ONE", "TWO", "THREE", "FOUR"])
      yield* connectionsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("a request the provider could not set up costs only itself: logged, and the next client is served", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7609)
      // The next two rpma_ep_next_conn_req calls fail as when the device refuses a request's queue
      // pair (a client that has just gone): RPMA_E_PROVIDER, which ended the server before.
      yield* SimulatedDriver.fail({ operation: "rpma_ep_next_conn_req", nth: 1, code: -100002 })
      yield* SimulatedDriver.fail({ operation: "rpma_ep_next_conn_req", nth: 2, code: -100002 })
      const server = yield* Effect.fork(Listener.serve(listener, shout))
      assert.strictEqual(yield* ask(peer, listener.port, "still here"), "STILL HERE")
      assert.isNull(server.unsafePoll())
      yield* connectionsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("at most `concurrency` clients at once: the next is accepted only when a handler is done", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7602)
      const gate = yield* Deferred.make<void>()
      const log: Array<string> = []
      const handler = () =>
        Effect.gen(function*() {
          log.push("start")
          if (log.length === 1) yield* Deferred.await(gate)
          log.push("end")
        })
      const server = yield* Effect.fork(listener.pipe(Listener.serve(handler, { concurrency: 1 })))
      const clients = yield* Effect.fork(Effect.all(
        [0, 1].map(() =>
          Effect.scoped(Effect.flatMap(Connection.connect(peer, address, listener.port), Connection.awaitClosed))
        ),
        { concurrency: "unbounded" }
      ))
      yield* Effect.repeat(Effect.sync(() => log.length), {
        until: (n) => n >= 1,
        schedule: Schedule.spaced("5 millis")
      })
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(clients).pipe(Effect.timeout("10 seconds"))
      assert.deepStrictEqual(log, ["start", "end", "start", "end"])
      yield* Fiber.interrupt(server)
    })))

  it.live("with an admission, a client without the token is rejected at once and the server goes on; the token admits one client", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7603)
      const token = Uint8Array.of(7, 7, 7, 7, 7, 7, 7, 7)
      const admission = yield* Admission.make(token) // one use: the rendezvous spends it once, not twice
      const server = yield* Effect.fork(Listener.serve(listener, shout, { admission }))
      const refused = yield* Effect.exit(ask(peer, listener.port, "nope", { privateData: Uint8Array.of(1, 1) }))
      assert.isTrue(
        Exit.isFailure(refused) && String(refused.cause).includes("ConnectionFailedError"),
        `a client without the token: ${String(refused)}`
      )
      const privateData = yield* Admission.privateData(token)
      assert.strictEqual(yield* ask(peer, listener.port, "yes", { privateData }), "YES")
      const spent = yield* Effect.exit(ask(peer, listener.port, "again", { privateData }))
      assert.isTrue(Exit.isFailure(spent), `a client with the spent token: ${String(spent)}`)
      yield* connectionsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("a handler's failure ends the server with it, and every connection is closed", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7604)
      const server = yield* Effect.fork(Listener.serve(listener, () => Effect.fail(new Boom())))
      yield* Effect.exit(
        Effect.scoped(Effect.flatMap(Connection.connect(peer, address, listener.port), Connection.awaitClosed))
      )
      const exit = yield* Fiber.await(server)
      assert.isTrue(Exit.isFailure(exit) && String(exit.cause).includes("Boom"), String(exit))
      yield* connectionsSettle(0)
    })))

  it.live("interrupted, it closes the connections its handlers hold: the clients see them end", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7605)
      const server = yield* Effect.fork(Listener.serve(listener, () => Effect.never))
      const ended = yield* Effect.scoped(Effect.gen(function*() {
        const conn = yield* Connection.connect(peer, address, listener.port)
        const waiting = yield* Effect.fork(Connection.awaitClosed(conn))
        yield* Fiber.interrupt(server)
        return yield* Fiber.join(waiting).pipe(Effect.timeout("10 seconds"))
      }))
      assert.strictEqual(ended, "Closed")
      yield* connectionsSettle(0)
    })))

  /** A listener on `port` served with `handler` while `body` runs on it, then the connections settle. */
  const whileServing = <A, E, R>(
    port: number,
    handler: (conn: Connection.Connection) => Effect.Effect<void, unknown, Peer.Peer | Scope.Scope | Driver.RdmaDriver>,
    options: Listener.ServeOptions,
    body: (peer: Peer.Peer) => Effect.Effect<A, E, R>
  ) =>
    Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const server = yield* Effect.fork(Listener.serve(yield* Listener.make(peer, address, port), handler, options))
      yield* body(peer)
      yield* connectionsSettle(0)
      yield* Fiber.interrupt(server)
    })

  it.live("isolated by default: a client's handler is given a Peer of its own, deleted after its connection", () => {
    const peers: Array<Peer.Peer> = []
    const handler = (conn: Connection.Connection) =>
      Effect.zipRight(Effect.map(Peer.Peer, (own) => peers.push(own)), shout(conn))
    return inWorld(whileServing(7606, handler, {}, (peer) =>
      Effect.gen(function*() {
        assert.deepStrictEqual(yield* Effect.all([ask(peer, 7606, "a"), ask(peer, 7606, "b")]), ["A", "B"])
        assert.strictEqual(peers.length, 2)
        assert.isTrue(peers[0] !== peer && peers[1] !== peer && peers[0] !== peers[1], "a peer per client")
      })))
  })

  it.live("shared: every handler is given the listener's Peer", () => {
    const peers: Array<Peer.Peer> = []
    const handler = (conn: Connection.Connection) =>
      Effect.zipRight(Effect.map(Peer.Peer, (own) => peers.push(own)), shout(conn))
    return inWorld(whileServing(7607, handler, { isolation: "shared" }, (peer) =>
      Effect.gen(function*() {
        assert.strictEqual(yield* ask(peer, 7607, "c"), "C")
        assert.deepStrictEqual(peers, [peer])
      })))
  })

  it.live("an isolation it does not know, or no port to isolate clients on, fails the server at once", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7608)
      const unknown = yield* Effect.flip(
        Listener.serve(listener, shout, { isolation: "none" as unknown as Listener.Isolation })
      )
      assert.strictEqual(unknown._tag, "RpmaInvalidError")
      assert.include(unknown.message, `isolation must be "perClient" (the default) or "shared"`)
      const last = yield* Listener.make(peer, address, 65535)
      const noPorts = yield* Effect.flip(Listener.serve(last, shout))
      assert.include(noPorts.message, "no port after it")
      const badRange = yield* Effect.flip(
        Effect.scoped(Effect.gen(function*() {
          const serving = yield* Effect.fork(Listener.serve(listener, shout, { ports: { from: 9, to: 3 } }))
          yield* Effect.exit(Effect.scoped(Connection.connect(peer, address, listener.port)))
          return yield* Fiber.join(serving)
        }))
      )
      assert.include(badRange.message, "ports must be { from, to }")
    })))

  it.live("a handshakeTimeout that is no duration is refused before any client is taken: RPMA_E_INVAL naming it", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const listener = yield* Listener.make(peer, address, 7610)
      for (const handshakeTimeout of ["soon", "10 parsecs", {}]) {
        const error = yield* Effect.flip(Listener.serve(listener, shout, { handshakeTimeout } as never))
        assert.strictEqual(error._tag, "RpmaInvalidError")
        assert.include(error.message, "handshakeTimeout must be a duration")
      }
    })))
})
