/**
 * Conformance cases for the configurations librpma's own examples use (issue 19, item 8): an
 * accept refused for its private data can be retried, a receive CQ smaller than the receive queue
 * (example 09) works, and a shared receive queue without a receive CQ of its own (example 08srq,
 * modes m and r) completes its receives on each connection's CQ or receive CQ.
 */
import { Connection, Listener, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { check, driverConfig, equal, messageOf, pattern, rawPeer, same, tagOf } from "./support.js"

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

/**
 * A server with a shared receive queue of 4 receives and no receive CQ, and one connection per
 * entry of `options` (the server side's options beside the queue), each from its own client. As
 * librpma's 08srq: a message on each connection in turn lands in one of the queue's receives,
 * naming that connection's queue pair, and the server answers on that connection. The first
 * receive is posted before any connection exists, the others while the connections are idle.
 */
const pingPongOnQueue = (address: string, port: number, options: ReadonlyArray<Connection.Options>) =>
  Effect.gen(function*() {
    const serverPeer = yield* Peer.make(address)
    const clientPeer = yield* Peer.make(address)
    const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 4, completionQueueSize: 0 })
    const inbox = yield* LocalMr.allocate(serverPeer, 4 * 64, Usage.RECV)
    const first = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 0, length: 64 })
    const ep = yield* Listener.make(serverPeer, address, port)
    const pairs = yield* Effect.forEach(options, (serverOptions) =>
      Effect.gen(function*() {
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { ...serverOptions, sharedReceiveQueue: srq }))
        const client = yield* Connection.connect(clientPeer, address, port)
        return { client, server: yield* Fiber.join(accepting) }
      }))
    const out = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.SEND, Usage.RECV))
    const reply = yield* LocalMr.allocate(serverPeer, 16, Usage.SEND)
    for (let round = 0; round < 2 * pairs.length; round++) {
      const { client, server } = pairs[round % pairs.length]!
      const posted = round === 0
        ? first
        : yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: (round % 4) * 64, length: 64 })
      const answer = yield* Connection.postRecv(client, { dst: out, offset: 32, length: 32 })
      out.memory.fill(round + 1, 0, 32)
      yield* Connection.send(client, { src: out, offset: 0, length: 8 + round })
      const got = yield* posted.completion
      const qpNum = yield* Connection.qpNum(server)
      yield* check(
        got.byteLength === 8 + round && got.qpNum === qpNum,
        `round ${round}: ${got.byteLength} bytes from qp ${got.qpNum} (${qpNum})`
      )
      const at = (round % 4) * 64
      yield* check(
        inbox.memory.subarray(at, at + 8 + round).every((b) => b === round + 1),
        `round ${round}: the bytes in the queue's region`
      )
      reply.memory.fill(0x40 + round)
      yield* Connection.send(server, { src: reply, offset: 0, length: 16 })
      const back = yield* answer.completion
      yield* check(
        back.byteLength === 16 && out.memory[32] === 0x40 + round,
        `round ${round}: the server's answer on that connection`
      )
    }
    return { ep, serverPeer, srq }
  })

export const configurationCases: ReadonlyArray<Case> = [
  {
    name: "driver: rpma_conn_req_connect with private data too long for an accept is refused and leaves the " +
      "request usable: a second connect with 196 bytes establishes the connection",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const peer = yield* rawPeer(address)
        const config = driverConfig(10_000)
        const ep = yield* Effect.acquireRelease(
          d.epListen(peer, address, port),
          (ep) => Effect.ignore(d.epShutdown(ep))
        )
        const deleting = (conn: Driver.Model.ConnHandle) =>
          Effect.acquireRelease(Effect.succeed(conn), (c) => Effect.ignore(d.connDelete(c)))
        const client = yield* Effect.flatMap(
          d.connReqNew(peer, address, port, config),
          (req) => Effect.flatMap(d.connReqConnect(req, undefined), deleting)
        )
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
        yield* check(
          same(yield* d.connPrivateData(client), fromServer),
          "the client got the retried accept's 196 bytes"
        )
      })
  },
  {
    name: "Listener.accept with private data too long, or a timeout of 0, is refused and leaves the request " +
      "unanswered: accepted again with good options, it connects",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)

        const connecting = yield* Effect.fork(Connection.connect(clientPeer, address, port, { timeout: "20 seconds" }))
        const req = yield* Listener.next(ep)
        const refused = yield* Effect.exit(Effect.scoped(Listener.accept(req, { privateData: new Uint8Array(197) })))
        yield* check(tagOf(refused) === "RpmaInvalidError", `accept with 197 bytes: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("196"), `the refusal names 196: ${messageOf(refused)}`)
        const noTimeout = yield* Effect.exit(Effect.scoped(Listener.accept(req, { timeout: 0 })))
        yield* check(tagOf(noTimeout) === "RpmaInvalidError", `accept with a timeout of 0: ${tagOf(noTimeout)}`)
        const welcome = pattern(196, 5)
        const server = yield* Listener.accept(req, { privateData: welcome })
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
        yield* check(
          same(inbox.memory.subarray(7 * 64, 7 * 64 + 15), pattern(64, 7).subarray(0, 15)),
          "the last message's bytes"
        )

        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 8, completionQueueSize: 2 })
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { sharedReceiveQueue: srq }))
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
    name: "a shared receive queue without a receive CQ (librpma's 08srq, mode m): each receive completes on the CQ " +
      "of the connection its message came on, among that connection's own completions, naming it; two connections " +
      "answered in turn; the CQ's default holds the queue's receives and a smaller one is refused",
    run: (address, port) =>
      Effect.gen(function*() {
        const { ep, srq } = yield* pingPongOnQueue(address, port, [{}, {}])
        const small = yield* Effect.exit(
          Listener.next(ep, { sharedReceiveQueue: srq, sendQueueSize: 8, completionQueueSize: 8 })
        )
        yield* check(tagOf(small) === "RpmaInvalidError", `a CQ of only the send queue: ${tagOf(small)}`)
        yield* check(
          messageOf(small).includes("shared receive queue's receiveQueueSize"),
          `the refusal says what the CQ must hold: ${messageOf(small)}`
        )
      })
  },
  {
    name:
      "a shared receive queue without a receive CQ and connections with one (librpma's 08srq, mode r), one of them " +
      "with a shared completion channel: each receive completes on its connection's receive CQ; a queue with a " +
      "receive CQ of its own refuses a connection's (librpma would ignore it), naming the way to mode r",
    run: (address, port) =>
      Effect.gen(function*() {
        const { ep, serverPeer } = yield* pingPongOnQueue(address, port, [
          { receiveCompletionQueueSize: 2 },
          { receiveCompletionQueueSize: 2, sharedCompletionChannel: true }
        ])
        const ownCq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 4 })
        const ignored = yield* Effect.exit(
          Listener.next(ep, { sharedReceiveQueue: ownCq, receiveCompletionQueueSize: 2 })
        )
        yield* check(tagOf(ignored) === "RpmaInvalidError", `a receive CQ beside the queue's own: ${tagOf(ignored)}`)
        yield* check(
          messageOf(ignored).includes("completionQueueSize 0"),
          `the refusal says what to use: ${messageOf(ignored)}`
        )
      })
  }
]
