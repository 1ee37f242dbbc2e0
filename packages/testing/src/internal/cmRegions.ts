/**
 * The simulated driver's registrations on librdmacm endpoints (rdma_reg_msgs / rdma_reg_read /
 * rdma_reg_write on an endpoint, rdma_dereg_mr), with librdmacm's errno values.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

const { EINVAL } = RdmaError.Errno

export const makeCmRegionCalls = (world: fabric.Fabric, tools: Tools) => {
  const { acquire, call, cmMrOf, errno, releaseHandle } = tools
  return {
    cmReg: (idValue, kind, given) => {
      const operation = kind === "msgs" ? "rdma_reg_msgs" : kind === "read" ? "rdma_reg_read" : "rdma_reg_write"
      return call(
        operation,
        () => {
          // The endpoint's own protection domain.
          const id = fabric.asHandle(idValue, "CmEp")
          return id === undefined || !id.alive
            ? errno(
              operation,
              EINVAL,
              id === undefined ? "expected an rdma_cm endpoint" : "the endpoint was already destroyed"
            )
            : kind !== "msgs" && kind !== "read" && kind !== "write"
            ? errno(operation, EINVAL, `unknown registration kind ${Arguments.show(kind)}`)
            : Arguments.memory(given) !== undefined
            ? errno(operation, EINVAL, Arguments.memory(given)!)
            : undefined
        },
        (code) => errno(operation, code, "planned fault"),
        () => {
          const id = fabric.asHandle(idValue, "CmEp")!
          // The real view: the region is as long as its memory, whatever the given one's getters say.
          const memory = Arguments.realView(given)
          const mr: fabric.CmMr = {
            kind: "CmMr",
            id: world.nextId++,
            alive: true,
            cmId: id,
            access: kind,
            memory,
            address: fabric.addressOf(memory),
            lkey: fabric.nextKey(world),
            rkey: kind === "msgs" ? 0 : fabric.nextKey(world)
          }
          id.regions.add(mr)
          return acquire(mr, "CmMr", `${memory.byteLength}-byte ${operation} region`)
        }
      )
    },
    cmDeregMr: (value) =>
      call(
        "rdma_dereg_mr",
        () => {
          const mr = cmMrOf(value)
          return mr === undefined || !mr.alive
            ? errno("rdma_dereg_mr", EINVAL, mr === undefined ? "expected an rdma_cm region" : "already deregistered")
            : undefined
        },
        (code) => {
          const mr = cmMrOf(value)!
          mr.cmId.regions.delete(mr)
          releaseHandle(mr)
          return errno("rdma_dereg_mr", code, "planned fault")
        },
        () =>
          Effect.sync(() => {
            const mr = cmMrOf(value)!
            mr.cmId.regions.delete(mr)
            releaseHandle(mr)
          })
      ),
    cmMrInfo: (value) =>
      Effect.suspend(() => {
        const mr = cmMrOf(value)
        return mr === undefined || !mr.alive
          ? Effect.fail(errno("rdma_cm region", EINVAL, "not a live rdma_cm region"))
          : Effect.succeed({ address: mr.address, length: mr.memory.byteLength, lkey: mr.lkey, rkey: mr.rkey })
      })
  } satisfies Partial<Driver.Driver>
}
