/**
 * The API: usage flags, tagged errors, descriptors, memory, peers, local and remote regions, rdma_cm ids, connections, and the Driver service every implementation provides.
 *
 * @packageDocumentation
 * @module @effect-rdma/core
 */
/**
 * @since 0.1.0
 */
export * as CmId from "./CmId.js"
/**
 * @since 0.1.0
 */
export * as Connection from "./Connection.js"
/**
 * @since 0.5.0
 */
export * as ConnectionError from "./ConnectionError.js"
/**
 * @since 0.1.0
 */
export * as Descriptor from "./Descriptor.js"
/**
 * @since 0.1.0
 */
export * as DescriptorExchange from "./DescriptorExchange.js"
/**
 * @since 0.1.0
 */
export * as Driver from "./Driver.js"
/**
 * @since 0.5.0
 */
export * as DriverModel from "./DriverModel.js"
/**
 * @since 0.1.0
 */
export * as DriverArguments from "./DriverArguments.js"
/**
 * @since 0.1.0
 */
export * as Endpoint from "./Endpoint.js"
/**
 * @since 0.1.0
 */
export * as LocalMr from "./LocalMr.js"
/**
 * @since 0.1.0
 */
export * as Memory from "./Memory.js"
/**
 * @since 0.1.0
 */
export * as Peer from "./Peer.js"
/**
 * @since 0.1.0
 */
export * as RdmaError from "./RdmaError.js"
/**
 * @since 0.1.0
 */
export * as RdmaMetrics from "./RdmaMetrics.js"
/**
 * @since 0.1.0
 */
export * as RegistrationCache from "./RegistrationCache.js"
/**
 * @since 0.1.0
 */
export * as RemoteMr from "./RemoteMr.js"
/**
 * @since 0.3.0
 */
export * as SharedReceiveQueue from "./SharedReceiveQueue.js"

/**
 * What the library traces: spans on the control path always, per-operation spans and timers on request.
 *
 * @since 0.2.0
 */
export * as Tracing from "./Tracing.js"
/**
 * @since 0.1.0
 */
export * as Usage from "./Usage.js"
