/**
 * Conformance cases for core under interruption and in uninterruptible regions: a connect inside an
 * `acquireRelease` acquire (how a reconnecting session is built) returns once the connection is
 * established, and a receive posted on a request and interrupted at any point never loses its slot.
 */
import { Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { check, equal } from "./support.js"

/** A connect's own timeout, far longer than the bound it must return within. */
const CONNECT_TIMEOUT = "60 seconds"
/** The bound: a connect that waits for its timeout instead of ESTABLISHED exceeds it. */
const RETURN_BOUND = "20 seconds"

/** The receive queue of the request, larger than the receives the interrupted attempts may leave posted. */
const QUEUE = 64
/** Operations between two turns of an attempt's fiber (the runtime's default is 2048). */
const OPS_PER_TURN = 32
/** Interrupted attempts: enough to put a turn boundary at every step of a receive. */
const ATTEMPTS = 2 * OPS_PER_TURN
const SLOT = 16

export const interruptionCases: ReadonlyArray<Case> = [
  {
    name:
      "Connection.connect inside Effect.uninterruptible or an acquireRelease acquire returns once ESTABLISHED, not after its whole timeout",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(Effect.forEach([1, 2], () => Listener.acceptNext(ep)))
        const connect = Connection.connect(clientPeer, address, port, { timeout: CONNECT_TIMEOUT })
        const regions = [
          ["inside Effect.uninterruptible", Effect.uninterruptible(connect)],
          ["as an acquireRelease acquire", Effect.acquireRelease(connect, () => Effect.void)]
        ] as const
        for (const [where, connecting] of regions) {
          // Disconnected, so that the bound ends the wait even though the region cannot be interrupted.
          const conn = yield* connecting.pipe(
            Effect.disconnect,
            Effect.timeoutFail({
              duration: RETURN_BOUND,
              onTimeout: () =>
                new Error(
                  `connect ${where} (timeout ${CONNECT_TIMEOUT}) had not returned after ${RETURN_BOUND}: ` +
                    "it waited for its timeout, not for ESTABLISHED"
                )
            })
          )
          yield* equal(yield* Connection.state(conn), "Connected", `the state of a connection made ${where}`)
        }
        yield* Fiber.join(accepting)
      })
  },
  {
    name:
      "Listener.postRecv interrupted around its post never loses a receive slot: afterwards the whole receive queue can be posted and completes",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const inbox = yield* LocalMr.allocate(serverPeer, QUEUE * SLOT, Usage.RECV)
        const out = yield* LocalMr.allocate(clientPeer, SLOT, Usage.SEND)
        const ep = yield* Listener.make(serverPeer, address, port)
        const connecting = yield* Effect.fork(Connection.connect(clientPeer, address, port))
        const req = yield* Listener.next(ep, { receiveQueueSize: QUEUE })
        const slot = (i: number) => ({ dst: inbox, offset: (i % QUEUE) * SLOT, length: SLOT })

        // The runtime lets other fibers run every OPS_PER_TURN operations of a fiber; an attempt runs
        // `padding` operations first, so its receive reaches each turn boundary, where the
        // interruption lands, at a different step. An attempt interrupted after its post leaves a
        // receive posted (its slot held until a message takes it); one interrupted before, nothing.
        for (let padding = 0; padding < ATTEMPTS; padding++) {
          const attempt = yield* Effect.fork(
            Effect.withMaxOpsBeforeYield(
              Effect.zipRight(
                Effect.forEach(Array.from({ length: padding }), () => Effect.void),
                Listener.postRecv(req, slot(padding))
              ),
              OPS_PER_TURN
            )
          )
          yield* Effect.yieldNow()
          yield* Fiber.interrupt(attempt)
        }

        // The slots left: every receive the queue still takes (a lost slot would never come back).
        const fresh: Array<Connection.Posted> = []
        for (let i = 0; i <= QUEUE; i++) {
          const posted = yield* Effect.either(Listener.postRecv(req, slot(i)))
          if (posted._tag === "Left") break
          fresh.push(posted.right)
        }
        const server = yield* Listener.accept(req)
        const client = yield* Fiber.join(connecting)

        // QUEUE messages: one for each receive posted, by the attempts or after them. A lost slot
        // leaves the last message with no receive: its send never completes.
        const sendAll = (what: string) =>
          Effect.forEach(
            Array.from({ length: QUEUE }, (_, i) => i),
            (i) =>
              Connection.send(client, { src: out, offset: 0, length: 8 }).pipe(
                Effect.timeoutFail({
                  duration: "10 seconds",
                  onTimeout: () =>
                    new Error(
                      `${what}: send ${i + 1} of ${QUEUE} found no receive within 10 s (a receive slot was lost)`
                    )
                })
              ),
            { discard: true }
          )
        yield* sendAll(`after ${ATTEMPTS} interrupted receives and ${fresh.length} more`)
        for (const posted of fresh) yield* posted.completion

        // Every slot is free again: the whole queue, posted on the connection, completes.
        const again = yield* Effect.forEach(
          Array.from({ length: QUEUE }, (_, i) => i),
          (i) => Effect.either(Connection.postRecv(server, slot(i)))
        )
        const refused = again.filter((e) => e._tag === "Left").length
        yield* check(refused === 0, `${refused} of ${QUEUE} receives refused on the connection after the exchange`)
        yield* sendAll("the second round")
        for (const posted of again) if (posted._tag === "Right") yield* posted.right.completion
      })
  }
]
