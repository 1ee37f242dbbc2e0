// Workers that hold a peer, regions, an rdma_cm id, an endpoint, a connection with writes in flight
// and waits in progress, ended by terminate(), process.exit() or an uncaught throw, round after
// round: the process lives and every native object is released.
import { assert, describe, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as RpmaBinding from "../src/RpmaBinding.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

const script = fileURLToPath(new URL("../test/fixtures/worker-teardown.cjs", import.meta.url))

describe("worker teardown with live traffic", () => {
  for (const mode of ["terminate", "exit", "throw"]) {
    it(`${mode}, 6 rounds`, async () => {
      // Asynchronous: a blocked test worker misses vitest's own heartbeats.
      const { error, out } = await new Promise<{ error: (Error & { signal?: string | null }) | null; out: string }>((
        resolve
      ) =>
        execFile(process.execPath, [script, RpmaBinding.defaultPath, mode, "6", address], { timeout: 240_000 }, (
          error,
          stdout,
          stderr
        ) => resolve({ error, out: `${stdout}${stderr}` }))
      )
      assert.strictEqual(error?.signal ?? null, null, out)
      assert.strictEqual(error, null, out)
      assert.match(out, new RegExp(`survived ${mode} 6`))
      assert.notMatch(out, /worker setup failed/)
      const live = JSON.parse(out.slice(out.indexOf("{"), out.lastIndexOf("}") + 1)) as Record<string, number>
      assert.strictEqual(Object.values(live).reduce((a, b) => a + b, 0), 0, out)
    }, 250_000)
  }
})
