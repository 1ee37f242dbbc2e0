// When allocate()'s memory is freed, and mapFile()'s unmapped: once neither its ArrayBuffer nor a
// registration holds it. Alone in their file, so that the process-wide counts move only with these tests.
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void

// The allocation finalizer runs from a SetImmediate after its store goes.
const settle = Effect.promise(() => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve))))

const waitUntil = (predicate: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 50 && !predicate(); i++) {
      gc()
      yield* settle
    }
    return predicate()
  })

describe("allocations are freed once nothing holds them", () => {
  layer(NativeDriver.layer)((it) => {
    it.effect("by free(), by GC, and a transfer copies instead of moving them", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const binding = yield* RpmaBinding.load()
        const base = binding.liveAllocations()

        const freed = yield* driver.allocate(1 << 20)
        assert.strictEqual(binding.liveAllocations(), base + 1)
        yield* driver.free(freed)
        // Nothing else held it: gone at once, not at a later turn of the event loop.
        assert.strictEqual(binding.liveAllocations(), base, "free()")
        assert.strictEqual(freed.byteLength, 0, "detached")
        // Its ArrayBuffer's finalizer, which comes later, frees nothing twice.
        assert.isTrue(yield* waitUntil(() => binding.liveAllocations() === base), "after the finalizer")

        // Dropped without free(): the ArrayBuffer's finalizer frees it.
        yield* Effect.sync(() => {
          binding.allocate(1 << 20)
        })
        assert.isTrue(yield* waitUntil(() => binding.liveAllocations() === base), "GC")

        // Transfer is harmless: Node marks external ArrayBuffers untransferable, so structuredClone
        // and postMessage copy them (Node 20 to 24) or refuse with a DataCloneError (Node 26), and
        // the allocation stays where it was, owned by the driver.
        const kept = yield* driver.allocate(4096)
        kept[0] = 42
        const transferred = (() => {
          try {
            return new Uint8Array(structuredClone(kept.buffer, { transfer: [kept.buffer as ArrayBuffer] }))
          } catch (error) {
            assert.strictEqual((error as Error).name, "DataCloneError")
            return undefined
          }
        })()
        assert.strictEqual(kept.byteLength, 4096)
        if (transferred !== undefined) transferred[0] = 7
        assert.strictEqual(kept[0], 42)
        yield* driver.free(kept)
        assert.isTrue(yield* waitUntil(() => binding.liveAllocations() === base), "free() after a transfer")
      }), { timeout: 30_000 })

    it.effect(
      "a loop that allocates and frees without a turn of the event loop holds one allocation at a time",
      () =>
        Effect.gen(function*() {
          const driver = yield* RdmaDriver
          const binding = yield* RpmaBinding.load()
          const base = binding.liveAllocations()
          let most = 0
          // 64 of 16 MiB, synchronously: 1 GiB if the frees waited for the finalizers' SetImmediate.
          yield* Effect.sync(() => {
            for (let i = 0; i < 64; i++) {
              const memory = binding.allocate(16 << 20)
              memory[i] = i
              binding.free(memory)
              most = Math.max(most, binding.liveAllocations() - base)
            }
          })
          assert.strictEqual(most, 0, "each freed before the next was allocated")
          // Every finalizer then runs (from SetImmediate) and frees nothing twice.
          assert.isTrue(yield* waitUntil(() => binding.liveAllocations() === base))
          const again = yield* driver.allocate(4096)
          assert.strictEqual(binding.liveAllocations(), base + 1)
          yield* driver.free(again)
        }),
      { timeout: 30_000 }
    )

    it.scoped("mappings are unmapped by unmapFile() and by GC", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const binding = yield* RpmaBinding.load()
        const base = binding.liveMappings()
        const dir = yield* Effect.acquireRelease(
          Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-rdma-lifetime-"))),
          (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
        )
        const mapped = yield* driver.mapFile({ path: path.join(dir, "f"), offset: 0, size: 1 << 16, create: true })
        assert.strictEqual(binding.liveMappings(), base + 1)
        yield* driver.unmapFile(mapped)
        assert.strictEqual(mapped.byteLength, 0, "detached")
        assert.isTrue(yield* waitUntil(() => binding.liveMappings() === base), "unmapFile()")

        // Dropped without an unmap: the ArrayBuffer's finalizer unmaps it.
        yield* Effect.ignore(driver.mapFile({ path: path.join(dir, "g"), offset: 0, size: 4096, create: true }))
        assert.isTrue(yield* waitUntil(() => binding.liveMappings() === base), "GC")
      }), { timeout: 30_000 })
  })
})
