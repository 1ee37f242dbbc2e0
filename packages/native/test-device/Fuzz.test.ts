// The fuzzer on the native driver against a device: real handles, fewer runs (each makes a peer,
// regions, an rdma_cm id and an endpoint).
import { Conformance } from "@effect-rdma/testing"
import { describe, it } from "@effect/vitest"
import * as NativeDriver from "../src/NativeDriver.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

describe("fuzz: native driver on a device", () => {
  it("150 runs: no crash, no defect, no hang, no leak", async () => {
    await Conformance.fuzz(NativeDriver.layer, { address, port: 18950, runs: 150, callMillis: 1000 })
  }, 600_000)
})
