/**
 * The RPC cases of test/cases.ts on the native driver, on the device at RDMA_ADDRESS (the
 * Soft-RoCE VM): an @effect/rpc group served and called over rxe0, over both transports.
 */
import { NativeDriver } from "@effect-rdma/native"
import { Effect } from "effect"
import { cases } from "../test/cases.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined) throw new Error("RDMA_ADDRESS is not set: device tests run in the Soft-RoCE VM (vm/run)")

for (const transport of ["rpma", "cm"] as const) {
  cases(
    address,
    transport === "rpma" ? 7480 : 7580,
    (effect) => Effect.scoped(effect).pipe(Effect.asVoid, Effect.provide(NativeDriver.layer)),
    undefined,
    transport
  )
}
