/**
 * Both channels send a frame from a slot of their send pool (the librpma one awaiting each send,
 * the librdmacm one not): the slot must stay taken until the device is done reading it, also when
 * the wait for the send's completion is interrupted (else the next frame written into it goes out
 * in the posted send's place).
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

  it.effect("a refused post gives its slot back at once; interrupted waiting for a slot, nothing is posted", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(1)
      const held = framing.heldSlots(slots, (cause) => ({ failed: cause }))
      const refused = yield* held.send(() => Effect.fail("refused")).pipe(Effect.flip)
      assert.strictEqual(refused, "refused")
      const done = yield* Deferred.make<void>()
      yield* held.send(() => Effect.succeed({ completion: Deferred.await(done) }))
      let posts = 0
      const waiting = yield* Effect.fork(held.send(() => Effect.sync(() => (posts++, { completion: Effect.void }))))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(waiting)
      assert.strictEqual(posts, 0)
      yield* Deferred.succeed(done, undefined)
      yield* held.send(() => Effect.sync(() => (posts++, { completion: Effect.void })))
      assert.strictEqual(posts, 1)
    }))

  it.effect("a held send keeps its slot until a later take reaps its completion, oldest first", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(2)
      const held = framing.heldSlots(slots, (cause) => ({ failed: cause }))
      const first = yield* Deferred.make<void>()
      const reaped: Array<number> = []
      const slotsPosted: Array<number> = []
      const post = (completion: Effect.Effect<unknown>) => (slot: number) =>
        Effect.sync(() => (slotsPosted.push(slot), { completion }))
      yield* held.send(post(Effect.zipRight(Deferred.await(first), Effect.sync(() => reaped.push(0)))))
      yield* held.send(post(Effect.sync(() => reaped.push(1))))
      const [a, b] = slotsPosted
      assert.notStrictEqual(a, b)
      // No slot free: the next take reaps the oldest send, and waits while it has not completed.
      const third = yield* Effect.fork(held.take)
      yield* Effect.yieldNow()
      assert.isNull(third.unsafePoll(), "the oldest send has not completed: its slot is not free")
      assert.deepStrictEqual(reaped, [])
      yield* Deferred.succeed(first, undefined)
      assert.strictEqual(yield* Fiber.join(third), a)
      assert.deepStrictEqual(reaped, [0])
      // The second send is still held: its slot comes back at the next take that finds none free.
      yield* slots.release(a)
      yield* held.send(post(Effect.void))
      assert.deepStrictEqual(reaped, [0])
      assert.strictEqual(yield* held.take, b)
      assert.deepStrictEqual(reaped, [0, 1])
    }))

  it.effect("a reap interrupted before the completion gives the slot back only when it comes; a failed one fails the take", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(1)
      const held = framing.heldSlots(slots, (cause) => ({ failed: cause }))
      const done = yield* Deferred.make<void>()
      yield* held.send(() => Effect.succeed({ completion: Deferred.await(done) }))
      const reaper = yield* Effect.fork(held.take)
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(reaper)
      // The send is still posted: the next take waits for its slot.
      const next = yield* Effect.fork(held.take)
      yield* Effect.yieldNow()
      assert.isNull(next.unsafePoll(), "the slot stays taken until the send completes")
      yield* Deferred.succeed(done, undefined)
      const slot = yield* Fiber.join(next)
      yield* slots.release(slot)
      yield* held.send(() => Effect.succeed({ completion: Effect.fail("flushed") }))
      const failure = yield* Effect.flip(held.take)
      assert.deepStrictEqual(failure, { failed: "flushed" })
      // Its slot is free again.
      assert.strictEqual(yield* held.take, slot)
    }))

  it.effect("a fiber waiting for a slot that another takes first reaps that one's send in turn", () =>
    Effect.gen(function*() {
      const slots = framing.sendSlots(1)
      const held = framing.heldSlots(slots, (cause) => ({ failed: cause }))
      const [d1, d2] = [yield* Deferred.make<void>(), yield* Deferred.make<void>()]
      yield* held.send(() => Effect.succeed({ completion: Deferred.await(d1) }))
      // `first` reaps the held send (not yet complete); `second` finds nothing to reap and waits.
      const first = yield* Effect.fork(held.send(() => Effect.succeed({ completion: Deferred.await(d2) })))
      yield* Effect.yieldNow()
      let posted = false
      const second = yield* Effect.fork(
        held.send(() => Effect.sync(() => (posted = true, { completion: Effect.void })))
      )
      yield* Effect.yieldNow()
      // The release wakes `second`, but `first` takes the slot and holds its own send with it.
      yield* Deferred.succeed(d1, undefined)
      yield* Fiber.join(first)
      yield* Effect.yieldNow()
      assert.isFalse(posted, "the slot is held by first's send, not yet complete")
      yield* Deferred.succeed(d2, undefined)
      yield* Fiber.join(second)
      assert.isTrue(posted)
    }))
})
