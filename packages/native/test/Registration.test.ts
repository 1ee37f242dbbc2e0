// What the native driver asks of the addon per registration, checked against a recording binding
// (no device needed): one call to register (the address comes with it, no rpma_mr_get_ptr), one
// to deregister, and both on a worker thread (the *Async entries) for regions of 16 MiB and more.
import { LocalMr, Peer, RdmaError, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

const ADDRESS = 0x7f00_0000_1000n

const recordingBinding = (log: Array<string>) => {
  const record = <A>(name: string, value: A) => () => {
    log.push(name)
    return value
  }
  const registered = () => ({ handle: {}, address: ADDRESS })
  return {
    installLogCapture: () => {},
    getIbvContext: () => Promise.resolve({}),
    peerNew: () => ({}),
    peerDelete: () => {},
    mrReg: () => (log.push("mrReg"), registered()),
    mrRegAsync: () => (log.push("mrRegAsync"), Promise.resolve(registered())),
    mrDereg: record("mrDereg", undefined),
    mrDeregAsync: record("mrDeregAsync", Promise.resolve()),
    mrGetPtr: record("mrGetPtr", ADDRESS)
  } as unknown as RpmaBinding.Binding
}

const withBinding = (binding: RpmaBinding.Binding) =>
  Effect.provide(NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding))))

describe("registration through the native driver", () => {
  it.effect("one addon call each way; 16 MiB and more registered and deregistered off the event loop", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make("192.168.77.1")
        log.length = 0
        for (const size of [4096, 16 * 2 ** 20 - 1, 16 * 2 ** 20, 64 * 2 ** 20]) {
          const address = yield* LocalMr.use(
            peer,
            new Uint8Array(size),
            Usage.WRITE_DST,
            (mr) => Effect.succeed(mr.address)
          )
          assert.strictEqual(address, ADDRESS, "the address comes with the registration")
          yield* Effect.scoped(LocalMr.register(peer, new Uint8Array(size), Usage.WRITE_DST))
        }
      })).pipe(withBinding(recordingBinding(log)))
      const small = ["mrReg", "mrDereg"]
      const large = ["mrRegAsync", "mrDeregAsync"]
      assert.deepStrictEqual(log, [...small, ...small, ...small, ...small, ...large, ...large, ...large, ...large])
    }))

  it.effect("a refused asynchronous deregistration is a ResourceInUseError; the region stays registered", () =>
    Effect.gen(function*() {
      const inUse = Object.assign(new Error("in use"), { operation: "rpma_mr_dereg", inUse: true, detail: "1 request" })
      const binding = {
        ...recordingBinding([]),
        mrDeregAsync: () => {
          throw inUse
        }
      } as RpmaBinding.Binding
      const driver = yield* Effect.provide(
        RdmaDriver,
        NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding)))
      )
      const { handle } = yield* driver.mrReg({} as never, new Uint8Array(16 * 2 ** 20), Usage.WRITE_DST)
      const refused = yield* Effect.flip(driver.mrDereg(handle))
      assert.strictEqual(refused._tag, "ResourceInUseError")
    }))

  it.effect("mrReg.now / mrDereg.now: the addon's synchronous calls, declined for 16 MiB and more; refusals as tagged errors, a bug as a defect", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const inUse = Object.assign(new Error("in use"), { operation: "rpma_mr_dereg", inUse: true, detail: "1 request" })
      let deregFailure: unknown
      const binding = {
        ...recordingBinding(log),
        mrDereg: () => {
          log.push("mrDereg")
          if (deregFailure !== undefined) throw deregFailure
        }
      } as RpmaBinding.Binding
      const driver = yield* Effect.provide(
        RdmaDriver,
        NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding)))
      )
      const regNow = driver.mrReg.now!
      const deregNow = driver.mrDereg.now!
      assert.strictEqual(regNow({} as never, new Uint8Array(16 * 2 ** 20), Usage.WRITE_DST), undefined)
      assert.deepStrictEqual(log, [], "declined before the addon is called")
      const registered = regNow({} as never, new Uint8Array(4096), Usage.WRITE_DST)!
      assert.isTrue(Exit.isSuccess(registered))
      const { address, handle } = (registered as Exit.Success<Driver.Model.MrRegistration, never>).value
      assert.strictEqual(address, ADDRESS)
      deregFailure = inUse
      const refused = deregNow(handle)!
      assert.isTrue(
        Exit.isFailure(refused) && refused.cause._tag === "Fail" && refused.cause.error._tag === "ResourceInUseError"
      )
      deregFailure = Object.assign(new Error("failed"), {
        operation: "rpma_mr_dereg",
        code: RdmaError.RpmaCode.RPMA_E_PROVIDER
      })
      const failed = deregNow(handle)!
      assert.isTrue(
        Exit.isFailure(failed) && failed.cause._tag === "Fail" && failed.cause.error._tag === "RpmaProviderError"
      )
      deregFailure = new TypeError("a bug in the binding")
      const bug = deregNow(handle)!
      assert.isTrue(Exit.isFailure(bug) && bug.cause._tag === "Die")
      deregFailure = undefined
      assert.isTrue(Exit.isSuccess(deregNow(handle)!))
      assert.deepStrictEqual(log, ["mrReg", "mrDereg", "mrDereg", "mrDereg", "mrDereg"])
      // The large region's handle is declined by mrDereg.now too: its deregistration goes to the worker.
      const large = yield* driver.mrReg({} as never, new Uint8Array(16 * 2 ** 20), Usage.WRITE_DST)
      assert.strictEqual(deregNow(large.handle), undefined)
    }))
})
