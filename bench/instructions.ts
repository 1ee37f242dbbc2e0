/**
 * Instructions per operation of the host benches (bench/host.ts), under valgrind's callgrind:
 * stable on these shared machines where time is not. One valgrind run of node
 * (--single-threaded, so the JIT's work is counted on the one thread) runs every bench twice, a
 * warm-up and a measured stretch; callgrind dumps its counters at each mark, so a measured
 * stretch's dump holds exactly Ir(warm-up + N) - Ir(warm-up).
 *
 *   node --import tsx bench/instructions.ts [bench ...]     (also part of `pnpm bench`)
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

/** Instructions per operation of each bench measured, by name. */
export const instructions = (only: ReadonlyArray<string> = []): Map<string, number> => {
  const dir = mkdtempSync(join(tmpdir(), "callgrind-"))
  try {
    const out = execFileSync("valgrind", [
      "--tool=callgrind",
      "--dump-before=uv_loadavg",
      `--callgrind-out-file=${join(dir, "cg.out")}`,
      process.execPath,
      "--single-threaded",
      "--import",
      "tsx",
      "bench/host.ts",
      ...only
    ], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, CLOCK_SLOWDOWN: "50" }, maxBuffer: 1 << 24 })
    const measured = out.split("\n").filter((l) => l.startsWith("measured ")).map((l) => l.split(" ") as [string, string, string])
    // Dumps are cg.out.1, cg.out.2, ...: before each bench's measured stretch, then after it.
    const totals = readdirSync(dir)
      .filter((f) => /^cg\.out\.\d+$/.test(f))
      .sort((a, b) => Number(a.split(".").at(-1)) - Number(b.split(".").at(-1)))
      .map((f) => Number(/^totals: (\d+)/m.exec(readFileSync(join(dir, f), "utf8"))?.[1] ?? NaN))
    const result = new Map<string, number>()
    measured.forEach(([, name, ops], i) => result.set(name, totals[2 * i + 1]! / Number(ops)))
    return result
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

if (process.argv[1] !== undefined && /bench\/instructions\.[jt]s$/.test(process.argv[1])) {
  for (const [name, ir] of instructions(process.argv.slice(2))) console.log(`${name}\t${Math.round(ir)}`)
}
