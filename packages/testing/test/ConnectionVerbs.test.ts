/**
 * The 1.0 verbs of a librpma connection on the simulated fabric: recv's Completion, `imm` on write
 * and send, call and reply (the receive posted first), writeMany over an array of writes, and a
 * connection's state, changes, close and awaitClosed.
 */
import { Connection, LocalMr, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Exit, Fiber, Stream } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const pair = () => Conformance.connectedPair(address, 7481)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

describe("Connection verbs", () => {
  it.effect("recv answers the Completion; `imm` on send and write reaches the receive", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, server, serverPeer } = yield* pair()
      const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
      const out = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.SEND, Usage.WRITE_SRC))
      out.memory.set(new TextEncoder().encode("ping"))
      const first = yield* Effect.fork(Connection.recv(server, { dst: inbox }))
      yield* Connection.send(client, { src: out, length: 4, imm: 7 })
      const sent = yield* Fiber.join(first)
      assert.deepStrictEqual([sent.operation, sent.byteLength, sent.imm], ["RECV", 4, 7])
      const second = yield* Effect.fork(Connection.recv(server, { dst: inbox }))
      yield* Connection.write(client, { dst: remote, src: out, length: 4, imm: 9 })
      const written = yield* Fiber.join(second)
      assert.deepStrictEqual([written.operation, written.byteLength, written.imm], ["RECV_RDMA_WITH_IMM", 4, 9])
      const refused = yield* Effect.exit(Connection.send(client, { src: out, length: 4, imm: -1 }))
      assert.isTrue(Exit.isFailure(refused) && String(refused.cause).includes("OutOfRangeError"), String(refused))
    })))

  it.effect("call posts the answer's receive before the request; reply answers and posts the next receive", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, server, serverPeer } = yield* pair()
      const clientIn = yield* LocalMr.allocate(clientPeer, 64, Usage.RECV)
      const clientOut = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
      const serverIn = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
      const serverOut = yield* LocalMr.allocate(serverPeer, 64, Usage.SEND)
      let next = yield* Connection.postRecv(server, { dst: serverIn })
      for (const message of ["one", "three"]) {
        clientOut.memory.set(new TextEncoder().encode(message))
        const answering = yield* Effect.fork(
          Connection.call(client, { send: { src: clientOut, length: message.length }, recv: { dst: clientIn } })
        )
        const request = yield* next.completion
        serverOut.memory.set(new TextEncoder().encode(String(request.byteLength)))
        // The reply's receive is posted before its send: the client's next call never finds none.
        next = yield* Connection.reply(server, { send: { src: serverOut, length: 1 }, recv: { dst: serverIn } })
        const answer = yield* Fiber.join(answering)
        assert.strictEqual(
          new TextDecoder().decode(clientIn.memory.subarray(0, answer.byteLength)),
          String(message.length)
        )
      }
      const bad = yield* Effect.exit(Connection.call(client, { send: undefined as never, recv: { dst: clientIn } }))
      assert.isTrue(Exit.isFailure(bad) && String(bad.cause).includes("must name a send and a recv"), String(bad))
    })))

  it.effect("writeMany takes an array of writes, of several regions; a write with `imm` is refused before anything is posted", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const a = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
      const b = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
      a.memory.fill(1)
      b.memory.fill(2)
      yield* Connection.writeMany(client, [
        { dst: remote, dstOffset: 0, src: a, length: 8 },
        { dst: remote, dstOffset: 8, src: a, srcOffset: 8, length: 8 },
        { dst: remote, dstOffset: 16, src: b, length: 8 },
        { dst: remote, dstOffset: 24, src: a, length: 8 }
      ])
      yield* Connection.flush(client, { dst: remote, length: 32 })
      assert.deepStrictEqual([...target.memory.subarray(0, 32)], [
        ...Array(16).fill(1),
        ...Array(8).fill(2),
        ...Array(8).fill(1)
      ])
      target.memory.fill(0)
      const refused = yield* Effect.exit(Connection.writeMany(client, [
        { dst: remote, src: a, length: 8 },
        { dst: remote, dstOffset: 8, src: b, length: 8, imm: 1 }
      ]))
      assert.isTrue(Exit.isFailure(refused) && String(refused.cause).includes("immediate data"), String(refused))
      yield* Connection.flush(client, { dst: remote, length: 16 })
      assert.isTrue(target.memory.subarray(0, 16).every((byte) => byte === 0), "a refused batch posted nothing")
    })))

  it.effect("state, changes, close and awaitClosed: the client closes, the server sees Closed; close again is a no-op", () =>
    inWorld(Effect.gen(function*() {
      const { client, server } = yield* pair()
      assert.strictEqual(yield* Connection.state(client), "Connected")
      const serverEnd = yield* Effect.fork(Connection.awaitClosed(server))
      const subscribed = yield* Deferred.make<void>()
      const clientChanges = yield* Effect.fork(
        Connection.changes(client).pipe(Stream.tap(() => Deferred.succeed(subscribed, undefined)), Stream.runCollect)
      )
      yield* Deferred.await(subscribed)
      yield* Connection.close(client)
      yield* Connection.close(client)
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Fiber.join(clientChanges)), [
        "Connected",
        "Closing",
        "Closed"
      ])
      assert.strictEqual(yield* Connection.state(client), "Closed")
      assert.strictEqual(yield* Fiber.join(serverEnd), "Closed")
      assert.isTrue(Connection.isConnection(client))
      assert.isFalse(Connection.isConnection({ privateData: new Uint8Array() }))
    })))
})
