// RdmaStream on the device, on both paths: a Stream written into the other side's range and
// through a ring smaller than it (wrapping, the writer reading the reader's head word back), and a
// Stream of received messages; the bytes that arrive checked. The same cases on the simulated
// driver: packages/core/test/RdmaStreamCm.test.ts and RdmaStream.test.ts.
import {
  CmEndpoint,
  CmListener,
  Connection,
  Listener,
  LocalMr,
  Peer,
  RdmaStream,
  RemoteKey,
  RemoteMr,
  Usage
} from "@effect-rdma/core"
import { assert, describe, layer } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import * as NativeDriver from "../src/NativeDriver.js"
import { address } from "./support.js"

/** `n` records of `size` bytes, record i filled with the byte i + 1, and all of them as one array. */
const numbered = (n: number, size: number) => {
  const parts = Array.from({ length: n }, (_, i) => new Uint8Array(size).fill((i % 250) + 1))
  return { parts, whole: new Uint8Array(Buffer.concat(parts)) }
}

/** A connected pair of endpoints on the device, in the caller's scope. */
const cmPair = Effect.gen(function*() {
  const listener = yield* CmListener.make(address, 0)
  const client = yield* CmEndpoint.make(address, listener.port)
  const connecting = yield* Effect.fork(CmEndpoint.establish(client))
  const server = yield* CmListener.next(listener)
  yield* CmListener.accept(server)
  yield* Fiber.join(connecting)
  return { client, server }
})

/** Reads `total` bytes off a ring, as one array. */
const readAll = (ring: Parameters<typeof RdmaStream.readRing>[0], total: number) =>
  RdmaStream.readRing(ring).pipe(
    Stream.mapConcat((bytes) => Array.from(bytes)),
    Stream.take(total),
    Stream.runCollect,
    Effect.map((read) => Uint8Array.from(Chunk.toReadonlyArray(read)))
  )

layer(NativeDriver.layer, { excludeTestServices: true, timeout: "60 seconds" })("RdmaStream on a device", (it) => {
  describe("librdmacm endpoints", () => {
    it.scoped("writeRange: 64 KiB through a 4 KiB staging region into a write key's region", () =>
      Effect.gen(function*() {
        const { client, server } = yield* cmPair
        const target = yield* CmEndpoint.registerWrite(server, new Uint8Array(80 * 1024))
        const input = numbered(64, 1024)
        const written = yield* Stream.fromIterable(input.parts).pipe(
          Stream.rechunk(5),
          Stream.run(RdmaStream.writeRange(client, { dst: RemoteKey.make(target), offset: 100, stagingSize: 4096 }))
        )
        assert.strictEqual(written, 64 * 1024)
        assert.deepStrictEqual(target.memory.slice(100, 100 + 64 * 1024), input.whole)
      }))

    it.scoped("writeRing / readRing: 20 KB through a 1 KiB ring registered once each way", () =>
      Effect.gen(function*() {
        const { client, server } = yield* cmPair
        const memory = new Uint8Array(1024 + RdmaStream.RING_HEADER)
        const ring = yield* CmEndpoint.registerWrite(server, memory)
        const head = RemoteKey.make(yield* CmEndpoint.registerRead(server, memory))
        const input = numbered(200, 100)
        const reader = yield* Effect.fork(readAll(ring, 20_000))
        const written = yield* Stream.fromIterable(input.parts).pipe(
          Stream.rechunk(3),
          Stream.run(RdmaStream.writeRing(client, { ring: RemoteKey.make(ring), head, stagingSize: 256 }))
        )
        assert.strictEqual(written, 20_000)
        assert.deepStrictEqual(yield* Fiber.join(reader), input.whole)
      }))

    it.scoped("messages: every message, in order, over a pool of 4 receives; the stream ends with the sender's close", () =>
      Effect.gen(function*() {
        const sizes = [1, 100, 4096, 7, 2048, 3000, ...Array.from({ length: 20 }, (_, i) => i + 1)]
        const received = yield* Effect.scoped(Effect.gen(function*() {
          const { client, server } = yield* cmPair
          const receiving = yield* Effect.fork(
            Stream.runCollect(RdmaStream.messages(server, { count: 4, size: 4096 }))
          )
          const src = yield* CmEndpoint.registerMessages(client, new Uint8Array(4096))
          yield* Effect.forEach(sizes, (length, i) =>
            Effect.sync(() => src.memory.fill(i + 1, 0, length)).pipe(
              Effect.zipRight(CmEndpoint.send(client, { src, length }))
            ), { discard: true })
          yield* CmEndpoint.close(client)
          return Chunk.toReadonlyArray(yield* Fiber.join(receiving))
        }))
        assert.deepStrictEqual(received.map((m) => m.length), sizes)
        received.forEach((m, i) => assert.isTrue(m.every((b) => b === i + 1), `message ${i}`))
      }))
  })

  describe("librpma connections", () => {
    it.scoped("writeRing / readRing: 20 KB through a 1 KiB ring", () =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        // librpma cannot listen on a port the system picks: one no other device test uses.
        const listener = yield* Listener.make(serverPeer, address, 18_230)
        const accepting = yield* Effect.fork(Listener.acceptNext(listener))
        const client = yield* Connection.connect(clientPeer, address, listener.port)
        yield* Fiber.join(accepting)
        const ring = yield* LocalMr.allocate(
          serverPeer,
          1024 + RdmaStream.RING_HEADER,
          Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
        )
        const remoteRing = yield* LocalMr.descriptor(ring).pipe(
          Effect.flatMap(RemoteMr.fromDescriptor),
          Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)))
        )
        const input = numbered(200, 100)
        const reader = yield* Effect.fork(readAll(ring, 20_000))
        const written = yield* Stream.fromIterable(input.parts).pipe(
          Stream.rechunk(3),
          Stream.run(RdmaStream.writeRing(clientPeer, client, { ring: remoteRing, stagingSize: 256 }))
        )
        assert.strictEqual(written, 20_000)
        assert.deepStrictEqual(yield* Fiber.join(reader), input.whole)
      }))
  })
})
