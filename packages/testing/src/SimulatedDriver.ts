/**
 * A driver that runs without RDMA hardware. It follows the C libraries' rules (the same tagged
 * error for the same bad input, descriptors in librpma's format, plausible addresses and keys),
 * records every live handle in a ledger, and fails the calls a fault plan names.
 *
 * @since 0.1.0
 */
import type * as Driver from "@effect-rdma/core/Driver"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fabric from "./internal/fabric.js"
import { makeLinked } from "./internal/simulatedDriver.js"

/**
 * The address the simulated device answers on unless told otherwise. It is also the address the
 * Soft-RoCE virtual machine gives its device, so programs run unchanged on either.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_ADDRESS: typeof fabric.DEFAULT_ADDRESS = fabric.DEFAULT_ADDRESS

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

/**
 * Builds a simulated driver and its control.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (options?: Options): { readonly driver: Driver.Driver; readonly control: Simulation } =>
  makeLinked(options, undefined)

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
 * Plans a fault in the current simulation. A fault that could never fire as written (an operation
 * the driver does not count, an `nth` that is no positive integer, no kind of failure or two, a
 * completion status, lost connection or frozen peer on a call that posts no request) dies with an
 * `IllegalArgumentException` saying what to write, as does one in {@link Options.faults} when the
 * driver is made: planned silently, it would leave the test passing for the wrong reason.
 *
 * @since 0.1.0
 * @category faults
 */
export const fail = (fault: Fault): Effect.Effect<void, never, SimulationControl> =>
  Effect.flatMap(SimulationControl, (s) => s.fail(fault))
