/**
 * `@effect/rpc` over RDMA: the client and server protocols of `@effect/rpc` over a connection of
 * `@effect-rdma/core`, and the message channel under them.
 *
 * @packageDocumentation
 * @module @effect-rdma/rpc
 */
/**
 * @effect/rpc's client and server protocols over RDMA, on either path (`transport: "rpma" | "cm"`).
 *
 * @since 1.0.0
 */
export * as RdmaRpc from "./RdmaRpc.js"

/**
 * The transport under the RPC protocols: whole messages each way over one connection, small ones
 * sent, large ones written into the receiver's landing region and acknowledged.
 *
 * @since 1.0.0
 */
export * as RdmaChannel from "./RdmaChannel.js"
