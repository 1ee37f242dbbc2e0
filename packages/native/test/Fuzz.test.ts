// The fuzzer on the native driver without a device: every call still reaches the addon's guards.
import { Conformance } from "@effect-rdma/testing"
import { describe, it } from "@effect/vitest"
import * as NativeDriver from "../src/NativeDriver.js"

describe("fuzz: native driver, no device", () => {
  it("100 runs (FUZZ_RUNS=2000 for more): no crash, no defect, no hang, no leak", async () => {
    await Conformance.fuzz(NativeDriver.layer, {
      address: "127.0.0.1",
      port: 18900,
      device: false,
      runs: Number(process.env.FUZZ_RUNS ?? 100)
    })
  }, 600_000)
})
