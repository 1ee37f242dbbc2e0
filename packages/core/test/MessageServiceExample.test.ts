/**
 * examples/message-service.ts on the simulated driver, as a user runs it: it exits 0 only when every
 * reply was checked, the server's counter read back over rdma_post_read matched, and the leak
 * ledger was empty. (On the device: scripts/test runs it with --native.)
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../..", import.meta.url))

describe("examples/message-service.ts", () => {
  it("answers and checks every request, reads the server's counter, and leaves nothing alive", async () => {
    const { code, stderr, stdout } = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
      (resolve) => {
        const child = execFile(
          process.execPath,
          ["--import", "tsx", "examples/message-service.ts", "--requests", "300"],
          { cwd: root, timeout: 120_000 },
          (_error, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr })
        )
      }
    )
    assert.strictEqual(code, 0, stderr)
    assert.match(stdout, /300 requests answered and checked/)
    assert.match(stdout, /read with rdma_post_read: 300/)
    assert.match(stdout, /live resources at exit: 0/)
  }, 150_000)
})
