/**
 * The tests' ways of driving a TestClock (@effect/vitest's `it.effect`): each mechanism on Effect's
 * Clock is shown to end when the clock says, whatever the wall clock does. Every wait here is
 * bounded by the test's own timeout.
 */
import { assert } from "@effect/vitest"
import { Chunk, Clock, Effect, Fiber, TestClock, TestServices } from "effect"

/** Waits until some fiber sleeps until `instant` on the TestClock, polling each live millisecond. */
export const asleepUntil = (instant: number) =>
  TestClock.sleeps().pipe(
    Effect.zipLeft(TestServices.provideLive(Effect.sleep("1 millis"))),
    Effect.repeat({ until: Chunk.contains(instant) })
  )

/** Checks that `fiber` ends when the TestClock has moved `ms` on, not 1 ms before; its result. */
export const endsAfter = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, ms: number) =>
  Effect.gen(function*() {
    yield* TestClock.adjust(ms - 1)
    assert.isNull(fiber.unsafePoll(), "ended before its bound")
    yield* TestClock.adjust(1)
    assert.isNotNull(fiber.unsafePoll(), "not ended when the TestClock reached its bound")
    return yield* Fiber.join(fiber)
  })

/**
 * Runs `effect` with the TestClock moved on `stepMs` at a time until it is done: its result, and
 * the TestClock time it took (a wait for a timeout takes it all, real work next to none).
 */
export const driven = <A, E, R>(effect: Effect.Effect<A, E, R>, stepMs: number) =>
  Effect.gen(function*() {
    const started = yield* Clock.currentTimeMillis
    const fiber = yield* Effect.fork(effect)
    yield* Effect.repeat(TestClock.adjust(stepMs), { until: () => fiber.unsafePoll() !== null })
    const value = yield* Fiber.join(fiber)
    return { value, tookMs: (yield* Clock.currentTimeMillis) - started }
  })
