import { Memory } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"

const reason = (memory: unknown) =>
  Either.match(Memory.validate(memory), { onLeft: (e) => e.reason, onRight: () => "ok" })

describe("Memory.validate", () => {
  it("accepts memory the caller owns", () => {
    assert.strictEqual(reason(new Uint8Array(64)), "ok")
    assert.strictEqual(reason(Buffer.alloc(64)), "ok")
    assert.strictEqual(reason(Buffer.allocUnsafe(64 * 1024)), "ok")
    assert.strictEqual(reason(new Uint8Array(4096).subarray(128, 256)), "ok")
  })

  it("refuses slices of Node's shared Buffer pool, saying why", () => {
    const pooled = Buffer.allocUnsafe(100)
    assert.strictEqual(reason(pooled), "SharedBufferPool")
    assert.strictEqual(reason(Buffer.from("hello")), "SharedBufferPool")
    const error = Either.getLeft(Memory.validate(pooled))
    assert.isTrue(error._tag === "Some" && /Buffer\.alloc/.test(error.value.message))
  })

  // Issue 31, item 14: the memory's own getters were read, so a subclass could say it was longer,
  // elsewhere, or over another buffer than the bytes it holds.
  it("answers the real view of memory whose getters lie: its own bytes, whatever byteLength, byteOffset or buffer say", () => {
    class Lying extends Uint8Array {
      override get byteLength(): number {
        return 2 ** 30
      }
      override get buffer(): ArrayBuffer {
        return new ArrayBuffer(8)
      }
    }
    // A lie of the object's own, too.
    const lying = Object.defineProperty(new Lying(64), "byteOffset", { value: 4096 })
    const view = Either.getOrThrow(Memory.validate(lying))
    assert.strictEqual(view.byteLength, 64)
    assert.strictEqual(Object.getPrototypeOf(view), Uint8Array.prototype, "a plain Uint8Array")
    view[63] = 7
    assert.strictEqual(lying[63], 7, "over the same bytes")
    // Honest memory is answered as it is.
    const honest = Buffer.alloc(64)
    assert.strictEqual(Either.getOrThrow(Memory.validate(honest)), honest)
  })

  it("refuses a slice of the shared Buffer pool whose buffer getter hides the pool", () => {
    const pooled = Buffer.from("in the pool")
    class Hiding extends Uint8Array {
      override get buffer(): ArrayBuffer {
        return new ArrayBuffer(this.length)
      }
    }
    const hidden = new Hiding(pooled.buffer, pooled.byteOffset, pooled.byteLength)
    assert.strictEqual(reason(hidden), "SharedBufferPool")
    assert.isTrue(Memory.isPoolSlice(hidden))
  })

  it("refuses detached memory and things that are not bytes", () => {
    const bytes = new Uint8Array(16)
    structuredClone(bytes.buffer, { transfer: [bytes.buffer] })
    assert.strictEqual(reason(bytes), "Detached")
    assert.strictEqual(reason(null), "NotBytes")
    assert.strictEqual(reason([1, 2, 3]), "NotBytes")
    // An empty view is not refused here: the driver refuses size 0 as librpma does (RPMA_E_INVAL).
    assert.strictEqual(reason(new Uint8Array(0)), "ok")
  })
})
