/**
 * Instructions per operation of the host benches (bench/host.ts, bundled), under valgrind's callgrind:
 * stable on these shared machines where time is not. One valgrind run of node
 * (--single-threaded, so the JIT's work is counted on the one thread) runs every bench N times to
 * warm up, then three measured stretches of N; callgrind dumps its counters at each mark, so a
 * stretch's dump holds exactly Ir(warm-up + N) - Ir(warm-up); the least of the three is taken.
 *
 *   node --import tsx bench/instructions.ts [bench ...]     (also part of `pnpm bench`)
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { bundle } from "./bundle.js"
import type { Row } from "./table.js"

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
      bundle(),
      ...only
    ], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      env: { ...process.env, CLOCK_SLOWDOWN: "50" },
      maxBuffer: 1 << 24
    })
    const measured = out.split("\n").filter((l) => l.startsWith("measured ")).map((l) =>
      l.split(" ") as [string, string, string]
    )
    // Dumps are cg.out.1, cg.out.2, ...: for each bench, three pairs (up to a mark, then a measured
    // stretch); the least of its three stretches is taken (a major GC or a JIT tier-up can land in one).
    const totals = readdirSync(dir)
      .filter((f) => /^cg\.out\.\d+$/.test(f))
      .sort((a, b) => Number(a.split(".").at(-1)) - Number(b.split(".").at(-1)))
      .map((f) => Number(/^totals: (\d+)/m.exec(readFileSync(join(dir, f), "utf8"))?.[1] ?? NaN))
    const result = new Map<string, number>()
    measured.forEach(([, name, ops], i) => {
      const stretches = [0, 1, 2].map((s) => totals[6 * i + 2 * s + 1]!)
      result.set(name, Math.min(...stretches) / Number(ops))
    })
    return result
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The host rows again, in instructions per operation (callgrind), each ratio from the same run. */
export const instructionRows = (ir: ReadonlyMap<string, number>): Array<Row> => {
  const k = (x: number) => `${(x / 1000).toFixed(1)}k`
  const get = (name: string) => ir.get(name) ?? NaN
  const ratio = (
    ours: string,
    base: string,
    what: string,
    baseline: string,
    target: string,
    limit: number | undefined
  ) => ({
    what,
    ours: k(get(ours)),
    baseline: `${k(get(base))} (${baseline})`,
    ratio: get(ours) / get(base),
    target,
    met: limit === undefined ? undefined : get(ours) / get(base) <= limit
  })
  const over = get("write.queued") - get("write.raw")
  return [
    ratio(
      "reg.scoped",
      "reg.bare",
      "instructions: scoped registration (LocalMr.register)",
      "bare acquireRelease of mrReg + mrDereg",
      "≤ 1.2×",
      1.2
    ),
    ratio("use", "use.bare", "instructions: LocalMr.use", "bare acquireUseRelease of the same calls", "≤ 1.2×", 1.2),
    ratio(
      "use",
      "use.bareNow",
      "  breakdown: LocalMr.use over the synchronous calls",
      "bare acquireUseRelease of mrReg.now + mrDereg.now",
      "",
      undefined
    ),
    ratio(
      "cache.scoped",
      "reg.scoped",
      "instructions: registration-cache hit, scoped",
      "uncached LocalMr.register",
      "",
      undefined
    ),
    ratio("cache.use", "use", "instructions: registration-cache hit, cache.use", "uncached LocalMr.use", "", undefined),
    {
      what: "instructions: Connection.write, completion queued (over the raw call)",
      ours: `${k(get("write.queued"))} (+${k(over)})`,
      baseline: `${k(get("write.raw"))} (binding.post + pollCompletions from JS)`,
      ratio: get("write.queued") / get("write.raw"),
      target: "≤ +20k",
      met: over <= 20_000
    },
    ratio("write.driver", "write.raw", "  breakdown: the driver's postMany + pollCompletions", "raw", "", undefined),
    ratio(
      "write.postMany",
      "write.raw",
      "  breakdown: the driver's postMany (post + poll) from JS",
      "raw",
      "",
      undefined
    ),
    ratio("loop.void", "write.raw", "  breakdown: the loop alone (yield* Effect.void)", "raw", "", undefined),
    ratio(
      "write.later",
      "write.callback",
      "instructions: Connection.write, completion on a later turn",
      "binding from JS callbacks",
      "≤ 2.5×",
      2.5
    ),
    ratio(
      "batch.queued",
      "batch.raw",
      "instructions: Connection.writeMany ×16, completions queued, per write",
      "binding from JS",
      "(≤ 1 µs)",
      undefined
    ),
    ratio(
      "batch.later",
      "batch.callback",
      "instructions: Connection.writeMany ×16, later turn, per write",
      "binding from JS callbacks",
      "(≤ 1 µs)",
      undefined
    ),
    ratio(
      "batch.forEach",
      "batch.callback",
      "  breakdown: 16 Connection.write in Effect.forEach, per write",
      "binding from JS callbacks",
      "",
      undefined
    ),
    // bench/cm.ts's ping-pong on the simulated driver (bench/cmHost.ts): what core adds per round
    // trip; the device's target (≤ 1.5× in time) is measured there, where the kernel's work counts too.
    {
      what: "instructions: CmEndpoint.call / .reply ping-pong 64 B, round trip (simulated driver; over the callbacks)",
      ours: `${k(get("cm.call"))} (+${k(get("cm.call") - get("cm.callbacks"))})`,
      baseline: `${k(get("cm.callbacks"))} (the driver's cm calls from plain callbacks)`,
      ratio: get("cm.call") / get("cm.callbacks"),
      target: "",
      met: undefined
    },
    {
      what: "  the same with postRecv + send + the receive's completion on each side",
      ours: `${k(get("cm.pingpong"))} (+${k(get("cm.pingpong") - get("cm.callbacks"))})`,
      baseline: `${k(get("cm.callbacks"))}`,
      ratio: get("cm.pingpong") / get("cm.callbacks"),
      target: "",
      met: undefined
    }
  ]
}

if (process.argv[1] !== undefined && /bench\/instructions\.[jt]s$/.test(process.argv[1])) {
  for (const [name, ir] of instructions(process.argv.slice(2))) console.log(`${name}\t${Math.round(ir)}`)
}
