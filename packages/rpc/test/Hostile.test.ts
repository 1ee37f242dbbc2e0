/**
 * The hostile clients of test/hostile.ts on the simulated driver, with the ledger's leak check.
 */
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Effect } from "effect"
import { hostileCases } from "./hostile.js"

hostileCases(
  SimulatedDriver.DEFAULT_ADDRESS,
  7490,
  (effect) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.asVoid, Effect.provide(SimulatedDriver.layer))
)
