/**
 * Issue 19, item 5, on the simulated driver: a connection whose last requests were posted
 * unsignalled and succeeded ends without waiting for completions that never come, whichever side
 * ends it, and those requests fail saying that their outcome is unknown, in TestClock time. (The
 * conformance case closing.ts times the close on both drivers.)
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Scope } from "effect"
import { driven } from "./clock.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const usage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
const TIMEOUT_MS = 8_000

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** Each side's connection in a scope of its own, and a client region to write from. */
const pair = Effect.gen(function*() {
  const serverPeer = yield* Peer.make(address)
  const clientPeer = yield* Peer.make(address)
  const target = yield* LocalMr.allocate(serverPeer, 4096, usage)
  const ep = yield* Listener.make(serverPeer, address, 7480)
  const serverScope = yield* Scope.make()
  const clientScope = yield* Scope.make()
  const accepting = yield* Effect.fork(Scope.extend(Listener.acceptNext(ep), serverScope))
  const options = { timeout: Duration.millis(TIMEOUT_MS) }
  const client = yield* Scope.extend(Connection.connect(clientPeer, address, ep.port, options), clientScope)
  yield* Fiber.join(accepting)
  const src = yield* Scope.extend(LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC), clientScope)
  const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
    Effect.flatMap(RemoteMr.require(usage))
  )
  const posted: Array<Connection.Posted> = []
  for (let i = 0; i < 8; i++) {
    posted.push(
      yield* Connection.postWrite(client, {
        dst: remote,
        dstOffset: i * 8,
        src,
        srcOffset: i * 8,
        length: 8,
        completion: "onError"
      })
    )
  }
  return { client, serverScope, clientScope, last: posted[posted.length - 1]! }
})

/** How much TestClock time `effect` took, the clock moved on 10 ms at a time (a close that waited for its timeout would take it all). */
const clockTime = <A, E>(effect: Effect.Effect<A, E>) => Effect.map(driven(effect, 10), (r) => r.tookMs)

const unknownOutcome = (exit: Exit.Exit<unknown, unknown>) => {
  assert.isTrue(Exit.isFailure(exit) && exit.cause._tag === "Fail", `expected a failure, got ${String(exit)}`)
  const error = (exit as Exit.Failure<unknown, { _tag: string; message: string; unsignalled?: boolean }>).cause as any
  assert.strictEqual(error.error._tag, "ConnectionClosedError")
  assert.isTrue(error.error.unsignalled)
  assert.match(
    error.error.message,
    /rpma_write: the connection was closed before this unsignalled request .* its outcome is unknown/
  )
}

describe("a close after successful unsignalled requests", () => {
  it.effect("this side's close: ends at once, the requests fail with their outcome unknown, their regions let go", () =>
    inWorld(Effect.gen(function*() {
      const { clientScope, last, serverScope } = yield* pair
      const took = yield* clockTime(Scope.close(clientScope, Exit.void))
      assert.isBelow(took, TIMEOUT_MS / 2, `the close took ${took} ms of the TestClock`)
      unknownOutcome(yield* Effect.exit(last.completion))
      yield* Scope.close(serverScope, Exit.void)
    })))

  it.effect("the other side's close: this side's end does not wait for them either", () =>
    inWorld(Effect.gen(function*() {
      const { clientScope, last, serverScope } = yield* pair
      // The client's end fails what is still pending once it has drained what reports by itself.
      const took = yield* clockTime(
        Scope.close(serverScope, Exit.void).pipe(Effect.zipRight(Effect.exit(last.completion)))
      )
      assert.isBelow(took, TIMEOUT_MS / 2, `the client's end took ${took} ms of the TestClock`)
      unknownOutcome(yield* Effect.exit(last.completion))
      yield* Scope.close(clientScope, Exit.void)
    })))
})
