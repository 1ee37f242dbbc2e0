/**
 * The native driver's shared receive queue calls (srq.cc): creation and deletion. Receives are
 * posted and completions read through ./queues.ts, as a connection's.
 */
import { Arguments, type Driver, type Model } from "@effect-rdma/core/Driver"
import type { Binding } from "../RpmaBinding.js"
import { as, attempt, rpma } from "./addon.js"
import { inUseOr, invalidArgument, rpmaFailure } from "./failures.js"

export const srqCalls = (binding: Binding): Pick<Driver, "srqNew" | "srqDelete"> => ({
  // The sizes are checked with core's words first, as the simulated driver does.
  srqNew: (peer, config) =>
    rpma("rpma_srq_new", () => {
      const refused = Arguments.srqConfig(config)
      if (refused !== undefined) throw invalidArgument("rpma_srq_new", refused)
      return as<Model.SrqHandle>(binding.srqNew(peer, config))
    }),
  srqDelete: (srq) => attempt(() => binding.srqDelete(srq), inUseOr("rpma_srq_delete", rpmaFailure("rpma_srq_delete")))
})
