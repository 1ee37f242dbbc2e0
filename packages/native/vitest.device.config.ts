import type { ViteUserConfig } from "vitest/config"
import shared from "../../vitest.shared.js"

// Device tests need an RDMA device at RDMA_ADDRESS (Soft-RoCE will do); they run only through
// `pnpm --filter @effect-rdma/native test:device`, never in the default `pnpm test`. Not
// mergeConfig: it would append to the shared `include` instead of replacing it.

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
    include: ["test-device/**/*.test.ts"],
    testTimeout: 5_000 * slowdown,
    hookTimeout: 10_000 * slowdown,
    // One test at a time, and each file in a test process of its own (forks, isolated: vitest's
    // defaults, said here because they matter): the tests read process-wide live-handle counts,
    // and a file's pinned memory goes back to the kernel with its process. One file at a time
    // too: files pin hundreds of MiB (the storm, a 256 MiB registration) in a VM of a few GiB.
    // A test process that dies (the kernel's OOM killer, a native crash) stops vitest 3.2 with
    // only "Channel closed" and no report (scripts/repro-channel-closed.mjs): no pool setting
    // changes that; vitest.shared.ts names the files that were running.
    sequence: { concurrent: false },
    pool: "forks",
    isolate: true,
    fileParallelism: false
  }
}

export default config
