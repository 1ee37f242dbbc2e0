/**
 * bench/cm.ts's ping-pong on the simulated driver, for callgrind (bench/host-main.ts,
 * bench/instructions.ts): what `CmEndpoint` adds per round trip over the driver's calls made
 * from plain callbacks, in instructions, which the device's VM cannot count and time on these
 * shared machines does not show. Both sides run in this process; the simulated driver answers a
 * wait on a later turn of the event loop (setImmediate), as the addon's channel callback does.
 */
import { SimulatedDriver } from "@effect-rdma/testing"
import { Effect, Layer } from "effect"
import { anyError } from "./anyError.js"
import { oursCallPingPong, oursPair, oursPingPong, rawPair, rawPingPong } from "./cmPairs.js"
import type { Bench } from "./host.js"

/** The ping-pong benches over one simulated fabric, in the caller's scope. */
export const cmSetup = anyError(Effect.gen(function*() {
  const context = yield* Layer.build(SimulatedDriver.layer)
  return yield* Effect.provide(
    Effect.gen(function*() {
      const ours = yield* oursPair(SimulatedDriver.DEFAULT_ADDRESS, "postRecv+send")
      const calls = yield* oursPair(SimulatedDriver.DEFAULT_ADDRESS, "reply")
      const raw = yield* rawPair(SimulatedDriver.DEFAULT_ADDRESS)
      const benches: Record<string, Bench> = {
        // One round trip: the client's postRecv + send + the echo's completion, a server fiber
        // echoing with postRecv + send.
        "cm.pingpong": { perRun: 1, run: (n) => oursPingPong(ours, n) },
        // The same with one post and one wait a side: CmEndpoint.call, the server echoing with .reply.
        "cm.call": { perRun: 1, run: (n) => oursCallPingPong(calls, n) },
        // The same exchange through the driver's cm calls from plain callbacks.
        "cm.callbacks": { perRun: 1, run: (n) => rawPingPong(raw.driver, raw.side, n) }
      }
      return benches
    }),
    context
  )
}))
