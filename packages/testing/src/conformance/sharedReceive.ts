/**
 * Conformance cases for what a shared receive queue refuses before anything is posted: a receive
 * on a connection request taken with it, and a receive into a region of another peer. Each shows
 * that the refusal left the queue working.
 */
import { Connection, Listener, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { check, messageOf, tagOf } from "./support.js"

/**
 * Sends `length` bytes of `fill` from `client` and checks that the queue's receive `posted` took
 * them into `dst`, naming `server`'s queue pair.
 */
const delivered = (
  from: { readonly peer: Peer.Peer; readonly client: Connection.Connection; readonly server: Connection.Connection },
  posted: SharedReceiveQueue.Posted,
  dst: LocalMr.LocalMr<"RECV">,
  length: number,
  fill: number
) =>
  Effect.gen(function*() {
    const out = yield* LocalMr.allocate(from.peer, length, Usage.SEND)
    out.memory.fill(fill)
    yield* Connection.send(from.client, { src: out, offset: 0, length })
    const got = yield* posted.completion
    const qpNum = yield* Connection.qpNum(from.server)
    yield* check(
      got.byteLength === length && got.qpNum === qpNum,
      `the queue's receive: ${got.byteLength} bytes, qp ${got.qpNum}`
    )
    yield* check(dst.memory.subarray(0, length).every((b) => b === fill), "the bytes landed in the queue's region")
  })

export const sharedReceiveCases: ReadonlyArray<Case> = [
  {
    name: "shared receive queue: Listener.postRecv on a request taken with it is refused naming the queue; " +
      "the request is still accepted and its messages land in the queue",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 2 })
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        const posted = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 0, length: 64 })
        const ep = yield* Listener.make(serverPeer, address, port)
        const serving = yield* Effect.fork(Effect.gen(function*() {
          const req = yield* Listener.next(ep, { sharedReceiveQueue: srq })
          const refused = yield* Effect.exit(Listener.postRecv(req, { dst: inbox, offset: 0, length: 64 }))
          return { refused, conn: yield* Listener.accept(req) }
        }))
        const client = yield* Connection.connect(clientPeer, address, port)
        const { conn, refused } = yield* Fiber.join(serving)
        yield* check(
          tagOf(refused) === "RpmaInvalidError",
          `Listener.postRecv with a shared receive queue: ${tagOf(refused)}`
        )
        yield* check(
          messageOf(refused).includes("shared receive queue"),
          `the refusal names the queue: ${messageOf(refused)}`
        )

        yield* delivered({ peer: clientPeer, client, server: conn }, posted, inbox, 16, 0x5a)
      })
  },
  {
    name: "shared receive queue: postRecv into a region of another peer is refused before posting (RPMA_E_INVAL); " +
      "its one slot stays free and the next message lands in the queue's own region",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const otherPeer = yield* Peer.make(address) // another protection domain on the same device
        const clientPeer = yield* Peer.make(address)
        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 1 })
        const foreign = yield* LocalMr.allocate(otherPeer, 64, Usage.RECV)
        const own = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)

        const refused = yield* Effect.exit(SharedReceiveQueue.postRecv(srq, { dst: foreign }))
        yield* check(tagOf(refused) === "RpmaInvalidError", `a region of another peer: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("another peer"), `the refusal says why: ${messageOf(refused)}`)
        const awaited = yield* Effect.exit(SharedReceiveQueue.recv(srq, { dst: foreign, offset: 0, length: 8 }))
        yield* check(tagOf(awaited) === "RpmaInvalidError", `recv into a region of another peer: ${tagOf(awaited)}`)

        // The queue holds one receive: had the refused one been posted, this one would wait.
        const posted = yield* SharedReceiveQueue.postRecv(srq, { dst: own })
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { sharedReceiveQueue: srq }))
        const client = yield* Connection.connect(clientPeer, address, port)
        const server = yield* Fiber.join(accepting)
        yield* delivered({ peer: clientPeer, client, server }, posted, own, 24, 0x3c)
        yield* check(foreign.memory.every((b) => b === 0), "nothing landed in the other peer's region")
      })
  }
]
