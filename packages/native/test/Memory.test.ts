// Driver-owned memory: allocate() is page-aligned, zeroed, and freed exactly once, when neither
// its ArrayBuffer nor any registration holds it.
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../src/NativeDriver.js"

layer(NativeDriver.layer)("allocate and free", (it) => {
  it.effect("gives zeroed memory of the size asked", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const memory = yield* driver.allocate(10_000)
      assert.strictEqual(memory.byteLength, 10_000)
      assert.strictEqual(memory.byteOffset, 0)
      assert.isTrue(memory.every((b) => b === 0))
      memory.fill(0xab) // writable end to end
      yield* driver.free(memory)
    }))

  it.effect("free detaches: JavaScript can no longer reach the memory", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const memory = yield* driver.allocate(4096)
      const view = new Uint8Array(memory.buffer, 100, 10)
      yield* driver.free(memory)
      assert.strictEqual(memory.byteLength, 0)
      assert.strictEqual(view.byteLength, 0)
      assert.strictEqual(memory.buffer.byteLength, 0)
      assert.isUndefined(memory[0])
    }))

  it.effect("free twice is harmless", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const memory = yield* driver.allocate(64)
      yield* driver.free(memory)
      yield* driver.free(memory)
    }))

  it.effect("a size of 0 is RpmaInvalidError", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const error = yield* Effect.flip(driver.allocate(0))
      assert.strictEqual(error._tag, "RpmaInvalidError")
      assert.strictEqual(error.detail, "size is 0")
    }))

  it.effect("sizes that are not positive integers are RpmaInvalidError", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      for (const size of [-1, 1.5, NaN, Infinity, 2 ** 53, "64", null, undefined]) {
        const error = yield* Effect.flip(driver.allocate(size as never))
        assert.strictEqual(error._tag, "RpmaInvalidError", String(size))
      }
    }))

  it.effect("freeing memory it did not allocate is a defect, and leaves the memory alone", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const mine = new Uint8Array(64).fill(1)
      const exit = yield* Effect.exit(driver.free(mine))
      assert.isTrue(exit._tag === "Failure" && exit.cause._tag === "Die")
      assert.strictEqual(mine.byteLength, 64)
      assert.strictEqual(mine[63], 1)
    }))
})
