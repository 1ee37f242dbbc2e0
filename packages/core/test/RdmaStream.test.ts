/**
 * RdmaStream on the simulated fabric: Sinks into a remote range and ring, a Stream of received
 * messages, their backpressure, and what interruption leaves (nothing, once the scope closes).
 */
import { Connection, Listener, LocalMr, Peer, RdmaStream, RemoteMr, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import {
  Chunk,
  Clock,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Scope,
  type Sink,
  Stream,
  TestClock,
  TestServices
} from "effect"
import { concat, records } from "./streamData.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const pair = () => Conformance.connectedPair(address, 7471)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** How a Sink that refuses to start fails: it is run on one chunk. */
const sinkFailure = <E, R>(sink: Sink.Sink<number, Uint8Array, never, E, R>) =>
  Effect.flip(Stream.run(Stream.make(new Uint8Array(8)), sink))

describe("RdmaStream.writeRange", () => {
  it.effect("a staging region already released is a StreamOptionError on both Sinks, not a defect", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, serverPeer } = yield* pair()
      const ringMr = yield* LocalMr.allocate(
        serverPeer,
        RdmaStream.RING_HEADER + 1024,
        Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
      )
      const ring = yield* LocalMr.descriptor(ringMr).pipe(
        Effect.flatMap(RemoteMr.fromDescriptor),
        Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)))
      )
      const released = yield* Effect.scoped(LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC))
      const range = yield* sinkFailure(RdmaStream.writeRange(clientPeer, client, { dst: remote, staging: released }))
      const toRing = yield* sinkFailure(RdmaStream.writeRing(clientPeer, client, { ring, staging: released }))
      for (const error of [range, toRing]) {
        assert.strictEqual(error._tag, "StreamOptionError")
        assert.include(error.message, "staging was released")
      }
    })))

  it.effect("writes a Stream's chunks one after another and ends with the bytes written", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const input = records(50, 100) // 5000 bytes through a 1 KiB staging region: several batches
      const written = yield* Stream.fromIterable(input).pipe(
        Stream.rechunk(7),
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset: 10, stagingSize: 1024 }))
      )
      assert.strictEqual(written, 5000)
      assert.deepStrictEqual(target.memory.slice(10, 5010), concat(input))
      assert.strictEqual(target.memory[5010], 0)
    })))

  it.effect("a chunk that does not fit fails with RegionFullError after everything before it is written", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const error = yield* Stream.fromIterable(records(5, 300)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset: 0, length: 1000 })),
        Effect.flip
      )
      assert.strictEqual(error._tag, "RegionFullError")
      assert.include(error.message, "900 of its 1000 bytes")
      assert.deepStrictEqual(target.memory.slice(0, 900), concat(records(3, 300)))
      assert.strictEqual(target.memory[900], 0)
    })))

  it.effect("with wrap, the writing goes on from the range's start; a chunk larger than the range still fails", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const input = concat(records(5, 300)) // 1500 bytes into a 1000-byte range at 100
      const written = yield* Stream.make(input.subarray(0, 300), input.subarray(300, 900), input.subarray(900)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset: 100, length: 1000, wrap: true }))
      )
      assert.strictEqual(written, 1500)
      // The last 500 bytes went round to the range's start; the bytes 500-999 stay where they went.
      assert.deepStrictEqual(target.memory.slice(100, 600), input.subarray(1000, 1500))
      assert.deepStrictEqual(target.memory.slice(600, 1100), input.subarray(500, 1000))
      assert.strictEqual(target.memory[1100], 0, "nothing past the range")
      const error = yield* Stream.make(new Uint8Array(1001)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset: 100, length: 1000, wrap: true })),
        Effect.flip
      )
      assert.strictEqual(error._tag, "RegionFullError")
    })))

  it.effect("with flush, each chunk is flushed once its writes complete: one rpma_flush per chunk, of the type asked", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, serverPeer, target } = yield* pair()
      const flushes = SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_flush")))
      const before = yield* flushes
      const input = records(6, 100)
      const written = yield* Stream.fromIterable(input).pipe(
        Stream.rechunk(2),
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, flush: "visibility" }))
      )
      assert.strictEqual(written, 600)
      assert.strictEqual((yield* flushes) - before, 3, "a flush per chunk of two records")
      assert.deepStrictEqual(target.memory.slice(0, 600), concat(input))
      // A persistent flush needs a connection that allows it: the Sink fails as the flush does.
      const pmem = yield* LocalMr.allocate(
        serverPeer,
        4096,
        Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)
      )
      const durable = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(pmem)).pipe(
        Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)))
      )
      const error = yield* Stream.make(new Uint8Array(8)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: durable, flush: "persistent" })),
        Effect.flip
      )
      assert.strictEqual(error._tag, "RpmaNoSupportError")
    })))

  it.effect("a staging region of the caller's is reused by one Sink after another, and left registered", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, serverPeer, target } = yield* pair()
      const staging = yield* LocalMr.allocate(clientPeer, 256, Usage.WRITE_SRC)
      const registrations = SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_mr_reg")))
      const before = yield* registrations
      for (const [i, offset] of [0, 1000].entries()) {
        const written = yield* Stream.fromIterable(records(4, 100 + i)).pipe(
          Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset, staging }))
        )
        assert.strictEqual(written, 4 * (100 + i))
        assert.strictEqual(yield* registrations, before, "no region registered by the Sink")
      }
      assert.deepStrictEqual(target.memory.slice(1000, 1404), concat(records(4, 101)))
      const refusal = (options: Partial<RdmaStream.RangeSettings>) =>
        Stream.make(new Uint8Array(1)).pipe(
          Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, ...options })),
          Effect.flip,
          Effect.map((error) => error.message)
        )
      assert.include(yield* refusal({ staging, stagingSize: 64 }), "staging and stagingSize are exclusive")
      const elsewhere = yield* LocalMr.allocate(serverPeer, 256, Usage.WRITE_SRC)
      assert.include(yield* refusal({ staging: elsewhere }), "staging must be a region of the Sink's peer")
      const readOnly = yield* LocalMr.allocate(clientPeer, 256, Usage.READ_DST)
      assert.include(
        yield* refusal({ staging: readOnly as never }),
        "staging must be a LocalMr registered with Usage.WRITE_SRC"
      )
    })))

  it.effect("backpressure: the next chunk is pulled only once the previous one is written", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const input = records(40, 64)
      const lagging: Array<number> = []
      yield* Stream.fromIterable(input).pipe(
        Stream.rechunk(1),
        Stream.zipWithIndex,
        Stream.tap(([, i]) =>
          Effect.sync(() => {
            // When record i is pulled, record i - 1 is already in the remote memory.
            if (i > 0 && target.memory[(i - 1) * 64 + 63] !== ((i - 1) % 250) + 1) lagging.push(i)
          })
        ),
        Stream.map(([bytes]) => bytes),
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, stagingSize: 128 }))
      )
      assert.deepStrictEqual(lagging, [])
    })))

  it.effect("bad options fail with StreamOptionError naming the option", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* pair()
      const outside = yield* Stream.make(new Uint8Array(1)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, offset: 65000, length: 1000 })),
        Effect.flip
      )
      assert.strictEqual(outside._tag, "StreamOptionError")
      assert.include(outside.message, "offset/length")
      const staging = yield* Stream.make(new Uint8Array(1)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, stagingSize: 0 })),
        Effect.flip
      )
      assert.include(staging.message, "stagingSize must be a positive integer")
      const flush = yield* Stream.make(new Uint8Array(1)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, flush: "sometimes" } as never)),
        Effect.flip
      )
      assert.include(flush.message, `flush must be "visibility" or "persistent"`)
      const wrap = yield* Stream.make(new Uint8Array(1)).pipe(
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote, wrap: "yes" } as never)),
        Effect.flip
      )
      assert.include(wrap.message, "wrap must be a boolean")
    })))

  it.effect("interrupted while waiting for its next chunk: nothing stays registered once the scope closes", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const written = yield* Deferred.make<void>()
      const fiber = yield* Stream.make(new Uint8Array(512).fill(9)).pipe(
        // Pulled only once the Sink has written the first chunk.
        Stream.concat(Stream.drain(Stream.fromEffect(Deferred.succeed(written, undefined)))),
        Stream.concat(Stream.never),
        Stream.run(RdmaStream.writeRange(clientPeer, client, { dst: remote })),
        Effect.fork
      )
      yield* Deferred.await(written)
      assert.strictEqual(target.memory[511], 9)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      // Ledger.checked then checks that the staging region went with the scope.
    })))
})

/** The reader's ring: a region of its own, registered WRITE_DST and READ_SRC, its descriptor handed to the writer. */
const ringPair = (dataSize: number) =>
  Effect.gen(function*() {
    const p = yield* pair()
    const ring = yield* LocalMr.allocate(
      p.serverPeer,
      RdmaStream.RING_HEADER + dataSize,
      Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
    )
    const remoteRing = yield* LocalMr.descriptor(ring).pipe(
      Effect.flatMap(RemoteMr.fromDescriptor),
      Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)))
    )
    return { ...p, ring, remoteRing }
  })

describe("RdmaStream.writeRing / readRing", () => {
  it.live(
    "carries 20 KB through a 1 KiB ring, wrapping, with the reader freeing space",
    () =>
      inWorld(Effect.gen(function*() {
        const { client, clientPeer, remoteRing, ring } = yield* ringPair(1024)
        const input = records(200, 100)
        const reader = yield* RdmaStream.readRing(ring).pipe(
          Stream.mapConcat((bytes) => Array.from(bytes)),
          Stream.take(20_000),
          Stream.runCollect,
          Effect.fork
        )
        const written = yield* Stream.fromIterable(input).pipe(
          Stream.rechunk(3),
          Stream.run(RdmaStream.writeRing(clientPeer, client, { ring: remoteRing, stagingSize: 256 }))
        )
        assert.strictEqual(written, 20_000)
        const read = yield* Fiber.join(reader)
        assert.deepStrictEqual(Uint8Array.from(Chunk.toReadonlyArray(read)), concat(input))
      })),
    30_000
  )

  it.live(
    "a reader that never reads: RingStalledError after stallTimeout, naming the unread bytes",
    () =>
      inWorld(Effect.gen(function*() {
        const { client, clientPeer, remoteRing, ring } = yield* ringPair(1000)
        const error = yield* Stream.fromIterable(records(20, 100)).pipe(
          Stream.run(RdmaStream.writeRing(clientPeer, client, { ring: remoteRing, stallTimeout: "50 millis" })),
          Effect.flip
        )
        assert.strictEqual(error._tag, "RingStalledError")
        assert.include(error.message, "left 1000 bytes unread")
        // Everything that fitted was published: the tail word says 1000.
        assert.strictEqual(new DataView(ring.memory.buffer, ring.memory.byteOffset).getBigUint64(0, true), 1000n)
      })),
    30_000
  )
})

describe("RdmaStream.writeRing / readRing: bad options", () => {
  it.effect("readRing on a ring whose region was released, before or while it reads: StreamOptionError, never a defect or an endless poll", () =>
    inWorld(Effect.gen(function*() {
      const { serverPeer } = yield* pair()
      const usage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
      const before = yield* Effect.scoped(LocalMr.allocate(serverPeer, RdmaStream.RING_HEADER + 64, usage))
      const early = yield* Effect.flip(Stream.runDrain(RdmaStream.readRing(before)))
      assert.strictEqual(early._tag, "StreamOptionError")
      assert.include(early.message, "ring was released")
      const scope = yield* Scope.make()
      // Plain memory this time: released, it stays attached (only the region's scope says it is gone).
      const during = yield* LocalMr.register(serverPeer, new Uint8Array(RdmaStream.RING_HEADER + 64), usage).pipe(
        Scope.extend(scope)
      )
      const reading = yield* Effect.fork(Effect.flip(Stream.runDrain(RdmaStream.readRing(during))))
      yield* TestClock.adjust("5 millis")
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust("5 millis")
      const late = yield* Fiber.join(reading)
      assert.strictEqual(late._tag, "StreamOptionError")
      assert.include(late.message, "released while the Stream read it")
    })))

  it.effect("a duration that is none, or no ring, fails with StreamOptionError naming it, never thrown", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remoteRing, ring } = yield* ringPair(1024)
      type Bad = never
      for (
        const [option, settings] of [
          ["pollInterval", { pollInterval: "soon" as Bad }],
          ["pollInterval", { pollInterval: Duration.infinity }],
          ["stallTimeout", { stallTimeout: -5 }]
        ] as const
      ) {
        const error = yield* Stream.make(new Uint8Array(8)).pipe(
          Stream.run(RdmaStream.writeRing(clientPeer, client, { ring: remoteRing, ...settings })),
          Effect.flip
        )
        assert.strictEqual(error._tag, "StreamOptionError")
        assert.match(error.message, new RegExp(`${option} must be a (finite )?duration`))
      }
      const reading = [
        RdmaStream.readRing(ring, { pollInterval: "soon" as Bad }),
        RdmaStream.readRing(null as Bad),
        RdmaStream.readRing(5 as Bad)
      ]
      for (const stream of reading) {
        const error = yield* Effect.flip(Stream.runDrain(stream))
        assert.strictEqual(error._tag, "StreamOptionError")
      }
    })))
})

describe("RdmaStream's Sinks and readRing given no options, no region, or options that cannot be read", () => {
  it.effect("each fails with StreamOptionError saying what to give, never a defect; nothing is left", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer } = yield* pair()
      type Bad = never
      const trap = new Proxy({}, {
        get: (_, key) => {
          throw new Error(`no ${String(key)} here`)
        }
      }) as Bad
      const failures = [
        [
          "options must be an object naming dst",
          sinkFailure(RdmaStream.writeRange(clientPeer, client, undefined as Bad))
        ],
        ["options must be an object naming dst", sinkFailure(RdmaStream.writeRange(clientPeer, client, null as Bad))],
        ["dst must be a RemoteMr", sinkFailure(RdmaStream.writeRange(clientPeer, client, {} as Bad))],
        [
          "offset could not be read (it threw: no offset here)",
          sinkFailure(RdmaStream.writeRange(clientPeer, client, trap))
        ],
        ["options must be an object naming ring", sinkFailure(RdmaStream.writeRing(clientPeer, client, 5 as Bad))],
        ["ring must be a RemoteMr", sinkFailure(RdmaStream.writeRing(clientPeer, client, { ring: {} } as Bad))],
        ["stagingSize could not be read", sinkFailure(RdmaStream.writeRing(clientPeer, client, trap))]
      ] as const
      for (const [words, failure] of failures) {
        const error = yield* failure
        assert.strictEqual(error._tag, "StreamOptionError", words)
        assert.include(error.message, words)
      }
      const streams = [
        ["ring must be a region", RdmaStream.readRing(trap)],
        ["count could not be read", RdmaStream.messages(clientPeer, client, trap)]
      ] as const
      for (const [words, stream] of streams) {
        const error = yield* Effect.flip(Stream.runDrain(stream))
        assert.strictEqual(error._tag, "StreamOptionError", words)
        assert.include(error.message, words)
      }
    })))
})

describe("RdmaStream.writeRing: time", () => {
  it.effect("under TestClock, the test's clock decides when a reader that never reads has stalled the ring", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remoteRing } = yield* ringPair(1000)
      const writer = yield* Stream.fromIterable(records(20, 100)).pipe(
        Stream.run(
          RdmaStream.writeRing(clientPeer, client, {
            ring: remoteRing,
            stallTimeout: "10 seconds",
            pollInterval: "1 second"
          })
        ),
        Effect.flip,
        Effect.fork
      )
      // The test's clock moves a second at a time (the writer's polls in between run on the fabric).
      yield* Effect.fork(
        Effect.forever(
          Effect.zipRight(TestClock.adjust("1 second"), TestServices.provideLive(Effect.sleep("2 millis")))
        )
      )
      const error = yield* Fiber.join(writer).pipe(
        Effect.raceFirst(
          Effect.zipRight(
            TestServices.provideLive(Effect.sleep("10 seconds")),
            Effect.dieMessage("no stall in 10 s of wall-clock time")
          )
        )
      )
      assert.strictEqual(error._tag, "RingStalledError")
      assert.isAtLeast(yield* Clock.currentTimeMillis, 10_000)
    })))
})

describe("RdmaStream.writeRing: interruption", () => {
  it.live(
    "interrupted while the ring is full: nothing stays registered once the scope closes",
    () =>
      inWorld(Effect.gen(function*() {
        const { client, clientPeer, remoteRing, ring } = yield* ringPair(256)
        const fiber = yield* Stream.fromIterable(records(10, 100)).pipe(
          Stream.run(RdmaStream.writeRing(clientPeer, client, { ring: remoteRing })),
          Effect.fork
        )
        // The writer has filled the ring (its tail word says so) and waits for room.
        const tail = () => new DataView(ring.memory.buffer, ring.memory.byteOffset).getBigUint64(0, true)
        yield* Effect.sleep("1 millis").pipe(Effect.repeat({ until: () => tail() > 0n }), Effect.timeout("10 seconds"))
        const exit = yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
      })),
    30_000
  )
})

describe("RdmaStream.messages", () => {
  /** Sends message i (`sizes[i]` bytes of i + 1) one after another, counting each completed send. */
  const sendAll = (
    conn: Connection.Connection,
    src: LocalMr.LocalMr<"SEND">,
    sizes: ReadonlyArray<number>,
    sent: { n: number }
  ) =>
    Effect.forEach(sizes, (length, i) =>
      Effect.sync(() => src.memory.fill(i + 1, 0, length)).pipe(
        Effect.zipRight(Connection.send(conn, { src, length })),
        Effect.zipRight(Effect.sync(() => sent.n++))
      ), { discard: true })

  /** A server connection in the caller's scope, and a client connection whose scope `use` runs in. */
  const withClient = <A, E, R>(
    use: (
      client: Connection.Connection,
      clientPeer: Peer.Peer,
      server: Connection.Connection,
      serverPeer: Peer.Peer
    ) => Effect.Effect<A, E, R>
  ) =>
    Effect.gen(function*() {
      const serverPeer = yield* Peer.make(address)
      const clientPeer = yield* Peer.make(address)
      const ep = yield* Listener.make(serverPeer, address, 7471)
      const accepting = yield* Effect.fork(Listener.acceptNext(ep))
      return yield* Effect.scoped(Effect.gen(function*() {
        const client = yield* Connection.connect(clientPeer, address, ep.port)
        const server = yield* Fiber.join(accepting)
        return yield* use(client, clientPeer, server, serverPeer)
      }))
    })

  it.effect("delivers every message, a copy each, and ends when the other side closes", () =>
    inWorld(Effect.gen(function*() {
      const sizes = [1, 100, 4096, 7, 0, 2048, 3000, ...Array.from({ length: 20 }, (_, i) => i + 1)]
      const receiving = yield* withClient((client, clientPeer, server, serverPeer) =>
        Effect.gen(function*() {
          const receiving = yield* RdmaStream.messages(serverPeer, server, { count: 4, size: 4096 }).pipe(
            Stream.runCollect,
            Effect.fork
          )
          const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.SEND)
          yield* sendAll(client, src, sizes, { n: 0 })
          return receiving
        })
      )
      // The client's connection closed with its scope: the server's stream ended.
      const received = Chunk.toReadonlyArray(yield* Fiber.join(receiving))
      assert.deepStrictEqual(received.map((m) => m.length), sizes)
      received.forEach((m, i) => assert.isTrue(m.every((b) => b === i + 1), `message ${i}`))
    })))

  it.live(
    "backpressure: a consumer that stops holds the sender at the pool's size",
    () =>
      inWorld(withClient((client, clientPeer, server, serverPeer) =>
        Effect.gen(function*() {
          const count = 4
          const sent = { n: 0 }
          const src = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
          const messages = yield* Stream.toPull(RdmaStream.messages(serverPeer, server, { count, size: 64 }))
          const sender = yield* Effect.fork(sendAll(client, src, Array.from({ length: 30 }, () => 8), sent))
          // The stream posts its receives when first pulled: one message taken, `count` receives posted
          // again, so 1 + `count` sends complete and the next one waits for a receive.
          yield* messages
          yield* Effect.sleep("1 millis").pipe(
            Effect.repeat({ until: () => sent.n >= 1 + count }),
            Effect.timeout("10 seconds")
          )
          assert.strictEqual(sent.n, 1 + count)
          // And no more can: a send completes only into a receive, and the stream has posted no other.
          const control = yield* SimulatedDriver.SimulationControl
          assert.strictEqual(yield* control.calls("rpma_recv"), 1 + count, "receives posted")
          // Consumed one at a time: never more than `count` ahead of the consumer.
          for (let consumed = 2; consumed <= 30; consumed++) {
            yield* messages
            assert.isAtMost(sent.n, consumed + count)
          }
          yield* Fiber.join(sender)
          assert.strictEqual(sent.n, 30)
        }).pipe(Effect.scoped)
      )),
    30_000
  )

  it.effect("interrupted while waiting: nothing stays posted or registered once the connection ends", () =>
    inWorld(withClient((_client, _clientPeer, server, serverPeer) =>
      Effect.gen(function*() {
        const fiber = yield* RdmaStream.messages(serverPeer, server, { count: 8, size: 256 }).pipe(
          Stream.runDrain,
          Effect.fork
        )
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(fiber)
        // Ledger.checked then checks that the receive region went with the connection.
      })
    )))

  it.effect("bad options fail with StreamOptionError", () =>
    inWorld(withClient((_client, _clientPeer, server, serverPeer) =>
      Effect.gen(function*() {
        const error = yield* RdmaStream.messages(serverPeer, server, { count: 0 }).pipe(Stream.runDrain, Effect.flip)
        assert.strictEqual(error._tag, "StreamOptionError")
        assert.include(error.message, "count must be a positive integer, got 0")
      })
    )))
})
