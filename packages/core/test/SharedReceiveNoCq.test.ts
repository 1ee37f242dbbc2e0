/**
 * A shared receive queue without a receive CQ (librpma's 08srq modes m and r) on the simulated
 * fabric: its receives complete on its connections' CQs, and a connection's end neither loses one
 * that completed on it nor strands one still waiting.
 */
import { Connection, Listener, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** A queue of 4 receives without a receive CQ, its endpoint, and a way to connect a client to it in a scope. */
const setUp = Effect.gen(function*() {
  const serverPeer = yield* Peer.make(address)
  const clientPeer = yield* Peer.make(address)
  const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 4, completionQueueSize: 0 })
  const inbox = yield* LocalMr.allocate(serverPeer, 4 * 64, Usage.RECV)
  const out = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
  const ep = yield* Listener.make(serverPeer, address, 7471)
  const connectIn = (scope: Scope.Scope) =>
    Effect.gen(function*() {
      const accepting = yield* Effect.fork(Listener.acceptNext(ep, { sharedReceiveQueue: srq }))
      const client = yield* Connection.connect(clientPeer, address, ep.port)
      return { client, server: yield* Fiber.join(accepting) }
    }).pipe(Scope.extend(scope))
  return { connectIn, inbox, out, srq }
})

describe("a shared receive queue without a receive CQ", () => {
  it.effect("a receive still waiting when one of its connections closes completes on another", () =>
    inWorld(Effect.gen(function*() {
      const { connectIn, inbox, out, srq } = yield* setUp
      const first = yield* Scope.make()
      yield* connectIn(first)
      const second = yield* connectIn(yield* Effect.scope)
      const waiting = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 0, length: 64 })
      yield* Scope.close(first, Exit.void)
      yield* Connection.send(second.client, { src: out, offset: 0, length: 12 })
      const got = yield* waiting.completion
      assert.strictEqual(got.byteLength, 12)
      assert.strictEqual(got.qpNum, yield* Connection.qpNum(second.server))
    })))

  it.effect("a receive that completed on a connection closed before anyone awaited it still succeeds", () =>
    inWorld(Effect.gen(function*() {
      const { connectIn, inbox, out, srq } = yield* setUp
      const scope = yield* Scope.make()
      const { client } = yield* connectIn(scope)
      const posted = yield* SharedReceiveQueue.postRecv(srq, { dst: inbox, offset: 64, length: 64 })
      out.memory.fill(7)
      yield* Connection.send(client, { src: out, offset: 0, length: 20 })
      yield* Scope.close(scope, Exit.void)
      const got = yield* posted.completion
      assert.strictEqual(got.byteLength, 20)
      assert.isTrue(inbox.memory.subarray(64, 84).every((b) => b === 7))
    })))
})
