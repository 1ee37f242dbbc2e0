// A test process that dies (the kernel's OOM killer, a native crash, exit() from native code) fails
// its file with how it ended, and vitest still writes its report. Unpatched, tinypool 1.1.1 sent
// the dead process its teardown, and vitest 3.2 stopped with only "Channel closed" (issue 19):
// patches/tinypool@1.1.1.patch. Each case runs vitest on three files with the device suite's
// settings (scripts/repro-channel-closed.mjs), the third one's process dying.
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { childNode } from "./fixtures/childNode.js"

const script = fileURLToPath(new URL("../../../scripts/repro-channel-closed.mjs", import.meta.url))

const repro = (kase: string) =>
  new Promise<{ code: number | null; out: string }>((resolve) =>
    execFile(
      ...childNode([script, "--case", kase, "--runs", "1", "--files", "3", "--expect", "failedWithReport"]),
      { timeout: 240_000 },
      (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : (error.code as number | null), out: `${stdout}${stderr}` })
    )
  )

describe("a test process that dies", () => {
  for (
    const [kase, ending] of [
      ["sigkill", "signal SIGKILL"],
      ["abort", "signal SIGABRT"],
      ["native-exit", "exit code 1"],
      ["teardown-death", "signal SIGKILL"]
    ] as const
  ) {
    it(`${kase}: its file fails with "${ending}" and vitest writes its report`, async () => {
      const { code, out } = await repro(kase)
      assert.strictEqual(code, 0, out)
      assert.match(out, new RegExp(`Worker exited unexpectedly \\(pid \\d+, ${ending}\\)`), out)
      assert.notMatch(out, /Channel closed/, out)
    }, 250_000)
  }
})
