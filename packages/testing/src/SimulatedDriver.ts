/**
 * A driver that runs without RDMA hardware. It follows the C libraries' rules (the same tagged
 * error for the same bad input, descriptors in librpma's format, plausible addresses and keys),
 * records every live handle in a ledger, and fails the calls a fault plan names.
 *
 * @since 0.1.0
 */
import { Descriptor, RdmaError, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Arguments, RdmaDriver } from "@effect-rdma/core/Driver"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as fabric from "./internal/fabric.js"
import { makeFiles } from "./internal/files.js"
import { makeNetwork } from "./internal/network.js"
import { makeCmEndpoints } from "./internal/cmEndpoints.js"
import { makeTools } from "./internal/tools.js"
import { fanOut, type Link } from "./internal/wire.js"

/**
 * The address the simulated device answers on unless told otherwise. It is also the address the
 * Soft-RoCE virtual machine gives its device, so programs run unchanged on either.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_ADDRESS = "192.168.77.1"

/**
 * The C function a driver call makes, by the name the native driver gives it in its errors: what
 * a fault plan names, and what {@link Simulation.calls} counts.
 *
 * @since 0.1.0
 * @category faults
 */
export type Operation =
  | "rpma_utils_get_ibv_context"
  | "rpma_peer_new"
  | "rpma_peer_delete"
  | "rpma_mr_reg"
  | "rpma_mr_dereg"
  | "rpma_mr_get_descriptor"
  | "rpma_mr_remote_from_descriptor"
  | "rpma_mr_remote_delete"
  | "rdma_create_ep"
  | "rdma_destroy_ep"
  | "rdma_reg_msgs"
  | "rdma_reg_read"
  | "rdma_reg_write"
  | "rdma_dereg_mr"
  | "posix_memalign"
  | "rpma_ep_listen"
  | "rpma_ep_next_conn_req"
  | "rpma_conn_req_new"
  | "rpma_conn_req_connect"
  | "rpma_conn_disconnect"
  // librdmacm's verbs API (rdma_create_ep and rdma_destroy_ep above serve its endpoints too).
  | "rdma_connect"
  | "rdma_listen"
  | "rdma_get_request"
  | "rdma_accept"
  | "rdma_reject"
  | "rdma_disconnect"
  | DataOperation

/**
 * The operations that post a work request, one call per request: `writeMany` and `postMany` make
 * one call of the request's operation (`rpma_write`, `rpma_send`, ...) for each request or span.
 * Only these can fail through their completion ({@link CompleteWithStatus}) or lose their
 * connection ({@link LoseConnection}).
 *
 * @since 1.0.0
 * @category faults
 */
export type DataOperation =
  | "rpma_write"
  | "rpma_read"
  | "rpma_flush"
  | "rpma_atomic_write"
  | "rpma_send"
  | "rpma_recv"
  // An endpoint's requests (librdmacm's verbs API), one call per request of any form (v, imm, inline).
  | "rdma_post_send"
  | "rdma_post_recv"
  | "rdma_post_read"
  | "rdma_post_write"

/**
 * The `nth` call of `operation` returns `code` instead of doing its work, and the driver fails
 * with the tagged error it gives that return value (an `RdmaError` by librpma code for `rpma_*`
 * calls, by errno for `rdma_*` calls and `posix_memalign`), exactly as the native driver does when
 * the library returns it. Nothing is acquired, registered or posted: a failed `rpma_mr_reg` leaves
 * no region, a failed `rpma_write` has no completion.
 *
 * `nth` counts calls of `operation` from when the fault is planned (1: the next one; for
 * {@link Options.faults}, from the driver's start). Every call that reaches the library counts,
 * whether it succeeds or fails; a call the driver refuses before it (a dead handle, an argument out
 * of range) does not. A batch counts one call per request (see {@link DataOperation}).
 *
 * @example
 * ```ts
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // The second registration from now fails as when the device refuses it (RPMA_E_PROVIDER).
 * const refuseRegistration = SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 2, code: -100002 })
 * ```
 *
 * @since 1.0.0
 * @category faults
 */
export interface FailWithCode {
  readonly operation: Operation
  readonly nth: number
  /** A librpma code (`RPMA_E_*`, negative) for `rpma_*` operations, an errno (positive) for the others. */
  readonly code: number
}

/**
 * The `nth` request of `operation` is posted (the call succeeds and its regions are held until
 * its completion) but completes with `completionStatus`, an `ibv_wc_status` (12:
 * IBV_WC_RETRY_EXC_ERR, 10: IBV_WC_REM_ACCESS_ERR, ...), so the operation fails with the
 * completion error for that status. As on a device, a failed request moves the queue pair to the
 * error state: every request after it on that connection completes with IBV_WC_WR_FLUSH_ERR (5),
 * and a failed request always has a completion, even when it was posted unsignalled. `nth` counts
 * as in {@link FailWithCode}.
 *
 * @example
 * ```ts
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // The next read completes as if the remote side refused the access.
 * const remoteAccessError = SimulatedDriver.fail({ operation: "rpma_read", nth: 1, completionStatus: 10 })
 * ```
 *
 * @since 1.0.0
 * @category faults
 */
export interface CompleteWithStatus {
  readonly operation: DataOperation
  readonly nth: number
  readonly completionStatus: number
}

/**
 * The connection is lost just before the `nth` request of `operation` is posted, as when the link
 * or the peer goes away: both sides get their LOST event (the connection's next event), the call
 * itself succeeds, and that request and every request still queued or posted later on the
 * connection complete with IBV_WC_WR_FLUSH_ERR (5). So the operation fails with a completion error
 * for a flush, not with `ConnectionClosedError`; the event says why. `nth` counts as in
 * {@link FailWithCode}.
 *
 * @example
 * ```ts
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // The connection drops under the third write from now (a writeMany of three spans reaches it).
 * const dropUnderWrite = SimulatedDriver.fail({ operation: "rpma_write", nth: 3, loseConnection: true })
 * ```
 *
 * @since 1.0.0
 * @category faults
 */
export interface LoseConnection {
  readonly operation: DataOperation
  readonly nth: number
  readonly loseConnection: true
}

/**
 * The other side of the connection freezes just before the `nth` request of `operation` is posted,
 * as a host that stops (or a link cut without a word): nothing crosses the connection any more, in
 * either direction, and nobody is told. That request and every later one on either side are
 * posted (the call succeeds, its regions are held) but never complete; a disconnect is not heard
 * by the other side. So the operation ends only at a bound: the connection's watchdog declares it
 * LOST after its timeout without a completion (one-sided requests), or the caller's own timeout
 * (a send, a receive). Deleting the connection flushes what it still holds (IBV_WC_WR_FLUSH_ERR),
 * as a queue pair moved to the error state does. On a network shared by several processes
 * (SimulatedNetwork), only this process's side is frozen. `nth` counts as in {@link FailWithCode}.
 *
 * @example
 * ```ts
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // The server stops answering under the next write: it ends at the client's timeout.
 * const freezeUnderWrite = SimulatedDriver.fail({ operation: "rpma_write", nth: 1, freezePeer: true })
 * ```
 *
 * @since 1.0.0
 * @category faults
 */
export interface FreezePeer {
  /** A librpma operation (`rpma_*`): librdmacm's endpoints have no frozen peer yet. */
  readonly operation: Exclude<DataOperation, `rdma_${string}`>
  readonly nth: number
  readonly freezePeer: true
}

/**
 * A planned failure of one call: a return code ({@link FailWithCode}), a failed completion
 * ({@link CompleteWithStatus}), a lost connection ({@link LoseConnection}) or a peer that stops
 * answering ({@link FreezePeer}). Planned with {@link fail} during a test or with
 * {@link Options.faults} from the start; each fault fires once.
 *
 * @since 0.1.0
 * @category faults
 */
export type Fault = FailWithCode | CompleteWithStatus | LoseConnection | FreezePeer

/**
 * @since 0.1.0
 * @category models
 */
export type LedgerEntry = fabric.LedgerEntry

/**
 * Control of a running simulation: plan faults, read the ledger.
 *
 * @since 0.1.0
 * @category models
 */
export interface Simulation {
  /** Makes the `nth` call of an operation, counted from now, fail as `fault` says (see {@link Fault}). */
  readonly fail: (fault: Fault) => Effect.Effect<void>
  /** Peers, regions, remote regions, rdma_cm ids, endpoints, listeners and their regions that are still alive. */
  readonly live: Effect.Effect<ReadonlyArray<LedgerEntry>>
  /** How many times an operation was called. */
  readonly calls: (operation: Operation) => Effect.Effect<number>
}

/**
 * @since 0.1.0
 * @category tags
 */
export class SimulationControl extends Context.Tag("@effect-rdma/testing/SimulationControl")<
  SimulationControl,
  Simulation
>() {}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Addresses with a simulated RDMA device. Default: [{@link DEFAULT_ADDRESS}]. */
  readonly devices?: ReadonlyArray<string> | undefined
  /** Faults planned from the start. */
  readonly faults?: ReadonlyArray<Fault> | undefined
  /** Largest single allocation or registration; above it, RPMA_E_NOMEM / RPMA_E_PROVIDER. Default 4 GiB. */
  readonly maxRegionSize?: number | undefined
}

const { EADDRNOTAVAIL, EINVAL } = RdmaError.Errno

/**
 * Builds a simulated driver and its control.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options?: Options): { readonly driver: Driver.Driver; readonly control: Simulation } =>
  makeLinked(options, undefined)

/**
 * {@link make} with its connections able to reach other processes through `link` (SimulatedNetwork).
 *
 * @internal
 */
export const makeLinked = (
  options: Options | undefined,
  link: Link | undefined
): { readonly driver: Driver.Driver; readonly control: Simulation } => {
  const world = fabric.makeFabric(options?.devices ?? [DEFAULT_ADDRESS])
  for (const fault of options?.faults ?? []) fabric.planFault(world, fault)
  const maxRegionSize = options?.maxRegionSize ?? 2 ** 32

  const tools = makeTools(world)
  const { acquire, acquireNow, call, callNow, deadOrWrong, errno, inUse, invalid, releaseHandle, rpma } = tools
  const { cmIdOf, cmMrOf, getMr, getRemote, liveMr, mrOf, peerOf, remoteOf } = tools
  // Both the connections and librdmacm's endpoints hear the network (started once the driver is made).
  const shared = link === undefined ? undefined : fanOut(link)
  const network = makeNetwork(world, tools, shared?.link)
  const files = makeFiles()

  const deregistered = (mr: fabric.MrLocal) => {
    mr.peer.regions.delete(mr)
    network.deregistered(mr)
    releaseHandle(mr)
  }

  const driver: Driver.Driver = {
    name: "simulated",

    getIbvContext: (address, kind) =>
      call(
        "rpma_utils_get_ibv_context",
        () =>
          typeof address !== "string"
            ? invalid("rpma_utils_get_ibv_context", "address is NULL")
            : kind !== "local" && kind !== "remote"
            ? invalid("rpma_utils_get_ibv_context", `unknown address type ${Arguments.show(kind)}`)
            : undefined,
        (code) => rpma("rpma_utils_get_ibv_context", code, "planned fault"),
        () =>
          world.devices.has(address)
            ? Effect.succeed(
              fabric.track<fabric.IbvContext>({ kind: "IbvContext", id: world.nextId++, alive: true, address })
            )
            : Effect.fail(rpma(
              "rpma_utils_get_ibv_context",
              RdmaError.RpmaCode.RPMA_E_PROVIDER,
              `no RDMA device answers at ${address}`
            ))
      ),

    peerNew: (context) =>
      call(
        "rpma_peer_new",
        () =>
          fabric.asHandle(context, "IbvContext") === undefined
            ? invalid("rpma_peer_new", "ibv_ctx is NULL (not an ibv context handle)")
            : undefined,
        (code) => rpma("rpma_peer_new", code, "planned fault"),
        () => {
          const ctx = fabric.asHandle(context, "IbvContext")!
          const peer: fabric.Peer = { kind: "Peer", id: world.nextId++, alive: true, context: ctx, regions: new Set() }
          return acquire(peer, "Peer", `peer on ${ctx.address}`)
        }
      ),

    peerDelete: (value) =>
      call<void, RdmaError.RpmaError | RdmaError.ResourceInUseError>(
        "rpma_peer_delete",
        () => {
          const peer = peerOf(value)
          const refused = deadOrWrong("rpma_peer_delete", "peer", peer)
          if (refused !== undefined) return refused
          // As the native driver: librpma would free the peer under its users' feet.
          if (peer!.regions.size > 0) {
            const n = peer!.regions.size
            return inUse("rpma_peer_delete", `${n} ${n === 1 ? "region" : "regions"} still registered: deregister them first`)
          }
          const users = network.usersOf(peer!)
          return users === 0 ? undefined : inUse(
            "rpma_peer_delete",
            `${users} ${
              users === 1
                ? "endpoint, connection request or connection still uses it"
                : "endpoints, connection requests or connections still use it"
            }: shut down or delete them first`
          )
        },
        (code) => {
          // librpma frees the peer even when ibv_dealloc_pd fails.
          releaseHandle(peerOf(value)!)
          return rpma("rpma_peer_delete", code, "ibv_dealloc_pd failed (planned fault)")
        },
        () => Effect.sync(() => releaseHandle(peerOf(value)!))
      ),

    // Synchronous (`now`), as the native driver's below its worker threshold: core registers in one step.
    mrReg: Driver.Model.synchronousCall(
      (peerValue, memory, usage) =>
        callNow<Driver.Model.MrRegistration, RdmaError.RpmaError>(
          "rpma_mr_reg",
          () => {
            const refused = deadOrWrong("rpma_mr_reg", "peer", peerOf(peerValue))
            if (refused !== undefined) return refused
            const problem = Arguments.memory(memory) ?? Arguments.usage(usage)
            return problem === undefined ? undefined : invalid("rpma_mr_reg", problem)
          },
          (code) => rpma("rpma_mr_reg", code, "planned fault"),
          () => {
            if (memory.byteLength > maxRegionSize) {
              return Exit.fail(rpma("rpma_mr_reg", RdmaError.RpmaCode.RPMA_E_PROVIDER, "ibv_reg_mr() failed: Cannot allocate memory"))
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
            network.registered(mr)
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
              `${mr.inFlight} ${mr.inFlight === 1 ? "request in flight uses" : "requests in flight use"} this region: ` +
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
      ),

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
            ? errno(operation, EINVAL, `unknown registration kind ${Arguments.show(kind)}`)
            : Arguments.memory(memory) !== undefined
            ? errno(operation, EINVAL, Arguments.memory(memory)!)
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
      }),

    allocate: (size) =>
      call(
        "posix_memalign",
        () =>
          Arguments.allocationSize(size) === undefined
            ? undefined
            : invalid("posix_memalign", Arguments.allocationSize(size)!),
        (code) => rpma("posix_memalign", code, "planned fault"),
        () =>
          size > maxRegionSize
            ? Effect.fail(rpma("posix_memalign", RdmaError.RpmaCode.RPMA_E_NOMEM, `cannot allocate ${size} bytes`))
            : Effect.sync(() => new Uint8Array(size))
      ),
    free: (memory) =>
      Effect.sync(() => {
        // Detach, so that nothing can read or write it any more, as the native driver does.
        if (memory.buffer.byteLength > 0) structuredClone(memory.buffer, { transfer: [memory.buffer as ArrayBuffer] })
      }),

    mapFile: files.mapFile,
    unmapFile: files.unmapFile,
    ...network.calls,
    ...makeCmEndpoints(world, tools, shared?.link),

    live: Effect.sync(() => {
      const count = {
        Peer: 0,
        MrLocal: 0,
        MrRemote: 0,
        CmId: 0,
        CmMr: 0,
        Endpoint: 0,
        ConnReq: 0,
        Conn: 0,
        Srq: 0,
        CmEp: 0,
        CmListener: 0
      }
      for (const entry of world.ledger.values()) count[entry.kind]++
      return {
        peers: count.Peer,
        localRegions: count.MrLocal,
        remoteRegions: count.MrRemote,
        cmIds: count.CmId,
        cmRegions: count.CmMr,
        cmEndpoints: count.CmEp,
        cmListeners: count.CmListener,
        endpoints: count.Endpoint,
        connectionRequests: count.ConnReq,
        connections: count.Conn,
        sharedReceiveQueues: count.Srq
      }
    })
  }

  const control: Simulation = {
    fail: (fault) => Effect.sync(() => fabric.planFault(world, fault)),
    live: Effect.sync(() => Array.from(world.ledger.values())),
    calls: (operation) => Effect.sync(() => world.calls.get(operation) ?? 0)
  }

  shared?.start()
  return { driver, control }
}

/**
 * The simulated driver and its control, as a Layer, with options: devices at other addresses,
 * faults planned from the start, a smaller largest region. Each build is a new, empty world.
 *
 * @example
 * ```ts
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * const TwoDevices = SimulatedDriver.layerWith({ devices: ["10.0.0.1", "10.0.0.2"] })
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerWith = (options: Options): Layer.Layer<RdmaDriver | SimulationControl> =>
  Layer.effectContext(Effect.sync(() => {
    const { control, driver } = make(options)
    return Context.make(RdmaDriver, driver).pipe(Context.add(SimulationControl, control))
  }))

/**
 * The simulated driver and its control, as a Layer: one device at {@link DEFAULT_ADDRESS}, no
 * faults planned. Each build is a new, empty world (a Layer is built once per program that
 * provides it: two programs, or two `Effect.provide`s, get two worlds).
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * const TestLive = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))
 * ```
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<RdmaDriver | SimulationControl> = layerWith({})

/**
 * Plans a fault in the current simulation.
 *
 * @since 0.1.0
 * @category faults
 */
export const fail = (fault: Fault): Effect.Effect<void, never, SimulationControl> =>
  Effect.flatMap(SimulationControl, (s) => s.fail(fault))
