/**
 * Connection cases written once as two halves, a server half and a client half that exchange
 * messages (descriptors, "check your memory now") over a channel: run side by side in one process
 * over an in-memory channel ({@link inProcess}), or one per host over TCP by the two-host runner
 * (packages/native/test-pair), with the same names and the same checks.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { Case } from "../Conformance.js"

/** One message between the halves: a JSON object. */
export type Message = { readonly [key: string]: any }

/** What the halves talk over. */
export interface Channel {
  readonly send: (message: Message) => Effect.Effect<void>
  /** The next message, within `seconds`; fails if the other half failed. */
  readonly receive: (seconds?: number) => Effect.Effect<Message, unknown>
}

/** What a half knows. */
export interface HalfContext {
  /** This half's address. */
  readonly address: string
  /** Where the server half listens, seen from the client half. */
  readonly serverAddress: string
  readonly port: number
  readonly channel: Channel
}

export type Half = (ctx: HalfContext) => Effect.Effect<void, unknown, Driver.RdmaDriver | Scope.Scope>

export interface PairCase {
  readonly name: string
  readonly server: Half
  readonly client: Half
}

/** How long a half waits for the other's next message in one process. */
const RECEIVE_SECONDS = 30

const channelOver = (inbox: Queue.Queue<Message>, outbox: Queue.Queue<Message>): Channel => ({
  send: (message) => Queue.offer(outbox, message),
  receive: (seconds = RECEIVE_SECONDS) =>
    Queue.take(inbox).pipe(
      Effect.timeoutFail({
        duration: Duration.seconds(seconds),
        onTimeout: () => new Error(`no message from the other half within ${seconds} s`)
      }),
      Effect.flatMap((m) =>
        m.abort !== undefined ? Effect.fail(new Error(`the other half failed: ${m.abort}`)) : Effect.succeed(m)
      )
    )
})

/**
 * A pair case as one case: each half in a fiber of its own with a scope of its own (as
 * on two hosts), over an in-memory channel; a half that fails tells the other, which stops waiting.
 */
export const inProcess = (pairCase: PairCase): Case => ({
  name: pairCase.name,
  run: (address, port) =>
    Effect.gen(function*() {
      const toServer = yield* Queue.unbounded<Message>()
      const toClient = yield* Queue.unbounded<Message>()
      const half = (run: Half, inbox: Queue.Queue<Message>, outbox: Queue.Queue<Message>) => {
        const channel = channelOver(inbox, outbox)
        return Effect.scoped(run({ address, serverAddress: address, port, channel })).pipe(
          Effect.onError((cause) => channel.send({ abort: Cause.pretty(cause).split("\n")[0] }))
        )
      }
      const serving = yield* Effect.fork(half(pairCase.server, toServer, toClient))
      const client = yield* Effect.exit(half(pairCase.client, toClient, toServer))
      yield* Fiber.join(serving)
      yield* client
    })
})
