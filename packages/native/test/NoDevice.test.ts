// What this host can check without an RDMA device: the failures librpma and librdmacm report
// when no device answers, through the real libraries.
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../src/NativeDriver.js"

// The host's loopback address: no RDMA device is bound to it here (nor on Soft-RoCE VMs, whose
// device is bound to the NIC's address).
const address = "127.0.0.1"

layer(NativeDriver.layer)("without an RDMA device", (it) => {
  describe("getIbvContext", () => {
    it.effect("is RpmaProviderError, saying that no device answers", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const error = yield* Effect.flip(driver.getIbvContext(address, "local"))
        assert.strictEqual(error._tag, "RpmaProviderError")
        assert.strictEqual(error.operation, "rpma_utils_get_ibv_context")
        assert.include(error.detail, `no RDMA device answers at local address ${address}`)
        // librpma's own reason, captured from its log.
        assert.include(error.detail, "rdma_getaddrinfo")
      }))

    it.effect("for a remote address too", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const error = yield* Effect.flip(driver.getIbvContext(address, "remote"))
        assert.strictEqual(error._tag, "RpmaProviderError")
        assert.include(error.detail, "remote address")
      }))

    it.effect("an unknown kind is RpmaInvalidError, as librpma's unknown type", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const error = yield* Effect.flip(driver.getIbvContext(address, "sideways" as never))
        assert.strictEqual(error._tag, "RpmaInvalidError")
      }))

    it.effect("a null address is RpmaInvalidError", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const error = yield* Effect.flip(driver.getIbvContext(null as never, "local"))
        assert.strictEqual(error._tag, "RpmaInvalidError")
        assert.strictEqual(error.detail, "addr is NULL")
      }))
  })
})
