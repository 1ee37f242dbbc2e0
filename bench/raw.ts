/**
 * A connection made with driver calls only (no Connection, no Endpoint): the baseline for what
 * Connection adds. A client connected to a server in the same process, torn down with the scope.
 */
import type { Peer } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Effect, Fiber } from "effect"
import { anyError } from "./anyError.js"

const expectEvent = (driver: Driver.Driver, conn: Driver.Model.ConnHandle, expected: Driver.Model.ConnEvent) =>
  Effect.flatMap(
    driver.connNextEvent(conn),
    (event) => event === expected ? Effect.void : Effect.dieMessage(`expected ${expected}, got ${event}`)
  )

export const rawConnection = (
  driver: Driver.Driver,
  peer: Peer.Peer,
  address: string,
  port: number,
  config: Driver.Model.ConnConfig
) =>
  anyError(Effect.gen(function*() {
    const ep = yield* Effect.acquireRelease(driver.epListen(Driver.handleOf(peer), address, port), (ep) =>
      Effect.ignore(driver.epShutdown(ep)))
    const server = yield* driver.epNextConnReq(ep, config).pipe(
      Effect.flatMap((req) =>
        driver.connReqConnect(req, undefined)
      ),
      Effect.tap((conn) => expectEvent(driver, conn, "ESTABLISHED")),
      Effect.fork
    )
    const client = yield* Effect.flatMap(
      driver.connReqNew(Driver.handleOf(peer), address, port, config),
      (req) => driver.connReqConnect(req, undefined)
    )
    yield* expectEvent(driver, client, "ESTABLISHED")
    const serverConn = yield* Fiber.join(server)
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* driver.connDisconnect(client)
        yield* expectEvent(driver, serverConn, "CLOSED")
        yield* driver.connDisconnect(serverConn)
        yield* expectEvent(driver, client, "CLOSED")
        yield* driver.connDelete(serverConn)
        yield* driver.connDelete(client)
      }).pipe(Effect.orDie)
    )
    return client
  }))
