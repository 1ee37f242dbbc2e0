/**
 * Effect Cluster over RDMA: an `@effect/cluster` runner whose runner-to-runner protocols are
 * `@effect-rdma/rpc`'s, chosen by Layer as `@effect/platform-node`'s `NodeClusterSocket` chooses TCP.
 *
 * @packageDocumentation
 * @module @effect-rdma/cluster
 */
/**
 * The runner Layer over RDMA, and its client and server protocols.
 *
 * @since 1.0.0
 */
export * as RdmaCluster from "./RdmaCluster.js"
