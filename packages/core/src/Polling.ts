/**
 * Polling where it pays: before a connection or an endpoint arms its completion channel and
 * yields to the event loop, it may busy-poll its completion queues for a bounded budget, so that a
 * completion arriving within it costs no trip through the channel, epoll and the loop (what UCX
 * and libfabric do before they sleep). Each connection and endpoint takes a `polling` option; this
 * module's {@link layer} sets the default for everything opened under it.
 *
 * - `"off"`: arm and wait (no CPU spent while waiting).
 * - `{ budget }`: spin up to `budget` (at most 10 ms) before each wait.
 * - `"adaptive"`, or `{ budget, adaptive: true }`: the budget halves each time a spin finds nothing
 *   (down to 0: plain waiting, so an idle connection costs no CPU) and doubles back, up to the
 *   configured one, each time a spin finds a completion; when the channel answers, the budget
 *   becomes 1.5 times the wait it just took if that is within the configured budget (a spin that
 *   long would have caught it), and halves otherwise. `"adaptive"` starts at
 *   {@link ADAPTIVE_BUDGET}.
 *
 * The event loop still turns: one wake-up (a post, a completion callback) spins at most `budget`
 * in all before it arms the channel and returns to the loop, so no timer or socket waits longer
 * than that for polling's sake. A driver without the spin call ({@link Driver.Driver.spinCompletions})
 * waits as `"off"` does.
 *
 * @since 1.0.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"
import * as Layer from "effect/Layer"

/**
 * How a connection or an endpoint waits for its completions.
 *
 * @since 1.0.0
 * @category models
 */
export type Polling =
  | "off"
  | "adaptive"
  | { readonly budget: Duration.DurationInput; readonly adaptive?: boolean | undefined }

/**
 * The budget `"adaptive"` starts from and grows back to: 100 µs, about one round trip on a
 * software device.
 *
 * @since 1.0.0
 * @category constants
 */
export const ADAPTIVE_BUDGET: Duration.Duration = Duration.decode("100 micros")

/**
 * The default of every connection and endpoint that names no `polling` of its own: `"off"`
 * unless a {@link layer} says otherwise (BENCHMARKS.md, "Polling", says why).
 *
 * @since 1.0.0
 * @category fiber refs
 */
export const current: FiberRef.FiberRef<Polling> = globalValue(
  "@effect-rdma/core/Polling/current",
  () => FiberRef.unsafeMake<Polling>("off")
)

/**
 * Sets the default polling of what the layer is provided to.
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { Polling } from "@effect-rdma/core"
 *
 * declare const program: Effect.Effect<void>
 * program.pipe(Effect.provide(Polling.layer("adaptive")))
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layer = (polling: Polling): Layer.Layer<never> =>
  Layer.scopedDiscard(Effect.locallyScoped(current, polling))
