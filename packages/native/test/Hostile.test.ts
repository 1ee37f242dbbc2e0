// Hostile callers of the addon without a device: workers torn down while they use it (terminated,
// process.exit, an uncaught throw), and arguments whose reading runs JavaScript that throws
// (getters, Proxy traps) or whose memory node-addon-api cannot take (a SharedArrayBuffer). Each is
// a coded error or a clean release, never an abort. The workers run in a child process, so that an
// abort fails the test instead of killing the runner.
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { childNode } from "./fixtures/childNode.js"

const script = fileURLToPath(new URL("./fixtures/worker-teardown.cjs", import.meta.url))
const loopScript = fileURLToPath(new URL("./fixtures/worker-loop.cjs", import.meta.url))
const binding = Effect.runSync(RpmaBinding.load())

// Asynchronous: a blocked test worker misses vitest's own heartbeats.
const run = (args: ReadonlyArray<string>) =>
  new Promise<{ status: number | null; signal: string | null; out: string }>((resolve) => {
    execFile(...childNode(args), { timeout: 120_000 }, (error, stdout, stderr) => {
      const failed = error as (Error & { code?: unknown; signal?: string | null }) | null
      resolve({
        status: failed === null ? 0 : typeof failed.code === "number" ? failed.code : null,
        signal: failed?.signal ?? null,
        out: `${stdout}${stderr}`
      })
    })
  })

const teardown = (mode: string, rounds: number) => run([script, RpmaBinding.defaultPath, mode, String(rounds)])

describe("worker teardown", () => {
  for (const mode of ["terminate", "exit", "throw"]) {
    it(`workers busy with the addon end by ${mode}: the process lives`, async () => {
      const ended = await teardown(mode, 25)
      assert.strictEqual(ended.signal, null, ended.out)
      assert.strictEqual(ended.status, 0, ended.out)
      assert.match(ended.out, new RegExp(`survived ${mode} 25`))
    }, 130_000)
  }

  // Issue 19: a handle's native object is gone (napi_unwrap finds none) while the worker's
  // environment is torn down; the addon used it anyway and the process died of SIGSEGV after 9-45
  // terminations.
  it("a worker calling the addon in a loop on handles it holds, terminated 100 times: the process lives", async () => {
    const ended = await run([loopScript, RpmaBinding.defaultPath, "100"])
    assert.strictEqual(ended.signal, null, ended.out)
    assert.strictEqual(ended.status, 0, ended.out)
    assert.match(ended.out, /survived 100/)
  }, 130_000)
})

const trap = new Proxy({}, {
  get() {
    throw new Error("trap")
  }
})

const coded = (f: () => unknown): { code: unknown; detail: unknown; cause: unknown } => {
  try {
    f()
  } catch (error) {
    const e = error as { code?: unknown; detail?: unknown; cause?: unknown }
    return { code: e.code, detail: e.detail, cause: e.cause }
  }
  throw new Error("expected a throw")
}

describe("arguments that throw when read", () => {
  it("a work request whose op or fields throw → RPMA_E_INVAL with the thrown error as cause", () => {
    const op = coded(() => binding.post({}, trap))
    assert.strictEqual(op.code, -100004)
    assert.match(String(op.detail), /op threw/)
    assert.strictEqual((op.cause as Error).message, "trap")
    const id = coded(() =>
      binding.post({}, {
        op: "write",
        get id() {
          throw new Error("id")
        }
      })
    )
    assert.strictEqual(id.code, -100004)
    assert.strictEqual((id.cause as Error).message, "id")
  })

  it("free() of a SharedArrayBuffer view → RPMA_E_INVAL", () => {
    assert.strictEqual(coded(() => binding.free(new Uint8Array(new SharedArrayBuffer(8)))).code, -100004)
  })

  it("Proxies as memory, descriptor or config → RPMA_E_INVAL", async () => {
    assert.strictEqual(coded(() => binding.mrRemoteFromDescriptor(new Proxy(new Uint8Array(21), {}))).code, -100004)
    assert.strictEqual(coded(() => binding.epNextConnReq({}, trap, () => {})).code, -100004)
    const rejected = await binding.connReqNew({}, "192.0.2.1", 1, trap).then(() => undefined, (e) => e)
    assert.strictEqual((rejected as { code: number }).code, -100004)
  })
})
