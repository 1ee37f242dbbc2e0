// Summarises a `pnpm test` run: how many conformance cases passed on each driver, the totals,
// and a closing "N passed, N failed" line. Exits non-zero if anything failed, or if the device
// tests did not run in CI (CI installs qemu, so there they must run).
import { existsSync, readFileSync } from "node:fs"

const [hostStatus, deviceStatus, reason, pairStatus = "not-run", pmemStatus = "not-run"] = process.argv.slice(2)
const read = (file) => (existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : undefined)
const host = read(".cache/test/host.json")
const device = read(".cache/test/device.json")
// The two-host suite (scripts/test-pair) writes its own report: { results: [{ group, name, status, ... }] }.
const pair = pairStatus === "not-run" ? undefined : read(".cache/test/pair.json")
const pairResults = pair?.results ?? []
const pairGroup = (group) => {
  const rs = pairResults.filter((r) => r.group === group)
  return `${rs.filter((r) => r.status === "passed").length}/${rs.length}`
}

const tests = (report) => report?.testResults.flatMap((file) => file.assertionResults) ?? []
const conformance = (report, title) => {
  const cases = tests(report).filter((t) => t.ancestorTitles.includes(title))
  return `${cases.filter((t) => t.status === "passed").length}/${cases.length}`
}
const count = (report, status) => tests(report).filter((t) => t.status === status).length
// Each failed test by file and name, with its message's first line: CI keeps only the log's tail,
// so the summary is where a failure must be named.
const failures = (report, where) =>
  (report?.testResults ?? []).flatMap((file) => {
    const name = file.name.replace(process.cwd() + "/", "")
    const firstLine = (text) => String(text ?? "").split("\n")[0].slice(0, 300)
    const failed = file.assertionResults.filter((t) => t.status === "failed")
    // A file that failed with no failed test (it did not load, or its worker died) says why in its message.
    if (failed.length === 0) {
      return file.status === "failed"
        ? [`    failed (${where}): ${name}\n      ${firstLine(file.message)}`]
        : []
    }
    return failed.map((t) =>
      `    failed (${where}): ${name} > ${t.fullName}\n      ${firstLine(t.failureMessages?.[0])}`
    )
  })

const lines = [
  "",
  "summary",
  `  conformance suite: ${
    conformance(host, "conformance: simulated driver")
  } cases passed on the simulated driver (host)` +
  (device ? `, ${conformance(device, "conformance: native driver")} on the native driver (Soft-RoCE VM)` : ""),
  `  host:   ${count(host, "passed")} passed, ${count(host, "failed")} failed`,
  ...failures(host, "host"),
  deviceStatus === "not-run"
    ? `  device: NOT RUN: ${reason}`
    : `  device: ${count(device, "passed")} passed, ${count(device, "failed")} failed in the VM` +
      (deviceStatus === "0" ? "" : ` (vm/run exited ${deviceStatus}: a test, the example smoke test or the VM failed)`),
  ...failures(device, "device"),
  pairStatus === "not-run"
    ? `  two hosts: NOT RUN${deviceStatus === "not-run" ? "" : `: ${reason}`}`
    : `  two hosts: ${pairGroup("conformance across two hosts")} connection cases across the wire, ` +
      `${pairGroup("faults across the wire")} fault tests, ` +
      `librdmacm endpoint faults ${pairGroup("faults on librdmacm's endpoints across the wire")}, ` +
      `RdmaClient under faults ${pairGroup("RdmaClient across the wire")}, ` +
      `RdmaClient over librdmacm ${pairGroup("RdmaClient over librdmacm across the wire")}, @effect/rpc ${
        pairGroup("@effect/rpc across the wire")
      }, @effect/cluster ${pairGroup("@effect/cluster across the wire")}, ` +
      `long run ${pairGroup("long run")} (vm/pair)` +
      (pairStatus === "0"
        ? ""
        : ` (vm/pair exited ${pairStatus}${pair === undefined ? ": no report, the pair failed" : ""})`),
  ...pairResults.filter((r) => r.status === "failed").map((r) => `    failed: [${r.group}] ${r.name}`),
  // scripts/test-pmem writes { status, phase, detail, seconds }.
  pmemStatus === "not-run"
    ? `  persistent memory: NOT RUN`
    : `  persistent memory: ${pmemStatus === "0" ? "passed" : `FAILED (scripts/test-pmem exited ${pmemStatus})`}: ` +
      `${read(".cache/test/pmem.json")?.detail ?? "no report"}`
]
console.log(lines.join("\n"))
const pmemCount = (status) => (pmemStatus === "not-run" ? 0 : (pmemStatus === "0") === (status === "passed") ? 1 : 0)
const passed = count(host, "passed") + count(device, "passed") +
  pairResults.filter((r) => r.status === "passed").length +
  pmemCount("passed")
const failed = count(host, "failed") + count(device, "failed") +
  pairResults.filter((r) => r.status === "failed").length +
  pmemCount("failed")
console.log(`${passed} passed, ${failed} failed`)

const deviceFailed = (deviceStatus !== "not-run" && deviceStatus !== "0") ||
  (pairStatus !== "not-run" && pairStatus !== "0") ||
  (pmemStatus !== "not-run" && pmemStatus !== "0")
const mustRunDevice = process.env.CI === "true" && deviceStatus === "not-run"
if (mustRunDevice) console.log("the device tests must run in CI: install qemu (scripts/setup does)")
process.exit(hostStatus !== "0" || deviceFailed || mustRunDevice || failed > 0 ? 1 : 0)
