/**
 * An @effect/rpc group served and called over RDMA on the simulated fabric: plain calls, typed
 * errors, streams, messages larger than a receive buffer and than the landing region, both
 * serializations, a server that goes away, and nothing left registered afterwards (the ledger).
 */
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Effect } from "effect"
import { cases } from "./cases.js"

cases(
  SimulatedDriver.DEFAULT_ADDRESS,
  7480,
  (effect) => Ledger.checked(Effect.scoped(effect)).pipe(Effect.asVoid, Effect.provide(SimulatedDriver.layer))
)
