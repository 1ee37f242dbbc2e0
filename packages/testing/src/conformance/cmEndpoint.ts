/**
 * Conformance cases of librdmacm's verbs API in one process, over the raw Driver: the page's
 * release order (regions before their endpoint, requests before their listener), a full queue,
 * a listener's waits when it goes, and an interruption storm over connect and get-request that
 * leaves nothing alive. The cases with two sides are in cmEndpointPairs.ts.
 */
import * as Driver from "@effect-rdma/core/Driver"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import {
  config,
  endpoint,
  errnoOf,
  expectErrno,
  listen,
  nextRequest,
  postOutcome,
  region,
  whole
} from "./cmEndpointSupport.js"
import { check, equal, expectTag } from "./support.js"

/** Connects a client to a listener in this process: the request taken (not answered) and the client still connecting. */
const requested = (address: string, port: number) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const listener = yield* listen(address, port)
    const client = yield* endpoint(address, port)
    const connecting = yield* Effect.fork(d.cmConnect(client, undefined, config.timeoutMs))
    const request = yield* nextRequest(listener.handle)
    return { listener, client, connecting, request }
  })

export const cmEndpointCases: ReadonlyArray<Case> = [
  {
    name:
      "cm endpoint: release order: an endpoint with a region, a listener with a live request → ResourceInUseError, both still usable",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { client, connecting, listener, request } = yield* requested(address, port)
        const mr = yield* d.cmReg(request, "msgs", new Uint8Array(4096))
        yield* expectTag(d.cmEpDestroy(request), "ResourceInUseError", "destroying a request with a region")
        yield* expectTag(
          d.cmListenerDestroy(listener.handle),
          "ResourceInUseError",
          "destroying a listener with a live request"
        )
        yield* d.cmAccept(request, undefined, config.timeoutMs)
        yield* Fiber.join(connecting)
        yield* d.cmDeregMr(mr)
        yield* d.cmEpDestroy(request)
        yield* expectErrno(d.cmEpDestroy(request), "EINVAL", "destroying it twice")
        yield* expectErrno(
          d.cmReg(request, "msgs", new Uint8Array(64)),
          "EINVAL",
          "registering on a destroyed endpoint"
        )
        yield* d.cmListenerDestroy(listener.handle)
        yield* expectErrno(d.cmGetRequest(listener.handle), "EINVAL", "get-request on a destroyed listener")
        yield* equal(yield* d.cmNextEvent(client), "DISCONNECTED", "the client's event once the request is destroyed")
      })
  },
  {
    name: "cm endpoint: a full receive queue → ENOMEM at the request past maxRecvWr; a send before connect → EINVAL",
    run: (address, port) =>
      Effect.gen(function*() {
        const ep = yield* endpoint(address, port)
        const buffer = yield* region(ep, "msgs", 4096)
        const recvs = Array.from({ length: config.maxRecvWr + 1 }, (_, i) => ({
          op: "recv" as const,
          id: i,
          segments: [whole(buffer, i * 16, 16)]
        }))
        const outcome = yield* postOutcome(ep, recvs)
        yield* equal(outcome.posted, config.maxRecvWr, "receives posted")
        yield* equal(outcome.error?.errnoName, "ENOMEM", "the refusal of the one past maxRecvWr")
        const send = yield* postOutcome(ep, [{ op: "send", id: 99, segments: [whole(buffer, 0, 8)] }])
        yield* equal(`${send.posted} ${send.error?.errnoName}`, "0 EINVAL", "a send before connect")
      })
  },
  {
    name:
      "cm endpoint: a listener destroyed under a waiting get-request → ECANCELED; the client's connect is refused or times out",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const listener = yield* d.cmListen(address, port, config)
        const waiting = yield* Effect.fork(d.cmGetRequest(listener.handle))
        yield* Effect.sleep("50 millis")
        yield* d.cmListenerDestroy(listener.handle)
        const exit = yield* Fiber.await(waiting).pipe(Effect.timeout("20 seconds"))
        yield* check(
          Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error.errnoName === "ECANCELED",
          `the waiting get-request: expected ECANCELED, got ${String(exit)}`
        )
        const client = yield* endpoint(address, port, { ...config, timeoutMs: 2000 })
        const refused = yield* errnoOf(d.cmConnect(client, undefined, 2000))
        yield* check(refused !== "success", "a connect to a destroyed listener succeeded")
      })
  },
  {
    name:
      "cm endpoint: a connect nobody answers (a listener that takes no request) ends with ETIMEDOUT at its bound, not before",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        yield* listen(address, port)
        const client = yield* endpoint(address, port)
        const started = yield* Clock.currentTimeMillis
        yield* expectErrno(
          d.cmConnect(client, undefined, 1000).pipe(Effect.timeout("20 seconds")),
          "ETIMEDOUT",
          "the unanswered connect"
        )
        const waited = (yield* Clock.currentTimeMillis) - started
        yield* check(waited >= 900, `the connect ended after ${waited} ms, before its 1000 ms bound`)
      })
  },
  {
    name:
      "cm endpoint: an interruption storm over connect, get-request and accept leaves no endpoint, listener or region alive",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const listener = yield* listen(address, port)
        for (let round = 0; round < 24; round++) {
          // Interrupted at different points: before the request, while connecting, while accepting.
          const after = `${(round * 7) % 13} millis` as const
          const server = Effect.scoped(Effect.gen(function*() {
            const request = yield* nextRequest(listener.handle)
            yield* region(request, "msgs", 4096)
            yield* d.cmAccept(request, undefined, config.timeoutMs)
          }))
          const client = Effect.scoped(Effect.gen(function*() {
            const ep = yield* endpoint(address, port)
            yield* region(ep, "msgs", 4096)
            yield* d.cmConnect(ep, undefined, config.timeoutMs)
          }))
          const serving = yield* Effect.fork(server)
          const connecting = yield* Effect.fork(client)
          yield* Effect.sleep(after)
          yield* Fiber.interrupt(connecting)
          yield* Fiber.interrupt(serving)
        }
        const live = yield* d.live
        yield* equal(`${live.cmEndpoints} ${live.cmRegions}`, "0 0", "endpoints and regions alive after the storm")
      })
  }
]
