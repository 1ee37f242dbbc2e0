/**
 * Resident set over many register/deregister cycles on the host: the real NativeDriver over the
 * fake binding (bench/fake.ts), so only JavaScript (core, the driver, V8) can grow. Prints RSS,
 * V8 heap and external memory after each 100,000 cycles, after a full GC.
 *
 *   node --expose-gc bench/.build/rss.mjs [cycles=1000000]   (bundled: node --import tsx bench/rss-host.ts)
 */
import { LocalMr, Peer, Usage } from "@effect-rdma/core"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { Effect, Layer } from "effect"
import * as Fake from "./fake.js"

const cycles = Number(process.argv[2] ?? "1000000")
const MiB = 2 ** 20
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {})
const sample = () => {
  gc()
  const m = process.memoryUsage()
  return { rss: m.rss / MiB, heap: m.heapUsed / MiB, committed: m.heapTotal / MiB, external: m.external / MiB }
}

const program = Effect.gen(function*() {
  const peer = yield* Peer.make("192.168.77.1")
  const memory = new Uint8Array(4096)
  const once = Effect.scoped(LocalMr.register(peer, memory, Usage.WRITE_DST))
  for (let i = 0; i < 10_000; i++) yield* once // warm-up: the JIT and the heap settle
  const start = sample()
  console.log(
    `start: rss ${start.rss.toFixed(1)} MiB, heap ${start.heap.toFixed(1)} MiB, external ${
      start.external.toFixed(1)
    } MiB`
  )
  for (let done = 0; done < cycles;) {
    for (let i = 0; i < 100_000; i++) yield* once
    done += 100_000
    const now = sample()
    console.log(
      `${done} cycles: rss +${(now.rss - start.rss).toFixed(2)} MiB, heap +${
        (now.heap - start.heap).toFixed(2)
      } MiB, ` +
        `V8 heap committed +${(now.committed - start.committed).toFixed(2)} MiB, external +${
          (now.external - start.external).toFixed(2)
        } MiB`
    )
  }
})

const layer = NativeDriver.layerWithBinding.pipe(
  Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, Fake.make().binding))
)
await Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(layer)))
