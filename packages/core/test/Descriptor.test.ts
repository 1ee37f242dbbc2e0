import { Descriptor, Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ")
const fromHex = (s: string) => Uint8Array.from(s.split(" ").map((h) => parseInt(h, 16)))

const reason = (bytes: Uint8Array, options?: Descriptor.DecodeOptions) =>
  Either.match(Descriptor.validate(bytes, options), { onLeft: (e) => e.reason, onRight: () => "ok" })

describe("Descriptor", () => {
  const example = "00 10 00 00 00 7f 00 00 00 10 00 00 00 00 00 00 34 12 00 00 11"

  it("encodes librpma's format byte for byte", () => {
    const bytes = Descriptor.encode({
      address: 0x7f0000001000n,
      length: 4096n,
      rkey: 0x1234,
      usage: Usage.combine(Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
    })
    assert.strictEqual(hex(bytes), example)
  })

  it("decodes the test vectors", () => {
    assert.deepStrictEqual(
      Descriptor.validate(fromHex(example)),
      Either.right({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: 0x11 as Usage.Usage<never> })
    )
    const max = fromHex("00 00 00 00 00 00 00 00 ff ff ff ff ff ff ff ff ff ff ff ff ff")
    assert.deepStrictEqual(
      Descriptor.validate(max),
      Either.right({ address: 0n, length: 2n ** 64n - 1n, rkey: 0xffffffff, usage: 0xff as Usage.Usage<never> })
    )
    const top = Descriptor.encode({ address: 2n ** 64n - 4096n, length: 4096n, rkey: 1, usage: 1 })
    assert.strictEqual(reason(top), "ok")
  })

  it("refuses what librpma refuses", () => {
    assert.strictEqual(reason(new Uint8Array(20)), "TooShort")
    assert.strictEqual(reason(new Uint8Array(0), { lenient: true }), "TooShort")
    const noUsage = fromHex(example)
    noUsage[20] = 0
    assert.strictEqual(reason(noUsage), "UsageZero")
    assert.strictEqual(reason(noUsage, { lenient: true }), "UsageZero")
    assert.strictEqual(reason(null as any), "NotBytes")
    const error = Either.getLeft(Descriptor.validate(new Uint8Array(3))).pipe((o) => o._tag === "Some" && o.value)
    assert.isTrue(error && error.refusedByLibrpma)
    assert.match(error ? error.message : "", /3 bytes, fewer than the 21/)
  })

  it("refuses to encode a field that does not fit its width, or anything but a descriptor; format says so and never throws", () => {
    const good = { address: 0x1000n, length: 4096n, rkey: 1, usage: 1 }
    const refused: Array<[unknown, string]> = [
      [null, "takes { address, length, rkey, usage }, not null"],
      [{ ...good, address: 2n ** 64n }, "its address must be a bigint from 0 to 2^64 - 1, not 18446744073709551616"],
      [{ ...good, address: -1n }, "its address must be a bigint from 0 to 2^64 - 1, not -1"],
      [{ ...good, length: 4096 }, "its length must be a bigint from 0 to 2^64 - 1, not a number"],
      [{ ...good, rkey: -1 }, "its rkey must be a 32-bit unsigned integer, not -1"],
      [{ ...good, rkey: 1.5 }, "its rkey must be a 32-bit unsigned integer, not 1.5"],
      [{ ...good, usage: 0x100 }, "its usage must be usage flags (an integer from 0 to 255), not 256"]
    ]
    for (const [bad, words] of refused) {
      assert.throws(() => Descriptor.encode(bad as never), `Descriptor.encode: ${words}`)
      assert.strictEqual(Descriptor.format(bad as never), `not a descriptor: ${words}`)
    }
    // What the decoder's checks are tested with still encodes.
    assert.strictEqual(Descriptor.encode({ ...good, length: 0n, usage: 0 }).byteLength, Descriptor.SIZE)
  })

  it("is stricter than librpma unless asked to be lenient", () => {
    const padded = new Uint8Array(196)
    padded.set(fromHex(example))
    assert.strictEqual(reason(padded), "WrongSize")
    assert.strictEqual(reason(padded, { lenient: true }), "ok")
    const empty = Descriptor.encode({ address: 0x1000n, length: 0n, rkey: 1, usage: 1 })
    assert.strictEqual(reason(empty), "LengthZero")
    assert.strictEqual(reason(empty, { lenient: true }), "ok")
    const wraps = Descriptor.encode({ address: 2n ** 64n - 4096n, length: 4097n, rkey: 1, usage: 1 })
    assert.strictEqual(reason(wraps), "AddressOverflow")
    const error = Either.getLeft(Descriptor.validate(wraps))
    assert.isTrue(error._tag === "Some" && !error.value.refusedByLibrpma)
    // Options that cannot be read ask for nothing: strict, and no throw.
    const trapped = new Proxy({}, {
      get: () => {
        throw new Error("a trap")
      }
    })
    assert.strictEqual(reason(padded, trapped), "WrongSize")
  })

  it.prop("random bytes never throw and decode only when valid", [fc.uint8Array({ maxLength: 64 })], ([bytes]) => {
    const strict = Descriptor.validate(bytes)
    const lenient = Descriptor.validate(bytes, { lenient: true })
    assert.strictEqual(Either.isRight(lenient), bytes.length >= 21 && bytes[20] !== 0)
    if (Either.isRight(strict)) {
      assert.strictEqual(bytes.length, 21)
      assert.deepStrictEqual(Descriptor.encode(strict.right), bytes)
    }
  })

  it.prop(
    "round trips are exact",
    [
      fc.bigUint(2n ** 64n - 1n),
      fc.bigUint(2n ** 64n - 1n),
      fc.integer({ min: 0, max: 0xffffffff }),
      fc.integer({
        min: 1,
        max: 0xff
      })
    ],
    ([address, length, rkey, usage]) => {
      const bytes = Descriptor.encode({ address, length, rkey, usage })
      assert.strictEqual(bytes.length, Descriptor.SIZE)
      const decoded = Descriptor.validate(bytes, { lenient: true })
      assert.deepStrictEqual(decoded, Either.right({ address, length, rkey, usage: usage as Usage.Usage<never> }))
      const strictOk = length > 0n && address + length <= 2n ** 64n
      assert.strictEqual(Either.isRight(Descriptor.validate(bytes)), strictOk)
    }
  )
})
