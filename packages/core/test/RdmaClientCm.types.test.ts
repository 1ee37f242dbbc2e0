/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 * A `"cm"` client's regions are keys of one access each (rdma_reg_write or rdma_reg_read).
 */
import { RdmaClient, Usage } from "@effect-rdma/core"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"

const offer = Effect.succeed<RdmaClient.Offer>({
  rdma: { address: "192.168.77.1", port: 7471 },
  regions: {},
  config: {}
})

const reconnect = Schedule.spaced("1 second")

export const typeTests = () => {
  RdmaClient.make({ transport: "cm", offer, reconnect, regions: { log: Usage.WRITE_DST, snap: Usage.READ_SRC } })
  // @ts-expect-error a librdmacm key allows one access: a region of both does not compile
  RdmaClient.make({
    transport: "cm",
    offer,
    reconnect,
    regions: { log: Usage.combine(Usage.WRITE_DST, Usage.READ_SRC) }
  })
  // @ts-expect-error nor one with a flush type (rpma_flush is librpma's)
  RdmaClient.make({
    transport: "cm",
    offer,
    regions: { log: Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY) }
  })
  // The librpma client takes both.
  RdmaClient.make({
    offer,
    reconnect,
    regions: { log: Usage.combine(Usage.WRITE_DST, Usage.READ_SRC) },
    peer: undefined as never
  })
}

describe("RdmaClient over librdmacm, types", () => {
  it("compiles (the checks are the @ts-expect-error lines above)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
