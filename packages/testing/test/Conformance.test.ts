/**
 * The conformance suite on the simulated driver. The same cases run on the native driver in the
 * Soft-RoCE virtual machine (packages/native/test-device).
 */
import { Conformance, SimulatedDriver } from "@effect-rdma/testing"
import { describe, it } from "@effect/vitest"

describe("conformance: simulated driver", () => {
  for (const testCase of Conformance.cases) {
    // As on the device: a case's own bounds (20 s at most) fail it with their message first.
    it.effect(
      testCase.name,
      () => Conformance.runCase(testCase, SimulatedDriver.layer, SimulatedDriver.DEFAULT_ADDRESS),
      { timeout: 30_000 }
    )
  }
})
