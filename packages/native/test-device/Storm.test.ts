// An interruption storm on the native driver: a program holding a peer, many regions, an endpoint
// and connections, interrupted at random points again and again. Nothing may hang, nothing may be
// left alive when it ends (without relying on garbage collection), and the memory it holds stays
// flat.
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Random from "effect/Random"
import * as Stream from "effect/Stream"
import { readdirSync } from "node:fs"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { nothingAlive } from "./support.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void

const ROUNDS = Number(process.env.STORM_ROUNDS ?? 500)
const PORT = 18400
const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

interface Sample {
  readonly round: number
  /** Bytes in use from malloc (the addon, librpma, librdmacm, libibverbs, Node itself). */
  readonly malloc: number
  /** The V8 heap in use after a full collection: fibers, scopes, handles' wrappers. */
  readonly heapUsed: number
  /** The resident set and the V8 heap's committed size, whose growth accounts for most of it. */
  readonly rss: number
  readonly heapTotal: number
  /** Open file descriptors: event channels, completion channels, uverbs. */
  readonly fds: number
}

const MiB = 2 ** 20

/** The least-squares slope of `key` against the round, per round. */
const trend = (samples: ReadonlyArray<Sample>, key: Exclude<keyof Sample, "round">): number => {
  const mean = (f: (sample: Sample) => number) => samples.reduce((sum, sample) => sum + f(sample), 0) / samples.length
  const round = mean((sample) => sample.round)
  const value = mean((sample) => sample[key])
  const covariance = mean((sample) => (sample.round - round) * (sample[key] - value))
  const variance = mean((sample) => (sample.round - round) ** 2)
  return covariance / variance
}

/** One client's life, to be cut short anywhere: its own peer, regions, a connection, writes. */
const client = (descriptor: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const log = yield* RemoteMr.fromDescriptor(descriptor).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
    const regions = yield* Effect.forEach(
      Array.from({ length: 4 }, (_, i) => i),
      () => LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
    )
    const conn = yield* Connection.connect(peer, address, PORT, { timeout: "2 seconds" })
    for (let i = 0; i < 16; i++) {
      yield* Connection.write(conn, { dst: log, dstOffset: (i % 64) * 64, src: regions[i % 4]!, length: 64 })
    }
    yield* Effect.never
  }))

describe("interruption storm (native driver)", () => {
  it.live(
    `${ROUNDS} clients interrupted at random points leave nothing alive; the resident set stays flat`,
    () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const binding = yield* RpmaBinding.load()
        const samples: Array<Sample> = []
        // V8 frees the backing stores of dead ArrayBuffers after a collection, off the main thread:
        // a collection, a pause for that, a second collection, and only then the counters.
        const sample = (round: number) =>
          Effect.sync(gc).pipe(
            Effect.zipRight(Effect.sleep("20 millis")),
            Effect.map(gc),
            Effect.map(() => record(round))
          )
        const record = (round: number) => {
          const memory = process.memoryUsage()
          samples.push({
            round,
            malloc: binding.mallocInUse() ?? Number.NaN,
            heapUsed: memory.heapUsed,
            rss: memory.rss,
            heapTotal: memory.heapTotal,
            fds: readdirSync("/proc/self/fd").length
          })
        }
        yield* Effect.scoped(Effect.gen(function*() {
          const serverPeer = yield* Peer.make(address)
          const target = yield* LocalMr.allocate(serverPeer, 4096, exposed)
          const ep = yield* Listener.make(serverPeer, address, PORT)
          yield* Listener.requests(ep, { timeout: "2 seconds" }).pipe(
            Stream.runForEach((req) =>
              Effect.forkDaemon(
                Effect.ignore(Effect.scoped(Effect.flatMap(Listener.accept(req), (c) => Connection.awaitClosed(c))))
              )
            ),
            Effect.forkScoped
          )
          const descriptor = yield* LocalMr.descriptor(target)
          for (let round = 1; round <= ROUNDS; round++) {
            const fiber = yield* Effect.fork(client(descriptor))
            // Anywhere: before the peer, among the registrations, in the connect, mid-writes, or idle.
            const yields = yield* Random.nextIntBetween(0, 200)
            for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
            if ((yield* Random.nextIntBetween(0, 3)) === 0) {
              yield* Effect.sleep(`${yield* Random.nextIntBetween(0, 30)} millis`)
            }
            const started = yield* Clock.currentTimeMillis
            yield* Fiber.interrupt(fiber)
            const took = (yield* Clock.currentTimeMillis) - started
            assert.isBelow(
              took,
              2000 + 3000,
              `round ${round}: the interruption took ${took} ms (connection timeout 2 s)`
            )
            if (round % 50 === 0) yield* sample(round)
          }
        }))
        // The server's connections end within their timeout of their clients' end.
        yield* Effect.sleep("2500 millis")
        const live = yield* driver.live
        assert.deepStrictEqual(live, nothingAlive)
        // Flat: the last sample against the one a fifth of the way in (after warm-up). A leak of one
        // descriptor per client shows as hundreds; of 1 KiB of native memory per client, as 400 KiB.
        // The resident set is not the measure: it moves with how much of the V8 heap is committed
        // (it grew by 24 MiB in one run while the heap in use grew by 0.6), and in the device suite's
        // shared process with what earlier files left to it. It may grow only by what V8 committed.
        // The growth is the least of two reads that a leak raises alike: the least-squares trend
        // over the samples from there on, times their span, and how far the floor rose (the lowest
        // of the last three samples against the lowest of the first three). A sample caught while
        // clients are mid-connect sits up to 1.7 MiB above the rest and falls back (a plain
        // last-minus-first read 2.08 MiB once); it moves the trend, never the floor.
        const warmed = samples.slice(Math.floor(samples.length / 5))
        const warm = warmed[0]!
        const last = warmed.at(-1)!
        const floor = (few: ReadonlyArray<Sample>, key: Exclude<keyof Sample, "round">) =>
          Math.min(...few.map((sample) => sample[key]))
        const growth = (key: Exclude<keyof Sample, "round">) =>
          Math.min(
            trend(warmed, key) * (last.round - warm.round),
            floor(warmed.slice(-3), key) - floor(warmed.slice(0, 3), key)
          )
        console.log(
          `storm: ${ROUNDS} rounds; from round ${warm.round} to ${last.round}: malloc ${
            (growth("malloc") / MiB).toFixed(2)
          } MiB, V8 heap in use ${(growth("heapUsed") / MiB).toFixed(2)} MiB, committed ${
            (growth("heapTotal") / MiB).toFixed(2)
          } MiB, resident set ${(growth("rss") / MiB).toFixed(2)} MiB, descriptors ${growth("fds")}`
        )
        console.log(`storm: malloc in use by round (MiB): ${
          samples.map((sample) => `${sample.round} ${(sample.malloc / MiB).toFixed(2)}`).join(", ")
        }`)
        assert.isAtMost(growth("fds"), 2, "file descriptors kept growing")
        assert.isBelow(growth("malloc"), 2 * MiB, "memory in use from malloc kept growing")
        assert.isBelow(growth("heapUsed"), 4 * MiB, "the V8 heap in use kept growing")
        assert.isBelow(
          growth("rss") - Math.max(0, growth("heapTotal")),
          16 * MiB,
          "the resident set grew beyond the V8 heap's growth"
        )
      }).pipe(Effect.provide(NativeDriver.layer)),
    { timeout: 900_000 }
  )
})
