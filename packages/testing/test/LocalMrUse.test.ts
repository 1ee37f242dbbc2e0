/**
 * LocalMr.use: the scope-free registration, released however its body ends.
 */
import { Driver, LocalMr, Peer, Usage } from "@effect-rdma/core"
import { SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"

const live = Effect.flatMap(Driver.RdmaDriver, (d) => d.live)

describe("LocalMr.use", () => {
  it.effect("registers for the body only: on success, failure and interruption", () =>
    Effect.scoped(Effect.gen(function*() {
      const peer = yield* Peer.make(SimulatedDriver.DEFAULT_ADDRESS)
      const memory = new Uint8Array(4096)
      const size = yield* LocalMr.use(peer, memory, Usage.SEND, (mr) =>
        Effect.map(live, (l) => {
          assert.strictEqual(l.localRegions, 1)
          return mr.size
        }))
      assert.strictEqual(size, 4096)
      assert.strictEqual((yield* live).localRegions, 0)
      const failed = yield* Effect.exit(LocalMr.use(peer, memory, Usage.SEND, () => Effect.fail("boom")))
      assert.isTrue(Exit.isFailure(failed))
      assert.strictEqual((yield* live).localRegions, 0)
      const fiber = yield* Effect.fork(LocalMr.use(peer, memory, Usage.SEND, () => Effect.never))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* live).localRegions, 0)
    })).pipe(Effect.provide(SimulatedDriver.layer())))
})
