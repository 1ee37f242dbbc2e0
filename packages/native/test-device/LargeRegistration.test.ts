// Pinning is proportional to size: a large registration runs on a worker thread, so the event
// loop keeps turning while it pins (a timer-driven check would be noisy; turns counted are not).
import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { monitorEventLoopDelay } from "node:perf_hooks"
import * as NativeDriver from "../src/NativeDriver.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

/** Counts event-loop turns (setImmediate runs once per turn) while `effect` runs. */
const turnsDuring = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    let turns = 0
    let on = true
    const tick = () => {
      turns++
      if (on) setImmediate(tick)
    }
    setImmediate(tick)
    const delay = monitorEventLoopDelay({ resolution: 10 })
    delay.enable()
    const value = yield* Effect.ensuring(effect, Effect.sync(() => (on = false)))
    delay.disable()
    return { value, turns, maxDelayMs: delay.max / 1e6 }
  })

describe("large registrations", () => {
  it.live(
    "256 MiB is registered on a worker thread: the event loop keeps turning",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const small = yield* turnsDuring(LocalMr.allocate(peer, 4096, Usage.WRITE_DST))
        const large = yield* turnsDuring(LocalMr.allocate(peer, 256 * 2 ** 20, Usage.WRITE_DST))
        console.log(
          `registration of 256 MiB: ${large.turns} event-loop turns meanwhile, max event-loop delay ${
            large.maxDelayMs.toFixed(1)
          } ms (4 KiB: ${small.turns} turns)`
        )
        assert.strictEqual(large.value.size, 256 * 2 ** 20)
        // At least one turn: a registration on the event loop ends before the first (4 KiB: 0). Not
        // more: with one vCPU the kernel's pinning can hold the only CPU (3, 2 and 1 turns measured).
        assert.isAtLeast(large.turns, 1, "the registration returned to the event loop before it ended")
        assert.strictEqual(small.turns, 0, "a small registration stays on the event loop")
      })).pipe(Effect.provide(NativeDriver.layer)),
    { timeout: 120_000 }
  )

  it.live(
    "256 MiB is deregistered on a worker thread too: the event loop turns while it is unpinned",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const memory = yield* Memory.allocate(256 * 2 ** 20)
        const registration = yield* Scope.make()
        yield* Scope.extend(LocalMr.register(peer, memory, Usage.WRITE_DST), registration)
        const released = yield* turnsDuring(Scope.close(registration, Exit.void))
        console.log(
          `deregistration of 256 MiB: ${released.turns} event-loop turns meanwhile, max event-loop delay ${
            released.maxDelayMs.toFixed(1)
          } ms`
        )
        // Unpinning is quick here (rxe keeps no copy), so few turns: but a deregistration on the event
        // loop would end before the first one (as a 4 KiB registration does: 0 turns).
        assert.isAtLeast(released.turns, 1, "the deregistration returned to the event loop before it ended")
      })).pipe(Effect.provide(NativeDriver.layer)),
    { timeout: 120_000 }
  )
})
