import { availableParallelism, loadavg } from "node:os"
import type { ViteUserConfig } from "vitest/config"

// Issue 19, item 9: a test's timeout is a bound on a hang, not a guess at its speed, so it scales
// with how loaded the machine is when the run starts (the 1-minute load average per core, at least
// 1, at most 20; TEST_SLOWDOWN overrides it): on 2 cores at a load of 20, vitest's 5 s default
// ended tests that take 0.4 s on an idle machine and 3-5 s there. The device config sets its own
// (DEVICE_TEST_SLOWDOWN).
const slowdownSetting = process.env.TEST_SLOWDOWN
if (slowdownSetting !== undefined && !(Number(slowdownSetting) >= 1)) {
  throw new Error(
    `TEST_SLOWDOWN must be a number of at least 1 (how many times slower than usual the tests run), not '${slowdownSetting}'`
  )
}
const slowdown = slowdownSetting !== undefined
  ? Number(slowdownSetting)
  : Math.min(20, Math.max(1, loadavg()[0]! / availableParallelism()))

const once = Symbol.for("effect-rdma/files-running-at-a-stop")

const config: ViteUserConfig = {
  plugins: [{
    // A test process that dies fails its file with "Worker exited unexpectedly (pid P, signal S)"
    // (patches/tinypool@1.1.1.patch; unpatched, tinypool's teardown of the dead process failed
    // unhandled and vitest 3.2 stopped with only "Channel closed": scripts/repro-channel-closed.mjs).
    // If vitest still stops, say which files were running. Once per vitest, not per project.
    name: "effect-rdma:files-running-at-a-stop",
    configureVitest({ vitest }) {
      const state = vitest as unknown as Record<symbol, boolean>
      if (state[once]) return
      state[once] = true
      // Before vitest's own exit listener, which calls process.exit() again: later ones never run.
      process.prependOnceListener("exit", (code) => {
        if (code === 0) return
        const running = vitest.state.getFiles().filter((file) => file.result?.state === "run")
        if (running.length > 0) {
          process.stderr.write(
            `vitest stopped while these files ran (a test process that dies stops it so): ${
              running.map((file) => file.filepath).join(", ")
            }\n`
          )
        }
      })
    }
  }],
  test: {
    include: ["test/**/*.test.ts"],
    sequence: { concurrent: true },
    fakeTimers: { toFake: undefined },
    testTimeout: Math.round(5_000 * slowdown),
    hookTimeout: Math.round(10_000 * slowdown),
    // For the few bounds a test or a conformance case measures on the wall clock because they are
    // its point (packages/testing/src/conformance/support.ts `slowdown`).
    env: { TEST_SLOWDOWN: String(slowdown) }
  }
}

export default config
