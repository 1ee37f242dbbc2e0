// The RPC cases on the native driver, at RDMA_ADDRESS (the Soft-RoCE VM), never in the host's
// `pnpm test`:
//   cd packages/rpc && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts
// The native package's device settings (test-device/, timeouts scaled by DEVICE_TEST_SLOWDOWN,
// one file at a time).
export { default } from "../native/vitest.device.config.js"
