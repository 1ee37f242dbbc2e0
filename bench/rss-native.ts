/**
 * Where the native driver's resident-set growth lives, in the VM (bench/device.sh's environment):
 * rpma_mr_reg + rpma_mr_dereg through the raw addon from plain JavaScript (no Effect, no core),
 * RSS and V8 heap after a full GC every 50,000 cycles, measured twice: at once (the handles'
 * native finalizers are still queued: Node runs them on a later event-loop turn) and after the
 * event loop has turned (they have run). Growth left after the turn is native memory kept.
 *
 *   node --expose-gc packages/native/.vm-build/rss-native.mjs [cycles=300000]
 */
import { RpmaBinding } from "@effect-rdma/native"
import { Effect } from "effect"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: run this inside the VM")
const cycles = Number(process.argv[2] ?? "300000")
const MiB = 2 ** 20
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {})
const binding = await Effect.runPromise(RpmaBinding.load())
binding.installLogCapture()
const peer = binding.peerNew(await binding.getIbvContext(address, "local"))
const memory = new Uint8Array(4096)
const cycle = () => binding.mrDereg(binding.mrReg(peer, memory, 0x04).handle)
for (let i = 0; i < 10_000; i++) cycle()
gc()
await new Promise((resolve) => setImmediate(resolve))
gc()
const start = process.memoryUsage()
console.log(`start: rss ${(start.rss / MiB).toFixed(1)} MiB, V8 committed ${(start.heapTotal / MiB).toFixed(1)} MiB`)
const turn = () => new Promise((resolve) => setImmediate(resolve))
for (let done = 0; done < cycles;) {
  for (let i = 0; i < 50_000; i++) cycle()
  done += 50_000
  gc()
  const queued = process.memoryUsage().rss
  for (let i = 0; i < 3; i++) {
    await turn()
    gc()
  }
  const m = process.memoryUsage()
  console.log(
    `${done} raw cycles: rss before the finalizers run +${((queued - start.rss) / MiB).toFixed(2)} MiB, after +${
      ((m.rss - start.rss) / MiB).toFixed(2)
    } MiB, V8 used +${((m.heapUsed - start.heapUsed) / MiB).toFixed(2)}, committed +${
      ((m.heapTotal - start.heapTotal) / MiB).toFixed(2)
    }, external +${
      ((m.external - start.external) / MiB).toFixed(2)
    } MiB, live regions ${binding.liveHandles().localRegions}`
  )
}
binding.peerDelete(peer)
