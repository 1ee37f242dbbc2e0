// The RPC cases on the native driver, at RDMA_ADDRESS (the Soft-RoCE VM), never in the host's
// `pnpm test`. scripts/test runs them in the native package's device run (its config includes
// them, so they share its test process); by themselves:
//   cd packages/rpc && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts
// The native package's device settings (timeouts scaled by DEVICE_TEST_SLOWDOWN, one file at a
// time, the check after each file), this package's test-device/ only.
import type { ViteUserConfig } from "vitest/config"
import native from "../native/vitest.device.config.js"

const config: ViteUserConfig = { ...native, test: { ...native.test, include: ["test-device/**/*.test.ts"] } }

export default config
