// Reproduces the device suite's "Channel closed" stop on the host, one candidate cause at a time.
//
//   node scripts/repro-channel-closed.mjs [--case NAME] [--runs N] [--files N] [--busy] [--slow]
//                                          [--pool isolated|single] [--expect OUTCOME]
//
// Writes N short test files under .cache/repro-channel-closed/<pid> and runs vitest on them N times with
// the device suite's own test options (packages/native/vitest.device.config.ts: the forks pool, one
// file at a time), each file in a fork of its own or, with --pool single, all in one long-lived
// fork (singleFork, isolate: false: what the device suite itself does); without the suite's setup
// file (test-device/setup.ts: the addon's live handles after each file). The third file does what
// --case names (CASES below: each way a test file can end its process or its IPC channel, or send
// on it late); --dies is --case sigkill. --busy keeps both cores busy (two `nice -n 10` loops) for
// the duration; --slow runs vitest at `nice -n 19` beside them, about 15x slower, as under qemu's
// emulation. Prints each run's outcome and the counts: passed, failed with a report, stopped with
// "Channel closed" and no report, stopped otherwise, hung (killed after 300 s).
// With --expect, exits 1 unless every run had that outcome (packages/native/test/TestProcessDeath.test.ts).
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { parseArgs } from "node:util"

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "5" },
    files: { type: "string", default: "20" },
    case: { type: "string", default: "healthy" },
    expect: { type: "string" },
    dies: { type: "boolean", default: false },
    busy: { type: "boolean", default: false },
    slow: { type: "boolean", default: false },
    pool: { type: "string", default: "isolated" }
  }
})
const positive = (name) => {
  const n = Number(values[name])
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} must be a whole number of at least 1, not '${values[name]}'`)
    process.exit(2)
  }
  return n
}
const runs = positive("runs")
const files = positive("files")
if (values.pool !== "isolated" && values.pool !== "single") {
  console.error(`--pool must be 'isolated' (the device config as it is) or 'single', not '${values.pool}'`)
  process.exit(2)
}
// What the third file's test does, as the body of an async test function.
const CASES = {
  healthy: "",
  // The kernel's OOM killer, or anything else that kills the process mid-file.
  sigkill: `process.kill(process.pid, "SIGKILL")`,
  // A native crash in the addon (SIGSEGV, SIGABRT) mid-file.
  abort: `process.abort()`,
  // A test (or code it runs) calling process.exit: vitest replaces process.exit in its test processes.
  exit: `process.exit(1)`,
  // Native code calling exit(), which vitest's replacement does not see.
  "native-exit": `process.reallyExit(1)`,
  // A test closing its process's IPC channel.
  disconnect: `process.disconnect()`,
  // Work the file left running logs after its last test ended: a late message to vitest while
  // tinypool tears the process down.
  "late-log": `setTimeout(() => console.log("late"), 30)`,
  "late-log-loop": `setInterval(() => console.log("tick"), 1)`,
  // Work left running fails after the last test ended: a late RPC call (onUnhandledError).
  "late-rejection": `setTimeout(() => Promise.reject(new Error("late")), 30)`,
  // A child process the file started and left running.
  grandchild: `(await import("node:child_process")).spawn("sleep", ["30"], { stdio: "inherit" })`,
  // The process dies after its last test ended, when tinypool asks it to tear down (a native crash
  // at teardown; a timer that fires then, as "late-death" does about one run in two).
  "teardown-death": `process.on("message", (m) => m?.name === "teardown" && process.kill(process.pid, "SIGKILL"))`,
  "late-death": `setTimeout(() => process.kill(process.pid, "SIGKILL"), 5)`
}
const caseName = values.dies ? "sigkill" : values.case
if (!Object.hasOwn(CASES, caseName)) {
  console.error(`--case must be one of ${Object.keys(CASES).join(", ")}, not '${caseName}'`)
  process.exit(2)
}
const special = caseName !== "healthy"
if (special && files < 3) {
  console.error("--case needs --files 3 or more (the third file does it)")
  process.exit(2)
}

const root = resolve(import.meta.dirname, "..")
// One directory per invocation: two at once must not share files or a report.
const dir = join(root, ".cache", "repro-channel-closed", String(process.pid))
mkdirSync(join(dir, "t"), { recursive: true })
for (let i = 1; i <= files; i++) {
  const name = String(i).padStart(3, "0")
  // All files the same size, so vitest's order (by size) does not put the dying one first.
  writeFileSync(
    join(dir, "t", `f${name}.test.ts`),
    `import { expect, it } from "vitest"
it("f${name}", async () => {
  await new Promise((resolve) => setTimeout(resolve, 20))
  expect(${i} + 1).toBe(${i + 1})
  if (process.env.REPRO_CASE === "f${name}") {
    ${CASES[caseName]}
  }
})
`
  )
}
const pool = values.pool === "single"
  ? "\n    isolate: false,\n    poolOptions: { forks: { singleFork: true } },"
  : "\n    isolate: true,\n    poolOptions: { forks: { singleFork: false } },"
writeFileSync(
  join(dir, "vitest.config.ts"),
  `import device from "../../../packages/native/vitest.device.config.ts"
export default { ...device, test: { ...device.test, include: ["t/*.test.ts"], setupFiles: [], pool: "forks",${pool} } }
`
)

const busy = values.busy
  ? [0, 1].map(() => spawn("nice", ["-n", "10", "sh", "-c", "while :; do :; done"], { stdio: "ignore" }))
  : []
const stopBusy = () => busy.forEach((child) => child.kill("SIGKILL"))
process.on("exit", stopBusy)
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(130))

const counts = { passed: 0, failedWithReport: 0, channelClosedNoReport: 0, stoppedOtherwise: 0, hung: 0 }
const report = join(dir, "report.json")
for (let run = 1; run <= runs; run++) {
  rmSync(report, { force: true })
  const started = Date.now()
  const vitest = [
    join(root, "node_modules", ".bin", "vitest"),
    "run",
    "--root",
    dir,
    "--reporter=default",
    "--reporter=json",
    `--outputFile.json=${report}`
  ]
  const [command, ...args] = values.slow ? ["nice", "-n", "19", ...vitest] : vitest
  const result = spawnSync(
    command,
    args,
    {
      encoding: "utf8",
      env: { ...process.env, CI: "1", NO_COLOR: "1", REPRO_CASE: special ? "f003" : "" },
      maxBuffer: 64 * 2 ** 20,
      timeout: 300_000,
      killSignal: "SIGKILL"
    }
  )
  const output = `${result.stdout}${result.stderr}`
  const hasReport = existsSync(report)
  const passed = hasReport ? JSON.parse(readFileSync(report, "utf8")).numPassedTests : 0
  const outcome = result.error?.code === "ETIMEDOUT"
    ? "hung"
    : result.status === 0
    ? "passed"
    : hasReport
    ? "failedWithReport"
    : /Channel closed/.test(output)
    ? "channelClosedNoReport"
    : "stoppedOtherwise"
  counts[outcome]++
  const named = special ? `, output names the third file: ${/f003/.test(output) ? "yes" : "no"}` : ""
  console.log(
    `run ${run}: ${outcome} (exit ${result.status}, ${passed}/${files} tests in the report${named}, ${
      ((Date.now() - started) / 1000).toFixed(1)
    } s)`
  )
  // What vitest said of the process's end, if anything.
  for (
    const line of new Set(
      output.split("\n").filter((l) => /exited unexpectedly|Channel closed|stopped while|FAIL /.test(l))
    )
  ) {
    console.log(`  ${line.trim()}`)
  }
  if (outcome !== "passed" && outcome !== "failedWithReport") {
    console.log(output.trim().split("\n").slice(-14).join("\n"))
  }
}
stopBusy()
rmSync(dir, { recursive: true, force: true })
console.log(
  `pool ${values.pool}, ${files} files, case ${caseName}, ${values.busy ? "both cores busy" : "no extra load"}${
    values.slow ? ", vitest at nice 19" : ""
  }: ${JSON.stringify(counts)}`
)
if (values.expect !== undefined && counts[values.expect] !== runs) process.exitCode = 1
