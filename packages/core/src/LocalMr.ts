/**
 * A local memory registration (`struct rpma_mr_local`): memory the device may read or write, with
 * the usage it was registered for in its type. It lives at least as long as its Scope, and no
 * longer than its last user: the finalizer deregisters it (rpma_mr_dereg) on success, failure,
 * defect and interruption, or once the last request in flight that names it has completed.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import type * as MetricLabel from "effect/MetricLabel"
import type { Pipeable } from "effect/Pipeable"
import type * as Scope from "effect/Scope"
import * as Descriptors from "./Descriptor.js"
import { type Driver, RdmaDriver } from "./Driver.js"
import { type MrRegistration } from "./DriverModel.js"
import * as handles from "./internal/handles.js"
import * as instrument from "./internal/instrument.js"
import { isLocalMr as isLocalMrImpl, Region, TypeId as typeId } from "./internal/localMr.js"
import * as Owner from "./internal/owner.js"
import { ownerOf as peerOwner } from "./internal/peer.js"
import * as pins from "./internal/pins.js"
import { type Policy, releaseNowThen } from "./internal/release.js"
import { notALocalMr, notAPeer, notAUse } from "./internal/resourceGuard.js"
import * as Memory from "./Memory.js"
import type * as Peers from "./Peer.js"
import { MemoryRefusedError, type RpmaError } from "./RdmaError.js"
import * as Tracing from "./Tracing.js"
import * as Usages from "./Usage.js"
import type { Flag, Usage } from "./Usage.js"

/**
 * What marks a {@link LocalMr}.
 *
 * @since 1.0.0
 * @category symbols
 */
export const TypeId: unique symbol = typeId

/**
 * @since 1.0.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * @since 1.0.0
 * @category guards
 */
export const isLocalMr: (u: unknown) => u is LocalMr = isLocalMrImpl

/**
 * A registered region. `F` is the set of usage flags it was registered with: a function that needs
 * a write source takes `LocalMr<"WRITE_SRC">`, and any region whose flags include WRITE_SRC fits.
 *
 * @since 0.1.0
 * @category models
 */
export interface LocalMr<F extends Flag = Flag> extends Pipeable {
  readonly [TypeId]: TypeId
  readonly peer: Peers.Peer
  /** The registered bytes. Kept alive by the registration, not by this reference alone. */
  readonly memory: Uint8Array
  readonly usage: Usage<F>
  /** The region's address in this process (rpma_mr_get_ptr). */
  readonly address: bigint
  readonly size: number
}

/**
 * A region that can be the source of an RDMA write.
 *
 * @since 0.1.0
 * @category models
 */
export type WriteSource = LocalMr<"WRITE_SRC">
/**
 * A region that can receive the data of an RDMA read.
 *
 * @since 0.1.0
 * @category models
 */
export type ReadDestination = LocalMr<"READ_DST">
/**
 * A region whose contents can be sent.
 *
 * @since 0.1.0
 * @category models
 */
export type SendBuffer = LocalMr<"SEND">
/**
 * A region that can receive sent messages.
 *
 * @since 0.1.0
 * @category models
 */
export type RecvBuffer = LocalMr<"RECV">

/**
 * Registers `memory` with `peer` for `usage` (rpma_mr_reg); deregistered (rpma_mr_dereg) when the
 * scope closes. The memory is kept alive while registered. If the deregistration fails, the
 * failure is logged and counted, never retried, and the memory is kept alive for good.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
 *
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const memory = yield* Memory.allocate(4096)
 *   const mr = yield* LocalMr.register(peer, memory, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
 *   return yield* LocalMr.descriptor(mr) // 21 bytes to send to the other peer
 * }))
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const register = <F extends Flag>(
  peer: Peers.Peer,
  memory: Uint8Array,
  usage: Usage<F>
): Effect.Effect<LocalMr<F>, RpmaError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  Effect.acquireRelease(acquire(peer, memory, usage), releaser)

const REG = "rpma_mr_reg"
const DEREG = "rpma_mr_dereg"

/**
 * rpma_mr_reg (which also gives the address), then the bookkeeping (pin, retain, counters,
 * gauges) as plain JavaScript. When the driver answers synchronously (`mrReg.now`: a region below
 * its worker threshold, tracing off) the whole registration is this one step; otherwise the
 * driver's Effect and one match. With per-operation tracing on, the call gets its span and the
 * duration histogram a sample; off, nothing of either is built.
 */
const acquire = <F extends Flag>(
  peer: Peers.Peer,
  given: Uint8Array,
  usage: Usage<F>
): Effect.Effect<LocalMr<F>, RpmaError | MemoryRefusedError, RdmaDriver> =>
  Effect.withFiberRuntime<LocalMr<F>, RpmaError | MemoryRefusedError, RdmaDriver>((fiber) => {
    const notPeer = notAPeer(REG, peer)
    if (notPeer !== undefined) {
      instrument.failedUnsafe(REG, notPeer._tag, instrument.labelsOf(fiber))
      return Effect.fail(notPeer)
    }
    // From here on, the real view: its length is the region's, whatever the given one's getters say.
    const memory = Memory.admit(given)
    if (memory instanceof MemoryRefusedError) {
      instrument.failedUnsafe(REG, memory._tag, instrument.labelsOf(fiber))
      return Effect.fail(memory)
    }
    const raw = Context.unsafeGet(fiber.getFiberRef(FiberRef.currentContext), RdmaDriver)
    const traced = fiber.getFiberRef(Tracing.perOperation)
    // The instrumented driver's calls have no `now`: traced, the call is the span's Effect.
    const driver = traced ? instrument.instrumented(raw) : raw
    const labels = instrument.labelsOf(fiber)
    const exit = driver.mrReg.now?.(handles.peer(peer), memory, usage)
    if (exit !== undefined) {
      if (exit._tag === "Success") return Effect.succeed(registered(driver, labels, peer, memory, usage, exit.value))
      if (exit.cause._tag !== "Fail") return Effect.failCause(exit.cause)
      instrument.failedUnsafe(REG, exit.cause.error._tag, labels)
      return Effect.fail(exit.cause.error)
    }
    const call = driver.mrReg(handles.peer(peer), memory, usage)
    const registering = traced ? instrument.timed(REG, call) : call
    return Effect.matchEffect(registering, {
      onFailure: (error) => {
        instrument.failedUnsafe(REG, error._tag, labels)
        return Effect.fail(error)
      },
      onSuccess: (registration) => Effect.succeed(registered(driver, labels, peer, memory, usage, registration))
    })
  })

/** The bookkeeping of a new registration, in plain JavaScript: the region. */
const registered = <F extends Flag>(
  driver: Driver,
  labels: ReadonlyArray<MetricLabel.MetricLabel>,
  peer: Peers.Peer,
  memory: Uint8Array,
  usage: Usage<F>,
  { address, handle }: MrRegistration
): LocalMr<F> => {
  Owner.retain(peerOwner(peer))
  pins.pin(memory)
  instrument.regionUnsafe(REG, peer.address, memory.byteLength, labels)
  return new Region(handle, peer, memory, usage, address, memory.byteLength, { driver, labels })
}

/** The release: now, or once the requests in flight that use the region have completed. */
const releaser = (mr: LocalMr<any>): Effect.Effect<void> => {
  const region = mr as Region<any>
  region.released = true
  const dereg = releaseNowThen(deregistration, Region.registrationOf(region).driver.mrDereg, region.handle, region)
  // No owner record: no request ever used it (the data path makes one), so nothing to wait for.
  const owner = Owner.peek(mr)
  return owner === undefined ? dereg : Owner.releaseWhenUnused(owner, dereg)
}

/**
 * rpma_mr_dereg, then the bookkeeping as plain JavaScript (release policy: internal/release.ts): one
 * step when the driver answers synchronously (`mrDereg.now`).
 */
const deregistration: Policy<Region<any>> = {
  operation: DEREG,
  describe: (mr) => `a ${mr.size}-byte region registered for ${Usages.format(mr.usage)}`,
  onFailure: (mr) => pins.quarantine(mr.memory),
  // Gone (librpma frees it even when ibv_dereg_mr fails): unpinned only if released.
  onGone: (mr, released) => {
    const { memory, peer } = mr
    const unpinned = released ? pins.unpin(memory) : undefined
    instrument.regionUnsafe(DEREG, peer.address, -mr.size, Region.registrationOf(mr).labels)
    const peerRelease = Owner.dropUnsafe(peerOwner(peer))
    if (unpinned === undefined) return peerRelease
    return peerRelease === undefined ? unpinned : Effect.zipRight(unpinned, peerRelease)
  }
}

/**
 * Registers `memory`, runs `f` with the region, and deregisters it when `f` ends, however it ends:
 * the scope-free form for short-lived registrations (no Scope to open, no finalizer to add). An `f`
 * that is no function is refused (RPMA_E_INVAL) before anything is registered.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Peer, Usage } from "@effect-rdma/core"
 *
 * const descriptorOf = (memory: Uint8Array) =>
 *   Effect.flatMap(Peer.Peer, (peer) => LocalMr.use(peer, memory, Usage.READ_SRC, LocalMr.descriptor))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const use = <F extends Flag, A, E, R>(
  peer: Peers.Peer,
  memory: Uint8Array,
  usage: Usage<F>,
  f: (mr: LocalMr<F>) => Effect.Effect<A, E, R>
): Effect.Effect<A, E | RpmaError | MemoryRefusedError, R | RdmaDriver> => {
  const refused = notAUse("rpma_mr_reg", f)
  return refused === undefined
    ? Effect.acquireUseRelease(acquire(peer, memory, usage), f, releaser)
    : Effect.fail(refused)
}

/**
 * Allocates `size` page-aligned bytes and registers them; both are released with the scope,
 * the registration first.
 *
 * @since 0.1.0
 * @category constructors
 */
export const allocate = <F extends Flag>(
  peer: Peers.Peer,
  size: number,
  usage: Usage<F>
): Effect.Effect<LocalMr<F>, RpmaError | MemoryRefusedError, RdmaDriver | Scope.Scope> =>
  Effect.flatMap(Memory.allocate(size), (memory) => register(peer, memory, usage))

/**
 * The region's descriptor (rpma_mr_get_descriptor): the 21 bytes another peer needs to reach it.
 * Send it over an authenticated channel (TLS), not rdma_cm private data.
 *
 * @since 0.1.0
 * @category getters
 */
export const descriptor = (mr: LocalMr<any>): Effect.Effect<Uint8Array, RpmaError, RdmaDriver> =>
  Effect.flatMap(instrument.driver, (driver) => {
    const refused = notALocalMr("rpma_mr_get_descriptor", mr)
    return refused === undefined ? driver.mrGetDescriptor(handles.localMr(mr)) : instrument.refused(refused)
  })

/**
 * The region's descriptor, decoded.
 *
 * @since 0.1.0
 * @category getters
 */
export const describe = (mr: LocalMr<any>): Effect.Effect<Descriptors.Descriptor, RpmaError, RdmaDriver> =>
  Effect.flatMap(descriptor(mr), (bytes) => Effect.orDie(Descriptors.decode(bytes)))
