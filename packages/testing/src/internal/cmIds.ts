/**
 * The simulated driver's rdma_cm identifiers and their registrations (rdma_create_ep without a queue
 * pair, rdma_reg_msgs / rdma_reg_read / rdma_reg_write on an identifier or an endpoint, rdma_dereg_mr),
 * with librdmacm's errno values.
 *
 * @internal
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import type * as RdmaError from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

// The errno values librdmacm reports.
const EINVAL = 22
const EADDRNOTAVAIL = 99

/** @internal */
export const makeCmIdCalls = (world: fabric.Fabric, tools: Tools) => {
  const { acquire, call, cmIdOf, cmMrOf, errno, inUse, releaseHandle } = tools
  return {
    cmCreateId: (address) =>
      call(
        "rdma_create_ep",
        () => typeof address !== "string" ? errno("rdma_getaddrinfo", EINVAL, "address is NULL") : undefined,
        (code) => errno("rdma_create_ep", code, "planned fault"),
        () => {
          if (!world.devices.has(address)) {
            return Effect.fail(errno("rdma_create_ep", EADDRNOTAVAIL, `no RDMA device answers at ${address}`))
          }
          const id: fabric.CmId = { kind: "CmId", id: world.nextId++, alive: true, address, regions: new Set() }
          return acquire(id, "CmId", `rdma_cm id bound to ${address}`)
        }
      ),
    cmDestroyId: (value) =>
      call<void, RdmaError.RdmaCmError | RdmaError.ResourceInUseError>(
        "rdma_destroy_ep",
        () => {
          const id = cmIdOf(value)
          return id === undefined || !id.alive
            ? errno("rdma_destroy_ep", EINVAL, id === undefined ? "expected an rdma_cm id" : "the id was already destroyed")
            : id.regions.size > 0
            ? inUse(
              "rdma_destroy_ep",
              `${id.regions.size} ${id.regions.size === 1 ? "region" : "regions"} still registered: deregister them first`
            )
            : undefined
        },
        (code) => {
          releaseHandle(cmIdOf(value)!)
          return errno("rdma_destroy_ep", code, "planned fault")
        },
        () => Effect.sync(() => releaseHandle(cmIdOf(value)!))
      ),
    cmReg: (idValue, kind, memory) => {
      const operation = kind === "msgs" ? "rdma_reg_msgs" : kind === "read" ? "rdma_reg_read" : "rdma_reg_write"
      return call(
        operation,
        () => {
          // A bound identifier's protection domain, or an endpoint's own.
          const id = cmIdOf(idValue) ?? fabric.asHandle(idValue, "CmEp")
          return id === undefined || !id.alive
            ? errno(operation, EINVAL, id === undefined ? "expected an rdma_cm id or endpoint" : "the id was already destroyed")
            : kind !== "msgs" && kind !== "read" && kind !== "write"
            ? errno(operation, EINVAL, `unknown registration kind ${DriverArguments.show(kind)}`)
            : DriverArguments.memory(memory) !== undefined
            ? errno(operation, EINVAL, DriverArguments.memory(memory)!)
            : undefined
        },
        (code) => errno(operation, code, "planned fault"),
        () => {
          const id = cmIdOf(idValue) ?? fabric.asHandle(idValue, "CmEp")!
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
