/**
 * examples/kv-store.ts on the simulated driver, as a user runs it: its own process, ended by the
 * SIGINT it sends itself, with nothing left alive (the example checks the ledger and exits 1
 * otherwise). scripts/test runs it on the device too (--native).
 */
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../../", import.meta.url))

describe("examples/kv-store.ts", () => {
  it(
    "stores and reads back, survives a killed client and a dropped link, and shuts down on SIGINT leaving nothing",
    async () => {
      const { code, stderr, stdout } = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
        (resolve) => {
          const child = execFile(
            process.execPath,
            ["--import", "tsx", "examples/kv-store.ts", "--keys", "100", "--port", "7581"],
            { cwd: root, timeout: 90_000 },
            (_error, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr })
          )
        }
      )
      assert.strictEqual(code, 0, `${stdout}\n${stderr}`)
      assert.match(stdout, /client B: killed/)
      assert.match(stdout, /server: client B's connection ended \(Lost\); still serving/)
      assert.match(stdout, /client A: its link dropped/)
      assert.match(stdout, /SIGINT: shutting down/)
      assert.match(stdout, /live handles at exit 0/)
      const found = /client A: (\d+) GETs found their value \((\d+) distinct slots\)/.exec(stdout)
      assert.isNotNull(found, stdout)
      assert.strictEqual(found![1], found![2])
    },
    120_000
  )
})
