// The driver conformance suite (@effect-rdma/testing) on the native driver: the cases the
// simulated driver passes, against a real device at RDMA_ADDRESS.
import { Conformance } from "@effect-rdma/testing"
import { describe, it } from "@effect/vitest"
import * as NativeDriver from "../src/NativeDriver.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

describe("conformance: native driver", () => {
  for (const testCase of Conformance.cases) {
    it.effect(testCase.name, () => Conformance.runCase(testCase, NativeDriver.layer, address), { timeout: 30_000 })
  }
})
