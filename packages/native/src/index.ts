/**
 * The driver over librpma and librdmacm: a node-addon-api addon behind core's Driver service, loaded lazily (the effect-rdma-doctor command checks a machine for it).
 *
 * @packageDocumentation
 * @module @effect-rdma/native
 */
/**
 * The RDMA driver over librpma and librdmacm. Building {@link NativeDriver.layer} loads the addon;
 * if it is not built, or a library it needs is missing, the layer fails with a
 * {@link NativeDriver.NativeLoadError} that says what to install or run, and the program can fall
 * back to the simulated driver.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { NativeDriver } from "@effect-rdma/native"
 *
 * // The same program as on the simulated driver, on the device at an address.
 * const Live = Peer.layer("192.168.77.1").pipe(Layer.provideMerge(NativeDriver.layer))
 * ```
 *
 * @since 0.1.0
 */
export * as NativeDriver from "./NativeDriver.js"
/**
 * The raw addon as a service, so that tests and embedders can load it from another path or provide
 * a fake. Loading happens when a layer is built, never on import: a machine without the built addon
 * or without the RDMA libraries can still import this package and fall back to another driver.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { RpmaBinding } from "@effect-rdma/native"
 *
 * // Whether the addon loads here; if not, its NativeLoadError says why and what to run.
 * const why = RpmaBinding.load().pipe(
 *   Effect.as("the addon loads"),
 *   Effect.catchTag("NativeLoadError", (error) => Effect.succeed(`${error.reason}: ${error.message}`))
 * )
 * ```
 *
 * @since 0.1.0
 */
export * as RpmaBinding from "./RpmaBinding.js"
