/**
 * examples/cluster-counter.ts on the simulated driver, as a user runs it: its own process, which
 * exits 0 only when every counter holds the sum of its increments, both runners served calls, some
 * crossed between them, and nothing was left alive.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../../", import.meta.url))

describe("examples/cluster-counter.ts", () => {
  it("counts across two runners over RDMA, its values in SQL, and leaves nothing alive", async () => {
    const { code, stdout } = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        ["--import", "tsx", "examples/cluster-counter.ts"],
        { cwd: root, timeout: 90_000 },
        (_error, stdout, stderr) => resolve({ code: child.exitCode, stdout: `${stdout}\n${stderr}` })
      )
    })
    assert.strictEqual(code, 0, stdout)
    assert.match(stdout, /^8 counters, each at 3: yes$/m)
    assert.match(stdout, /^served by 2 of 2 runners; [1-9]\d* calls crossed to another runner over RDMA$/m)
    assert.match(stdout, /^nothing left alive/m)
  }, 120_000)
})
