/**
 * The five bugs of issue 18 on the simulated driver, each a case that failed before the posting
 * kernel and passes with it.
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Fiber, Layer, ScopedRef, Stream, TestClock } from "effect"
import { ById } from "../../core/src/internal/byId.js"
import type { ConnectionImpl } from "../../core/src/internal/connectionImpl.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const serverUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>, driver = SimulatedDriver.layer) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(driver))

/** A client connected to a server that accepts it, with a region of the server's to write. */
const pair = (options?: Connection.Options) =>
  Effect.gen(function*() {
    const serverPeer = yield* Peer.make(address)
    const clientPeer = yield* Peer.make(address)
    const target = yield* LocalMr.allocate(serverPeer, 4096, serverUsage)
    const ep = yield* Listener.make(serverPeer, address, 7471)
    const accepting = yield* Effect.fork(Listener.acceptNext(ep, options))
    const client = yield* Connection.connect(clientPeer, address, ep.port, options)
    const server = yield* Fiber.join(accepting)
    const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
      Effect.flatMap(RemoteMr.require(serverUsage))
    )
    return { clientPeer, serverPeer, client, server, remote, ep }
  })

describe("kernel: the bugs of issue 18", () => {
  // Under the test clock the deadline's sleep never ends by itself: a connect that waited for it
  // after ESTABLISHED came would never return (the test's own timeout then fails it).
  it.effect(
    "1. connect inside an uninterruptible region returns once established, not at its deadline",
    () =>
      inWorld(Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, 7471)
        yield* Effect.fork(Listener.acceptNext(ep))
        // A reconnecting session's shape: the connection acquired by a ScopedRef (uninterruptibly).
        const session = yield* ScopedRef.fromAcquire(Connection.connect(clientPeer, address, ep.port))
        assert.strictEqual(yield* Connection.state(yield* ScopedRef.get(session)), "Connected")
        yield* Effect.fork(Listener.acceptNext(ep))
        // And as an acquireRelease's acquire.
        const again = yield* Effect.scoped(
          Effect.acquireRelease(Connection.connect(clientPeer, address, ep.port), () => Effect.void).pipe(
            Effect.flatMap(Connection.state)
          )
        )
        assert.strictEqual(again, "Connected")
      })),
    20_000
  )

  it.effect("2. Listener.postRecv refuses a length over 2^32 - 1, as every other operation does", () =>
    inWorld(Effect.gen(function*() {
      const serverPeer = yield* Peer.make(address)
      const clientPeer = yield* Peer.make(address)
      const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
      const ep = yield* Listener.make(serverPeer, address, 7471)
      const client = yield* Effect.fork(Effect.scoped(Connection.connect(clientPeer, address, ep.port)))
      const req = yield* Listener.next(ep)
      // A region as large as the length (its size is all the check reads): only the cap refuses it.
      const huge = { ...inbox, size: 2 ** 33 }
      const refused = yield* Effect.flip(Listener.postRecv(req, { dst: huge, offset: 0, length: 2 ** 32 }))
      assert.strictEqual(refused._tag, "OutOfRangeError")
      assert.match(refused.message, /rpma_conn_req_recv: length 4294967296 exceeds 2\^32 - 1/)
      // A receive that fits is posted, and fails once the request is rejected.
      const first = yield* Listener.postRecv(req, { dst: inbox, length: 8 })
      assert.strictEqual(first.operation, "rpma_conn_req_recv")
      yield* Listener.reject(req)
      assert.strictEqual((yield* Effect.flip(first.completion))._tag, "ConnectionClosedError")
      assert.strictEqual((yield* Effect.flip(Fiber.join(client)))._tag, "ConnectionFailedError")
    })))

  it.effect("3. a local close calls rpma_conn_disconnect once", () => {
    const calls = new Map<Driver.Model.ConnHandle, number>()
    const counting = Layer.effect(
      Driver.RdmaDriver,
      Effect.map(Driver.RdmaDriver, (driver): Driver.Driver => ({
        ...driver,
        connDisconnect: (conn) => {
          calls.set(conn, (calls.get(conn) ?? 0) + 1)
          return driver.connDisconnect(conn)
        }
      }))
    ).pipe(Layer.provideMerge(SimulatedDriver.layer))
    return inWorld(
      Effect.gen(function*() {
        const { client, server } = yield* Effect.scoped(pair())
        // The pair's scope closed the server first (acquired last): its close disconnected, then
        // its event fiber saw CLOSED (the client's answer) and must not disconnect again.
        assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(Connection.changes(client))), ["Closed"])
        assert.strictEqual(yield* Connection.state(server), "Closed")
        assert.deepStrictEqual([calls.get(Driver.handleOf(client)), calls.get(Driver.handleOf(server))], [1, 1])
      }),
      counting
    )
  })

  it.effect("4. the no-wait forms read and check their arguments when the Effect runs, as the awaited ones", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.WRITE_SRC, Usage.SEND))
      const dst = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.READ_DST, Usage.RECV))
      // Made with arguments that are fine, run after they changed: what runs is checked.
      const write = { dst: remote, src, length: 64 }
      const read = { dst, src: remote, length: 64 }
      const send = { src, length: 64 }
      const recv = { dst, length: 64 }
      const effects = [
        Connection.postWrite(client, write),
        Connection.postRead(client, read),
        Connection.postSend(client, send),
        Connection.postRecv(client, recv),
        Connection.write(client, write)
      ]
      write.length =
        read.length =
        send.length =
        recv.length =
          2 ** 40
      for (const effect of effects) {
        const refused = yield* Effect.flip(effect)
        assert.strictEqual(refused._tag, "OutOfRangeError")
        assert.match(refused.message, /length 1099511627776 exceeds 2\^32 - 1/)
      }
    })))

  it.effect("5. the watchdog finds the oldest timed request without going through every pending one", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer } = yield* pair({ receiveQueueSize: 256 })
      const inbox = yield* LocalMr.allocate(clientPeer, 64, Usage.RECV)
      // Receives wait for messages that never come: the watchdog does not time them.
      for (let i = 0; i < 200; i++) yield* Connection.postRecv(client, { dst: inbox, length: 8 })
      // This connection's own requests: the patch below sees every table of the process, and the
      // tests of this file run concurrently (another one's close goes through its table).
      const table = (client as ConnectionImpl).kernel["link"].table
      const own = table["pending"]
      const ticks = table.tick
      const original = ById.prototype.values
      let scans = 0
      ById.prototype.values = function(this: ById<any>) {
        if (this === own) scans++
        return original.call(this)
      }
      try {
        // Ten periods of the default 5 s timeout's watchdog.
        yield* TestClock.adjust("5 seconds")
      } finally {
        ById.prototype.values = original
      }
      // The watchdog ran its ten periods, and none of them went through the pending requests.
      assert.strictEqual(table.tick - ticks, 10)
      assert.strictEqual(scans, 0)
      assert.strictEqual(yield* Connection.state(client), "Connected")
    })))
})
