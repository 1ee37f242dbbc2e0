/**
 * The native driver: core's Driver over the addon, assembled from one module per resource (peer,
 * registration, memory, cm, connection, shared receive queue, and the queues' posts and
 * completions), each over ./addon.ts and the one failure mapping, ./failures.ts.
 */
import type { Driver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { cmCalls } from "./cm.js"
import { cmEndpointCalls } from "./cmEndpoint.js"
import { connectionCalls } from "./connection.js"
import { type LoopTurns, makeLoopTurns } from "./loopTurns.js"
import { memoryCalls } from "./memory.js"
import { peerCalls } from "./peer.js"
import { queueCalls } from "./queues.js"
import { registrationCalls } from "./registration.js"
import { srqCalls } from "./srq.js"

export const makeDriver = (binding: Binding, loop: LoopTurns = makeLoopTurns()): Driver => ({
  name: "native",
  ...peerCalls(binding),
  ...registrationCalls(binding),
  ...memoryCalls(binding),
  ...cmCalls(binding),
  ...connectionCalls(binding),
  ...srqCalls(binding),
  ...queueCalls(binding, loop),
  ...cmEndpointCalls(binding, loop),
  live: Effect.sync(() => binding.liveHandles())
})
