/**
 * The simulated driver (an in-memory fabric that follows librpma's rules), fault plans, the leak ledger, and the driver conformance suite.
 *
 * @packageDocumentation
 * @module @effect-rdma/testing
 */
/**
 * Leak checks for tests: what the simulated driver still holds, and an assertion that nothing is;
 * on any driver (the native one included), that an effect leaves no more handles alive than it
 * found (`checkedOnAnyDriver`, from the driver's own counts).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Peer, Usage } from "@effect-rdma/core"
 * import { Ledger } from "@effect-rdma/testing"
 *
 * // Fails with a LeakError naming where each handle still alive was acquired.
 * const leakFree = Ledger.checked(Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
 * })))
 * ```
 *
 * @since 0.1.0
 */
export * as Ledger from "./Ledger.js"
/**
 * A driver that runs without RDMA hardware. It follows the C libraries' rules (the same tagged
 * error for the same bad input, descriptors in librpma's format, plausible addresses and keys),
 * records every live handle in a ledger, and fails the calls a fault plan names.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // A test's world: a simulated device at the VM's address, and the next registration refused.
 * const TestLive = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))
 * const refuseNextRegistration = SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 1, code: -100002 })
 * declare const test: Effect.Effect<void, never, Peer.Peer>
 * const run = Effect.zipRight(refuseNextRegistration, test).pipe(Effect.provide(TestLive))
 * ```
 *
 * @since 0.1.0
 */
export * as SimulatedDriver from "./SimulatedDriver.js"
/**
 * The driver conformance suite: one list of cases that every `RdmaDriver` must pass, run on the
 * simulated driver on any host and on the native driver where a device is. It is the single source
 * of truth for driver behaviour. Where hardware legitimately differs (addresses, keys), a case
 * compares properties, not values. The cases live in `conformance/`, one module per subject.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Conformance, SimulatedDriver } from "@effect-rdma/testing"
 *
 * // Every case of the suite on a driver (here the simulated one; NativeDriver.layer on a device).
 * const all = Effect.forEach(
 *   Conformance.cases,
 *   (testCase) => Conformance.runCase(testCase, SimulatedDriver.layer, SimulatedDriver.DEFAULT_ADDRESS),
 *   { discard: true }
 * )
 * ```
 *
 * @since 0.1.0
 */
export * as Conformance from "./Conformance.js"
/**
 * One simulated RDMA network shared by several processes on one machine: one process serves it,
 * each process joins it with its own simulated driver (its own memory, ledger and faults), and a
 * connection between two processes behaves as one within a process, down to the completion
 * statuses; a process killed mid-traffic is a lost connection for the others.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
 *
 * // The test process serves the network and joins it; a server process joins it with the same path.
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const path = yield* SimulatedNetwork.serve()
 *   const Joined = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedNetwork.layer({ path })))
 *   return Joined
 * }))
 * ```
 *
 * @since 1.0.0
 */
export * as SimulatedNetwork from "./SimulatedNetwork.js"
