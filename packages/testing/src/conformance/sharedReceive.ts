/**
 * Conformance cases for what a shared receive queue refuses before anything is posted: a receive
 * on a connection request taken with it. Each shows that the refusal left the queue working.
 *
 * @internal
 */
import { Connection, Endpoint, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { type CaseOf, check, messageOf, tagOf } from "./support.js"

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
    yield* check(got.byteLength === length && got.qpNum === qpNum, `the queue's receive: ${got.byteLength} bytes, qp ${got.qpNum}`)
    yield* check(dst.memory.subarray(0, length).every((b) => b === fill), "the bytes landed in the queue's region")
  })

/** @internal */
export const sharedReceiveCases = (): ReadonlyArray<CaseOf> => [
  {
    name: "shared receive queue: Endpoint.recv on a request taken with it is refused naming the queue; " +
      "the request is still accepted and its messages land in the queue",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 2 })
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        const posted = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 0, length: 64 })
        const ep = yield* Endpoint.listen(serverPeer, address, port)
        const serving = yield* Effect.fork(Effect.gen(function*() {
          const req = yield* Endpoint.next(ep, { sharedReceiveQueue: srq })
          const refused = yield* Effect.exit(Endpoint.recv(req, { dst: inbox, offset: 0, length: 64 }))
          return { refused, conn: yield* Endpoint.accept(req) }
        }))
        const client = yield* Connection.connect(clientPeer, address, port)
        const { conn, refused } = yield* Fiber.join(serving)
        yield* check(tagOf(refused) === "RpmaInvalidError", `Endpoint.recv with a shared receive queue: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("shared receive queue"), `the refusal names the queue: ${messageOf(refused)}`)

        yield* delivered({ peer: clientPeer, client, server: conn }, posted, inbox, 16, 0x5a)
      })
  }
]
