/**
 * What the addon adds to a registration in the VM, measured against the C loop in rounds that
 * alternate (C, then the addon from plain JavaScript), so that a slow stretch of the shared host
 * lands on both; the best round of each is kept. Also cheap calls that share parts of the
 * registration's path (a handle opened and a number or a BigInt returned), per call.
 *
 *   node packages/native/.vm-build/addon-calls.mjs [rounds=5]   (bundle: bench/bundle.ts; in the VM)
 */
import { RpmaBinding } from "@effect-rdma/native"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: run this inside the VM")
const rounds = Number(process.argv[2] ?? "5")
const binding = await Effect.runPromise(RpmaBinding.load())
binding.installLogCapture()
const peer = binding.peerNew(await binding.getIbvContext(address, "local"))
const memory = new Uint8Array(4096)
const held = binding.mrReg(peer, memory, 0x04).handle
const cProgram = process.env.MR_REG_LOOP ?? "bench/.build/mr_reg_loop"
const PAIRS = 2_000

/** Calls per second of `body`, one round of `n` (after a loop turn: the finalizers of the round before run then). */
const perSecond = async (n: number, body: () => void) => {
  await new Promise((resolve) => setImmediate(resolve))
  const t0 = performance.now()
  for (let i = 0; i < n; i++) body()
  return n / ((performance.now() - t0) / 1000)
}
const pair = () => binding.mrDereg(binding.mrReg(peer, memory, 0x04).handle)
await perSecond(PAIRS, pair)
const best = new Map<string, number>()
const keep = (what: string, rate: number) => best.set(what, Math.max(best.get(what) ?? 0, rate))
for (let round = 0; round < rounds; round++) {
  // The C program's own best of three rounds of PAIRS.
  keep("C", Number(execFileSync(cProgram, [address, `4096:${PAIRS}`], { encoding: "utf8" }).trim().split(" ")[1]))
  keep("addon", await perSecond(PAIRS, pair))
  keep("mrGetSize", await perSecond(10 * PAIRS, () => binding.mrGetSize(held)))
  keep("mrGetPtr", await perSecond(10 * PAIRS, () => binding.mrGetPtr(held)))
}
const c = best.get("C")!
const line = (what: string, rate: number) => console.log(`${what}: ${rate.toFixed(0)}/s, ${(1e6 / rate).toFixed(2)} µs each`)
line("C: rpma_mr_reg + rpma_mr_dereg, 4 KiB", c)
line("addon: mrReg + mrDereg from JavaScript, 4 KiB", best.get("addon")!)
console.log(`addon / C: ${(c / best.get("addon")!).toFixed(2)}×; the addon adds ${(1e6 / best.get("addon")! - 1e6 / c).toFixed(2)} µs per pair`)
line("addon: mrGetSize (open a handle, return a number)", best.get("mrGetSize")!)
line("addon: mrGetPtr (open a handle, return a BigInt)", best.get("mrGetPtr")!)
binding.mrDereg(held)
binding.peerDelete(peer)
