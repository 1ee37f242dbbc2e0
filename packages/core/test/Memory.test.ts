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
