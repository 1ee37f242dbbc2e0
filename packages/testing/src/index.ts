/**
 * The simulated driver (an in-memory fabric that follows librpma's rules), fault plans, the leak ledger, and the driver conformance suite.
 *
 * @packageDocumentation
 * @module @effect-rdma/testing
 */
/**
 * Leak checks for tests: what the simulated driver still holds, and an assertion that nothing is.
 *
 * @since 0.1.0
 */
export * as Ledger from "./Ledger.js"
/**
 * A driver that runs without RDMA hardware. It follows the C libraries' rules (the same tagged
 * error for the same bad input, descriptors in librpma's format, plausible addresses and keys),
 * records every live handle in a ledger, and fails the calls a fault plan names.
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
 * @since 0.1.0
 */
export * as Conformance from "./Conformance.js"
