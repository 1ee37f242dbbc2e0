/**
 * The hostile clients of test/hostile.ts on the simulated driver, over both transports, with the
 * ledger's leak check.
 */
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Effect } from "effect"
import { hostileCases } from "./hostile.js"

for (const transport of ["rpma", "cm"] as const) {
  hostileCases(
    SimulatedDriver.DEFAULT_ADDRESS,
    transport === "rpma" ? 7490 : 7590,
    (effect) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.asVoid, Effect.provide(SimulatedDriver.layer)),
    undefined,
    transport
  )
}
