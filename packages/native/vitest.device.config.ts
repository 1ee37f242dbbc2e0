import type { ViteUserConfig } from "vitest/config"
import shared from "../../vitest.shared.js"

// Device tests need an RDMA device at RDMA_ADDRESS (Soft-RoCE will do); they run only through
// `pnpm --filter @effect-rdma/native test:device`, never in the default `pnpm test`. Not
// mergeConfig: it would append to the shared `include` instead of replacing it. One at a time:
// the tests read process-wide live-handle counts.
const config: ViteUserConfig = {
  ...shared,
  test: {
    ...shared.test,
    include: ["test-device/**/*.test.ts"],
    sequence: { concurrent: false },
    // One file at a time too: files pin hundreds of MiB (the storm, a 256 MiB registration) in a
    // VM of a few GiB, and a test process killed for memory takes vitest's channel down with it.
    fileParallelism: false
  }
}

export default config
