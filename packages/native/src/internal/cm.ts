/**
 * The native driver's librdmacm calls (cm.cc): an rdma_cm id with its own protection domain, and
 * regions registered on it for the message path.
 */
import type { Driver, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { as, attempt, attemptPromise, cm } from "./addon.js"
import { cmFailure, inUseOr } from "./failures.js"

const cmOperations = { msgs: "rdma_reg_msgs", read: "rdma_reg_read", write: "rdma_reg_write" } as const

const cmOperationOf = (kind: unknown): string =>
  typeof kind === "string" && Object.hasOwn(cmOperations, kind) ? cmOperations[kind as keyof typeof cmOperations] : "rdma_reg_msgs"

export const cmCalls = (binding: Binding): Pick<Driver, "cmCreateId" | "cmDestroyId" | "cmReg" | "cmDeregMr" | "cmMrInfo"> => ({
  cmCreateId: (address) =>
    attemptPromise(() => binding.cmCreateId(address), cmFailure("rdma_create_ep")).pipe(Effect.map(as<Model.CmIdHandle>)),
  cmDestroyId: (id) => attempt(() => binding.cmDestroyId(id), inUseOr("rdma_destroy_ep", cmFailure("rdma_destroy_ep"))),
  cmReg: (id, kind, memory) => cm(cmOperationOf(kind), () => as<Model.CmMrHandle>(binding.cmReg(id, kind, memory))),
  cmDeregMr: (mr) => cm("rdma_dereg_mr", () => binding.cmDeregMr(mr)),
  cmMrInfo: (mr) => cm("ibv_mr", () => binding.cmMrInfo(mr))
})
