/**
 * What the library traces. Control-path calls (devices, peers, endpoints, connection set-up and
 * teardown, rdma_cm ids) always run in a span named after their C function. Registrations and the
 * data path (rpma_mr_reg / rpma_mr_dereg, rdma_reg_* / rdma_dereg_mr, descriptors, every posted
 * operation) run in none and are not timed, unless per-operation tracing is turned on: at
 * microseconds per operation, a span or a timer would cost more than the operation itself. The
 * switch is one FiberRef, read before anything is built.
 *
 * @since 1.0.0
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"
import * as Layer from "effect/Layer"

/**
 * Whether registrations and data-path calls get a span each, and registrations a latency timer.
 * Default false.
 *
 * @since 1.0.0
 * @category fiber refs
 */
export const perOperation: FiberRef.FiberRef<boolean> = globalValue(
  "@effect-rdma/core/Tracing/perOperation",
  () => FiberRef.unsafeMake(false)
)

/**
 * Turns per-operation tracing on for what the layer is provided to.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Tracing } from "@effect-rdma/core"
 *
 * declare const program: Effect.Effect<void>
 * program.pipe(Effect.provide(Tracing.layerPerOperation))
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layerPerOperation: Layer.Layer<never> = Layer.scopedDiscard(Effect.locallyScoped(perOperation, true))

/**
 * Runs `effect` with per-operation tracing on.
 *
 * @since 1.0.0
 * @category combinators
 */
export const withPerOperation = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locally(effect, perOperation, true)
