// Shared receive queues against a C program written on librpma (srq_peer.c), in both directions:
// two clients' messages taken from one queue's receives, each routed by its qp_num to the
// connection it came on, which answers; a client that got another's answer sees the wrong bytes.
// The TypeScript clients and the last server have a receive CQ of their own (one on a completion
// channel shared with the CQ).
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/FeaturesSrq.test.ts
import { Connection, Listener, LocalMr, Peer, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, pattern, runC, same } from "./cPeer.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

const MSG = 32
const SEEDS = [11, 22] as const
/** A receive CQ of its own; for the second client, on one completion channel with the CQ. */
const ownReceiveCq = (i: number): Connection.Options => ({
  receiveQueueSize: 16,
  receiveCompletionQueueSize: 16,
  sharedCompletionChannel: i === 1
})
const usage = Usage.combine(Usage.SEND, Usage.RECV)

/** A message as srq_peer.c builds it: the seed, then pattern(i, seed). */
const message = (seed: number) => {
  const bytes = pattern(MSG, seed)
  bytes[0] = seed
  return bytes
}

describe("shared receive queues against a librpma C program", () => {
  it.live(
    "TypeScript server with a shared receive queue, two C clients: each message answered on its own connection",
    () => {
      const port = 17910
      return Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const mem = yield* LocalMr.allocate(peer, 4096, usage)
        const srq = yield* SharedReceiveQueue.make(peer, { receiveQueueSize: 4 })
        const posted = [
          yield* SharedReceiveQueue.postRecv(srq, { dst: mem, offset: 0, length: 64 }),
          yield* SharedReceiveQueue.postRecv(srq, { dst: mem, offset: 64, length: 64 })
        ]
        const ep = yield* Listener.make(peer, address, port)
        const clients = SEEDS.map((seed) => runC("srq_peer", ["client", address, String(port), String(seed)]))
        yield* Effect.addFinalizer(() => Effect.sync(() => clients.forEach((c) => c.child.kill())))
        const byQp = new Map<number, Connection.Connection>()
        for (let i = 0; i < SEEDS.length; i++) {
          const conn = yield* Listener.acceptNext(ep, { sharedReceiveQueue: srq })
          byQp.set(yield* Connection.qpNum(conn), conn)
        }
        assert.strictEqual(byQp.size, 2, "two queue pair numbers")
        const seen: Array<number> = []
        for (const [i, receive] of posted.entries()) {
          const got = yield* receive.completion
          assert.strictEqual(got.operation, "RECV")
          assert.strictEqual(got.byteLength, MSG)
          const bytes = mem.memory.slice(i * 64, i * 64 + MSG)
          const seed = bytes[0]!
          assert.isTrue(same(bytes, message(seed)), `the bytes of seed ${seed}`)
          seen.push(seed)
          const conn = byQp.get(got.qpNum)
          assert.isDefined(conn, `qpNum ${got.qpNum} names one of the connections`)
          mem.memory.set(pattern(MSG, seed + 100), 1024 + i * 64)
          yield* Connection.send(conn!, { src: mem, offset: 1024 + i * 64, length: MSG })
        }
        assert.deepStrictEqual(seen.sort((a, b) => a - b), [...SEEDS])
        for (const client of clients) {
          const code = yield* awaitExit(client)
          assert.strictEqual(code, 0, `a C client:\n${client.output()}`)
        }
      }).pipe(Effect.scoped, Effect.provide(NativeDriver.layer))
    },
    90_000
  )

  it.live(
    "TypeScript clients with their own receive CQ, C server with a shared receive queue: each gets its answer",
    () => {
      const port = 17911
      const server = runC("srq_peer", ["server", address, String(port)])
      return Effect.gen(function*() {
        yield* Effect.promise(() => server.ready)
        const peer = yield* Peer.make(address)
        yield* Effect.forEach(SEEDS, (seed, i) =>
          Effect.gen(function*() {
            const mem = yield* LocalMr.allocate(peer, 128, usage)
            const conn = yield* Connection.connect(peer, address, port, ownReceiveCq(i))
            const answer = yield* Connection.postRecv(conn, { dst: mem, offset: 64, length: 64 })
            mem.memory.set(message(seed), 0)
            yield* Connection.send(conn, { src: mem, offset: 0, length: MSG })
            const got = yield* answer.completion
            assert.strictEqual(got.byteLength, MSG)
            assert.isTrue(same(mem.memory.slice(64, 64 + MSG), pattern(MSG, seed + 100)), `the answer to seed ${seed}`)
          }), { concurrency: "unbounded", discard: true })
      }).pipe(
        Effect.scoped,
        Effect.zipRight(awaitExit(server)),
        Effect.tap((code) => Effect.sync(() => assert.strictEqual(code, 0, `the C server:\n${server.output()}`))),
        Effect.ensuring(Effect.sync(() => server.child.kill())),
        Effect.provide(NativeDriver.layer)
      )
    },
    90_000
  )

  it.live(
    "TypeScript server with a receive CQ of its own on a shared channel, C client: receive before accept, answer",
    () => {
      const port = 17912
      return Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const mem = yield* LocalMr.allocate(peer, 256, usage)
        const ep = yield* Listener.make(peer, address, port)
        const client = runC("srq_peer", ["client", address, String(port), "33"])
        yield* Effect.addFinalizer(() => Effect.sync(() => client.child.kill()))
        const options = ownReceiveCq(1)
        const req = yield* Listener.next(ep, options)
        const first = yield* Listener.postRecv(req, { dst: mem, offset: 0, length: 64 })
        const conn = yield* Listener.accept(req, options)
        const got = yield* first.completion
        assert.strictEqual(got.byteLength, MSG)
        assert.isTrue(same(mem.memory.slice(0, MSG), message(33)), "the client's message")
        mem.memory.set(pattern(MSG, 133), 128)
        yield* Connection.send(conn, { src: mem, offset: 128, length: MSG })
        const code = yield* awaitExit(client)
        assert.strictEqual(code, 0, `the C client:\n${client.output()}`)
      }).pipe(Effect.scoped, Effect.provide(NativeDriver.layer))
    },
    90_000
  )
})
