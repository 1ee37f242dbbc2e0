// Every guard in the addon, reached from JavaScript: a wrong handle kind, a closed handle, a
// plain object, null or undefined where C takes a pointer, bad sizes and usages. Each is a tagged
// error (RPMA_E_INVAL for librpma calls, EINVAL for librdmacm calls), never a crash. Without a
// device, the only real handle to misuse is a remote region, plus the driver's allocations.
import { Descriptor } from "@effect-rdma/core"
import { type Driver, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

const descriptor = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 0x01 })

type Bad = never
const bogus: ReadonlyArray<readonly [string, unknown]> = [
  ["null", null],
  ["undefined", undefined],
  ["a plain object", {}],
  ["a number", 42],
  ["a string", "peer"],
  ["a function", () => {}],
  ["a Proxy", new Proxy({}, {})]
]

// Each librpma call that takes a handle, with the kind it expects.
const rpmaCalls = (driver: Driver, handle: unknown) => ({
  peerNew: driver.peerNew(handle as Bad),
  peerDelete: driver.peerDelete(handle as Bad),
  mrReg: driver.mrReg(handle as Bad, new Uint8Array(64), 0x01),
  mrDereg: driver.mrDereg(handle as Bad),
  mrGetDescriptorSize: driver.mrGetDescriptorSize(handle as Bad),
  mrGetDescriptor: driver.mrGetDescriptor(handle as Bad),
  mrGetPtr: driver.mrGetPtr(handle as Bad),
  mrGetSize: driver.mrGetSize(handle as Bad)
})

const cmCalls = (driver: Driver, handle: unknown) => ({
  cmRegMsgs: driver.cmReg(handle as Bad, "msgs", new Uint8Array(64)),
  cmRegRead: driver.cmReg(handle as Bad, "read", new Uint8Array(64)),
  cmRegWrite: driver.cmReg(handle as Bad, "write", new Uint8Array(64)),
  cmDeregMr: driver.cmDeregMr(handle as Bad),
  cmMrInfo: driver.cmMrInfo(handle as Bad)
})

const remoteCalls = (driver: Driver, handle: unknown) => ({
  mrRemoteDelete: driver.mrRemoteDelete(handle as Bad),
  mrRemoteGetSize: driver.mrRemoteGetSize(handle as Bad),
  mrRemoteGetFlushType: driver.mrRemoteGetFlushType(handle as Bad)
})

const expectRpmaInvalid = (name: string, effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (error) => {
    assert.strictEqual(error._tag, "RpmaInvalidError", name)
    return error as unknown as { readonly detail?: string }
  })

const expectEinval = (name: string, effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (error) => {
    assert.strictEqual(error._tag, "RdmaCmError", name)
    assert.strictEqual((error as unknown as { readonly errnoName: string }).errnoName, "EINVAL", name)
    return error as unknown as { readonly detail?: string }
  })

layer(NativeDriver.layer)("misuse gives tagged errors", (it) => {
  describe("values that are not handles", () => {
    for (const [label, value] of bogus) {
      it.effect(`${label} as a librpma handle is RpmaInvalidError`, () =>
        Effect.gen(function*() {
          const driver = yield* RdmaDriver
          for (const [name, call] of Object.entries({ ...rpmaCalls(driver, value), ...remoteCalls(driver, value) })) {
            const error = yield* expectRpmaInvalid(name, call)
            if (value === null || value === undefined) assert.match(error.detail!, / is NULL$/, name)
          }
        }))

      it.effect(`${label} as a librdmacm handle is EINVAL`, () =>
        Effect.gen(function*() {
          const driver = yield* RdmaDriver
          for (const [name, call] of Object.entries(cmCalls(driver, value))) yield* expectEinval(name, call)
        }))
    }
  })

  it.effect("a remote region where another kind is expected is refused, naming both kinds", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      for (const [name, call] of Object.entries(rpmaCalls(driver, remote))) {
        const error = yield* expectRpmaInvalid(name, call)
        assert.include(error.detail, "got a mr_remote", name)
      }
      for (const [name, call] of Object.entries(cmCalls(driver, remote))) {
        const error = yield* expectEinval(name, call)
        assert.include(error.detail, "got a mr_remote", name)
      }
      // Still intact after all that.
      assert.strictEqual(yield* driver.mrRemoteGetSize(remote), 64n)
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("double delete and use after delete are RpmaInvalidError", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      yield* driver.mrRemoteDelete(remote)
      for (const [name, call] of Object.entries(remoteCalls(driver, remote))) {
        const error = yield* expectRpmaInvalid(name, call)
        assert.strictEqual(error.detail, "the mr_remote was already deleted", name)
      }
    }))

  it.effect("an allocation is not a handle", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const memory = yield* driver.allocate(64)
      yield* expectRpmaInvalid("peerDelete", driver.peerDelete(memory as Bad))
      yield* expectEinval("cmDeregMr", driver.cmDeregMr(memory as Bad))
      yield* driver.free(memory)
    }))

  it.effect("a descriptor that is not a Uint8Array is RpmaInvalidError", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      for (const value of [null, undefined, "descriptor", [1, 2, 3], new Uint16Array(21), descriptor.buffer]) {
        yield* expectRpmaInvalid(String(value), driver.mrRemoteFromDescriptor(value as Bad))
      }
    }))

  it.effect("cmReg with an unknown kind is EINVAL", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      yield* expectEinval("cmReg", driver.cmReg({} as Bad, "atomic" as Bad, new Uint8Array(8)))
    }))
})

describe("handles cannot be forged", () => {
  it.effect("their constructor refuses JavaScript callers", () =>
    Effect.gen(function*() {
      const binding = yield* RpmaBinding.load()
      const remote = binding.mrRemoteFromDescriptor(descriptor)
      const Constructor = remote.constructor as new(...args: Array<unknown>) => object
      assert.throws(() => new Constructor(), TypeError, "Illegal constructor")
      assert.throws(() => new Constructor({}), TypeError, "Illegal constructor")
      // An object inheriting from a handle is not a handle.
      assert.throws(() => binding.mrRemoteGetSize(Object.create(remote)), /expected a mr_remote handle/)
      binding.mrRemoteDelete(remote)
    }))

  it.effect("raw errors carry the code, operation and detail", () =>
    Effect.gen(function*() {
      const binding = yield* RpmaBinding.load()
      try {
        binding.peerDelete(null)
        assert.fail("peerDelete(null) returned")
      } catch (error) {
        assert.instanceOf(error, Error)
        assert.deepInclude(error as unknown as Record<string, unknown>, {
          code: -100004,
          operation: "rpma_peer_delete",
          detail: "peer is NULL"
        })
      }
      try {
        binding.cmDeregMr(undefined)
        assert.fail("cmDeregMr(undefined) returned")
      } catch (error) {
        assert.deepInclude(error as Record<string, unknown>, {
          errno: 22,
          operation: "rdma_dereg_mr",
          detail: "cm_mr is NULL"
        })
      }
    }))
})
