// The device suite's files share one test process (vitest.device.config.ts). After each file's
// last test: nothing it made may still be alive (the storm and the raw endpoint tests assert
// absolute counts of zero, so a leak here would fail them in a later file, not the one that made
// it), and the garbage is collected, so that its blocks are freed before the next file pins more.
import { Effect } from "effect"
import { afterAll, assert } from "vitest"
import * as RpmaBinding from "../src/RpmaBinding.js"

const binding = await Effect.runPromise(RpmaBinding.load())
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("the device tests' process runs with --expose-gc (vitest.device.config.ts)")

/** Connections a test dropped end within their timeout (the storm's server: 2 s) of their client. */
const SETTLE_MS = 5_000

const alive = () => Object.entries(binding.liveHandles()).filter(([, count]) => count !== 0)

afterAll(async () => {
  const deadline = Date.now() + SETTLE_MS * Number(process.env.DEVICE_TEST_SLOWDOWN ?? 1)
  while (alive().length > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100))
  gc()
  assert.deepStrictEqual(Object.fromEntries(alive()), {}, "native objects the file left alive")
})
