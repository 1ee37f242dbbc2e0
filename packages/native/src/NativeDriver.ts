/**
 * The RDMA driver over librpma and librdmacm. Building {@link layer} loads the addon; if it is not
 * built, or a library it needs is missing, the layer fails with a {@link NativeLoadError} that
 * says what to install or run, and the program can fall back to the simulated driver.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { NativeDriver } from "@effect-rdma/native"
 * import { SimulatedDriver } from "@effect-rdma/testing"
 *
 * const DriverLive = NativeDriver.layer.pipe(Layer.orElse(() => SimulatedDriver.layer))
 * ```
 *
 * @since 0.1.0
 */
import { type Driver, RdmaDriver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as internal from "./internal/driver.js"
import * as RpmaBinding from "./RpmaBinding.js"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  NativeLoadError
} from "./RpmaBinding.js"

/**
 * The driver over whichever addon {@link RpmaBinding.RpmaBinding} provides. Installs the librpma
 * log capture (once per process), so that failures carry librpma's reason in their detail.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<Driver, never, RpmaBinding.RpmaBinding> = Effect.flatMap(
  RpmaBinding.RpmaBinding,
  (binding) =>
    Effect.sync(() => {
      binding.installLogCapture()
      return internal.makeDriver(binding)
    })
)

/**
 * The driver over the binding in context: provide {@link RpmaBinding.layerFromPath} or a fake.
 *
 * @since 0.1.0
 * @category layers
 */
export const layerWithBinding: Layer.Layer<RdmaDriver, never, RpmaBinding.RpmaBinding> = Layer.effect(
  RdmaDriver,
  make
)

/**
 * The native driver, loading the addon from its build directory.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<RdmaDriver, RpmaBinding.NativeLoadError> = Layer.provide(
  layerWithBinding,
  RpmaBinding.layer
)
