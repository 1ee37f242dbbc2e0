// Error messages name the real cause and what to do: registrations refused under RLIMIT_MEMLOCK
// (one too large, several adding up, rdma_reg_msgs) and connection set-ups refused by a verb.
import type { Model } from "@effect-rdma/core/Driver"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { beforeAll } from "vitest"
import * as NativeDriver from "../src/NativeDriver.js"
import { address, withPeer } from "./support.js"

const root = (path: string) => fileURLToPath(new URL(`../../../${path}`, import.meta.url))

/** Runs a command to its end (asynchronously: a blocked test worker misses vitest's heartbeats). */
const run = (command: string, args: ReadonlyArray<string>, timeout: number) =>
  new Promise<{ error: Error | null; out: string; err: string }>((resolve) =>
    execFile(command, args, { timeout }, (error, out, err) => resolve({ error, out, err }))
  )

describe("registrations under RLIMIT_MEMLOCK", () => {
  const limit = 12 * 2 ** 20
  const results = new Map<string, { registered: number; tag: string; message: string }>()

  beforeAll(async () => {
    const bundled = await run(process.execPath, [root("scripts/bundle-vm.mjs"), "memlock"], 300_000)
    assert.strictEqual(bundled.error, null, bundled.err)
    // Root's CAP_IPC_LOCK ignores the limit: drop it (from the bounding set, so exec loses it).
    const asRoot = process.getuid?.() === 0 ? ["setpriv", "--bounding-set=-ipc_lock"] : []
    const program = root("packages/native/.vm-build/memlock.mjs")
    const command = [...asRoot, process.execPath, "--enable-source-maps", program, address, `${limit}`]
    const child = await run("prlimit", [`--memlock=${limit}:${limit}`, ...command], 240_000)
    assert.strictEqual(child.error, null, child.out + child.err)
    for (const line of child.out.split("\n").filter((line) => line.startsWith("{"))) {
      const result = JSON.parse(line) as { case: string; registered: number; tag: string; message: string }
      results.set(result.case, result)
    }
  }, 600_000)

  // [the child's case, the error, how it starts, the least number of registrations before it]
  const cases = [
    ["single", "RpmaProviderError", "rpma_mr_reg failed with RPMA_E_PROVIDER", 0],
    ["single on a worker thread", "RpmaProviderError", "rpma_mr_reg failed with RPMA_E_PROVIDER", 0],
    ["cumulative", "RpmaProviderError", "rpma_mr_reg failed with RPMA_E_PROVIDER", 12],
    ["rdma_reg_msgs single", "RdmaCmError", "rdma_reg_msgs failed with ENOMEM", 0],
    // 11 or 12: a heap buffer that does not start on a page pins one page more.
    ["rdma_reg_msgs cumulative", "RdmaCmError", "rdma_reg_msgs failed with ENOMEM", 11]
  ] as const

  for (const [name, tag, head, before] of cases) {
    const together = before > 0
    it(`${name}: ${tag} naming ${together ? "registrations together" : "the size"}, the limit and how to raise it`, () => {
      const result = results.get(name)
      assert.isDefined(result, name)
      assert.strictEqual(result!.tag, tag, result!.message)
      assert.isAtLeast(result!.registered, before)
      assert.include(result!.message, head)
      if (together) assert.include(result!.message, "registrations together")
      else assert.match(result!.message, /registering \d+ bytes exceeds RLIMIT_MEMLOCK/)
      assert.include(result!.message, `RLIMIT_MEMLOCK (${limit} bytes of locked memory)`)
      assert.include(result!.message, "ulimit -l unlimited")
      assert.include(result!.message, "LimitMEMLOCK=infinity")
    })
  }
})

const config: Model.ConnConfig = { timeoutMs: 5000, sqSize: 8, rqSize: 8, cqSize: 16, directWriteToPmem: false }
// Beyond any device's limits (rxe: max_cqe 32767, max_qp_wr 1048576; mlx5: about 4 million).
const huge = 2 ** 24

layer(NativeDriver.layer, { timeout: "30 seconds" })("connection set-up refused by a verb", (it) => {
  it.effect("connReqNew: the verb, the device's limit and the field to change; a 0 ms timeout said as such", () =>
    withPeer((driver, peer) =>
      Effect.gen(function*() {
        const cq = yield* Effect.flip(driver.connReqNew(peer, address, 18120, { ...config, cqSize: huge }))
        assert.strictEqual(cq._tag, "RpmaProviderError")
        assert.match(
          cq.message,
          /ibv_create_cq failed for a completion queue of 16777216 entries: this device's max_cqe is \d+/
        )
        assert.include(cq.message, "make completionQueueSize (cqSize) at most that")
        assert.notInclude(cq.message, "no RDMA device reaches it")

        const qp = yield* Effect.flip(driver.connReqNew(peer, address, 18120, { ...config, sqSize: huge, cqSize: 64 }))
        assert.strictEqual(qp._tag, "RpmaProviderError")
        assert.match(qp.message, /rdma_create_qp\w* failed for a queue pair of 16777216 send and 8 receive requests/)
        assert.match(qp.message, /this device's max_qp_wr is \d+/)
        assert.include(qp.message, "make sendQueueSize (sqSize) and receiveQueueSize (rqSize) at most that")

        const zero = yield* Effect.flip(driver.connReqNew(peer, address, 18120, { ...config, timeoutMs: 0 }))
        assert.strictEqual(zero._tag, "RpmaProviderError")
        assert.include(zero.message, "failed with a timeout of 0 ms: give timeoutMs above 0")
        assert.notInclude(zero.message, "no RDMA device reaches it")
        assert.strictEqual((yield* driver.live).connectionRequests, 0)
      })
    ))

  it.effect("epNextConnReq: a request the device refuses queues for names the verb and the limit", () =>
    withPeer((driver, peer) =>
      Effect.gen(function*() {
        const ep = yield* driver.epListen(peer, address, 18121)
        const incoming = yield* Effect.fork(driver.epNextConnReq(ep, { ...config, cqSize: huge }))
        const outgoing = yield* driver.connReqNew(peer, address, 18121, config)
        const conn = yield* driver.connReqConnect(outgoing, undefined)
        const refused = yield* Effect.flip(Fiber.join(incoming))
        assert.strictEqual(refused._tag, "RpmaProviderError")
        assert.match(
          refused.message,
          /ibv_create_cq failed for a completion queue of 16777216 entries: this device's max_cqe is/
        )
        yield* driver.connDelete(conn)
        yield* driver.epShutdown(ep)
      })
    ))
})
