/**
 * Conformance cases for connections: connect and accept with private data, the refusals, the
 * operations over a connected pair, the device's own checks, many requests in flight, and a
 * pending receive when the other side closes.
 *
 * @internal
 */
import { Connection, Descriptor, Driver, Endpoint, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { check, equal, expectTag, NOWHERE, rawPeer, text } from "./support.js"

/**
 * Two connections of the raw driver, both ESTABLISHED, deleted with the scope: for the cases that
 * look at what the driver's own calls do, below core's handling of them.
 */
const driverPair = (address: string, port: number) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const peer = yield* rawPeer(address)
    const config = Connection.toConfig({ timeout: "10 seconds" })
    const ep = yield* Effect.acquireRelease(d.epListen(peer, address, port), (ep) => Effect.ignore(d.epShutdown(ep)))
    const deleting = (conn: Driver.ConnHandle) => Effect.acquireRelease(Effect.succeed(conn), (c) => Effect.ignore(d.connDelete(c)))
    const accepting = yield* Effect.fork(
      Effect.flatMap(d.epNextConnReq(ep, config), (req) => Effect.flatMap(d.connReqConnect(req, undefined), deleting))
    )
    const client = yield* Effect.flatMap(d.connReqNew(peer, address, port, config), (req) =>
      Effect.flatMap(d.connReqConnect(req, undefined), deleting))
    const server = yield* Fiber.join(accepting)
    yield* equal(yield* d.connNextEvent(client), "ESTABLISHED", "the client's first event")
    yield* equal(yield* d.connNextEvent(server), "ESTABLISHED", "the server's first event")
    return { client, server }
  })

/** @internal */
export const connectionCases: ReadonlyArray<Case> = [
  {
    name: "connection: connect, accept, private data both ways; a close is seen by the other side",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Endpoint.listen(serverPeer, address, port)
        const accepting = yield* Effect.fork(
          Endpoint.acceptNext(ep, { privateData: new TextEncoder().encode("welcome") })
        )
        const server = yield* Effect.scoped(Effect.gen(function*() {
          const client = yield* Connection.connect(clientPeer, address, port, {
            privateData: new TextEncoder().encode("hello")
          })
          const server = yield* Fiber.join(accepting)
          // rdma_cm pads private data: compare the prefix.
          yield* equal(text(server.privateData.subarray(0, 5)), "hello", "the client's private data")
          yield* equal(text(client.privateData.subarray(0, 7)), "welcome", "the server's private data")
          yield* equal(yield* client.state, "ESTABLISHED", "client state")
          return server
        }))
        const events = yield* Stream.runCollect(server.events)
        yield* equal([...events].at(-1), "CLOSED", "the server's last event after the client closed")
      })
  },
  {
    name: "connection: nobody listening → ConnectionFailedError; no device → RPMA_E_PROVIDER",
    run: (address, port) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* expectTag(Effect.scoped(Connection.connect(peer, address, port)), "ConnectionFailedError", "no listener")
        yield* expectTag(Effect.scoped(Connection.connect(peer, NOWHERE, port)), "RpmaProviderError", "no device")
        yield* expectTag(Effect.scoped(Endpoint.listen(peer, address, 0)), "RpmaInvalidError", "listen on port 0")
      })
  },
  {
    name: "rpma_write + rpma_flush + rpma_read: the bytes arrive and come back",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, remote, target } = yield* connectedPair(address, port)
        const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
        const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
        src.memory.set(new TextEncoder().encode("record #1"), 10)
        yield* Connection.write(client, { dst: remote, dstOffset: 1000, src, srcOffset: 10, length: 9 })
        yield* Connection.flush(client, { dst: remote, offset: 1000, length: 9 })
        yield* equal(text(target.memory.subarray(1000, 1009)), "record #1", "the server's memory after write+flush")
        yield* Connection.read(client, { dst, dstOffset: 100, src: remote, srcOffset: 1000, length: 9 })
        yield* equal(text(dst.memory.subarray(100, 109)), "record #1", "read back")
        yield* Connection.atomicWrite(client, { dst: remote, offset: 2048, value: Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8) })
        yield* Connection.flush(client, { dst: remote, offset: 2048, length: 8 })
        yield* equal(target.memory.subarray(2048, 2056).join(","), "1,2,3,4,5,6,7,8", "atomic write")
        yield* expectTag(Connection.atomicWrite(client, { dst: remote, offset: 2047, value: new Uint8Array(8) }), "OutOfRangeError", "misaligned")
      })
  },
  {
    name: "rpma_send + rpma_recv: a message arrives with its length",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, server, serverPeer } = yield* connectedPair(address, port)
        const out = yield* LocalMr.allocate(clientPeer, 256, Usage.SEND)
        const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
        out.memory.set(new TextEncoder().encode("ping"), 0)
        const received = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 128 }))
        yield* Effect.yieldNow()
        yield* Connection.send(client, { src: out, offset: 0, length: 4 })
        yield* equal(yield* Fiber.join(received), 4, "bytes received")
        yield* equal(text(inbox.memory.subarray(0, 4)), "ping", "message")
      })
  },
  {
    name: "the device enforces rkeys and bounds: a forged descriptor → IBV_WC_REM_ACCESS_ERR",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, target } = yield* connectedPair(address, port)
        const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
        const d = yield* LocalMr.describe(target)
        const forged = yield* RemoteMr.fromDescriptor(
          Descriptor.encode({ ...d, address: d.address + 65536n, length: 4096n })
        ).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
        const error = yield* Effect.flip(Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 }))
        yield* equal(error._tag, "CompletionError", "outcome of a write outside the region")
        yield* equal((error as { status?: number }).status, 10, "work completion status")
      })
  },
  {
    name: "offsets and lengths are checked before posting; a persistent flush needs pmem → RPMA_E_NOSUPP",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, remote, serverPeer } = yield* connectedPair(address, port)
        const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
        yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 4000, length: 200 }), "OutOfRangeError", "source range")
        yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 65530, src, srcOffset: 0, length: 16 }), "OutOfRangeError", "destination range")
        yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 2 ** 32 }), "OutOfRangeError", "length ≥ 2^32")
        const pmem = yield* LocalMr.allocate(serverPeer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT))
        const persistent = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(pmem)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.FLUSH_TYPE_PERSISTENT))
        )
        yield* expectTag(Connection.flushPersistent(client, { dst: persistent, offset: 0, length: 64 }), "RpmaNoSupportError", "no pmem")
        // The connection is still usable.
        yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
      })
  },
  {
    name: "many requests in flight: more than the send queue holds, all complete",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, remote, target } = yield* connectedPair(address, port, { server: { sendQueueSize: 16 }, client: { sendQueueSize: 16 } })
        const src = yield* LocalMr.allocate(clientPeer, 65536, Usage.WRITE_SRC)
        for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
        yield* Effect.forEach(
          Array.from({ length: 256 }, (_, i) => i),
          (i) => Connection.write(client, { dst: remote, dstOffset: i * 256, src, srcOffset: i * 256, length: 256 }),
          { concurrency: "unbounded", discard: true }
        )
        yield* Connection.flush(client, { dst: remote, offset: 0, length: 65536 })
        let wrong = 0
        for (let i = 0; i < 256; i++) if (target.memory[i * 256] !== (i % 250) + 1) wrong++
        yield* equal(wrong, 0, "chunks that did not arrive")
      })
  },
  {
    name: "a pending receive fails, not hangs, when the other side closes",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
        const ep = yield* Endpoint.listen(serverPeer, address, port)
        const accepting = yield* Effect.fork(Endpoint.acceptNext(ep))
        const waiting = yield* Effect.scoped(Effect.gen(function*() {
          yield* Connection.connect(clientPeer, address, port)
          const server = yield* Fiber.join(accepting)
          const waiting = yield* Effect.fork(Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 256 })))
          yield* Effect.yieldNow()
          return waiting
        }))
        const error = yield* Fiber.join(waiting)
        yield* check(
          error._tag === "ConnectionClosedError" || error._tag === "CompletionError",
          `a pending receive after the close failed with ${error._tag}`
        )
      })
  },
  {
    name: "rpma_conn_disconnect twice on one side: the second succeeds and sends nothing; the other side sees one CLOSED",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { client, server } = yield* driverPair(address, port)
        const start = yield* Clock.currentTimeMillis
        yield* d.connDisconnect(client)
        yield* equal(yield* Effect.exit(d.connDisconnect(client)).pipe(Effect.map((e) => e._tag)), "Success", "the second rpma_conn_disconnect")
        yield* equal(yield* d.connNextEvent(server), "CLOSED", "the server's event after the client's disconnect")
        // A second notification would travel as the first did: ten times the first one's delay
        // (at least 200 ms) is a generous bound. The server has not disconnected yet, so rdma_cm's
        // TIMEWAIT_EXIT (which librpma also reports as CLOSED) cannot come in between.
        const firstMs = (yield* Clock.currentTimeMillis) - start
        const second = yield* Effect.timeout(d.connNextEvent(server), Duration.millis(Math.max(10 * firstMs, 200))).pipe(
          Effect.option
        )
        yield* check(Option.isNone(second), `a second event on the server: ${Option.getOrElse(second, () => "")}`)
        // The server answers; the client sees its own CLOSED.
        yield* d.connDisconnect(server)
        yield* equal(yield* d.connNextEvent(client), "CLOSED", "the client's event after the server's answer")
      })
  }
]
