// rdma_cm's private-data limits are written once for the TypeScript side (core's
// Arguments.PRIVATE_DATA_LIMIT, which the simulated driver reads) and once for the addon
// (private_data.h, used by conn_req.cc and cm_ep.cc): the two must say the same, or the drivers
// would refuse different private data.
import { Arguments } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as RpmaBinding from "../src/RpmaBinding.js"

describe("private-data limits", () => {
  it.effect("the addon's are core's", () =>
    Effect.gen(function*() {
      const binding = yield* RpmaBinding.load()
      assert.deepStrictEqual({ ...binding.privateDataLimits }, { ...Arguments.PRIVATE_DATA_LIMIT })
    }))
})
