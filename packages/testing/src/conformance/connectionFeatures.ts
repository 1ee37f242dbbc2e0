/**
 * Conformance cases for the connection features of librpma beyond plain operations: a receive
 * posted before accepting, posting without waiting and unsignalled requests, immediate data, the
 * peer configuration descriptor, rdma_cm's private data limits, and shared receive queues.
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type { Case } from "../Conformance.js"
import { connectedPair, exposed } from "./pair.js"
import { check, messageOf, pattern, same, tagOf } from "./support.js"

const remoteOf = (mr: LocalMr.LocalMr<any>) =>
  Effect.flatMap(
    LocalMr.descriptor(mr),
    (
      d
    ): Effect.Effect<
      RemoteMr.RemoteMr<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">,
      unknown,
      Driver.RdmaDriver | Scope.Scope
    > =>
      Effect.flatMap(
        RemoteMr.fromDescriptor(d),
        RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
      )
  )

export const connectionFeatureCases: ReadonlyArray<Case> = [
  {
    name:
      "rpma_conn_req_recv: a receive posted before accepting takes the client's first message; a rejected request fails it",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        const ep = yield* Listener.make(serverPeer, address, port)
        const serving = yield* Effect.fork(Effect.gen(function*() {
          const req = yield* Listener.next(ep)
          const first = yield* Listener.postRecv(req, { dst: inbox, offset: 8, length: 32 })
          const conn = yield* Listener.accept(req)
          return { conn, arrived: yield* first.completion }
        }))
        const client = yield* Connection.connect(clientPeer, address, port)
        const out = yield* LocalMr.allocate(clientPeer, 32, Usage.SEND)
        out.memory.set(pattern(32, 3))
        yield* Connection.send(client, { src: out, offset: 0, length: 20 })
        const { arrived } = yield* Fiber.join(serving)
        yield* check(arrived.operation === "RECV", `the early receive completed as ${arrived.operation}`)
        yield* check(arrived.byteLength === 20, `the early receive got ${arrived.byteLength} bytes`)
        yield* check(same(inbox.memory.subarray(8, 28), pattern(32, 3).subarray(0, 20)), "the bytes that arrived")

        // A request rejected with a receive posted: the receive fails, its region is let go.
        const rejecting = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
          const spare = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
          const req = yield* Listener.next(ep)
          const posted = yield* Listener.postRecv(req, { dst: spare, offset: 0, length: 64 })
          yield* Listener.reject(req)
          return yield* Effect.exit(posted.completion)
        })))
        const refused = yield* Effect.exit(Effect.scoped(Connection.connect(clientPeer, address, port)))
        const rejected = yield* Fiber.join(rejecting)
        yield* check(tagOf(refused) === "ConnectionFailedError", `the rejected client: ${tagOf(refused)}`)
        yield* check(tagOf(rejected) === "ConnectionClosedError", `the rejected request's receive: ${tagOf(rejected)}`)
      })
  },
  {
    name:
      "unsignalled writes (completion onError) then one awaited flush: all arrive, their tickets succeed, the queue never jams",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, serverPeer } = yield* connectedPair(address, port, {
          server: { sendQueueSize: 4 },
          client: { sendQueueSize: 4 }
        })
        const target = yield* LocalMr.allocate(serverPeer, 4096, exposed)
        const remote = yield* remoteOf(target)
        const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
        src.memory.set(pattern(4096, 11))
        // 16 writes through a 4-entry send queue, none asked to signal: the one that takes the last
        // free entry is signalled anyway, so the queue gives entries back.
        const tickets: Array<Connection.Posted> = []
        for (let i = 0; i < 16; i++) {
          tickets.push(
            yield* Connection.postWrite(client, {
              dst: remote,
              dstOffset: i * 256,
              src,
              srcOffset: i * 256,
              length: 256,
              completion: "onError"
            })
          )
        }
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 4096 })
        yield* check(same(target.memory, pattern(4096, 11)), "the unsignalled writes arrived")
        for (const ticket of tickets) {
          const done = yield* ticket.completion
          yield* check(done.operation === "RDMA_WRITE", `an unsignalled write completed as ${done.operation}`)
        }
      })
  },
  {
    name:
      "posted without waiting: the region outlives its scope while the receive is posted; the connection's end fails it, then lets it go",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const before = (yield* d.live).localRegions
        const [posted, added] = yield* Effect.scoped(Effect.gen(function*() {
          const { server, serverPeer } = yield* connectedPair(address, port)
          const withPair = (yield* d.live).localRegions
          const posted = yield* Effect.scoped(Effect.flatMap(
            LocalMr.allocate(serverPeer, 64, Usage.RECV),
            (inbox) => Connection.postRecv(server, { dst: inbox, offset: 0, length: 64 })
          ))
          // The region's scope has closed; the device may still write it: still registered.
          return [posted, (yield* d.live).localRegions - withPair] as const
        }))
        yield* check(added === 1, `regions while the receive is posted: ${added} (expected 1)`)
        const outcome = yield* Effect.exit(posted.completion)
        // Flushed by the queue pair (IBV_WC_WR_FLUSH_ERR), or failed when the connection ended.
        yield* check(
          tagOf(outcome) === "CompletionError" || tagOf(outcome) === "ConnectionClosedError",
          `the receive once the connection closed: ${tagOf(outcome)}`
        )
        yield* check(
          (yield* d.live).localRegions === before,
          "the region is deregistered once the connection is deleted"
        )
      })
  },
  {
    name:
      "immediate data: send and write with imm complete the receive with RECV / RECV_RDMA_WITH_IMM, length and value",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, server, serverPeer } = yield* connectedPair(address, port)
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        const target = yield* LocalMr.allocate(serverPeer, 256, exposed)
        const remote = yield* remoteOf(target)
        const out = yield* LocalMr.allocate(clientPeer, 256, Usage.combine(Usage.SEND, Usage.WRITE_SRC))
        out.memory.set(pattern(256, 5))

        const first = yield* Connection.postRecv(server, { dst: inbox, offset: 0, length: 64 })
        yield* Connection.send(client, { src: out, offset: 0, length: 16, imm: 0xdeadbeef })
        const sent = yield* first.completion
        yield* check(sent.operation === "RECV", `send with imm arrived as ${sent.operation}`)
        yield* check(sent.imm === 0xdeadbeef, `send with imm carried ${sent.imm}`)
        yield* check(
          sent.byteLength === 16 && same(inbox.memory.subarray(0, 16), pattern(256, 5).subarray(0, 16)),
          "its bytes"
        )

        const second = yield* Connection.postRecv(server, { dst: inbox, offset: 0, length: 64 })
        yield* Connection.write(client, { dst: remote, dstOffset: 0, src: out, srcOffset: 0, length: 256, imm: 7 })
        const written = yield* second.completion
        yield* check(written.operation === "RECV_RDMA_WITH_IMM", `write with imm arrived as ${written.operation}`)
        yield* check(
          written.imm === 7 && written.byteLength === 256,
          `write with imm: ${written.imm}, ${written.byteLength}`
        )
        yield* check(same(target.memory, pattern(256, 5)), "the written bytes")

        const plain = yield* Connection.postRecv(server, { dst: inbox, offset: 0, length: 64 })
        yield* Connection.send(client, { src: out, offset: 0, length: 4 })
        const none = yield* plain.completion
        yield* check(none.imm === undefined && none.operation === "RECV", "a plain send carries no immediate data")

        const refused = yield* Effect.exit(Connection.send(client, { src: out, offset: 0, length: 4, imm: 2 ** 32 }))
        yield* check(tagOf(refused) === "OutOfRangeError", `imm 2^32: ${tagOf(refused)}`)
      })
  },
  {
    name: "peer configuration descriptor: a persistent flush is refused until the server's descriptor is applied",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, serverPeer } = yield* connectedPair(address, port)
        const target = yield* LocalMr.allocate(
          serverPeer,
          64,
          Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)
        )
        const remote = yield* LocalMr.descriptor(target).pipe(
          Effect.flatMap(RemoteMr.fromDescriptor),
          Effect.flatMap(RemoteMr.require(Usage.FLUSH_TYPE_PERSISTENT))
        )
        const before = yield* Effect.exit(
          Connection.flush(client, { type: "persistent", dst: remote, dstOffset: 0, length: 64 })
        )
        yield* check(tagOf(before) === "RpmaNoSupportError", `persistent flush before the descriptor: ${tagOf(before)}`)
        const descriptor = yield* Connection.peerConfigDescriptor({ directWriteToPmem: true })
        yield* check(descriptor.byteLength === 1 && descriptor[0] === 1, `the descriptor: ${Array.from(descriptor)}`)
        yield* Connection.applyRemotePeerConfig(client, descriptor)
        yield* Connection.flush(client, { type: "persistent", dst: remote, dstOffset: 0, length: 64 })
        const bad = yield* Effect.exit(Connection.applyRemotePeerConfig(client, new Uint8Array(2)))
        yield* check(tagOf(bad) === "RpmaInvalidError", `a 2-byte descriptor: ${tagOf(bad)}`)
      })
  },
  {
    name: "shared receive queue: two connections' messages land in its receives, each naming its connection; " +
      "recv on such a connection is refused; its end fails what waits",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const before = yield* d.live
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 4 })
        const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
        const first = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 0, length: 64 })
        const second = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 64, length: 64 })
        const waiting = yield* Effect.scoped(Effect.gen(function*() {
          const ep = yield* Listener.make(serverPeer, address, port)
          const connect = Effect.gen(function*() {
            const accepting = yield* Effect.fork(Listener.acceptNext(ep, { sharedReceiveQueue: srq }))
            const client = yield* Connection.connect(clientPeer, address, port)
            return { client, server: yield* Fiber.join(accepting) }
          })
          const a = yield* connect
          const b = yield* connect
          const qpA = yield* Connection.qpNum(a.server)
          const qpB = yield* Connection.qpNum(b.server)
          yield* check(qpA !== qpB, `the two connections' queue pair numbers differ (${qpA}, ${qpB})`)
          const out = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
          out.memory.set(pattern(64, 1))
          yield* Connection.send(a.client, { src: out, offset: 0, length: 20 })
          const gotA = yield* Effect.raceFirst(first.completion, second.completion)
          out.memory.set(pattern(64, 2))
          yield* Connection.send(b.client, { src: out, offset: 0, length: 30, imm: 77 })
          const [one, two] = [yield* first.completion, yield* second.completion]
          const gotB = one.qpNum === gotA.qpNum ? two : one
          yield* check(
            gotA.qpNum === qpA && gotB.qpNum === qpB,
            `qpNum ${gotA.qpNum}, ${gotB.qpNum} (expected ${qpA}, ${qpB})`
          )
          yield* check(gotA.byteLength === 20 && gotA.imm === undefined, `A's message: ${gotA.byteLength} bytes`)
          yield* check(
            gotB.byteLength === 30 && gotB.imm === 77 && gotB.operation === "RECV",
            `B's message: ${gotB.byteLength}, ${gotB.imm}`
          )
          const atA = one.qpNum === gotA.qpNum ? 0 : 64
          yield* check(same(inbox.memory.subarray(atA, atA + 20), pattern(64, 1).subarray(0, 20)), "A's bytes")
          yield* check(
            same(inbox.memory.subarray(64 - atA, 64 - atA + 30), pattern(64, 2).subarray(0, 30)),
            "B's bytes"
          )

          const own = yield* Effect.exit(Connection.recv(a.server, { dst: inbox, offset: 128, length: 64 }))
          yield* check(
            tagOf(own) === "RpmaInvalidError",
            `recv on a connection with a shared receive queue: ${tagOf(own)}`
          )
          yield* check(messageOf(own).includes("shared receive queue"), `the refusal says why: ${messageOf(own)}`)
          // Still posted when the connections go: the queue outlives them.
          return yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 128, length: 64 })
        }))
        yield* check((yield* d.live).sharedReceiveQueues === 1, "the queue is alive after its connections")
        return { waiting, before }
      }).pipe(
        Effect.scoped,
        Effect.flatMap(({ before, waiting }) =>
          Effect.gen(function*() {
            const ended = yield* Effect.exit(waiting.completion)
            yield* check(
              tagOf(ended) === "ConnectionClosedError",
              `a receive still posted when the queue ends: ${tagOf(ended)}`
            )
            const live = yield* (yield* Driver.RdmaDriver).live
            yield* check(live.sharedReceiveQueues === before.sharedReceiveQueues, "the queue is deleted")
            yield* check(
              live.localRegions === before.localRegions && live.peers === before.peers,
              "its regions and peer too"
            )
          })
        )
      )
  },
  {
    name: "a receive CQ of its own, and one channel for both CQs: sends, receives and writes complete as before; " +
      "a shared channel with a shared receive queue (librpma refuses it) is refused naming the option",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, server, serverPeer } = yield* connectedPair(address, port, {
          server: { receiveQueueSize: 8, receiveCompletionQueueSize: 8 },
          client: { receiveQueueSize: 8, receiveCompletionQueueSize: 16, sharedCompletionChannel: true }
        })
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        const target = yield* LocalMr.allocate(serverPeer, 256, exposed)
        const remote = yield* remoteOf(target)
        const out = yield* LocalMr.allocate(clientPeer, 256, Usage.combine(Usage.SEND, Usage.WRITE_SRC, Usage.RECV))
        out.memory.set(pattern(256, 9))
        const arriving = yield* Connection.postRecv(server, { dst: inbox, offset: 0, length: 64 })
        yield* Connection.send(client, { src: out, offset: 0, length: 24, imm: 5 })
        const got = yield* arriving.completion
        yield* check(
          got.operation === "RECV" && got.byteLength === 24 && got.imm === 5,
          `the server's receive: ${got.byteLength}`
        )
        yield* check(same(inbox.memory.subarray(0, 24), pattern(256, 9).subarray(0, 24)), "the bytes sent")
        yield* Connection.write(client, { dst: remote, src: out, length: 256 })
        yield* check(same(target.memory, pattern(256, 9)), "the bytes written")
        const back = yield* Connection.postRecv(client, { dst: out, offset: 128, length: 128 })
        inbox.memory.fill(0)
        const reply = yield* LocalMr.allocate(serverPeer, 16, Usage.SEND)
        reply.memory.set(pattern(16, 4))
        yield* Connection.send(server, { src: reply, offset: 0, length: 16 })
        const answered = yield* back.completion
        yield* check(answered.byteLength === 16, `the client's receive on a shared channel: ${answered.byteLength}`)
        yield* check(same(out.memory.subarray(128, 144), pattern(16, 4)), "the bytes of the reply")

        const srq = yield* SharedReceiveQueue.make(serverPeer)
        const shared = yield* Effect.exit(
          Effect.scoped(
            Connection.connect(clientPeer, address, port, { sharedReceiveQueue: srq, sharedCompletionChannel: true })
          )
        )
        yield* check(
          tagOf(shared) === "RpmaInvalidError",
          `a shared channel with a shared receive queue: ${tagOf(shared)}`
        )
        yield* check(
          messageOf(shared).includes("sharedCompletionChannel"),
          `the refusal names it: ${messageOf(shared)}`
        )
      })
  },
  {
    name:
      "private data: 56 bytes on a connect and 196 on an accept pass, padded to that; one more is refused naming the limit",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const tooLong = yield* Effect.exit(
          Effect.scoped(Connection.connect(clientPeer, address, port, { privateData: new Uint8Array(57) }))
        )
        yield* check(tagOf(tooLong) === "RpmaInvalidError", `connect with 57 bytes: ${tagOf(tooLong)}`)
        yield* check(messageOf(tooLong).includes("56"), `the refusal names 56: ${messageOf(tooLong)}`)

        const accepting = yield* Effect.fork(
          Effect.exit(Effect.scoped(Listener.acceptNext(ep, { privateData: new Uint8Array(197) })))
        )
        yield* Effect.exit(Effect.scoped(Connection.connect(clientPeer, address, port, { timeout: "3 seconds" })))
        const refused = yield* Fiber.join(accepting)
        yield* check(tagOf(refused) === "RpmaInvalidError", `accept with 197 bytes: ${tagOf(refused)}`)
        yield* check(messageOf(refused).includes("196"), `the refusal names 196: ${messageOf(refused)}`)

        const fromServer = pattern(196, 1)
        const fromClient = pattern(14, 2)
        const accepted = yield* Effect.fork(Listener.acceptNext(ep, { privateData: fromServer }))
        const client = yield* Connection.connect(clientPeer, address, port, { privateData: fromClient })
        const server = yield* Fiber.join(accepted)
        yield* check(
          server.privateData.byteLength === 56,
          `the request's private data arrived as ${server.privateData.byteLength} bytes`
        )
        yield* check(same(server.privateData.subarray(0, 14), fromClient), "the client's bytes")
        yield* check(server.privateData.subarray(14).every((b) => b === 0), "padded with zeros")
        yield* check(
          client.privateData.byteLength === 196 && same(client.privateData, fromServer),
          "the server's 196 bytes"
        )
      })
  }
]
