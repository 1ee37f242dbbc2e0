// Memory.mapFile on the native driver, without a device: a MAP_SHARED mapping whose writes reach
// the file, msync'd and unmapped with its scope, and the errors of the conformance suite. (When
// munmap happens: MemoryLifetime.test.ts.)
import { Memory } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { Conformance } from "@effect-rdma/testing"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as NativeDriver from "../src/NativeDriver.js"

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-rdma-mapfile-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

describe("Memory.mapFile on the native driver", () => {
  layer(NativeDriver.layer)((it) => {
    it.scoped("a shared mapping: the file sees writes before the unmap", () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, "f")
        const memory = yield* Effect.scoped(Effect.gen(function*() {
          const memory = yield* Memory.mapFile({ path: file, size: 1 << 16, create: true })
          memory.set(new TextEncoder().encode("persist me"), 4096)
          // MAP_SHARED: another reader of the file sees the bytes at once, no unmap needed.
          assert.strictEqual(fs.readFileSync(file).subarray(4096, 4106).toString(), "persist me")
          return memory
        }))
        assert.strictEqual(memory.byteLength, 0, "detached")
        assert.strictEqual(fs.statSync(file).mode & 0o777, 0o600, "a created file is the owner's alone")
      }))

    it.effect("unmapFile: twice is nothing; memory it did not map is refused", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const error = yield* Effect.flip(driver.unmapFile(new Uint8Array(8)))
        assert.strictEqual(error.reason, "Invalid")
        yield* Effect.scoped(Effect.gen(function*() {
          const dir = yield* tempDir
          const memory = yield* driver.mapFile({ path: path.join(dir, "h"), offset: 0, size: 4096, create: true })
          yield* driver.unmapFile(memory)
          yield* driver.unmapFile(memory)
        }))
      }))
  })

  const errors = Conformance.cases.find((c) => c.name.startsWith("Memory.mapFile: missing"))!
  it.effect("the conformance suite's errors, on the native driver", () =>
    Conformance.runCase(errors, NativeDriver.layer, "127.0.0.1"))
})
