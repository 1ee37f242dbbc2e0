/**
 * The simulated driver's rows of `pnpm bench` (bench/run.ts): each a figure of ours against a
 * baseline measured in the same process, in the same run. These machines are noisy: read the
 * ratios, not the absolutes.
 *
 *   node --expose-gc --import tsx bench/simulated.ts   (these rows alone)
 */
import { Connection, Descriptor, Listener, LocalMr, Peer, RegistrationCache, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Effect, Either, Fiber } from "effect"
import { postOne } from "./driverCalls.js"
import { rawConnection } from "./raw.js"
import { printTable, rate, type Row } from "./table.js"

const address = SimulatedDriver.DEFAULT_ADDRESS

/** Runs `body` `n` times in a tight loop and returns operations per second (best of `rounds`). */
const opsPerSecond = (n: number, body: () => void, rounds = 5): number => {
  let best = 0
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now()
    for (let i = 0; i < n; i++) body()
    best = Math.max(best, n / ((performance.now() - t0) / 1000))
  }
  return best
}

const effectOpsPerSecond = <E, R>(n: number, effect: Effect.Effect<unknown, E, R>, rounds = 5) =>
  Effect.gen(function*() {
    let best = 0
    for (let r = 0; r < rounds; r++) {
      const t0 = performance.now()
      for (let i = 0; i < n; i++) yield* effect
      best = Math.max(best, n / ((performance.now() - t0) / 1000))
    }
    return best
  })

const program = Effect.gen(function*() {
  const rows: Array<Row> = []
  const peer = yield* Peer.make(address)

  // Scoped register + deregister against a bare acquireRelease of a no-op resource.
  const memory = new Uint8Array(4096)
  const bare = yield* effectOpsPerSecond(
    100_000,
    Effect.scoped(Effect.acquireRelease(Effect.succeed(1), () => Effect.void))
  )
  const pairs = yield* effectOpsPerSecond(100_000, Effect.scoped(LocalMr.register(peer, memory, Usage.WRITE_DST)))
  // Where the time goes: the simulated driver's own calls, bare, in the same acquireRelease.
  const driver = yield* Driver.RdmaDriver
  const driverOnly = yield* effectOpsPerSecond(
    100_000,
    Effect.scoped(
      Effect.acquireRelease(
        driver.mrReg(Driver.handleOf(peer), memory, Usage.WRITE_DST),
        (mr) => Effect.orDie(driver.mrDereg(mr.handle))
      )
    )
  )
  rows.push({
    what: "  breakdown: the simulated driver's rpma_mr_reg + rpma_mr_dereg alone",
    ours: rate(driverOnly, "pairs/s"),
    baseline: `${rate(bare, "pairs/s")} (bare acquireRelease)`,
    ratio: bare / driverOnly,
    target: "",
    met: undefined
  })
  rows.push({
    what: "scoped register+deregister, 4 KiB, simulated driver",
    ours: rate(pairs, "pairs/s"),
    baseline: `${rate(driverOnly, "pairs/s")} (the driver's calls alone, in a bare acquireRelease)`,
    ratio: driverOnly / pairs,
    target: "≤ 1.25×",
    met: driverOnly / pairs <= 1.25
  })

  // Connection.write against the driver's post + completion on a raw connection, both simulated.
  const serverPeer = yield* Peer.make(address)
  const target = yield* LocalMr.allocate(serverPeer, 65536, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
  const ep = yield* Listener.make(serverPeer, address, 7490)
  const accepting = yield* Effect.fork(Listener.acceptNext(ep))
  const conn = yield* Connection.connect(peer, address, 7490)
  yield* Fiber.join(accepting)
  const dst = yield* LocalMr.descriptor(target).pipe(
    Effect.flatMap((bytes) => RemoteMr.fromDescriptor(bytes)),
    Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
  )
  const src = yield* LocalMr.allocate(peer, 65536, Usage.WRITE_SRC)
  const rawConn = yield* rawConnection(driver, peer, address, 7491, {
    timeoutMs: 5000,
    sqSize: 64,
    rqSize: 64,
    cqSize: 128,
    rcqSize: 0,
    sharedCompletionChannel: false,
    directWriteToPmem: false
  })
  let id = 1
  const rawWrite = Effect.suspend(() =>
    postOne(driver, rawConn, {
      op: "write",
      id: id++,
      dst: Driver.handleOf(dst),
      dstOffset: 0,
      src: Driver.handleOf(src),
      srcOffset: 0,
      length: 64
    })
  )
  const raw = yield* effectOpsPerSecond(50_000, rawWrite)
  const written = yield* effectOpsPerSecond(
    50_000,
    Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64 })
  )
  rows.push({
    what: "Connection.write 64 B, simulated driver",
    ours: rate(written, "writes/s"),
    baseline: `${rate(raw, "writes/s")} (the driver's postMany + armCompletions on a raw connection)`,
    ratio: raw / written,
    target: "≤ 2×",
    met: raw / written <= 2
  })

  // A cache hit against an uncached registration, both scoped.
  const cache = yield* RegistrationCache.make(peer)
  const hit = yield* effectOpsPerSecond(100_000, Effect.scoped(cache.register(memory, Usage.WRITE_DST)))
  rows.push({
    what: "registration cache hit, 4 KiB, simulated driver",
    ours: rate(hit, "hits/s"),
    baseline: `${rate(pairs, "pairs/s")} (uncached)`,
    ratio: pairs / hit,
    target: "(≥ 20× faster on a device)",
    met: undefined
  })

  // Descriptor decode + validation against Buffer's own readers with no validation.
  const bytes = Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: 0x11 })
  const buf = Buffer.from(bytes)
  let sink = 0n
  const decode = opsPerSecond(2_000_000, () => {
    const d = Descriptor.validate(bytes)
    if (Either.isRight(d)) sink += d.right.length
  })
  const naive = opsPerSecond(2_000_000, () => {
    sink += buf.readBigUInt64LE(8) + buf.readBigUInt64LE(0) + BigInt(buf.readUInt32LE(16) + buf[20]!)
  })
  rows.push({
    what: "descriptor decode + validation (TypeScript)",
    ours: rate(decode, "/s"),
    baseline: `${rate(naive, "/s")} (Buffer readers, unchecked)`,
    ratio: naive / decode,
    target: "≥ 10M/s",
    met: decode >= 10_000_000
  })
  if (sink === -1n) console.log(sink)

  // Resident set growth over 1,000,000 register/deregister cycles, after a warm-up that lets the
  // heap reach its working size.
  for (let i = 0; i < 100_000; i++) yield* Effect.scoped(LocalMr.register(peer, memory, Usage.WRITE_DST))
  globalThis.gc?.()
  const before = process.memoryUsage().rss
  for (let i = 0; i < 1_000_000; i++) yield* Effect.scoped(LocalMr.register(peer, memory, Usage.WRITE_DST))
  globalThis.gc?.()
  const after = process.memoryUsage().rss
  const growth = (after - before) / 1024 / 1024
  rows.push({
    what: "RSS growth over 1,000,000 register/deregister cycles, simulated",
    ours: `${growth.toFixed(2)} MiB`,
    baseline: `${(before / 1024 / 1024).toFixed(1)} MiB at start`,
    ratio: undefined,
    target: "< 1 MiB, nothing alive",
    met: growth < 1
  })
  return rows
})

/** The simulated rows, with the ledger checked empty afterwards. */
export const simulatedRows: Effect.Effect<Array<Row>, unknown> = Effect.scoped(program).pipe(
  Effect.zipLeft(Ledger.assertEmpty),
  Effect.provide(SimulatedDriver.layer)
)

if (process.argv[1] !== undefined && /bench\/simulated\.[jt]s$/.test(process.argv[1])) {
  printTable(await Effect.runPromise(simulatedRows))
}
