/**
 * The conformance suite's connection cases written as halves (Conformance.pairCases), each half
 * with a simulated driver of its own joined to one SimulatedNetwork: every connection, request and
 * completion of the suite crosses between two worlds through the network's messages, as between
 * two processes (here in one, to run the whole suite in seconds; SimulatedNetwork.test.ts starts
 * real processes). Each half's world must be empty when it ends. And the whole suite on a driver
 * joined to a network: the same results, the same tagged errors for the same bad input.
 */
import * as Driver from "@effect-rdma/core/Driver"
import { Conformance, SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Queue, Scope } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

/** One direction each way; a half that failed says so, and the other stops waiting. */
const channel = (
  inbox: Queue.Queue<Conformance.Message>,
  outbox: Queue.Queue<Conformance.Message>
): Conformance.Channel => ({
  send: (message) => Queue.offer(outbox, message),
  receive: (seconds = 30) =>
    Queue.take(inbox).pipe(
      Effect.timeoutFail({
        duration: `${seconds} seconds`,
        onTimeout: () => new Error(`no message within ${seconds} s`)
      }),
      Effect.filterOrFail((m) => m.abort === undefined, (m) => new Error(`the other half failed: ${m.abort}`))
    )
})

describe("conformance pair cases, each half in a world of its own on one simulated network", () => {
  Conformance.pairCases.forEach((pairCase, i) => {
    it.scopedLive(pairCase.name, () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        const toServer = yield* Queue.unbounded<Conformance.Message>()
        const toClient = yield* Queue.unbounded<Conformance.Message>()
        const half = (
          run: (ctx: Conformance.HalfContext) => Effect.Effect<void, unknown, any>,
          inbox: typeof toServer,
          outbox: typeof toServer
        ) => {
          const talk = channel(inbox, outbox)
          return Effect.gen(function*() {
            yield* Effect.scoped(run({ address, serverAddress: address, port: 7700 + i, channel: talk }))
            const live = yield* Effect.flatMap(Driver.RdmaDriver, (driver) => driver.live)
            assert.strictEqual(Object.values(live).reduce((a, b) => a + b, 0), 0, `left alive: ${JSON.stringify(live)}`)
          }).pipe(
            Effect.onError((cause) => talk.send({ abort: Cause.pretty(cause).split("\n")[0] })),
            Effect.provide(SimulatedNetwork.layer({ path }))
          )
        }
        const serving = yield* Effect.fork(half(pairCase.server, toServer, toClient))
        const client = yield* Effect.exit(half(pairCase.client, toClient, toServer))
        yield* Fiber.join(serving)
        yield* client
      }), 60_000)
  })
})

describe("conformance: a simulated driver joined to a network", () => {
  const scope = Effect.runSync(Scope.make())
  let path = ""
  beforeAll(async () => {
    path = await Effect.runPromise(Scope.extend(SimulatedNetwork.serve(), scope))
  })
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
  for (const testCase of Conformance.cases) {
    it.effect(
      testCase.name,
      () => Effect.suspend(() => Conformance.runCase(testCase, SimulatedNetwork.layer({ path }), address)),
      { timeout: 30_000 }
    )
  }
})
