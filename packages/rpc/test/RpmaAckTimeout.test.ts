/**
 * The `"rpma"` transport's `ackTimeout` on the simulated driver: a server whose large answer's
 * piece is never acknowledged (RELEASE) by its client ends that client's channel with the wait's
 * Timeout at `ackTimeout`, as the `"cm"` transport does (test/CmFlowControl.test.ts): it closes
 * the connection and drops the client with a warning. Left open, the channel would refuse every
 * later send and never end, and the client would wait on for its answers.
 */
import { Connection, LocalMr, Peer, Usage } from "@effect-rdma/core"
import { RdmaChannel, RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { RpcSerialization } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Fiber, Logger, Option, TestClock } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const HELLO = 1
const LARGE = 3
const HEADER = 8
const header = (kind: number, length: number) => [
  kind,
  0,
  0,
  0,
  length & 0xff,
  (length >> 8) & 0xff,
  (length >> 16) & 0xff,
  length >>> 24
]

describe("RdmaRpc rpma transport: ackTimeout", () => {
  it.effect(
    "a server whose client never acknowledges a large answer's piece drops it with Timeout at ackTimeout, not before",
    () => {
      const logged: Array<{ readonly line: string; readonly level: string; readonly error: unknown }> = []
      const logger = Logger.make(({ cause, logLevel, message }) => {
        logged.push({ line: [message].flat().join(" "), level: logLevel.label, error: Cause.squash(cause) })
      })
      return Effect.gen(function*() {
        const port = 7497
        const ackTimeout = Duration.seconds(5)
        const protocol = yield* RdmaRpc.makeProtocolServer({
          transport: "rpma",
          address,
          port,
          ackTimeout,
          keepAlive: Duration.infinity,
          landingSize: 4096
        }).pipe(Effect.provide(RpcSerialization.layerMsgPack), Effect.provide(Peer.layer(address)))
        // A raw client: its HELLO, then it reads what comes and never answers RELEASE.
        const peer = yield* Peer.make(address)
        const peers = Effect.map(Ledger.live, (entries) => entries.filter((e) => e.kind === "Peer").length)
        const peersBefore = yield* peers
        const conn = yield* Connection.connect(peer, address, port)
        const inbox = yield* LocalMr.allocate(peer, 4 * 4096, Usage.RECV)
        const outbox = yield* LocalMr.allocate(peer, 4096, Usage.SEND)
        const landing = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.READ_SRC))
        const descriptor = yield* LocalMr.descriptor(landing)
        const received: Array<number> = []
        const receiving = yield* Effect.gen(function*() {
          for (let slot = 0;; slot = (slot + 1) % 4) {
            yield* Connection.recv(conn, { dst: inbox, offset: slot * 4096, length: 4096 })
            received.push(inbox.memory[slot * 4096]!)
          }
        }).pipe(Effect.ignore, Effect.fork)
        outbox.memory.set([...header(HELLO, descriptor.length), ...descriptor])
        yield* Connection.send(conn, { src: outbox, length: HEADER + descriptor.length })
        // The server registers the client once both HELLOs are in.
        yield* Effect.zipLeft(protocol.clientIds, Effect.yieldNow()).pipe(Effect.repeat({ until: (ids) => ids.has(0) }))
        assert.strictEqual(yield* peers, peersBefore + 1, "the server isolates the client in a peer of its own")
        // An answer of three pieces of the 4096-byte landing size: the second waits for the first's RELEASE.
        const answer = yield* Effect.fork(
          protocol.send(0, { _tag: "Chunk", requestId: "1", values: [new Uint8Array(10_000).fill(3)] })
        )
        const disconnected = yield* Effect.fork(protocol.disconnects.take)
        yield* Effect.yieldNow().pipe(Effect.repeat({ until: () => received.includes(LARGE) }))
        yield* TestClock.adjust(Duration.subtract(ackTimeout, Duration.millis(1)))
        assert.isTrue(Option.isNone(yield* Fiber.poll(disconnected)), "the client is kept until ackTimeout")
        assert.deepStrictEqual(received, [HELLO, LARGE], "one piece, then a wait for its RELEASE")
        yield* TestClock.adjust(Duration.millis(1))
        assert.strictEqual(yield* Fiber.join(disconnected), 0)
        yield* Fiber.join(answer)
        yield* Connection.awaitClosed(conn)
        // The protection domain the server gave this client (isolated by default) goes with it,
        // not with the server: its scope closes right after the drop is announced.
        const peersAfter = yield* Effect.zipLeft(peers, Effect.yieldNow()).pipe(
          Effect.repeat({ until: (n) => n === peersBefore, times: 1000 })
        )
        assert.strictEqual(peersAfter, peersBefore, "the dropped client's peer is released")
        yield* Fiber.interrupt(receiving)
        // The channel ends with the wait's Timeout: a drop worth a warning.
        const dropped = logged.find(({ line }) => /client 0 dropped/.test(line))
        assert.strictEqual(dropped?.level, "WARN")
        assert.instanceOf(dropped?.error, RdmaChannel.ChannelError)
        assert.strictEqual(dropped.error.reason, "Timeout")
        assert.match(dropped.error.detail, /acknowledgement of a large message's piece did not come within 5s/)
      }).pipe(Effect.scoped, Ledger.checked, Effect.provide(Logger.add(logger)), Effect.provide(SimulatedDriver.layer))
    },
    30_000
  )
})
