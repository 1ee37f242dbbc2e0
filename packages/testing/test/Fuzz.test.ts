// The fuzzer on the simulated driver: thousands of runs of random and hostile calls.
import { Conformance, SimulatedDriver } from "@effect-rdma/testing"
import { describe, it } from "@effect/vitest"

describe("fuzz: simulated driver", () => {
  it("2000 runs: no defect, no hang, no leak", async () => {
    await Conformance.fuzz(SimulatedDriver.layer, { address: SimulatedDriver.DEFAULT_ADDRESS, port: 18900, runs: 2000 })
  }, 300_000)
})
