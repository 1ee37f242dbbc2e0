import { RemoteKey } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, FastCheck as fc } from "effect"

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ")

const refusedField = (bytes: Uint8Array) => {
  const exit = Effect.runSyncExit(RemoteKey.decode(bytes))
  if (Exit.isSuccess(exit)) return "ok"
  const error = exit.cause._tag === "Fail" ? exit.cause.error : undefined
  assert.strictEqual(error?._tag, "InvalidRemoteKeyError")
  assert.include(error!.message, error!.field)
  return error!.field
}

describe("RemoteKey", () => {
  const key: RemoteKey.RemoteKey<"write"> = { address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, access: "write" }
  const example = "01 02 00 00 34 12 00 00 00 10 00 00 00 7f 00 00 00 10 00 00 00 00 00 00"

  it("encodes version, access, rkey, address and length little-endian in 24 bytes", () => {
    assert.strictEqual(hex(RemoteKey.encode(key)), example)
  })

  it("refuses to encode a key whose fields do not fit, or anything but a key, saying which; require fails on no key", () => {
    const refused: Array<[unknown, string]> = [
      [null, "takes a RemoteKey (RemoteKey.make, RemoteKey.decode), not null"],
      [{ ...key, access: "msgs" }, `its access must be "read" or "write"`],
      [{ ...key, rkey: 2 ** 32 }, "its rkey must be a 32-bit unsigned integer, not 4294967296"],
      [{ ...key, rkey: -1 }, "its rkey must be a 32-bit unsigned integer, not -1"],
      [{ ...key, address: 2n ** 64n }, "its address must be a bigint from 0 to 2^64 - 1"],
      [{ ...key, length: 4096 }, "its length must be a bigint from 0 to 2^64 - 1, not a number"]
    ]
    for (const [bad, words] of refused) {
      assert.throws(() => RemoteKey.encode(bad as never), `RemoteKey.encode: ${words}`)
      assert.throws(() => RemoteKey.encode(bad as never), /IllegalArgumentException|RemoteKey.encode/)
    }
    for (const notARegion of [null, 5, {}]) {
      assert.throws(
        () => RemoteKey.make(notARegion as never),
        "RemoteKey.make: takes a region of CmEndpoint.registerRead"
      )
    }
    const exit = Effect.runSyncExit(RemoteKey.require("write")(null as never))
    assert.isTrue(
      Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error._tag === "InvalidRemoteKeyError"
    )
  })

  it("decodes what it encodes, for every key", () => {
    fc.assert(fc.property(
      fc.bigInt({ min: 0n, max: 2n ** 63n }),
      fc.bigInt({ min: 1n, max: 2n ** 63n }),
      fc.integer({ min: 0, max: 2 ** 32 - 1 }),
      fc.constantFrom("read" as const, "write" as const),
      (address, length, rkey, access) => {
        const k = { address, length, rkey, access }
        assert.deepStrictEqual(Effect.runSync(RemoteKey.decode(RemoteKey.encode(k))), k)
      }
    ))
  })

  it("refuses bad bytes, naming the field", () => {
    const good = RemoteKey.encode(key)
    const with_ = (at: number, value: number) => {
      const b = good.slice()
      b[at] = value
      return b
    }
    assert.strictEqual(refusedField(good), "ok")
    assert.strictEqual(refusedField(good.subarray(0, 23)), "bytes")
    assert.strictEqual(refusedField(new Uint8Array(56).fill(0).map((_, i) => good[i] ?? 0)), "bytes")
    assert.strictEqual(refusedField("not bytes" as unknown as Uint8Array), "bytes")
    assert.strictEqual(refusedField(with_(0, 2)), "version")
    assert.strictEqual(refusedField(with_(1, 0)), "access")
    assert.strictEqual(refusedField(with_(1, 3)), "access")
    assert.strictEqual(refusedField(with_(3, 1)), "reserved")
    const zero = good.slice()
    zero.fill(0, 16, 24)
    assert.strictEqual(refusedField(zero), "length")
    const wraps = good.slice()
    wraps.fill(0xff, 8, 16)
    assert.strictEqual(refusedField(wraps), "address")
  })

  it("narrows a key to the access it allows", () => {
    const decoded = Effect.runSync(RemoteKey.decode(RemoteKey.encode(key)))
    const writable = Effect.runSync(RemoteKey.require("write")(decoded))
    assert.strictEqual(writable.access, "write")
    const exit = Effect.runSyncExit(RemoteKey.require("read")(decoded))
    assert.isTrue(Exit.isFailure(exit))
  })
})
