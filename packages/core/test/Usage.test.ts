import { Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either } from "effect"

describe("Usage", () => {
  it("has librpma's values", () => {
    assert.deepStrictEqual(
      [
        Usage.READ_SRC,
        Usage.READ_DST,
        Usage.WRITE_SRC,
        Usage.WRITE_DST,
        Usage.FLUSH_TYPE_VISIBILITY,
        Usage.FLUSH_TYPE_PERSISTENT,
        Usage.SEND,
        Usage.RECV
      ],
      [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80]
    )
  })

  it("combines, tests membership and prints", () => {
    const u = Usage.combine(Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
    assert.strictEqual(u, 0x11)
    assert.isTrue(Usage.has(u, "READ_SRC"))
    assert.isFalse(Usage.has(u, "WRITE_DST"))
    assert.isTrue(Usage.includes(u, Usage.READ_SRC))
    assert.isFalse(Usage.includes(u, Usage.combine(Usage.READ_SRC, Usage.SEND)))
    assert.deepStrictEqual(Usage.flags(u), ["READ_SRC", "FLUSH_TYPE_VISIBILITY"])
    assert.strictEqual(Usage.format(u), "READ_SRC|FLUSH_TYPE_VISIBILITY (0x11)")
    assert.strictEqual(Usage.of("SEND", "RECV"), 0xc0)
    assert.strictEqual(Usage.format(0x100), "0x100 (0x100)")
  })

  it("validates numbers from outside", () => {
    assert.deepStrictEqual(Usage.validate(0x11), Either.right(0x11 as any))
    assert.deepStrictEqual(Usage.validate(0xff), Either.right(0xff as any))
    const reason = (v: unknown) => Either.match(Usage.validate(v), { onLeft: (e) => e.reason, onRight: () => "ok" })
    assert.strictEqual(reason(0), "Zero")
    assert.strictEqual(reason(1.5), "NotAnInteger")
    assert.strictEqual(reason("1"), "NotAnInteger")
    assert.strictEqual(reason(Number.NaN), "NotAnInteger")
    assert.strictEqual(reason(0x100), "UnknownBits")
    assert.strictEqual(reason(-1), "UnknownBits")
  })

  it.effect("decode fails with a tagged error that says what was wrong", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Usage.decode(0x1ff))
      assert.strictEqual(error._tag, "InvalidUsageError")
      assert.match(error.message, /outside 0xff/)
      const zero = yield* Effect.flip(Usage.decode(0))
      assert.match(zero.message, /at least one RPMA_MR_USAGE_\* flag/)
    }))
})
