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
