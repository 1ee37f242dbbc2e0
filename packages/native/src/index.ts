/**
 * The driver over librpma and librdmacm: a node-addon-api addon behind core's Driver service, loaded lazily (the effect-rdma-doctor command checks a machine for it).
 *
 * @packageDocumentation
 * @module @effect-rdma/native
 */
/**
 * @since 0.1.0
 */
export * as NativeDriver from "./NativeDriver.js"
/**
 * @since 0.1.0
 */
export * as RpmaBinding from "./RpmaBinding.js"
