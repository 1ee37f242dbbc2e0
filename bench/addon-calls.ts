/**
 * What the addon adds to a registration in the VM, measured against the C loop in rounds that
 * alternate (C, then the addon from plain JavaScript), so that a slow stretch of the shared host
 * lands on both; the best round of each is kept. Also cheap calls that share parts of the
 * registration's path (a handle opened and a number or a BigInt returned), per call, and a handle
 * made and released without a kernel call (a remote region from a descriptor).
 *
 *   node packages/native/.vm-build/addon-calls.mjs [rounds=5]   (bundle: bench/bundle.ts; in the VM)
 *
 * ADDON=<path to a .node file> measures that build of the addon (another commit's, say).
 */
import { RpmaBinding } from "@effect-rdma/native"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: run this inside the VM")
const rounds = Number(process.argv[2] ?? "5")
const binding = await Effect.runPromise(RpmaBinding.load(process.env.ADDON))
binding.installLogCapture()
const peer = binding.peerNew(await binding.getIbvContext(address, "local"))
// Page-aligned, as the C loop's (a 4 KiB view across two pages would pin two).
const memory = binding.allocate(4096)
const WRITE_DST = 0x08 // as the C loop's RPMA_MR_USAGE_WRITE_DST
const held = binding.mrReg(peer, memory, WRITE_DST).handle
const cProgram = process.env.MR_REG_LOOP ?? "bench/.build/mr_reg_loop"
const PAIRS = 2_000

/** Calls per second of `body`, one round of `n` (after a loop turn: the finalizers of the round before run then). */
const perSecond = async (n: number, body: () => void) => {
  await new Promise((resolve) => setImmediate(resolve))
  const t0 = performance.now()
  for (let i = 0; i < n; i++) body()
  return n / ((performance.now() - t0) / 1000)
}
const pair = () => binding.mrDereg(binding.mrReg(peer, memory, WRITE_DST).handle)
// A handle made and released with no kernel call (librpma decodes the descriptor in memory): what
// a handle object costs (its wrapper, type tag and finalizer) beside two calls.
const descriptor = binding.mrGetDescriptor(held)
const remotePair = () => binding.mrRemoteDelete(binding.mrRemoteFromDescriptor(descriptor))
await perSecond(PAIRS, pair)
const best = new Map<string, number>()
const keep = (what: string, rate: number) => best.set(what, Math.max(best.get(what) ?? 0, rate))
for (let round = 0; round < rounds; round++) {
  // The C program's own best of three rounds of PAIRS.
  keep("C", Number(execFileSync(cProgram, [address, `4096:${PAIRS}`], { encoding: "utf8" }).trim().split(" ")[1]))
  keep("addon", await perSecond(PAIRS, pair))
  keep("mrGetSize", await perSecond(10 * PAIRS, () => binding.mrGetSize(held)))
  keep("mrGetPtr", await perSecond(10 * PAIRS, () => binding.mrGetPtr(held)))
  keep("remote", await perSecond(PAIRS, remotePair))
}
const c = best.get("C")!
const line = (what: string, rate: number) =>
  console.log(`${what}: ${rate.toFixed(0)}/s, ${(1e6 / rate).toFixed(2)} µs each`)
line("C: rpma_mr_reg + rpma_mr_dereg, 4 KiB", c)
line("addon: mrReg + mrDereg from JavaScript, 4 KiB", best.get("addon")!)
console.log(
  `addon / C: ${(c / best.get("addon")!).toFixed(2)}×; the addon adds ${
    (1e6 / best.get("addon")! - 1e6 / c).toFixed(2)
  } µs per pair`
)
line("addon: mrGetSize (open a handle, return a number)", best.get("mrGetSize")!)
line("addon: mrGetPtr (open a handle, return a BigInt)", best.get("mrGetPtr")!)
line("addon: mrRemoteFromDescriptor + mrRemoteDelete (a handle made and released, no kernel call)", best.get("remote")!)
binding.mrDereg(held)
binding.peerDelete(peer)
binding.free(memory)
