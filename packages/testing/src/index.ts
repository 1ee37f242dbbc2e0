/**
 * The simulated driver (an in-memory fabric that follows librpma's rules), fault plans, the leak ledger, and the driver conformance suite.
 *
 * @packageDocumentation
 * @module @effect-rdma/testing
 */
/**
 * @since 0.1.0
 */
export * as Ledger from "./Ledger.js"
/**
 * @since 0.1.0
 */
export * as SimulatedDriver from "./SimulatedDriver.js"
/**
 * @since 0.1.0
 */
export * as Conformance from "./Conformance.js"
