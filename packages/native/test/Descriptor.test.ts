// rpma_mr_remote_from_descriptor and its getters need no device: they run against the real
// librpma here, and are compared with core's codec.
import { Descriptor } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FastCheck from "effect/FastCheck"
import * as NativeDriver from "../src/NativeDriver.js"

const FLUSH_TYPES = 0x10 | 0x20

const descriptor = Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: 0x11 })

layer(NativeDriver.layer)("descriptors through librpma", (it) => {
  it.effect("decode, size, flush type, delete", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      assert.strictEqual(yield* driver.mrRemoteGetSize(remote), 4096n)
      assert.strictEqual(yield* driver.mrRemoteGetFlushType(remote), 0x10)
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("a size past 2^53 comes back exact, as a bigint", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const length = (1n << 63n) + 7n
      const remote = yield* driver.mrRemoteFromDescriptor(
        Descriptor.encode({ address: 0n, length, rkey: 1, usage: 0x20 | 0x08 })
      )
      assert.strictEqual(yield* driver.mrRemoteGetSize(remote), length)
      assert.strictEqual(yield* driver.mrRemoteGetFlushType(remote), 0x20)
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("trailing bytes are ignored, as librpma does", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const padded = new Uint8Array(32)
      padded.set(descriptor)
      padded.fill(0xff, 21)
      const remote = yield* driver.mrRemoteFromDescriptor(padded)
      assert.strictEqual(yield* driver.mrRemoteGetSize(remote), 4096n)
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("a short descriptor is RpmaInvalidError with librpma's reason", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const error = yield* Effect.flip(driver.mrRemoteFromDescriptor(descriptor.subarray(0, 20)))
      assert.strictEqual(error._tag, "RpmaInvalidError")
      assert.include(error.detail, "incorrect size of the descriptor: 20 bytes")
    }))

  it.effect("a usage of 0 is RpmaInvalidError", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const zero = descriptor.slice()
      zero[20] = 0
      const error = yield* Effect.flip(driver.mrRemoteFromDescriptor(zero))
      assert.strictEqual(error._tag, "RpmaInvalidError")
      assert.include(error.detail, "usage")
    }))

  it.effect("the live count follows decode and delete", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      // Other tests run concurrently: at least this one is live.
      assert.isAtLeast((yield* driver.live).remoteRegions, 1)
      yield* driver.mrRemoteDelete(remote)
    }))

  describe("differential: librpma and core's lenient codec agree", () => {
    // Lengths 0..40 straddle the 21-byte minimum; the usage byte is often forced to 0.
    const bytes = FastCheck.tuple(FastCheck.uint8Array({ minLength: 0, maxLength: 40 }), FastCheck.boolean()).map(
      ([b, zeroUsage]) => {
        if (zeroUsage && b.length > 20) b[20] = 0
        return b
      }
    )

    it.effect.prop("same verdict, same length and flush type", [bytes], ([b]) =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const ours = Descriptor.validate(b, { lenient: true })
        const theirs = yield* Effect.either(driver.mrRemoteFromDescriptor(b))
        if (Either.isLeft(ours)) {
          assert.strictEqual(Either.isLeft(theirs), ours.left.refusedByLibrpma, ours.left.reason)
          if (Either.isLeft(theirs)) assert.strictEqual(theirs.left._tag, "RpmaInvalidError")
          if (Either.isRight(theirs)) yield* driver.mrRemoteDelete(theirs.right)
          return
        }
        assert.isTrue(Either.isRight(theirs), "librpma refused what core accepts")
        if (Either.isLeft(theirs)) return
        // librpma exposes only the length and the flush type of a remote region; the address and
        // rkey stay inside struct rpma_mr_remote.
        assert.strictEqual(yield* driver.mrRemoteGetSize(theirs.right), ours.right.length)
        assert.strictEqual(yield* driver.mrRemoteGetFlushType(theirs.right), ours.right.usage & FLUSH_TYPES)
        yield* driver.mrRemoteDelete(theirs.right)
      }), { fastCheck: { numRuns: 2000 }, timeout: 60_000 })
  })
})
