// The driver's one posting call and one completion mechanism on every queue kind, through the
// driver itself (core's own use of them is tested with core): a shared receive queue and a
// connection request take receives through postMany and refuse anything else; a shared receive
// queue's completions come through pollCompletions / armCompletions like a connection's, naming
// the queue pair; deleting a queue fails the wait armed on it; cancelWait stops a wait on either.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Queues.test.ts
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { address, nextCompletions, postOne } from "./support.js"

const SEND = 0x40
const RECV = 0x80
const config: Model.ConnConfig = { timeoutMs: 5000, sqSize: 8, rqSize: 8, cqSize: 16, directWriteToPmem: false }
const settle = Effect.promise(() => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve))))

const withTwoPeers = <A, E, R>(
  f: (driver: Driver, server: Model.PeerHandle, client: Model.PeerHandle) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const context = yield* driver.getIbvContext(address, "local")
    const peers = Effect.acquireRelease(driver.peerNew(context), (peer) => Effect.orDie(driver.peerDelete(peer)))
    return yield* Effect.scoped(
      Effect.flatMap(Effect.zip(peers, peers), ([server, client]) => f(driver, server, client))
    )
  })

/** A region of 256 bytes registered for `usage`, deregistered with the scope (if still registered). */
const region = (driver: Driver, peer: Model.PeerHandle, usage: number) =>
  Effect.acquireRelease(
    Effect.flatMap(driver.allocate(256), (memory) => Effect.map(driver.mrReg(peer, memory, usage), (r) => r.handle)),
    (mr) => Effect.ignore(driver.mrDereg(mr))
  )

layer(NativeDriver.layer, { timeout: "60 seconds" })("every queue kind through postMany and armCompletions", (it) => {
  describe("a shared receive queue", () => {
    it.effect(
      "takes receives only; its completions name the queue pair; its delete fails an armed wait",
      () =>
        withTwoPeers((driver, server, client) =>
          Effect.gen(function*() {
            const binding = yield* RpmaBinding.load()
            const inbox = yield* region(driver, server, RECV)
            const outbox = yield* region(driver, client, SEND)
            const srq = yield* driver.srqNew(server, { rqSize: 4, rcqSize: 4 })
            const write = yield* Effect.flip(
              postOne(driver, srq, { op: "send", id: 1, src: inbox, offset: 0, length: 8 })
            )
            assert.strictEqual(write._tag, "RpmaInvalidError")
            assert.include(write.detail, "a shared receive queue takes receives only")
            assert.deepStrictEqual(
              yield* postOne(driver, srq, { op: "recv", id: 7, dst: inbox, offset: 0, length: 64 }),
              []
            )
            assert.strictEqual((yield* Effect.flip(driver.mrDereg(inbox)))._tag, "ResourceInUseError")

            const port = 18960
            const ep = yield* driver.epListen(server, address, port)
            const incoming = yield* Effect.fork(driver.epNextConnReq(ep, { ...config, srq }))
            const clientConn = yield* driver.connReqConnect(
              yield* driver.connReqNew(client, address, port, config),
              undefined
            )
            const serverConn = yield* driver.connReqConnect(yield* Fiber.join(incoming), undefined)
            assert.strictEqual(yield* driver.connNextEvent(clientConn), "ESTABLISHED")
            assert.strictEqual(yield* driver.connNextEvent(serverConn), "ESTABLISHED")

            const armed = yield* Effect.fork(nextCompletions(driver, srq))
            yield* settle
            // The send's own completion may come back from the poll right after the post.
            const sent = yield* postOne(driver, clientConn, { op: "send", id: 1, src: outbox, offset: 0, length: 5 })
            const [received] = yield* Fiber.join(armed)
            assert.strictEqual(received?.id, 7)
            assert.strictEqual(received?.status, 0)
            assert.strictEqual(received?.byteLength, 5)
            assert.strictEqual(received?.qpNum, yield* driver.connQpNum(serverConn))
            assert.strictEqual((sent.length > 0 ? sent : yield* nextCompletions(driver, clientConn))[0]?.id, 1)
            assert.deepStrictEqual(yield* driver.pollCompletions(srq), [])

            // One cancel entry for every wait: a queue's completions too.
            const id = binding.waitCompletions(srq, () => assert.fail("a cancelled wait answered"))
            assert.isTrue(binding.cancelWait(srq, id))
            assert.isFalse(binding.cancelWait(srq, id))

            yield* driver.connDelete(serverConn)
            yield* driver.connDelete(clientConn)
            yield* driver.epShutdown(ep)
            yield* postOne(driver, srq, { op: "recv", id: 8, dst: inbox, offset: 0, length: 64 })
            const pending = yield* Effect.fork(nextCompletions(driver, srq))
            yield* settle
            yield* driver.srqDelete(srq)
            const deleted = yield* Effect.flip(Fiber.join(pending))
            assert.strictEqual(deleted._tag, "RpmaInvalidError")
            assert.strictEqual(deleted.detail, "the shared receive queue was deleted")
            // The queue is gone: the region of its last receive is released.
            yield* driver.mrDereg(inbox)
            assert.strictEqual((yield* driver.live).sharedReceiveQueues, 0)
          })
        ),
      30_000
    )
  })

  describe("a connection request", () => {
    it.effect(
      "takes receives only before it is connected; they complete on its connection",
      () =>
        withTwoPeers((driver, server, client) =>
          Effect.gen(function*() {
            const inbox = yield* region(driver, server, RECV)
            const outbox = yield* region(driver, client, SEND)
            const port = 18961
            const ep = yield* driver.epListen(server, address, port)
            const incoming = yield* Effect.fork(driver.epNextConnReq(ep, config))
            const clientConn = yield* driver.connReqConnect(
              yield* driver.connReqNew(client, address, port, config),
              undefined
            )
            const req = yield* Fiber.join(incoming)
            const send = yield* Effect.flip(
              postOne(driver, req, { op: "send", id: 1, src: inbox, offset: 0, length: 8 })
            )
            assert.strictEqual(send._tag, "RpmaInvalidError")
            assert.include(send.detail, "a connection request takes receives only")
            assert.deepStrictEqual(
              yield* postOne(driver, req, { op: "recv", id: 9, dst: inbox, offset: 0, length: 64 }),
              []
            )
            const serverConn = yield* driver.connReqConnect(req, undefined)
            assert.strictEqual(yield* driver.connNextEvent(clientConn), "ESTABLISHED")
            assert.strictEqual(yield* driver.connNextEvent(serverConn), "ESTABLISHED")
            const armed = yield* Effect.fork(nextCompletions(driver, serverConn))
            yield* settle
            yield* postOne(driver, clientConn, { op: "send", id: 2, src: outbox, offset: 0, length: 3 })
            const [received] = yield* Fiber.join(armed)
            assert.strictEqual(received?.id, 9)
            assert.strictEqual(received?.byteLength, 3)
            assert.isUndefined(received?.qpNum)
            const pending = yield* Effect.fork(nextCompletions(driver, serverConn))
            yield* settle
            yield* driver.connDelete(serverConn)
            const deleted = yield* Effect.flip(Fiber.join(pending))
            assert.strictEqual(deleted.detail, "the connection was deleted")
            yield* driver.connDelete(clientConn)
            yield* driver.epShutdown(ep)
          })
        ),
      30_000
    )
  })
})
