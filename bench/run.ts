/**
 * `pnpm bench`: the rows that need no device, each against a baseline measured in the same run.
 * 1. the simulated driver (bench/simulated.ts, bundled: bench/simulated-main.ts);
 * 2. the host rows: the real NativeDriver over a zero-cost fake of the addon (bench/host.ts), timed;
 * 3. the same host rows in instructions per operation under callgrind (bench/instructions.ts),
 *    stable where time is not. BENCH_CALLGRIND=0 skips them (they take several minutes).
 */
import { execFileSync } from "node:child_process"
import { bundle } from "./bundle.js"
import { instructionRows, instructions } from "./instructions.js"
import { printTable } from "./table.js"

console.log("## Simulated driver\n")
// From a bundle too: compiled JavaScript (see bench/simulated-main.ts).
execFileSync(process.execPath, ["--expose-gc", bundle("bench/simulated-main.ts", "bench/.build/simulated.mjs")], {
  stdio: "inherit"
})
console.log("\n## Host: NativeDriver over a fake binding, timed\n")
// From the bundle: compiled JavaScript, as users run it (see bench/host.ts).
printTable(JSON.parse(execFileSync(process.execPath, [bundle(), "--timed"], { encoding: "utf8" })).rows)
if (process.env.BENCH_CALLGRIND !== "0") {
  console.log("\n## Host: instructions per operation (callgrind)\n")
  printTable(instructionRows(instructions()))
}
