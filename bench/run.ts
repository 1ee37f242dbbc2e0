/**
 * `pnpm bench`: the rows that need no device, each against a baseline measured in the same run.
 * 1. the simulated driver (bench/simulated.ts);
 * 2. the host rows: the real NativeDriver over a zero-cost fake of the addon (bench/host.ts), timed;
 * 3. the same host rows in instructions per operation under callgrind (bench/instructions.ts),
 *    stable where time is not. BENCH_CALLGRIND=0 skips them (they take several minutes).
 */
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import { bundle } from "./bundle.js"
import { instructionRows, instructions } from "./instructions.js"
import { simulatedRows } from "./simulated.js"
import { printTable } from "./table.js"

console.log("## Simulated driver\n")
printTable(await Effect.runPromise(simulatedRows))
console.log("\n## Host: NativeDriver over a fake binding, timed\n")
// From the bundle: compiled JavaScript, as users run it (see bench/host.ts).
printTable(JSON.parse(execFileSync(process.execPath, [bundle(), "--timed"], { encoding: "utf8" })).rows)
if (process.env.BENCH_CALLGRIND !== "0") {
  console.log("\n## Host: instructions per operation (callgrind)\n")
  printTable(instructionRows(instructions()))
}
