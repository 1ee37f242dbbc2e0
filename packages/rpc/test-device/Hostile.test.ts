/**
 * The hostile clients of test/hostile.ts on the native driver, on the device at RDMA_ADDRESS (the
 * Soft-RoCE VM), with the driver's handle counts checked after each.
 */
import { NativeDriver } from "@effect-rdma/native"
import { Ledger } from "@effect-rdma/testing"
import { Effect } from "effect"
import { hostileCases } from "../test/hostile.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: device tests run in the Soft-RoCE VM (vm/run)")

hostileCases(
  address,
  7490,
  (effect) =>
    Ledger.checkedOnAnyDriver(Effect.scoped(effect), { within: "5 seconds" }).pipe(
      Effect.asVoid,
      Effect.provide(NativeDriver.layer)
    )
)
