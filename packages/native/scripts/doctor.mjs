#!/usr/bin/env node
// The published `effect-rdma-doctor`: checks the installed effect before it loads the doctor
// (dist/doctor/bin.js), which runs on effect, so that an unsupported one (Effect 4: its modules
// moved, and loading the doctor would fail while Node links it) is the report's failed "effect"
// row, not a crash. Same output, --json document and exit status as the doctor.
import { check, required } from "@effect-rdma/core/effect-guard"

const unsupported = check(import.meta.url)
if (unsupported === undefined) {
  await import("../dist/doctor/bin.js")
} else {
  const row = {
    id: "effect",
    title: "effect",
    status: "fail",
    summary: `effect ${unsupported.found}, but @effect-rdma needs effect ${required}`,
    details: ["the other checks need a supported effect to run"],
    fixes: [`npm install effect@${required} (pnpm: pnpm add effect@${required})`],
    data: { found: unsupported.found, required }
  }
  if (process.argv.includes("--json")) {
    const report = { schemaVersion: 1, ok: false, counts: { ok: 0, warn: 0, fail: 1 }, checks: [row] }
    console.log(JSON.stringify(report, null, 2))
  } else {
    console.log(`fail  effect  ${row.summary}\n              fix: ${row.fixes[0]}\n\n1 failed: ${unsupported.message}`)
  }
  process.exitCode = 1
}
