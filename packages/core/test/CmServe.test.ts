/**
 * CmListener.serve and ClientGoneError on the simulated driver: each request in its own scope, the
 * concurrency bound, unanswered requests rejected, a failing handler, interruption, and a client
 * gone before its accept; every resource accounted for by the leak ledger after each case.
 */
import { Admission, CmEndpoint, CmListener, type RdmaError } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Data, Deferred, Effect, Exit, Fiber, Schedule, Scope } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const text = (bytes: Uint8Array, length = bytes.byteLength) => new TextDecoder().decode(bytes.subarray(0, length))
const bytesOf = (s: string) => new TextEncoder().encode(s)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

class Boom extends Data.TaggedError("Boom")<{}> {}

/** Accepts, receives one message and sends it back upper-cased. */
const shout = (request: CmEndpoint.CmEndpoint) =>
  Effect.gen(function*() {
    const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
    const outbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
    const first = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
    yield* CmListener.accept(request)
    const { byteLength } = yield* first.completion
    outbox.memory.set(bytesOf(text(inbox.memory, byteLength).toUpperCase()))
    yield* CmEndpoint.send(request, { src: outbox, length: byteLength })
  })

/** A client that sends `message` (asking with `privateData`) and returns the answer. */
const ask = (port: number, message: string, privateData?: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const ep = yield* CmEndpoint.make(address, port)
    const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(64))
    const outbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(64))
    const answer = yield* CmEndpoint.postRecv(ep, { segments: [{ mr: inbox }] })
    yield* CmEndpoint.establish(ep, { privateData })
    outbox.memory.set(bytesOf(message))
    yield* CmEndpoint.send(ep, { src: outbox, length: message.length })
    const { byteLength } = yield* answer.completion
    return text(inbox.memory, byteLength)
  }))

/** Polls `holds` until it is true (the test's timeout bounds it). */
const until = <E, R>(holds: Effect.Effect<boolean, E, R>) =>
  Effect.repeat(holds, { until: (done) => done, schedule: Schedule.spaced("1 millis") })

/** Waits (bounded) until the server's requests are all released: only `clients` endpoints alive. */
const endpointsSettle = (clients: number) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    d.live.pipe(
      Effect.repeat({ until: (live) => live.cmEndpoints === clients, schedule: Schedule.spaced("5 millis") }),
      Effect.timeoutFail({
        duration: "2 seconds",
        onTimeout: () => new Error(`endpoints alive besides ${clients} clients`)
      })
    ))

const allZero = Effect.flatMap(Driver.RdmaDriver, (d) => d.live).pipe(
  Effect.map((live) => Object.entries(live).filter(([, n]) => n !== 0))
)

describe("CmListener.serve", () => {
  it.live("serves each request in its own scope, several at once; each released when its handler ends", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const server = yield* Effect.fork(CmListener.serve(listener, shout, { concurrency: 2 }))
      const answers = yield* Effect.all(["one", "two", "three", "four"].map((m) => ask(listener.port, m)), {
        concurrency: "unbounded"
      })
      assert.deepStrictEqual(answers, ["ONE", "TWO", "THREE", "FOUR"])
      yield* endpointsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("at most `concurrency` requests are taken: the next client connects only when a handler is done", () =>
    inWorld(Effect.gen(function*() {
      const control = yield* SimulatedDriver.SimulationControl
      const listener = yield* CmListener.make(address, 0, { timeout: "5 seconds" })
      const accepted = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const server = yield* Effect.fork(CmListener.serve(
        listener,
        (request) =>
          CmListener.accept(request).pipe(
            Effect.zipRight(Deferred.succeed(accepted, undefined)),
            Effect.zipRight(Deferred.await(gate))
          ),
        { concurrency: 1 }
      ))
      yield* Effect.scoped(CmEndpoint.connect(address, listener.port)).pipe(Effect.fork)
      yield* Deferred.await(accepted)
      const second = yield* Effect.fork(Effect.scoped(CmEndpoint.connect(address, listener.port)))
      // The second client has asked, and the server, its only handler busy since long before, has
      // asked the listener for no request after the first (a server that took one would have).
      yield* until(Effect.map(control.calls("rdma_connect"), (n) => n === 2))
      assert.strictEqual(
        yield* control.calls("rdma_get_request"),
        1,
        "the server took a request while its only handler was busy"
      )
      assert.strictEqual(
        (yield* Fiber.poll(second))._tag,
        "None",
        "a second client connected while the only handler was busy"
      )
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(second)
      yield* Fiber.interrupt(server)
    })))

  it.live("a request its handler leaves unanswered is rejected when the handler ends", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const server = yield* Effect.fork(CmListener.serve(listener, () => Effect.void))
      const refused = yield* Effect.flip(Effect.scoped(CmEndpoint.connect(address, listener.port)))
      assert.strictEqual(refused.errnoName, "ECONNREFUSED")
      yield* endpointsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("a failing handler stops the server with its error; the other handlers are interrupted, every request released", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const server = yield* Effect.fork(CmListener.serve(listener, (request) =>
        Effect.gen(function*() {
          yield* CmListener.accept(request)
          return yield* text(request.privateData, 4) === "fail" ? Effect.fail(new Boom()) : Effect.never
        })))
      // The first client: connected, waiting for a message that never comes.
      const first = yield* CmEndpoint.connect(address, listener.port)
      const inbox = yield* CmEndpoint.registerMessages(first, new Uint8Array(8))
      const waiting = yield* Effect.fork(CmEndpoint.recv(first, { dst: inbox }))
      yield* Effect.scoped(CmEndpoint.connect(address, listener.port, { privateData: bytesOf("fail") }))
      const exit = yield* Fiber.await(server)
      assert.isTrue(
        Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error._tag === "Boom",
        String(exit)
      )
      // The first handler was interrupted: its request disconnected and destroyed.
      const ended = yield* Effect.flip(Fiber.join(waiting))
      assert.strictEqual(ended._tag, "ConnectionClosedError")
      yield* endpointsSettle(1)
    })))

  it.live("interrupted, it leaves nothing alive: answered and unanswered requests released, waiting clients told", () =>
    Effect.gen(function*() {
      const left = yield* Effect.scoped(Effect.gen(function*() {
        const listener = yield* CmListener.make(address, 0)
        const accepted = yield* Deferred.make<void>()
        const server = yield* Effect.fork(
          CmListener.serve(listener, (request) =>
            text(request.privateData, 4) === "wait"
              ? Effect.never // left unanswered
              : Effect.zipRight(
                CmListener.accept(request),
                Effect.zipRight(Deferred.succeed(accepted, undefined), Effect.never)
              ))
        )
        const first = yield* CmEndpoint.connect(address, listener.port)
        yield* Deferred.await(accepted)
        const inbox = yield* CmEndpoint.registerMessages(first, new Uint8Array(8))
        const waiting = yield* Effect.fork(CmEndpoint.recv(first, { dst: inbox }))
        const unanswered = yield* Effect.fork(
          Effect.scoped(CmEndpoint.connect(address, listener.port, { privateData: bytesOf("wait") }))
        )
        // Its request taken: the server's third rdma_get_request waits for a next one.
        yield* until(
          Effect.flatMap(
            SimulatedDriver.SimulationControl,
            (c) => Effect.map(c.calls("rdma_get_request"), (n) => n === 3)
          )
        )
        yield* Fiber.interrupt(server)
        assert.strictEqual((yield* Effect.flip(Fiber.join(waiting)))._tag, "ConnectionClosedError")
        assert.strictEqual((yield* Effect.flip(Fiber.join(unanswered))).errnoName, "ECONNREFUSED")
        yield* endpointsSettle(1)
      })).pipe(Effect.zipRight(allZero))
      // Everything closed: the driver's own count of live handles is all zero.
      assert.deepStrictEqual(left, [])
    }).pipe(Effect.provide(SimulatedDriver.layer)))

  it.live("interrupted at any point of a busy server, nothing stays alive", () =>
    Effect.gen(function*() {
      for (let at = 0; at < 40; at += 1) {
        const left = yield* Effect.scoped(Effect.gen(function*() {
          const listener = yield* CmListener.make(address, 0)
          const server = yield* Effect.fork(CmListener.serve(listener, shout, { concurrency: 2 }))
          const clients = yield* Effect.fork(
            Effect.all(["a", "b", "c"].map((m) => Effect.either(ask(listener.port, m))), { concurrency: "unbounded" })
          )
          for (let i = 0; i < at; i++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(server)
          yield* Fiber.interrupt(clients)
        })).pipe(Effect.zipRight(allZero))
        assert.deepStrictEqual(left, [], `interrupted after ${at} yields`)
      }
    }).pipe(Effect.provide(SimulatedDriver.layer)))

  it.live("a client gone before its accept ends only its request (ClientGoneError, saying so); the server goes on", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const clientGone = yield* Deferred.make<void>()
      const seen = yield* Deferred.make<CmListener.ClientGoneError | RdmaError.RdmaCmError>()
      const server = yield* Effect.fork(CmListener.serve(listener, (request) =>
        text(request.privateData, 4) === "gone"
          ? Effect.zipRight(
            Deferred.await(clientGone),
            Effect.tapError(CmListener.accept(request), (error) => Deferred.succeed(seen, error))
          )
          : shout(request)))
      // A client that asks, then gives up and closes its endpoint before the server accepts.
      const scope = yield* Scope.make()
      const ep = yield* Scope.extend(CmEndpoint.make(address, listener.port), scope)
      yield* CmEndpoint.establish(ep, { privateData: bytesOf("gone") }).pipe(Effect.timeout("50 millis"), Effect.ignore)
      yield* Scope.close(scope, Exit.void)
      yield* Deferred.succeed(clientGone, undefined)
      const error = yield* Deferred.await(seen)
      assert.strictEqual(error._tag, "ClientGoneError")
      assert.match(error.message, /client that asked has gone.*spent.*CmListener\.next/)
      assert.strictEqual(yield* ask(listener.port, "still here"), "STILL HERE")
      yield* Fiber.interrupt(server)
    })))

  // Issue 34: the accept of a client that gave up but kept its endpoint waits until its bound; its
  // ETIMEDOUT used to fail the handler, so the server, while the listener stayed open: every later
  // client's connect then timed out unanswered.
  it.live("a client that gave up its connect but keeps its endpoint ends only its request (the accept's bound); the server goes on", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0, { timeout: "200 millis" })
      const taken = yield* Deferred.make<void>()
      const gaveUp = yield* Deferred.make<void>()
      const seen = yield* Deferred.make<CmListener.ClientGoneError | RdmaError.RdmaCmError>()
      const server = yield* Effect.fork(CmListener.serve(listener, (request) =>
        text(request.privateData, 4) === "gave"
          ? Deferred.succeed(taken, undefined).pipe(
            Effect.zipRight(Deferred.await(gaveUp)),
            Effect.zipRight(Effect.tapError(CmListener.accept(request), (error) => Deferred.succeed(seen, error)))
          )
          : shout(request)))
      // Interrupted while it connects, once the server has its request; its endpoint stays open.
      const ep = yield* CmEndpoint.make(address, listener.port)
      const connecting = yield* Effect.fork(CmEndpoint.establish(ep, { privateData: bytesOf("gave") }))
      yield* Deferred.await(taken)
      yield* Fiber.interrupt(connecting)
      yield* Deferred.succeed(gaveUp, undefined)
      const error = yield* Deferred.await(seen)
      assert.strictEqual(error._tag, "ClientGoneError")
      assert.strictEqual(
        error._tag === "ClientGoneError" && (error.cause as RdmaError.RdmaCmError).errnoName,
        "ETIMEDOUT"
      )
      assert.strictEqual(yield* ask(listener.port, "still here"), "STILL HERE")
      assert.isNull(server.unsafePoll(), "the server ended")
      yield* Fiber.interrupt(server)
    })))

  it.live("with an admission, only requests carrying its token reach the handler; others are rejected at once and the server goes on", () =>
    inWorld(Effect.gen(function*() {
      const token = bytesOf("sixteen byte key")
      const admission = yield* Admission.make(token, { uses: 2 })
      const listener = yield* CmListener.make(address, 0)
      const server = yield* Effect.fork(CmListener.serve(listener, shout, { admission }))
      const right = yield* Admission.privateData(token)
      const wrong = yield* Admission.privateData(bytesOf("sixteen byte kez"))
      const refused = (privateData?: Uint8Array) =>
        Effect.map(
          Effect.flip(ask(listener.port, "x", privateData)),
          (error) => error._tag === "RdmaCmError" && error.errnoName
        )
      assert.strictEqual(yield* ask(listener.port, "first", right), "FIRST")
      assert.strictEqual(yield* refused(wrong), "ECONNREFUSED", "a wrong token")
      assert.strictEqual(yield* refused(), "ECONNREFUSED", "no token at all")
      assert.strictEqual(yield* refused(right.subarray(0, 8)), "ECONNREFUSED", "a prefix of the token")
      assert.strictEqual(yield* ask(listener.port, "second", right), "SECOND")
      assert.strictEqual(yield* refused(right), "ECONNREFUSED", "the token again: its two uses are spent")
      assert.isNull(server.unsafePoll(), "the server ended")
      yield* endpointsSettle(0)
      yield* Fiber.interrupt(server)
    })))

  it.live("accept with an admission: a request without the token is rejected and the accept fails saying why", () =>
    inWorld(Effect.gen(function*() {
      const admission = yield* Admission.make(bytesOf("token"))
      const listener = yield* CmListener.make(address, 0)
      const client = yield* Effect.fork(
        Effect.flip(ask(listener.port, "x", yield* Admission.privateData(bytesOf("nope!"))))
      )
      const request = yield* CmListener.next(listener)
      const error = yield* Effect.flip(CmListener.accept(request, { admission }))
      assert.strictEqual(error._tag, "AdmissionRefusedError")
      assert.strictEqual(error._tag === "AdmissionRefusedError" && error.reason, "WrongToken")
      assert.match(error.message, new RegExp(`on ${address}:${listener.port} did not carry the expected token`))
      const refused = yield* Fiber.join(client)
      assert.strictEqual(refused._tag === "RdmaCmError" && refused.errnoName, "ECONNREFUSED")
    })))

  it.live("serve with an admission that is not one fails at once with InvalidTokenError", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const error = yield* Effect.flip(
        CmListener.serve(listener, shout, { admission: new Uint8Array(16) as unknown as Admission.Admission })
      )
      assert.strictEqual(error._tag, "InvalidTokenError")
    })))
})
