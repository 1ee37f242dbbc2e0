/**
 * Both channels send a frame from a slot of their send pool: the slot must stay taken until the
 * device is done reading it, also when the wait for the send's completion is interrupted (else the
 * next frame written into it goes out in the posted send's place).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import * as framing from "../src/internal/framing.js"

describe("send slots", () => {
  it.effect("a frame interrupted while its send is posted keeps its slot until the send completes", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(1)
      const done = yield* Deferred.make<void>()
      const posted: Array<number> = []
      const first = yield* Effect.fork(
        framing.sendFromSlot(
          slots,
          (slot) => Effect.sync(() => (posted.push(slot), { completion: Deferred.await(done) }))
        )
      )
      yield* Effect.yieldNow()
      assert.deepStrictEqual(posted, [0])
      yield* Fiber.interrupt(first)
      // The send is still posted: the one slot is not free for the next frame.
      const second = yield* Effect.fork(
        framing.sendFromSlot(slots, (slot) => Effect.sync(() => (posted.push(slot), { completion: Effect.void })))
      )
      yield* Effect.yieldNow()
      assert.deepStrictEqual(posted, [0], "the next frame waits for the slot")
      yield* Deferred.succeed(done, undefined)
      yield* Fiber.join(second)
      assert.deepStrictEqual(posted, [0, 0])
    }))

  it.effect("a send that is refused or fails gives its slot back at once; interrupted waiting for a slot, nothing is posted", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(1)
      const refused = yield* framing.sendFromSlot(slots, () => Effect.fail("refused")).pipe(Effect.flip)
      assert.strictEqual(refused, "refused")
      const failed = yield* framing.sendFromSlot(slots, () => Effect.succeed({ completion: Effect.fail("flushed") }))
        .pipe(
          Effect.flip
        )
      assert.strictEqual(failed, "flushed")
      const held = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(
        framing.sendFromSlot(slots, () => Effect.succeed({ completion: Deferred.await(held) }))
      )
      yield* Effect.yieldNow()
      let posts = 0
      const waiting = yield* Effect.fork(
        framing.sendFromSlot(slots, () => Effect.sync(() => (posts++, { completion: Effect.void })))
      )
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting)
      yield* Deferred.succeed(held, undefined)
      yield* Fiber.join(holder)
      assert.strictEqual(posts, 0)
      // The slot is free again.
      yield* framing.sendFromSlot(slots, () => Effect.sync(() => (posts++, { completion: Effect.void })))
      assert.strictEqual(posts, 1)
    }))
})
