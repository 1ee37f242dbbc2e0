/**
 * RdmaStream over librdmacm endpoints on the simulated driver: the same Sinks and Stream as over a
 * librpma connection, with write / read keys for the other side's memory and message regions for
 * staging; every resource accounted for by the leak ledger after each case.
 */
import { CmEndpoint, CmListener, RdmaStream, RemoteKey } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, type Duration, Effect, Exit, Fiber, Scope, type Sink, Stream, TestClock } from "effect"
import { concat, records } from "./streamData.js"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** How a Sink that refuses to start fails: it is run on one chunk. */
const sinkFailure = <E, R>(sink: Sink.Sink<number, Uint8Array, never, E, R>) =>
  Effect.flip(Stream.run(Stream.make(new Uint8Array(8)), sink))

/** One turn of the event loop, where the simulated fabric completes what was posted. */
const turn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

/**
 * Moves the TestClock on by `step`, a turn of the event loop each time, until `fiber` is done (the
 * test's timeout bounds it); its result.
 */
const untilDone = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, step: Duration.DurationInput) =>
  Effect.repeat(Effect.zipRight(TestClock.adjust(step), turn), { until: () => fiber.unsafePoll() !== null }).pipe(
    Effect.zipRight(Fiber.join(fiber))
  )

/** A connected pair of endpoints in the caller's scope. */
const connectedPair = Effect.gen(function*() {
  const listener = yield* CmListener.make(address, 0)
  const client = yield* CmEndpoint.make(address, listener.port)
  const connecting = yield* Effect.fork(CmEndpoint.establish(client))
  const server = yield* CmListener.next(listener)
  yield* CmListener.accept(server)
  yield* Fiber.join(connecting)
  return { client, server }
})

/** The server's memory the client may write, and its key. */
const writable = (size: number) =>
  Effect.gen(function*() {
    const pair = yield* connectedPair
    const target = yield* CmEndpoint.registerWrite(pair.server, new Uint8Array(size))
    return { ...pair, target, key: RemoteKey.make(target) }
  })

describe("RdmaStream.writeRange on a CmEndpoint", () => {
  it.effect("writes a Stream's chunks one after another into a write key's region", () =>
    inWorld(Effect.gen(function*() {
      const { client, key, target } = yield* writable(8192)
      const input = records(50, 100) // 5000 bytes through a 1 KiB staging region: several batches
      const written = yield* Stream.fromIterable(input).pipe(
        Stream.rechunk(7),
        Stream.run(RdmaStream.writeRange(client, { dst: key, offset: 10, stagingSize: 1024 }))
      )
      assert.strictEqual(written, 5000)
      assert.deepStrictEqual(target.memory.slice(10, 5010), concat(input))
      assert.strictEqual(target.memory[5010], 0)
    })))

  it.effect("a chunk that does not fit fails with RegionFullError; with wrap, the writing goes round", () =>
    inWorld(Effect.gen(function*() {
      const { client, key, target } = yield* writable(2048)
      const error = yield* Stream.fromIterable(records(5, 300)).pipe(
        Stream.run(RdmaStream.writeRange(client, { dst: key, offset: 0, length: 1000 })),
        Effect.flip
      )
      assert.strictEqual(error._tag, "RegionFullError")
      assert.include(error.message, "900 of its 1000 bytes")
      assert.deepStrictEqual(target.memory.slice(0, 900), concat(records(3, 300)))
      target.memory.fill(0)
      const input = concat(records(5, 300)) // 1500 bytes into a 1000-byte range at 100
      const written = yield* Stream.make(input.subarray(0, 300), input.subarray(300, 900), input.subarray(900)).pipe(
        Stream.run(RdmaStream.writeRange(client, { dst: key, offset: 100, length: 1000, wrap: true }))
      )
      assert.strictEqual(written, 1500)
      assert.deepStrictEqual(target.memory.slice(100, 600), input.subarray(1000, 1500))
      assert.deepStrictEqual(target.memory.slice(600, 1100), input.subarray(500, 1000))
      assert.strictEqual(target.memory[1100], 0, "nothing past the range")
    })))

  it.effect("a staging region of the caller's is used and left registered; bad options fail with StreamOptionError", () =>
    inWorld(Effect.gen(function*() {
      const { client, key, server, target } = yield* writable(4096)
      const staging = yield* CmEndpoint.registerMessages(client, new Uint8Array(256))
      for (const round of [0, 1]) {
        yield* Stream.make(new Uint8Array(600).fill(round + 1)).pipe(
          Stream.run(RdmaStream.writeRange(client, { dst: key, offset: round * 600, staging }))
        )
      }
      assert.isTrue(target.memory.subarray(0, 600).every((b) => b === 1))
      assert.isTrue(target.memory.subarray(600, 1200).every((b) => b === 2))
      const refused = (options: RdmaStream.CmRangeOptions) =>
        Stream.make(new Uint8Array(1)).pipe(Stream.run(RdmaStream.writeRange(client, options)), Effect.flip)
      const elsewhere = yield* CmEndpoint.registerMessages(server, new Uint8Array(256))
      const cases: Array<[RdmaStream.CmRangeOptions, string, string]> = [
        [{ dst: key, staging: elsewhere }, "staging", "of the Sink's endpoint"],
        [{ dst: key, staging, stagingSize: 10 }, "staging", "exclusive"],
        [{ dst: key, offset: 4000, length: 200 }, "offset/length", "within the 4096-byte region"],
        [{ dst: key, flush: "visibility" } as never, "flush", "librpma's (rpma_flush)"]
      ]
      for (const [options, option, detail] of cases) {
        const error = yield* refused(options)
        assert.strictEqual(error._tag, "StreamOptionError")
        if (error._tag === "StreamOptionError") {
          assert.strictEqual(error.option, option)
          assert.include(error.message, detail)
        }
      }
    })))
})

describe("RdmaStream.writeRing / readRing on CmEndpoints", () => {
  /** The reader's ring: its memory registered for the writer's writes and for its reads. */
  const ringPair = (size: number) =>
    Effect.gen(function*() {
      const { client, server } = yield* connectedPair
      const memory = new Uint8Array(size)
      const ring = yield* CmEndpoint.registerWrite(server, memory)
      const headRegion = yield* CmEndpoint.registerRead(server, memory)
      return { client, ring, key: RemoteKey.make(ring), head: RemoteKey.make(headRegion) }
    })

  it.effect("readRing on a region whose scope closed, before or while it reads, fails with StreamOptionError, never polls on", () =>
    inWorld(Effect.gen(function*() {
      const { server } = yield* connectedPair
      const memory = new Uint8Array(256 + RdmaStream.RING_HEADER)
      const before = yield* Effect.scoped(CmEndpoint.registerWrite(server, memory))
      const early = yield* Effect.flip(Stream.runDrain(RdmaStream.readRing(before)))
      assert.strictEqual(early._tag, "StreamOptionError")
      assert.include(early.message, "ring was released")
      const scope = yield* Scope.make()
      const during = yield* CmEndpoint.registerWrite(server, memory).pipe(Scope.extend(scope))
      const reading = yield* Effect.fork(Effect.flip(Stream.runDrain(RdmaStream.readRing(during))))
      yield* TestClock.adjust("5 millis")
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust("5 millis")
      const late = yield* Fiber.join(reading)
      assert.strictEqual(late._tag, "StreamOptionError")
      assert.include(late.message, "released while the Stream read it")
    })))

  it.effect("carries 20 KB through a 1 KiB ring, wrapping, the reader freeing space (TestClock drives the polls)", () =>
    inWorld(Effect.gen(function*() {
      const { client, head, key, ring } = yield* ringPair(1024 + RdmaStream.RING_HEADER)
      const input = records(200, 100)
      const reader = yield* RdmaStream.readRing(ring).pipe(
        Stream.mapConcat((bytes) => Array.from(bytes)),
        Stream.take(20_000),
        Stream.runCollect,
        Effect.fork
      )
      const writer = yield* Stream.fromIterable(input).pipe(
        Stream.rechunk(3),
        Stream.run(RdmaStream.writeRing(client, { ring: key, head, stagingSize: 256 })),
        Effect.fork
      )
      assert.strictEqual(yield* untilDone(writer, "1 millis"), 20_000)
      const read = yield* untilDone(reader, "1 millis")
      assert.deepStrictEqual(Uint8Array.from(Chunk.toReadonlyArray(read)), concat(input))
    })))

  it.effect("a reader that never reads: RingStalledError at the TestClock's stallTimeout; a bad head key is refused", () =>
    inWorld(Effect.gen(function*() {
      const { client, head, key, ring } = yield* ringPair(1000 + RdmaStream.RING_HEADER)
      const writer = yield* Stream.fromIterable(records(20, 100)).pipe(
        Stream.run(
          RdmaStream.writeRing(client, { ring: key, head, stallTimeout: "5 seconds", pollInterval: "1 second" })
        ),
        Effect.flip,
        Effect.fork
      )
      const error = yield* untilDone(writer, "1 second")
      assert.strictEqual(error._tag, "RingStalledError")
      assert.include(error.message, "left 1000 bytes unread")
      assert.strictEqual(new DataView(ring.memory.buffer, ring.memory.byteOffset).getBigUint64(0, true), 1000n)
      const other = yield* CmEndpoint.registerRead(ring.endpoint, new Uint8Array(256))
      const refused = yield* Stream.make(new Uint8Array(1)).pipe(
        Stream.run(RdmaStream.writeRing(client, { ring: key, head: RemoteKey.make(other) })),
        Effect.flip
      )
      assert.strictEqual(refused._tag, "StreamOptionError")
      assert.include(refused.message, "read key of the ring's own memory")
    })))
})

describe("RdmaStream's Sinks on a CmEndpoint given no options or no key", () => {
  it.effect("each fails with StreamOptionError saying what to give, never a defect", () =>
    inWorld(Effect.gen(function*() {
      const { client } = yield* connectedPair
      type Bad = never
      const failures = [
        ["options must be an object naming dst", sinkFailure(RdmaStream.writeRange(client, undefined as Bad))],
        ["dst must be a RemoteKey", sinkFailure(RdmaStream.writeRange(client, { dst: 7 } as Bad))],
        ["options must be an object naming ring", sinkFailure(RdmaStream.writeRing(client, null as Bad))],
        ["ring must be a RemoteKey", sinkFailure(RdmaStream.writeRing(client, {} as Bad))]
      ] as const
      for (const [words, failure] of failures) {
        const error = yield* failure
        assert.strictEqual(error._tag, "StreamOptionError", words)
        assert.include(error.message, words)
      }
    })))
})

describe("RdmaStream.messages on a CmEndpoint", () => {
  it.effect("delivers every message, a copy each, over a pool smaller than the traffic; ends when the other side closes", () =>
    inWorld(Effect.gen(function*() {
      const sizes = [1, 100, 4096, 7, 0, 2048, 3000, ...Array.from({ length: 20 }, (_, i) => i + 1)]
      const receiving = yield* Effect.scoped(Effect.gen(function*() {
        const { client, server } = yield* connectedPair
        const receiving = yield* RdmaStream.messages(server, { count: 4, size: 4096 }).pipe(
          Stream.runCollect,
          Effect.fork
        )
        const src = yield* CmEndpoint.registerMessages(client, new Uint8Array(4096))
        yield* Effect.forEach(sizes, (length, i) =>
          Effect.sync(() => src.memory.fill(i + 1, 0, length)).pipe(
            Effect.zipRight(CmEndpoint.send(client, { src, length }))
          ), { discard: true })
        yield* CmEndpoint.close(client)
        return yield* Fiber.join(receiving)
      }))
      const received = Chunk.toReadonlyArray(receiving)
      assert.deepStrictEqual(received.map((m) => m.length), sizes)
      received.forEach((m, i) => assert.isTrue(m.every((b) => b === i + 1), `message ${i}`))
    })))
})
