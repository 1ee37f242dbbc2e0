import { fileURLToPath } from "node:url"
import type { ViteUserConfig } from "vitest/config"
import shared from "../../vitest.shared.js"

// Device tests need an RDMA device at RDMA_ADDRESS (Soft-RoCE will do): scripts/test runs them in
// its VM (vm/run), with the rpc package's device suite (packages/rpc/test-device) in the same run,
// so in the same test process. Not mergeConfig: it would append to the shared `include` instead
// of replacing it.

// How many times slower than a real machine this CPU runs the tests: scripts/test sets it in the
// Soft-RoCE VM, whose emulated CPU (qemu's TCG) is 10-30x slower. A test without a timeout of its
// own gets vitest's default (5 s, hooks 10 s) times this: a generous bound on a hang, not a guess.
const slowdownSetting = process.env.DEVICE_TEST_SLOWDOWN ?? "1"
const slowdown = Number(slowdownSetting)
if (!Number.isFinite(slowdown) || slowdown < 1) {
  throw new Error(
    `DEVICE_TEST_SLOWDOWN must be a number of at least 1 (how many times slower than a real machine this CPU is), not '${slowdownSetting}'`
  )
}

const config: ViteUserConfig = {
  ...shared,
  test: {
    ...shared.test,
    include: ["test-device/**/*.test.ts", "../rpc/test-device/**/*.test.ts"],
    testTimeout: 5_000 * slowdown,
    hookTimeout: 10_000 * slowdown,
    env: { ...shared.test?.env, TEST_SLOWDOWN: String(slowdown) },
    // One test at a time, one file at a time, all files in one test process (forks, not isolated):
    // under TCG a process of its own per file cost ~70 s of start-up and imports each, about 1000 s
    // of the suite. Sharing one is safe because no file may leave a native object alive, which
    // test-device/setup.ts checks after each file (so a leak fails the file that made it, not a
    // later one's absolute count), and it collects the garbage there, so a file's registrations are
    // unpinned and its blocks freed before the next file starts (the storm, a 256 MiB registration).
    // A test process that dies (the kernel's OOM killer, a native crash) used to stop vitest 3.2
    // with only "Channel closed" and no report; patches/tinypool@1.1.1.patch makes it fail the run
    // with how the process ended (signal or exit code) and a report, and scripts/test prints the
    // kernel's OOM or crash lines (scripts/repro-channel-closed.mjs, TestProcessDeath.test.ts).
    sequence: { concurrent: false },
    pool: "forks",
    isolate: false,
    fileParallelism: false,
    poolOptions: { forks: { singleFork: true, execArgv: ["--expose-gc"] } },
    setupFiles: [fileURLToPath(new URL("test-device/setup.ts", import.meta.url))]
  }
}

export default config
