/**
 * The short soak CI runs: the example service's traffic with random faults and interruptions, in
 * one process, ending with nothing alive and a flat resident set (scripts/soak.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../..", import.meta.url))

describe("soak (short)", () => {
  it("200 cycles with random faults and interruptions leave nothing alive", { timeout: 120_000 }, () => {
    const output = execFileSync(
      process.execPath,
      ["--expose-gc", "--import", "tsx", "scripts/soak.ts", "--cycles", "200", "--max-growth-mib", "16"],
      { cwd: root, encoding: "utf8" }
    )
    expect(output).toMatch(/live handles at the end: 0;/)
    expect(output).toMatch(/\d+ failed, \d+ interrupted/)
  })
})
