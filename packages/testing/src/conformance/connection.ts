/**
 * Conformance cases for connections: connect and accept with private data, the refusals, the
 * operations over a connected pair, the device's own checks, many requests in flight, a pending
 * receive when the other side closes (each as a server half and a client half, run in one process
 * here and across two hosts by packages/native/test-pair), and what a second disconnect sends.
 */
import { Connection, Descriptor, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { Case } from "../Conformance.js"
import { type HalfContext, inProcess, type PairCase } from "./halves.js"
import { clientHalf, exposed, serverHalf } from "./pair.js"
import { check, driverConfig, equal, expectTag, NOWHERE, rawPeer, text } from "./support.js"

const bytes = (s: string) => new TextEncoder().encode(s)

/** Server half of the conformance suite's connected pair: the exposed region's descriptor sent, one client accepted. */
const serve = (ctx: HalfContext, options?: Connection.Options) =>
  serverHalf(
    ctx.address,
    ctx.port,
    options,
    (descriptor) => ctx.channel.send({ listening: true, descriptor: Array.from(descriptor) })
  )

/** Client half of the connected pair, once the server half has sent its descriptor. */
const join = (ctx: HalfContext, options?: Connection.Options) =>
  Effect.gen(function*() {
    const descriptor = Uint8Array.from((yield* ctx.channel.receive()).descriptor)
    const half = yield* clientHalf(ctx.address, ctx.serverAddress, ctx.port, descriptor, options)
    return { ...half, descriptor }
  })

/** The server's memory, read by the server half when the client half asks, sent back. */
const answerPeeks = (ctx: HalfContext, memory: Uint8Array) =>
  Effect.gen(function*() {
    for (;;) {
      const m = yield* ctx.channel.receive()
      if (m.done) return
      yield* ctx.channel.send({ bytes: Array.from(memory.subarray(m.offset, m.offset + m.length)) })
    }
  })
const peek = (ctx: HalfContext, offset: number, length: number) =>
  Effect.map(
    Effect.zipRight(ctx.channel.send({ offset, length }), ctx.channel.receive()),
    (m) => Uint8Array.from(m.bytes as Array<number>)
  )
const donePeeking = (ctx: HalfContext) => ctx.channel.send({ done: true })

/** The connection cases that need two sides, as halves. */
export const connectionPairCases: ReadonlyArray<PairCase> = [
  {
    name: "connection: connect, accept, private data both ways; a close is seen by the other side",
    server: (ctx) =>
      Effect.gen(function*() {
        const { server } = yield* serve(ctx)
        yield* equal(text(server.privateData.subarray(0, 5)), "hello", "the client's private data")
        const events = yield* Stream.runCollect(Connection.changes(server)).pipe(Effect.timeout("30 seconds"))
        yield* equal([...events].at(-1), "Closed", "the server's last state after the client closed")
      }),
    client: (ctx) =>
      Effect.scoped(Effect.gen(function*() {
        const { client } = yield* join(ctx)
        yield* equal(text(client.privateData.subarray(0, 7)), "welcome", "the server's private data")
        yield* equal(yield* Connection.state(client), "Connected", "client state")
      }))
  },
  {
    name: "connection: nobody listening → ConnectionFailedError; no device → RPMA_E_PROVIDER",
    server: () => Effect.void,
    client: (ctx) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(ctx.address)
        yield* expectTag(
          Effect.scoped(Connection.connect(peer, ctx.serverAddress, ctx.port)),
          "ConnectionFailedError",
          "no listener on the other host"
        )
        yield* expectTag(Effect.scoped(Connection.connect(peer, NOWHERE, ctx.port)), "RpmaProviderError", "no device")
        yield* expectTag(Effect.scoped(Listener.make(peer, ctx.address, 0)), "RpmaInvalidError", "listen on port 0")
      })
  },
  {
    name: "rpma_write + rpma_flush + rpma_read: the bytes arrive and come back",
    server: (ctx) => Effect.flatMap(serve(ctx), ({ target }) => answerPeeks(ctx, target.memory)),
    client: (ctx) =>
      Effect.gen(function*() {
        const { client, peer, remote } = yield* join(ctx)
        const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
        const dst = yield* LocalMr.allocate(peer, 4096, Usage.READ_DST)
        src.memory.set(bytes("record #1"), 10)
        yield* Connection.write(client, { dst: remote, dstOffset: 1000, src, srcOffset: 10, length: 9 })
        yield* Connection.flush(client, { dst: remote, dstOffset: 1000, length: 9 })
        yield* equal(text(yield* peek(ctx, 1000, 9)), "record #1", "the server's memory after write+flush")
        yield* Connection.read(client, { dst, dstOffset: 100, src: remote, srcOffset: 1000, length: 9 })
        yield* equal(text(dst.memory.subarray(100, 109)), "record #1", "read back")
        yield* Connection.atomicWrite(client, {
          dst: remote,
          offset: 2048,
          value: Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8)
        })
        yield* Connection.flush(client, { dst: remote, dstOffset: 2048, length: 8 })
        yield* equal((yield* peek(ctx, 2048, 8)).join(","), "1,2,3,4,5,6,7,8", "atomic write")
        yield* expectTag(
          Connection.atomicWrite(client, { dst: remote, offset: 2047, value: new Uint8Array(8) }),
          "OutOfRangeError",
          "misaligned"
        )
        yield* donePeeking(ctx)
      })
  },
  {
    name: "rpma_send + rpma_recv: a message arrives with its length",
    server: (ctx) =>
      Effect.gen(function*() {
        const { peer, server } = yield* serve(ctx)
        const inbox = yield* LocalMr.allocate(peer, 256, Usage.RECV)
        const received = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 128 }))
        yield* Effect.yieldNow()
        yield* ctx.channel.send({ posted: true })
        yield* equal((yield* Fiber.join(received).pipe(Effect.timeout("30 seconds"))).byteLength, 4, "bytes received")
        yield* equal(text(inbox.memory.subarray(0, 4)), "ping", "message")
        yield* ctx.channel.send({ received: true })
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { client, peer } = yield* join(ctx)
        const out = yield* LocalMr.allocate(peer, 256, Usage.SEND)
        out.memory.set(bytes("ping"), 0)
        yield* ctx.channel.receive() // the receive is posted
        yield* Connection.send(client, { src: out, offset: 0, length: 4 })
        yield* ctx.channel.receive() // and arrived
      })
  },
  {
    name: "the device enforces rkeys and bounds: a forged descriptor → IBV_WC_REM_ACCESS_ERR",
    server: (ctx) => Effect.flatMap(serve(ctx), () => ctx.channel.receive()),
    client: (ctx) =>
      Effect.gen(function*() {
        const { client, descriptor, peer } = yield* join(ctx)
        const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
        const d = yield* Descriptor.decode(descriptor)
        const forged = yield* RemoteMr.fromDescriptor(
          Descriptor.encode({ ...d, address: d.address + 65536n, length: 4096n })
        ).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
        const error = yield* Effect.flip(
          Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 })
        )
        yield* equal(error._tag, "CompletionError", "outcome of a write outside the region")
        yield* equal((error as { status?: number }).status, 10, "work completion status")
        yield* ctx.channel.send({ done: true })
      })
  },
  {
    name: "offsets and lengths are checked before posting; a persistent flush needs pmem → RPMA_E_NOSUPP",
    server: (ctx) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(ctx.address)
        const target = yield* LocalMr.allocate(peer, 65536, exposed)
        const pmem = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT))
        const ep = yield* Listener.make(peer, ctx.address, ctx.port)
        yield* ctx.channel.send({
          descriptor: Array.from(yield* LocalMr.descriptor(target)),
          pmem: Array.from(yield* LocalMr.descriptor(pmem))
        })
        yield* Listener.acceptNext(ep)
        yield* ctx.channel.receive()
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        const { descriptor, pmem } = yield* ctx.channel.receive()
        const peer = yield* Peer.make(ctx.address)
        const client = yield* Connection.connect(peer, ctx.serverAddress, ctx.port)
        const remote = yield* RemoteMr.fromDescriptor(Uint8Array.from(descriptor)).pipe(
          Effect.flatMap(RemoteMr.require(exposed))
        )
        const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
        yield* expectTag(
          Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 4000, length: 200 }),
          "OutOfRangeError",
          "source range"
        )
        yield* expectTag(
          Connection.write(client, { dst: remote, dstOffset: 65530, src, srcOffset: 0, length: 16 }),
          "OutOfRangeError",
          "destination range"
        )
        yield* expectTag(
          Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 2 ** 32 }),
          "OutOfRangeError",
          "length ≥ 2^32"
        )
        const persistent = yield* RemoteMr.fromDescriptor(Uint8Array.from(pmem)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.FLUSH_TYPE_PERSISTENT))
        )
        yield* expectTag(
          Connection.flush(client, { type: "persistent", dst: persistent, dstOffset: 0, length: 64 }),
          "RpmaNoSupportError",
          "no pmem"
        )
        yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
        yield* ctx.channel.send({ done: true })
      })
  },
  {
    name: "many requests in flight: more than the send queue holds, all complete",
    server: (ctx) => Effect.flatMap(serve(ctx, { sendQueueSize: 16 }), ({ target }) => answerPeeks(ctx, target.memory)),
    client: (ctx) =>
      Effect.gen(function*() {
        const { client, peer, remote } = yield* join(ctx, { sendQueueSize: 16 })
        const src = yield* LocalMr.allocate(peer, 65536, Usage.WRITE_SRC)
        for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
        yield* Effect.forEach(
          Array.from({ length: 256 }, (_, i) => i),
          (i) => Connection.write(client, { dst: remote, dstOffset: i * 256, src, srcOffset: i * 256, length: 256 }),
          { concurrency: "unbounded", discard: true }
        )
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 65536 })
        const memory = yield* peek(ctx, 0, 65536)
        let wrong = 0
        for (let i = 0; i < 256; i++) if (memory[i * 256] !== (i % 250) + 1) wrong++
        yield* equal(wrong, 0, "chunks that did not arrive")
        yield* donePeeking(ctx)
      })
  },
  {
    name: "a pending receive fails, not hangs, when the other side closes",
    server: (ctx) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(ctx.address)
        const inbox = yield* LocalMr.allocate(peer, 256, Usage.RECV)
        const ep = yield* Listener.make(peer, ctx.address, ctx.port)
        yield* ctx.channel.send({ listening: true })
        const server = yield* Listener.acceptNext(ep)
        const waiting = yield* Effect.fork(Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 256 })))
        yield* Effect.yieldNow()
        yield* ctx.channel.send({ posted: true })
        const error = yield* Fiber.join(waiting).pipe(Effect.timeout("30 seconds"))
        yield* check(
          error._tag === "ConnectionClosedError" || error._tag === "CompletionError",
          `a pending receive after the close failed with ${error._tag}`
        )
      }),
    client: (ctx) =>
      Effect.gen(function*() {
        yield* ctx.channel.receive()
        const peer = yield* Peer.make(ctx.address)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Connection.connect(peer, ctx.serverAddress, ctx.port)
          yield* ctx.channel.receive() // the receive is posted; now close
        }))
      })
  }
]

/**
 * Two connections of the raw driver, both ESTABLISHED, deleted with the scope: for the cases that
 * look at what the driver's own calls do, below core's handling of them.
 */
export const driverPair = (address: string, port: number) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const peer = yield* rawPeer(address)
    const config = driverConfig(10_000)
    const ep = yield* Effect.acquireRelease(d.epListen(peer, address, port), (ep) => Effect.ignore(d.epShutdown(ep)))
    const deleting = (conn: Driver.Model.ConnHandle) =>
      Effect.acquireRelease(Effect.succeed(conn), (c) => Effect.ignore(d.connDelete(c)))
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

export const connectionCases: ReadonlyArray<Case> = [
  ...connectionPairCases.map(inProcess),
  {
    name:
      "rpma_conn_disconnect twice on one side: the second succeeds and sends nothing; the other side sees one CLOSED",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const { client, server } = yield* driverPair(address, port)
        const start = yield* Clock.currentTimeMillis
        yield* d.connDisconnect(client)
        yield* equal(
          yield* Effect.exit(d.connDisconnect(client)).pipe(Effect.map((e) => e._tag)),
          "Success",
          "the second rpma_conn_disconnect"
        )
        yield* equal(yield* d.connNextEvent(server), "CLOSED", "the server's event after the client's disconnect")
        // A second notification would travel as the first did: ten times the first one's delay
        // (at least 200 ms) is a generous bound. The server has not disconnected yet, so rdma_cm's
        // TIMEWAIT_EXIT (which librpma also reports as CLOSED) cannot come in between.
        const firstMs = (yield* Clock.currentTimeMillis) - start
        const second = yield* Effect.timeout(d.connNextEvent(server), Duration.millis(Math.max(10 * firstMs, 200)))
          .pipe(
            Effect.option
          )
        yield* check(Option.isNone(second), `a second event on the server: ${Option.getOrElse(second, () => "")}`)
        // The server answers; the client sees its own CLOSED.
        yield* d.connDisconnect(server)
        yield* equal(yield* d.connNextEvent(client), "CLOSED", "the client's event after the server's answer")
      })
  }
]
