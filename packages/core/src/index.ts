/**
 * The API: usage flags, tagged errors, descriptors, memory, peers, local and remote regions, connections, librdmacm endpoints and listeners, and the Driver service every implementation provides.
 *
 * @packageDocumentation
 * @module @effect-rdma/core
 */
/**
 * Admission (was in `Endpoint`): tokens that admit a client to a listener, and what isolates
 * clients from each other (a listener on a peer of its own per client).
 *
 * @since 1.0.0
 */
export * as Admission from "./Admission.js"
/**
 * Endpoints of librdmacm's verbs API: rdma_create_ep with a queue pair and rdma_connect, their
 * state, the regions of rdma_reg_msgs(3) on the endpoint, and rdma_post_send / recv / read / write
 * through the same posting kernel as librpma's connections, all scoped.
 *
 * @since 1.0.0
 */
export * as CmEndpoint from "./CmEndpoint.js"
/**
 * Listeners of librdmacm's verbs API: rdma_listen, rdma_get_request, rdma_accept and rdma_reject,
 * and `serve`, which hands each request to a handler in a scope of its own.
 *
 * @since 1.0.0
 */
export * as CmListener from "./CmListener.js"
/**
 * A connection between two peers (`struct rpma_conn`), and the operations that move data over it:
 * write, read, flush, atomic write, send and receive. Each operation is an Effect that succeeds
 * when its completion arrives and fails with a tagged error when it does not. An operation reads
 * and checks its arguments when its Effect runs, whether it waits for its completion or not.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Connection, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
 *
 * // Write 4 KiB into a server's region and make it visible there.
 * const put = (descriptor: Uint8Array) =>
 *   Effect.scoped(Effect.gen(function*() {
 *     const peer = yield* Peer.Peer
 *     const source = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
 *     const target = yield* RemoteMr.fromDescriptor(descriptor).pipe(
 *       Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)))
 *     )
 *     const conn = yield* Connection.connect(peer, "192.168.77.1", 7471)
 *     yield* Connection.write(conn, { dst: target, dstOffset: 0, src: source, srcOffset: 0, length: 4096 })
 *     yield* Connection.flush(conn, { dst: target, length: 4096 })
 *   }))
 * ```
 *
 * @since 0.1.0
 */
export * as Connection from "./Connection.js"
/**
 * librpma's memory-region descriptor: the 21 bytes a peer sends so that another peer can reach one
 * of its regions. Layout (mr.c): raddr u64 LE, length u64 LE, rkey u32 LE, usage u8.
 *
 * @example
 * ```ts
 * import { Descriptor, Usage } from "@effect-rdma/core"
 *
 * const bytes = Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: Usage.of("READ_SRC") })
 * const decoded = Descriptor.decode(bytes) // Either: the fields back, or why the bytes are not a descriptor
 * ```
 *
 * @since 0.1.0
 */
export * as Descriptor from "./Descriptor.js"
/**
 * Carries region descriptors and peer configuration over TLS, as librpma's manual asks
 * (rpma_mr_remote_from_descriptor(3): a descriptor tampered in transit makes a peer write to the
 * wrong place, so do not send it as rdma_cm private data). The server offers named descriptors and
 * a configuration object. Each side verifies the other's certificate: the client the server's (and
 * its name), the server the client's (unless told that its clients are authenticated otherwise,
 * `clients: "any"`). The client then decodes every descriptor strictly.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { DescriptorExchange } from "@effect-rdma/core"
 *
 * declare const ca: string // the server's CA certificate (PEM)
 * declare const key: string, cert: string // this client's, signed by a CA the server trusts
 *
 * // The client side: fetch the server's offer over TLS and pick one region's descriptor.
 * const logRegion = Effect.map(
 *   DescriptorExchange.fetch({ host: "log.internal", port: 7000, tls: { key, cert, ca } }),
 *   (offer) => offer.regions["log"]
 * )
 * ```
 *
 * @since 0.1.0
 */
export * as DescriptorExchange from "./DescriptorExchange.js"
/**
 * A librpma listener (`struct rpma_ep`, was `Endpoint`): incoming connection requests arrive one by
 * one or as a Stream; each is accepted (a scoped {@link Connection.Connection}) or rejected, or
 * `serve` runs a whole server. Requests left unanswered are rejected when the listener shuts down
 * with its scope.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Listener, Peer } from "@effect-rdma/core"
 *
 * // Accept the next client; the connection lives until the scope closes.
 * const acceptOne = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const listener = yield* Listener.make(peer, "192.168.77.1", 7471)
 *   const conn = yield* Listener.acceptNext(listener)
 *   return conn
 * }))
 * ```
 *
 * @since 1.0.0
 */
export * as Listener from "./Listener.js"
/**
 * A local memory registration (`struct rpma_mr_local`): memory the device may read or write, with
 * the usage it was registered for in its type. It lives at least as long as its Scope, and no
 * longer than its last user: the finalizer deregisters it (rpma_mr_dereg) on success, failure,
 * defect and interruption, or once the last request in flight that names it has completed.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Peer, Usage } from "@effect-rdma/core"
 *
 * // 4 KiB a remote peer may write and flush, and its descriptor to send there.
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const mr = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
 *   return yield* LocalMr.descriptor(mr)
 * }))
 * ```
 *
 * @since 0.1.0
 */
export * as LocalMr from "./LocalMr.js"
/**
 * Memory to register: a page-aligned allocation the library owns for the life of a Scope, or a
 * caller's Uint8Array, checked so that nothing unrelated is exposed to the device.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
 *
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const memory = yield* Memory.allocate(1 << 20) // page-aligned, zeroed, freed after its last registration
 *   return yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
 * }))
 * ```
 *
 * @since 0.1.0
 */
export * as Memory from "./Memory.js"
/**
 * A librpma peer: the protection domain of one RDMA device, found by the IP address it answers on.
 * Regions are registered with a peer and must be released before it; Scope order guarantees it when
 * the peer is acquired first.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * // The peer on the device at an address, over the simulated driver (NativeDriver.layer for hardware).
 * const PeerLive = Peer.layer("192.168.77.1").pipe(Layer.provideMerge(SimulatedDriver.layer))
 * ```
 *
 * @since 0.1.0
 */
export * as Peer from "./Peer.js"
/**
 * Tagged errors for every failure the native libraries report, and the one function that maps their
 * codes to those errors. Every driver uses {@link RdmaError.fromRpmaCode} and
 * {@link RdmaError.fromErrno}, so the same bad input gives the same error whichever driver runs.
 *
 * @example
 * ```ts
 * import { RdmaError } from "@effect-rdma/core"
 *
 * // What a driver reports for a librpma return code: a tagged error per code.
 * const error = RdmaError.fromRpmaCode(-100002, "rpma_mr_reg", "the device refused the registration")
 * error._tag // "RpmaProviderError"
 * ```
 *
 * @since 0.1.0
 */
export * as RdmaError from "./RdmaError.js"
/**
 * Metrics the library records, with Effect's Metric API: read them with `Metric.value`, or export
 * them with any Effect metrics exporter (OpenTelemetry, Prometheus).
 *
 * @example
 * ```ts
 * import { Effect, Metric } from "effect"
 * import { RdmaMetrics } from "@effect-rdma/core"
 *
 * // How much memory is registered now, from the gauge core updates on every registration.
 * const registered = Metric.value(RdmaMetrics.registeredBytes).pipe(Effect.map((state) => state.value))
 * ```
 *
 * @since 0.1.0
 */
export * as RdmaMetrics from "./RdmaMetrics.js"
/**
 * A client for long-running services: fetches the offer, connects, reconnects on loss with a
 * Schedule (fetching the offer again), exposes its state as a SubscriptionRef, and fails or bounds
 * operations while disconnected.
 *
 * @since 1.0.0
 */
export * as RdmaClient from "./RdmaClient.js"
/**
 * A registration cache: registering the same memory with the same usage again, while a cached
 * registration is alive, reuses it instead of pinning the pages a second time. Entries are
 * reference-counted: one is deregistered when it has had no user for `idleTimeToLive`, when the
 * cache's scope closes, or when the memory itself is released by {@link Memory.allocate}'s scope;
 * never while a user holds it. Closing the cache waits (at most `closeTimeout`) for the regions
 * still in use; one still held then is deregistered when its last user is done. A hit is plain
 * JavaScript (a map lookup and a count): {@link RegistrationCache.use} then opens no scope and adds
 * no finalizer, which is most of what a scoped hit costs.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Memory, Peer, RegistrationCache, Usage } from "@effect-rdma/core"
 *
 * // A buffer used again and again is registered once, while the cache lives.
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const cache = yield* RegistrationCache.make(peer, { idleTimeToLive: "1 minute" })
 *   const buffer = yield* Memory.allocate(4096)
 *   yield* cache.use(buffer, Usage.WRITE_SRC, () => Effect.void)
 *   yield* cache.use(buffer, Usage.WRITE_SRC, () => Effect.void) // the same registration
 * }))
 * ```
 *
 * @since 0.1.0
 */
export * as RegistrationCache from "./RegistrationCache.js"
/**
 * The other side's region on librdmacm's path (address, length, rkey, access), its 24 bytes on the
 * wire, checked field by field, and the access a write or a read requires.
 *
 * @since 1.0.0
 */
export * as RemoteKey from "./RemoteKey.js"
/**
 * A remote memory region (`struct rpma_mr_remote`), rebuilt from a descriptor another peer sent.
 * The descriptor is validated strictly before librpma sees it; the usage the sender claimed is
 * checked at run time with {@link RemoteMr.require}, after which the type says what the region
 * allows.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { RemoteMr, Usage } from "@effect-rdma/core"
 *
 * // A region of another peer, from its descriptor, required to accept writes.
 * const target = (bytes: Uint8Array) =>
 *   RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
 * ```
 *
 * @since 0.1.0
 */
export * as RemoteMr from "./RemoteMr.js"
/**
 * A shared receive queue (`struct rpma_srq`): one pool of receives for many connections, each
 * completion saying which connection its message came on; deleted when its scope closes and no
 * connection made with it is left.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
 *
 * // One pool of receives for every connection of an endpoint.
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const peer = yield* Peer.Peer
 *   const srq = yield* SharedReceiveQueue.make(peer, { receiveQueueSize: 16 })
 *   const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
 *   return yield* SharedReceiveQueue.recv(srq, { dst: inbox })
 * }))
 * ```
 *
 * @since 1.0.0
 */
export * as SharedReceiveQueue from "./SharedReceiveQueue.js"

/**
 * Pipelines over a connection: Sinks that write a Stream of chunks into a remote range or ring with
 * backpressure from the send queue, and a Stream of received messages over pre-posted receives.
 *
 * @since 1.0.0
 */
export * as RdmaStream from "./RdmaStream.js"

/**
 * What the library traces: spans on the control path always, per-operation spans and timers on request.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Tracing } from "@effect-rdma/core"
 *
 * declare const program: Effect.Effect<void>
 * // A span for every driver call, not only for registrations and connections.
 * const traced = program.pipe(Effect.provide(Tracing.layerPerOperation))
 * ```
 *
 * @since 1.0.0
 */
export * as Tracing from "./Tracing.js"

/**
 * Polling where it pays: a connection or an endpoint busy-polls its completion queues for a
 * bounded budget before it waits on the event loop (`polling` option, or `Polling.layer` for a
 * default), adaptive so that an idle one costs no CPU.
 *
 * @since 1.0.0
 */
export * as Polling from "./Polling.js"
/**
 * Usage flags of a memory registration (librpma's `RPMA_MR_USAGE_*`), as a branded bitmask whose
 * type also records which flags it holds. A region registered with `Usage<"WRITE_SRC">` can be
 * passed where a write source is required; one registered for reading cannot, and the compiler says
 * so.
 *
 * @example
 * ```ts
 * import { Usage } from "@effect-rdma/core"
 *
 * const target = Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)
 * // Usage<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">: the type says what a region allows
 * ```
 *
 * @since 0.1.0
 */
export * as Usage from "./Usage.js"
