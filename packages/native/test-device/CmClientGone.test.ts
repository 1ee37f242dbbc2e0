// An incoming request whose client has gone, on the device, one process: what rdma_accept does when
// the client destroyed its endpoint before the server accepted, and when the client only gave up
// (its connect timed out, its endpoint still alive: the CM hears of it only when the endpoint is
// destroyed). Each outcome is printed and held to the driver's contract: ECONNABORTED, saying the
// client has gone.
import type { RdmaError } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as NativeDriver from "../src/NativeDriver.js"
import { address } from "./support.js"

const slowdown = Number(process.env.DEVICE_TEST_SLOWDOWN ?? "1")
const config: Model.CmEpConfig = {
  timeoutMs: 5_000 * slowdown,
  maxSendWr: 4,
  maxRecvWr: 4,
  maxSendSge: 1,
  maxRecvSge: 1,
  maxInlineData: 0
}

const listen = (driver: Driver) =>
  Effect.acquireRelease(driver.cmListen(address, 0, config), (l) => Effect.orDie(driver.cmListenerDestroy(l.handle)))
const owned = (driver: Driver, make: Effect.Effect<Model.CmEpHandle, RdmaError.RdmaCmError>) =>
  Effect.acquireRelease(make, (ep) => Effect.orDie(driver.cmEpDestroy(ep)))

/** The accept's outcome, printed for the record. */
const acceptOutcome = (driver: Driver, request: Model.CmEpHandle, label: string) =>
  Effect.gen(function*() {
    const started = Date.now()
    const exit = yield* Effect.exit(driver.cmAccept(request, undefined, config.timeoutMs))
    const took = Date.now() - started
    console.log(`[client gone] ${label}: ${Exit.isSuccess(exit) ? "accepted" : String(exit.cause)} after ${took} ms`)
    return exit
  })

const expectGone = (exit: Exit.Exit<void, RdmaError.RdmaCmError>) => {
  assert.isTrue(Exit.isFailure(exit), "the accept of a gone client's request succeeded")
  const error = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
  assert.strictEqual(error?.errnoName, "ECONNABORTED", String(Exit.isFailure(exit) ? exit.cause : ""))
  assert.match(error!.message, /client .*gone/)
}

/** A request taken from a listener, whose client then gave up its connect and destroyed its endpoint. */
const requestOfGoneClient = (driver: Driver) =>
  Effect.gen(function*() {
    const listening = yield* listen(driver)
    const clientScope = yield* Scope.make()
    const client = yield* Scope.extend(owned(driver, driver.cmEpCreate(address, listening.port, config)), clientScope)
    const connecting = yield* Effect.fork(driver.cmConnect(client, undefined, config.timeoutMs))
    const request = yield* owned(driver, driver.cmGetRequest(listening.handle))
    yield* Fiber.interrupt(connecting)
    yield* Scope.close(clientScope, Exit.void)
    return request
  })

layer(NativeDriver.layer, { excludeTestServices: true, timeout: "60 seconds" })(
  "a request whose client has gone",
  (it) => {
    describe("rdma_accept", () => {
      it.scoped(
        "the client destroyed its endpoint before the accept: ECONNABORTED, the client has gone",
        () =>
          Effect.gen(function*() {
            const driver = yield* RdmaDriver
            const request = yield* requestOfGoneClient(driver)
            // The client's CM tells the server's (a REJ); give it a moment to arrive.
            yield* Effect.sleep(200 * slowdown)
            expectGone(yield* acceptOutcome(driver, request, "client destroyed, then accepted"))
            const live = yield* driver.live
            assert.strictEqual(live.cmEndpoints, 1, "only the spent request is left, until its scope closes")
          }),
        60_000 * slowdown
      )

      it.scoped(
        "the client destroyed its endpoint just as the server accepts: ECONNABORTED",
        () =>
          Effect.gen(function*() {
            const driver = yield* RdmaDriver
            const request = yield* requestOfGoneClient(driver)
            expectGone(yield* acceptOutcome(driver, request, "client destroyed, accepted at once"))
          }),
        60_000 * slowdown
      )

      it.scoped(
        "the client's connect timed out, its endpoint alive: the accept waits (ETIMEDOUT at its bound) until the client is destroyed (ECONNABORTED)",
        () =>
          Effect.gen(function*() {
            const driver = yield* RdmaDriver
            const listening = yield* listen(driver)
            const clientScope = yield* Scope.make()
            const client = yield* Scope.extend(
              owned(driver, driver.cmEpCreate(address, listening.port, config)),
              clientScope
            )
            const connecting = yield* Effect.fork(Effect.flip(driver.cmConnect(client, undefined, 300 * slowdown)))
            const request = yield* owned(driver, driver.cmGetRequest(listening.handle))
            const timedOut = yield* Fiber.join(connecting)
            assert.strictEqual(timedOut.errnoName, "ETIMEDOUT")
            // The CM hears nothing of a client that only gave up: the accept waits.
            const accepting = yield* Effect.fork(
              acceptOutcome(driver, request, "client timed out (alive), accepted, then destroyed")
            )
            yield* Effect.sleep(200 * slowdown)
            assert.isTrue((yield* Fiber.poll(accepting))._tag === "None", "the accept ended while the client was alive")
            const started = Date.now()
            yield* Scope.close(clientScope, Exit.void)
            expectGone(yield* Fiber.join(accepting))
            console.log(`[client gone] the accept ended ${Date.now() - started} ms after the client was destroyed`)
          }),
        60_000 * slowdown
      )

      it.scoped(
        "the client's connect timed out, its endpoint alive: an accept with a short bound ends with ETIMEDOUT",
        () =>
          Effect.gen(function*() {
            const driver = yield* RdmaDriver
            const listening = yield* listen(driver)
            const client = yield* owned(driver, driver.cmEpCreate(address, listening.port, config))
            const connecting = yield* Effect.fork(Effect.flip(driver.cmConnect(client, undefined, 300 * slowdown)))
            const request = yield* owned(driver, driver.cmGetRequest(listening.handle))
            assert.strictEqual((yield* Fiber.join(connecting)).errnoName, "ETIMEDOUT")
            const error = yield* Effect.flip(driver.cmAccept(request, undefined, 500 * slowdown))
            assert.strictEqual(error.errnoName, "ETIMEDOUT")
          }),
        60_000 * slowdown
      )
    })
  }
)
