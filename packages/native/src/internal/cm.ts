/**
 * The native driver's librdmacm registration calls (cm.cc): regions on an endpoint's own
 * protection domain.
 */
import type { Driver, Model } from "@effect-rdma/core/Driver"
import type { Binding } from "../RpmaBinding.js"
import { as, cm } from "./addon.js"

const cmOperations = { msgs: "rdma_reg_msgs", read: "rdma_reg_read", write: "rdma_reg_write" } as const

const cmOperationOf = (kind: unknown): string =>
  typeof kind === "string" && Object.hasOwn(cmOperations, kind)
    ? cmOperations[kind as keyof typeof cmOperations]
    : "rdma_reg_msgs"

export const cmCalls = (binding: Binding): Pick<Driver, "cmReg" | "cmDeregMr" | "cmMrInfo"> => ({
  cmReg: (ep, kind, memory) => cm(cmOperationOf(kind), () => as<Model.CmMrHandle>(binding.cmReg(ep, kind, memory))),
  cmDeregMr: (mr) => cm("rdma_dereg_mr", () => binding.cmDeregMr(mr)),
  cmMrInfo: (mr) => cm("ibv_mr", () => binding.cmMrInfo(mr))
})
