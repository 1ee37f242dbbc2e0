/**
 * The simulated driver's memory registrations: local regions (rpma_mr_reg / rpma_mr_dereg, refused
 * while a request in flight uses one, and their descriptors) and remote ones made from a descriptor.
 */
import { Descriptor, RdmaError, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

/**
 * `maxRegionSize`: the largest region ibv_reg_mr takes; `index` keeps the network's rkey
 * index in step with registrations.
 */
export const makeRegionCalls = (
  world: fabric.Fabric,
  tools: Tools,
  maxRegionSize: number,
  index: { readonly registered: (mr: fabric.MrLocal) => void; readonly deregistered: (mr: fabric.MrLocal) => void }
) => {
  const { acquire, acquireNow, call, callNow, deadOrWrong, getMr, getRemote, inUse, invalid, liveMr, mrOf, peerOf } =
    tools
  const { releaseHandle, remoteOf, rpma } = tools

  const deregistered = (mr: fabric.MrLocal) => {
    mr.peer.regions.delete(mr)
    index.deregistered(mr)
    releaseHandle(mr)
  }

  return {
    // Synchronous (`now`), as the native driver's below its worker threshold: core registers in one step.
    mrReg: Driver.Model.synchronousCall(
      (peerValue, given, usage) =>
        callNow<Driver.Model.MrRegistration, RdmaError.RpmaError>(
          "rpma_mr_reg",
          () => {
            const refused = deadOrWrong("rpma_mr_reg", "peer", peerOf(peerValue))
            if (refused !== undefined) return refused
            const problem = Arguments.memory(given) ?? Arguments.usage(usage)
            return problem === undefined ? undefined : invalid("rpma_mr_reg", problem)
          },
          (code) => rpma("rpma_mr_reg", code, "planned fault"),
          () => {
            // The real view: the region is as long as its memory, whatever the given one's getters say.
            const memory = Arguments.realView(given)
            if (memory.byteLength > maxRegionSize) {
              return Exit.fail(
                rpma("rpma_mr_reg", RdmaError.RpmaCode.RPMA_E_PROVIDER, "ibv_reg_mr() failed: Cannot allocate memory")
              )
            }
            const peer = peerOf(peerValue)!
            const mr: fabric.MrLocal = {
              kind: "MrLocal",
              id: world.nextId++,
              alive: true,
              peer,
              memory,
              address: fabric.addressOf(memory),
              rkey: fabric.nextKey(world),
              usage,
              inFlight: 0
            }
            peer.regions.add(mr)
            index.registered(mr)
            const handle = acquireNow(mr, "MrLocal", `${memory.byteLength}-byte region for ${Usage.format(usage)}`)
            return Exit.succeed({ handle, address: mr.address })
          }
        )
    ),

    mrDereg: Driver.Model.synchronousCall(
      (value) =>
        callNow<void, RdmaError.RpmaError | RdmaError.ResourceInUseError>(
          "rpma_mr_dereg",
          () => {
            const { mr, refused } = liveMr("rpma_mr_dereg", value)
            if (refused !== undefined || mr.inFlight === 0) return refused
            return inUse(
              "rpma_mr_dereg",
              `${mr.inFlight} ${
                mr.inFlight === 1 ? "request in flight uses" : "requests in flight use"
              } this region: ` +
                "wait for their completions (or delete the connection) first"
            )
          },
          (code) => {
            // librpma frees the handle even when ibv_dereg_mr fails (mr.c).
            deregistered(mrOf(value)!)
            return rpma("rpma_mr_dereg", code, "ibv_dereg_mr() failed (planned fault)")
          },
          () => {
            deregistered(mrOf(value)!)
            return Exit.void
          }
        )
    ),

    mrGetDescriptorSize: (value) => getMr("rpma_mr_get_descriptor_size", value, () => Descriptor.SIZE),
    mrGetDescriptor: (value) =>
      call(
        "rpma_mr_get_descriptor",
        () => liveMr("rpma_mr_get_descriptor", value).refused,
        (code) => rpma("rpma_mr_get_descriptor", code, "planned fault"),
        () => {
          const mr = mrOf(value)!
          return Effect.succeed(Descriptor.encode({
            address: mr.address,
            length: BigInt(mr.memory.byteLength),
            rkey: mr.rkey,
            usage: mr.usage
          }))
        }
      ),
    mrGetPtr: (value) => getMr("rpma_mr_get_ptr", value, (mr) => mr.address),
    mrGetSize: (value) => getMr("rpma_mr_get_size", value, (mr) => mr.memory.byteLength),

    mrRemoteFromDescriptor: (bytes) =>
      call(
        "rpma_mr_remote_from_descriptor",
        () => {
          // librpma's own checks only: at least 21 bytes and a non-zero usage.
          const decoded = Descriptor.validate(bytes, { lenient: true })
          return decoded._tag === "Left"
            ? invalid("rpma_mr_remote_from_descriptor", decoded.left.message)
            : undefined
        },
        (code) => rpma("rpma_mr_remote_from_descriptor", code, "planned fault"),
        () => {
          const d = Either.getOrThrow(Descriptor.validate(bytes, { lenient: true }))
          const remote: fabric.MrRemote = {
            kind: "MrRemote",
            id: world.nextId++,
            alive: true,
            address: d.address,
            length: d.length,
            rkey: d.rkey,
            usage: d.usage
          }
          return acquire(remote, "MrRemote", `remote region ${Descriptor.format(d)}`)
        }
      ),
    mrRemoteDelete: (value) =>
      call(
        "rpma_mr_remote_delete",
        () => deadOrWrong("rpma_mr_remote_delete", "remote memory region", remoteOf(value)),
        (code) => {
          releaseHandle(remoteOf(value)!)
          return rpma("rpma_mr_remote_delete", code, "planned fault")
        },
        () => Effect.sync(() => releaseHandle(remoteOf(value)!))
      ),
    mrRemoteGetSize: (value) => getRemote("rpma_mr_remote_get_size", value, (mr) => mr.length),
    mrRemoteGetFlushType: (value) =>
      getRemote(
        "rpma_mr_remote_get_flush_type",
        value,
        (mr) => mr.usage & (Usage.Flags.FLUSH_TYPE_VISIBILITY | Usage.Flags.FLUSH_TYPE_PERSISTENT)
      )
  } satisfies Partial<Driver.Driver>
}
