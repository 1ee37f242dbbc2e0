// librdmacm's verbs API without a device: every endpoint and listener call refuses a value that is
// not its handle, a handle of another kind and bad arguments with a tagged error (EINVAL, saying
// what was wrong), never a crash; what needs the device fails as librdmacm does without one.
import { Descriptor } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { cmErrorOrThrow } from "../src/internal/failures.js"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

type Bad = never
const config: Model.CmEpConfig = {
  timeoutMs: 500,
  maxSendWr: 4,
  maxRecvWr: 4,
  maxSendSge: 2,
  maxRecvSge: 2,
  maxInlineData: 64
}
const descriptor = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 0x01 })

// Each call that takes an endpoint or a listener.
const handleCalls = (driver: Driver, handle: unknown) => ({
  cmConnect: driver.cmConnect(handle as Bad, undefined, 100),
  cmGetRequest: driver.cmGetRequest(handle as Bad),
  cmPrivateData: driver.cmPrivateData(handle as Bad),
  cmAccept: driver.cmAccept(handle as Bad, undefined, 100),
  cmReject: driver.cmReject(handle as Bad, undefined),
  cmNextEvent: driver.cmNextEvent(handle as Bad),
  cmDisconnect: driver.cmDisconnect(handle as Bad),
  cmEpDestroy: driver.cmEpDestroy(handle as Bad),
  cmListenerDestroy: driver.cmListenerDestroy(handle as Bad),
  cmEpInfo: driver.cmEpInfo(handle as Bad),
  cmPollCompletions: driver.cmPollCompletions(handle as Bad),
  cmRegOnEp: driver.cmReg(handle as Bad, "msgs", new Uint8Array(64))
})

const expectEinval = (name: string, effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (error) => {
    assert.strictEqual(error._tag, "RdmaCmError", name)
    assert.strictEqual((error as unknown as { readonly errnoName: string }).errnoName, "EINVAL", name)
    return error as unknown as { readonly detail: string; readonly operation: string }
  })

layer(NativeDriver.layer)("librdmacm endpoints without a device", (it) => {
  describe("values that are not endpoints", () => {
    for (
      const [label, value] of [["null", null], ["undefined", undefined], ["a plain object", {}], [
        "a number",
        7
      ]] as const
    ) {
      it.effect(`${label} is EINVAL for every call`, () =>
        Effect.gen(function*() {
          const driver = yield* RdmaDriver
          for (const [name, call] of Object.entries(handleCalls(driver, value))) {
            const error = yield* expectEinval(name, call)
            if (value === null) assert.match(error.detail, / is NULL$/, name)
          }
        }))
    }

    it.effect("a handle of another kind is refused, naming both kinds", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
        for (const [name, call] of Object.entries(handleCalls(driver, remote))) {
          const error = yield* expectEinval(name, call)
          assert.include(error.detail, "got a mr_remote", name)
        }
        yield* driver.mrRemoteDelete(remote)
      }))
  })

  describe("posting", () => {
    it.effect("a list that is not an array is refused in the outcome, never thrown", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const outcome = driver.cmPostMany({} as Bad, "requests" as Bad)
        assert.strictEqual(outcome.posted, 0)
        assert.strictEqual(outcome.error?.errnoName, "EINVAL")
        assert.include(outcome.error?.detail, "array of work requests")
      }))

    it.effect("a request on something that is not an endpoint names its operation", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const outcome = driver.cmPostMany(null as Bad, [{ op: "recv", id: 1, segments: [] }])
        assert.strictEqual(outcome.posted, 0)
        assert.strictEqual(outcome.error?.errnoName, "EINVAL")
        assert.include(outcome.error?.detail, "cm_ep is NULL")
      }))

    it.effect("arming on something that is not an endpoint answers the refusal later, once", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const answers: Array<Exit.Exit<unknown, unknown>> = []
        driver.cmArmCompletions({} as Bad, (exit) => answers.push(exit))
        assert.strictEqual(answers.length, 0, "never during the call")
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
        assert.strictEqual(answers.length, 1)
        assert.isTrue(Exit.isFailure(answers[0]))
        // Disarming an answered wait does nothing.
        const disarm = driver.cmArmCompletions(undefined as Bad, (exit) => answers.push(exit))
        disarm()
        yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
        assert.strictEqual(answers.length, 1)
      }))
  })

  describe("arguments checked before anything is sent", () => {
    it.effect("private data longer than the CM carries", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const connect = yield* expectEinval("cmConnect", driver.cmConnect({} as Bad, new Uint8Array(57), 100))
        assert.include(connect.detail, "57 bytes")
        const accept = yield* expectEinval("cmAccept", driver.cmAccept({} as Bad, new Uint8Array(197), 100))
        assert.include(accept.detail, "197 bytes")
        yield* expectEinval("cmConnect", driver.cmConnect({} as Bad, "data" as Bad, 100))
      }))

    it.effect("a timeout that is not a non-negative integer", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        for (const timeout of [-1, 1.5, Number.NaN, "100"]) {
          const error = yield* expectEinval("cmConnect", driver.cmConnect({} as Bad, undefined, timeout as Bad))
          assert.include(error.detail, "timeoutMs")
        }
      }))

    it.effect("a bad port, config or address for cmEpCreate and cmListen", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const port = yield* expectEinval("cmEpCreate", driver.cmEpCreate("127.0.0.1", 70000, config))
        assert.include(port.detail, "port")
        const sizes = yield* expectEinval("cmListen", driver.cmListen("127.0.0.1", 0, { ...config, maxSendWr: 0 }))
        assert.include(sizes.detail, "maxSendWr must be at least 1")
        const notConfig = yield* expectEinval("cmEpCreate", driver.cmEpCreate("127.0.0.1", 1, null as Bad))
        assert.include(notConfig.detail, "config must be an object")
        const address = yield* expectEinval("cmEpCreate", driver.cmEpCreate(undefined as Bad, 1, config))
        assert.include(address.detail, "node is NULL")
      }))
  })

  it.effect("without a device, cmEpCreate and cmListen fail as librdmacm does, and nothing stays alive", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const create = yield* Effect.flip(driver.cmEpCreate("127.0.0.1", 7471, config))
      assert.strictEqual(create._tag, "RdmaCmError")
      assert.notStrictEqual(create.errnoName, "ENOSYS")
      const listen = yield* Effect.flip(driver.cmListen("127.0.0.1", 0, config))
      assert.strictEqual(listen._tag, "RdmaCmError")
      assert.notStrictEqual(listen.errnoName, "ENOSYS")
      const live = yield* driver.live
      assert.strictEqual(live.cmEndpoints, 0)
      assert.strictEqual(live.cmListeners, 0)
    }))

  // cmPostWindow called directly, as a hostile caller may: its arrays and count are checked before
  // the endpoint (what needs an open endpoint is in test-device/CmEndpointRaw.test.ts).
  describe("cmPostWindow's arguments", () => {
    const binding = Effect.runSync(RpmaBinding.load())
    const fields = new Float64Array(16)
    /** The tagged error of a call that must be refused with EINVAL, and its `posted` (none). */
    const refused = (call: () => unknown) => {
      let thrown: unknown
      try {
        call()
      } catch (cause) {
        thrown = cause
      }
      assert.isDefined(thrown, "refused")
      assert.isUndefined((thrown as { readonly posted?: unknown }).posted)
      const error = cmErrorOrThrow("rdma_post_send", thrown)
      assert.strictEqual(error._tag, "RdmaCmError")
      assert.strictEqual(error.errnoName, "EINVAL")
      return error.detail ?? ""
    }

    it("arrays of the wrong kind, counts past the array and hostile regions → EINVAL, no crash", () => {
      const post = (...args: Array<unknown>) => () =>
        (binding.cmPostWindow as (...a: Array<unknown>) => number)(...args)
      assert.include(refused(post({}, "regions", fields, 1)), "regions must be an array")
      assert.include(refused(post({}, [], [0, 0, 0, 0, 0, 0, 0, 0], 1)), "must be a Float64Array")
      assert.include(refused(post({}, [], new Float32Array(16), 1)), "must be a Float64Array")
      assert.include(refused(post({}, [], undefined, 1)), "must be a Float64Array")
      for (const count of [3, -1, 1.5, NaN, Infinity, 2 ** 53]) {
        assert.include(refused(post({}, [], fields, count)), "count", String(count))
      }
      assert.include(refused(post({}, [], fields, "1")), "count must be a number")
      assert.include(refused(post({}, [], fields, 1, new BigInt64Array(2))), "must be a BigUint64Array")
      assert.include(refused(post({}, [], fields, 1, [1n])), "must be a BigUint64Array")
      assert.include(refused(post({}, new Proxy([{}], {}), fields, 1)), "regions must be an array")
      const hostile: Array<unknown> = [{}]
      Object.defineProperty(hostile, 0, {
        get() {
          throw new Error("hostile region")
        }
      })
      assert.include(refused(post({}, hostile, fields, 1)), "reading the regions threw")
      assert.include(refused(post({}, Array.from({ length: 5000 }), fields, 1)), "at most 4096 regions")
    })

    it("something that is not an open endpoint → EINVAL naming it", () => {
      for (const ep of [null, undefined, {}, 7, new Float64Array(8)]) {
        refused(() => binding.cmPostWindow(ep, [], fields, 1))
      }
      assert.include(refused(() => binding.cmPostWindow(null, [], fields, 0)), "cm_ep is NULL")
      const remote = binding.mrRemoteFromDescriptor(descriptor)
      assert.include(refused(() => binding.cmPostWindow(remote, [], fields, 1)), "got a mr_remote")
      binding.mrRemoteDelete(remote)
    })
  })
})
