/**
 * Conformance cases for polling (issue 35): the drivers' bounded busy-poll refuses a bad budget
 * with the same tagged error and words, core refuses a bad `polling` option before anything opens,
 * and a polling connection or endpoint succeeds, is interrupted, closes and fails exactly as a
 * waiting one does (the same outcomes, compared side by side in one run).
 */
import { CmEndpoint, CmListener, Connection, Listener, LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
import { type Polling, RdmaError } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { config as cmConfig, endpoint } from "./cmEndpointSupport.js"
import { driverPair } from "./connection.js"
import { check, equal, messageOf, outcome, slowdown, tagOf } from "./support.js"

/** Budgets every driver refuses: below 0, not whole, not a number, above 10 ms. */
const BAD_BUDGETS: ReadonlyArray<unknown> = [-1, 1.5, Number.NaN, Infinity, 10_000_001, "1000", undefined]
const WORDS = Arguments.spinBudget(-1)!
const EINVAL_TAG = RdmaError.fromErrno(RdmaError.Errno.EINVAL, "ibv_poll_cq")._tag
const WAIT = Duration.millis(Math.round(20_000 * slowdown))

/** What a spin call answered: its error's tag and message, or "found N". */
const spun = (exit: Driver.Model.SpinOutcome<unknown>): string =>
  Exit.isSuccess(exit) ? `found ${exit.value.length}` : `${tagOf(exit)}: ${messageOf(exit)}`

/** A waiting one's: the message arrives, the interrupted receive is interrupted, the pending one fails (not hangs). */
const WAITING_LIFE = /^success, interrupted, (ConnectionClosedError|CompletionError)$/

/** The settings compared: waiting, a fixed spin, an adaptive one. */
const SETTINGS: ReadonlyArray<Polling.Polling> = ["off", { budget: "200 micros" }, "adaptive"]

/**
 * One connection's life under `polling`, as outcome tags: a message there and back, a receive
 * interrupted, a receive pending when the other side closes.
 */
const connectionLife = (address: string, port: number, polling: Polling.Polling) =>
  Effect.scoped(Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const listener = yield* Listener.make(peer, address, port)
    const accepting = yield* Effect.fork(Listener.acceptNext(listener, { polling }))
    const client = yield* Connection.connect(peer, address, port, { polling, timeout: WAIT })
    const server = yield* Fiber.join(accepting)
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const out = yield* LocalMr.allocate(peer, 64, Usage.SEND)
    const received = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 64 }))
    yield* Effect.yieldNow()
    yield* Connection.send(client, { src: out, offset: 0, length: 8 })
    const message = yield* outcome(Fiber.join(received).pipe(Effect.timeout(WAIT)))
    const waiting = yield* Effect.fork(Connection.recv(client, { dst: inbox, offset: 0, length: 64 }))
    yield* Effect.yieldNow()
    const interrupted = tagOf(yield* Fiber.interrupt(waiting))
    const pending = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 64 }))
    yield* Effect.yieldNow()
    yield* Connection.close(client)
    const closed = yield* outcome(Fiber.join(pending).pipe(Effect.timeout(WAIT)))
    return [message, interrupted, closed].join(", ")
  }))

/** The same of an endpoint: a call answered, a receive interrupted, a receive pending at the other side's close. */
const endpointLife = (address: string, port: number, polling: Polling.Polling) =>
  Effect.scoped(Effect.gen(function*() {
    const options = { polling, timeout: WAIT }
    const listener = yield* CmListener.make(address, port, options)
    const memory = yield* Memory.allocate(256)
    const accepted = yield* Effect.fork(Effect.gen(function*() {
      const request = yield* CmListener.next(listener)
      const messages = yield* CmEndpoint.registerMessages(request, memory.subarray(0, 128))
      const first = yield* CmEndpoint.postRecv(request, { segments: [{ mr: messages, offset: 0, length: 64 }] })
      yield* CmListener.accept(request)
      return { request, messages, first }
    }))
    const client = yield* CmEndpoint.make(address, listener.port, options)
    const local = yield* CmEndpoint.registerMessages(client, memory.subarray(128))
    yield* CmEndpoint.establish(client)
    const server = yield* Fiber.join(accepted)
    const answering = yield* Effect.fork(Effect.gen(function*() {
      yield* server.first.completion
      yield* CmEndpoint.send(server.request, { src: server.messages, offset: 0, length: 8 })
    }))
    const call = yield* outcome(
      CmEndpoint.call(client, {
        send: { src: local, offset: 0, length: 8 },
        recv: { dst: local, offset: 64, length: 64 }
      }).pipe(Effect.timeout(WAIT))
    )
    yield* Fiber.join(answering)
    const waiting = yield* Effect.fork(CmEndpoint.recv(client, { dst: local, offset: 0, length: 64 }))
    yield* Effect.yieldNow()
    const interrupted = tagOf(yield* Fiber.interrupt(waiting))
    const pending = yield* Effect.fork(
      CmEndpoint.recv(server.request, { dst: server.messages, offset: 64, length: 64 })
    )
    yield* Effect.yieldNow()
    yield* CmEndpoint.close(client)
    const closed = yield* outcome(Fiber.join(pending).pipe(Effect.timeout(WAIT)))
    return [call, interrupted, closed].join(", ")
  }))

export const pollingCases: ReadonlyArray<Case> = [
  {
    name:
      "polling: spinCompletions and cmSpinCompletions refuse a bad budget (RPMA_E_INVAL, EINVAL) and spin 0 ns to what is queued",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        yield* check(d.spinCompletions !== undefined && d.cmSpinCompletions !== undefined, "the driver spins")
        const { client } = yield* driverPair(address, port)
        const ep = yield* endpoint(address, port + 1, cmConfig)
        for (const budget of BAD_BUDGETS) {
          const rpma = spun(d.spinCompletions!(client, budget as number))
          yield* check(
            rpma.startsWith("RpmaInvalidError: ") && rpma.endsWith(WORDS),
            `spinCompletions with ${String(budget)}: ${rpma}`
          )
          const cm = spun(d.cmSpinCompletions!(ep, budget as number))
          yield* check(
            cm.startsWith(`${EINVAL_TAG}: `) && cm.endsWith(WORDS),
            `cmSpinCompletions with ${String(budget)}: ${cm}`
          )
        }
        yield* equal(spun(d.spinCompletions!(client, 0)), "found 0", "spinCompletions of an idle connection, 0 ns")
        yield* equal(spun(d.cmSpinCompletions!(ep, 1000)), "found 0", "cmSpinCompletions of an idle endpoint, 1 µs")
      })
  },
  {
    name:
      "polling: a bad polling option (or Polling.layer default) is refused before anything opens, with the driver's tagged error",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const peer = yield* Peer.make(address)
        const before = yield* d.live
        const bad: ReadonlyArray<unknown> = ["sometimes", { budget: "1 hour" }, { budget: 0 }, {
          budget: "1 micro",
          adaptive: 1
        }]
        for (const polling of bad) {
          const options = { polling: polling as Polling.Polling, timeout: WAIT }
          yield* equal(
            yield* outcome(Connection.connect(peer, address, port, options)),
            "RpmaInvalidError",
            `Connection.connect with polling ${JSON.stringify(polling)}`
          )
          yield* equal(
            yield* outcome(CmEndpoint.make(address, port, options)),
            yield* outcome(CmEndpoint.make(address, port, { maxSendWr: 0 })),
            `CmEndpoint.make with polling ${JSON.stringify(polling)}`
          )
        }
        const after = yield* d.live
        yield* equal(JSON.stringify(after), JSON.stringify(before), "nothing left open")
      })
  },
  {
    name: "polling: a polling connection answers, is interrupted and closes exactly as a waiting one",
    run: (address, port) =>
      Effect.gen(function*() {
        const lives = yield* Effect.forEach(SETTINGS, (polling) => connectionLife(address, port, polling))
        yield* check(WAITING_LIFE.test(lives[0]!), `a waiting connection's life: ${lives[0]}`)
        for (let i = 1; i < lives.length; i++) {
          yield* equal(lives[i], lives[0], `polling ${JSON.stringify(SETTINGS[i])} against "off"`)
        }
      })
  },
  {
    name: "polling: a polling endpoint answers a call, is interrupted and closes exactly as a waiting one",
    run: (address, port) =>
      Effect.gen(function*() {
        const lives = yield* Effect.forEach(SETTINGS, (polling) => endpointLife(address, port, polling))
        yield* check(WAITING_LIFE.test(lives[0]!), `a waiting endpoint's life: ${lives[0]}`)
        for (let i = 1; i < lives.length; i++) {
          yield* equal(lives[i], lives[0], `polling ${JSON.stringify(SETTINGS[i])} against "off"`)
        }
      })
  }
]
