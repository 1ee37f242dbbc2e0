/**
 * Conformance cases for the configurations librpma's own examples use (issue 19, item 8): an
 * accept refused for its private data can be retried, a receive CQ smaller than the receive queue
 * (example 09) works, and a shared receive queue without a receive CQ of its own (example 08srq,
 * modes m and r) is refused naming what to use instead.
 *
 * @internal
 */
import { Connection, Driver, Endpoint, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { check, equal, messageOf, pattern, rawPeer, same, tagOf } from "./support.js"


/** Sends `count` messages one at a time, each awaited on the receiving side before the next. */
const pingOneAtATime = (
  count: number,
  send: (n: number) => Effect.Effect<unknown, unknown>,
  received: (n: number) => Effect.Effect<number, unknown>
) =>
  Effect.forEach(Array.from({ length: count }, (_, n) => n), (n) =>
    Effect.gen(function*() {
      yield* send(n)
      const length = yield* received(n)
      yield* equal(length, 8 + n, `message ${n}'s length`)
    }), { discard: true })

/** @internal */
export const configurationCases: ReadonlyArray<Case> = [
  {
    name: "driver: rpma_conn_req_connect with private data too long for an accept is refused and leaves the " +
      "request usable: a second connect with 196 bytes establishes the connection",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const peer = yield* rawPeer(address)
        const config = Connection.toConfig({ timeout: "10 seconds" })
        const ep = yield* Effect.acquireRelease(d.epListen(peer, address, port), (ep) => Effect.ignore(d.epShutdown(ep)))
        const deleting = (conn: Driver.ConnHandle) =>
          Effect.acquireRelease(Effect.succeed(conn), (c) => Effect.ignore(d.connDelete(c)))
        const client = yield* Effect.flatMap(d.connReqNew(peer, address, port, config), (req) =>
          Effect.flatMap(d.connReqConnect(req, undefined), deleting))
        const req = yield* d.epNextConnReq(ep, config)
        const refused = yield* Effect.exit(d.connReqConnect(req, new Uint8Array(197)))
        yield* check(tagOf(refused) === "RpmaInvalidError", `accept with 197 bytes: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("196"), `the refusal names 196: ${messageOf(refused)}`)
        const fromServer = pattern(196, 3)
        const server = yield* Effect.flatMap(d.connReqConnect(req, fromServer), deleting)
        // Both sides' events awaited at once: the server's ESTABLISHED comes only after the client
        // has read its own event (librdmacm answers the accept, RTU, when the client's
        // rdma_get_cm_event takes the CONNECT_RESPONSE), so awaiting the server's first hangs on a device.
        const [serverEvent, clientEvent] = yield* Effect.all([d.connNextEvent(server), d.connNextEvent(client)], {
          concurrency: 2
        })
        yield* equal(serverEvent, "ESTABLISHED", "the server's first event after the retry")
        yield* equal(clientEvent, "ESTABLISHED", "the client's first event")
        yield* check(same(yield* d.connPrivateData(client), fromServer), "the client got the retried accept's 196 bytes")
      })
  },
  {
    name: "Endpoint.accept with private data too long, or a timeout of 0, is refused and leaves the request " +
      "unanswered: accepted again with good options, it connects",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Endpoint.listen(serverPeer, address, port)

        const connecting = yield* Effect.fork(Connection.connect(clientPeer, address, port, { timeout: "20 seconds" }))
        const req = yield* Endpoint.next(ep)
        const refused = yield* Effect.exit(Effect.scoped(Endpoint.accept(req, { privateData: new Uint8Array(197) })))
        yield* check(tagOf(refused) === "RpmaInvalidError", `accept with 197 bytes: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("196"), `the refusal names 196: ${messageOf(refused)}`)
        const noTimeout = yield* Effect.exit(Effect.scoped(Endpoint.accept(req, { timeout: 0 })))
        yield* check(tagOf(noTimeout) === "RpmaInvalidError", `accept with a timeout of 0: ${tagOf(noTimeout)}`)
        const welcome = pattern(196, 5)
        const server = yield* Endpoint.accept(req, { privateData: welcome })
        const client = yield* Fiber.join(connecting)
        yield* check(same(client.privateData, welcome), "the client got the second accept's private data")
        yield* check((yield* Connection.qpNum(server)) > 0, "the server's connection is up")
      })
  },
  {
    name: "a receive CQ smaller than the receive queue (librpma's example 09: a receive CQ of 1), on a connection " +
      "and on a shared receive queue: accepted, and messages sent one at a time all complete",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, ep, server, serverPeer } = yield* connectedPair(address, port, {
          server: { receiveQueueSize: 8, receiveCompletionQueueSize: 1 }
        })
        const inbox = yield* LocalMr.allocate(serverPeer, 8 * 64, Usage.RECV)
        const out = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
        out.memory.set(pattern(64, 7))
        // Every slot of the receive queue posted at once: more receives in flight than the CQ holds.
        const posted = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, n) => n),
          (n) => Connection.postRecv(server, { dst: inbox, offset: n * 64, length: 64 })
        )
        yield* pingOneAtATime(
          8,
          (n) => Connection.send(client, { src: out, offset: 0, length: 8 + n }),
          (n) => Effect.map(posted[n]!.completion, (c) => c.byteLength)
        )
        yield* check(same(inbox.memory.subarray(7 * 64, 7 * 64 + 15), pattern(64, 7).subarray(0, 15)), "the last message's bytes")

        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 8, completionQueueSize: 2 })
        const accepting = yield* Effect.fork(Endpoint.acceptNext(ep, { sharedReceiveQueue: srq }))
        const toQueue = yield* Connection.connect(clientPeer, address, port)
        yield* Fiber.join(accepting)
        const queued = yield* Effect.forEach(
          Array.from({ length: 8 }, (_, n) => n),
          (n) => SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: n * 64, length: 64 })
        )
        yield* pingOneAtATime(
          8,
          (n) => Connection.send(toQueue, { src: out, offset: 0, length: 8 + n }),
          (n) => Effect.map(queued[n]!.completion, (c) => c.byteLength)
        )
      })
  },
  {
    name: "a shared receive queue without a receive CQ of its own (librpma's 08srq, modes m and r) is refused " +
      "on both paths, naming the configuration and what to use instead",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const peer = yield* rawPeer(address)
        const raw = yield* Effect.exit(d.srqNew(peer, { rqSize: 4, rcqSize: 0 }))
        yield* check(tagOf(raw) === "RpmaInvalidError", `srqNew with rcqSize 0: ${tagOf(raw)}`)
        const serverPeer = yield* Peer.make(address)
        const made = yield* Effect.exit(Effect.scoped(SharedReceiveQueue.make(serverPeer, { completionQueueSize: 0 })))
        yield* check(tagOf(made) === "RpmaInvalidError", `SharedReceiveQueue.make with completionQueueSize 0: ${tagOf(made)}`)
        for (const message of [messageOf(raw), messageOf(made)]) {
          yield* check(message.includes("08srq") && message.includes("modes m and r"), `the refusal names the configuration: ${message}`)
          yield* check(message.includes("completionQueueSize 1 or more"), `the refusal says what to use: ${message}`)
        }
      })
  }
]
