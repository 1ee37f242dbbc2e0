/**
 * The hostile clients of test/hostile.ts on the native driver, on the device at RDMA_ADDRESS (the
 * Soft-RoCE VM), over both transports. As for the RPC cases, the native device run checks the driver's handles after
 * each file (a per-case Ledger.checkedOnAnyDriver would wait on the cases' TestClock).
 */
import { NativeDriver } from "@effect-rdma/native"
import { Effect } from "effect"
import { hostileCases } from "../test/hostile.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: device tests run in the Soft-RoCE VM (vm/run)")

for (const transport of ["rpma", "cm"] as const) {
  hostileCases(
    address,
    transport === "rpma" ? 7490 : 7590,
    (effect) => Effect.scoped(effect).pipe(Effect.asVoid, Effect.provide(NativeDriver.layer)),
    undefined,
    transport
  )
}
