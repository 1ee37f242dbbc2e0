/**
 * SimulatedDriver's FreezePeer fault: the other side stops answering while connected, without a
 * word. Operations end at their bounds (the connection's watchdog for one-sided requests), never hang,
 * and nothing is left; across processes (SimulatedNetwork) too.
 */
import { Connection, LocalMr, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const TIMEOUT_MS = 400

describe("a peer frozen while connected", () => {
  it.live("a write under a frozen peer ends when the watchdog declares the connection LOST, after its timeout; nothing is left", () =>
    Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const { client, clientPeer, remote, server } = yield* Conformance.connectedPair(address, 7621, {
        client: { timeout: `${TIMEOUT_MS} millis` },
        server: { timeout: `${TIMEOUT_MS} millis` }
      })
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
      yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, freezePeer: true })
      const started = performance.now()
      // Two operations waiting, a write and a read; a generous bound on a hang: the watchdog ends
      // them after TIMEOUT_MS plus at most two periods.
      const errors = yield* Effect.all([
        Effect.flip(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })),
        Effect.flip(Connection.read(client, { dst, dstOffset: 0, src: remote, srcOffset: 0, length: 8 }))
      ], { concurrency: "unbounded" }).pipe(Effect.timeout("10 seconds"))
      const waited = performance.now() - started
      assert.isAtLeast(waited, TIMEOUT_MS, "not before the timeout")
      assert.isBelow(waited, 4 * TIMEOUT_MS, `within a few periods of the timeout (${Math.round(waited)} ms)`)
      for (const error of errors) {
        assert.strictEqual(error._tag, "ConnectionClosedError", String(error))
        if (error._tag !== "ConnectionClosedError") continue
        assert.strictEqual(error.reason, "LOST")
        assert.match(String((error.cause as Error)?.message), /^no completion for over \d+ ms \(timeout 400 ms\)/)
        assert.match(error.message, /lost/)
      }
      assert.deepStrictEqual(errors.map((e) => e._tag === "ConnectionClosedError" && e.operation), ["rpma_write", "rpma_read"])
      const causes = errors.map((e) => e._tag === "ConnectionClosedError" ? e.cause : undefined)
      assert.strictEqual(causes[0], causes[1], "one cause: the watchdog's")
      assert.strictEqual(yield* client.state, "LOST")
      // The frozen side heard nothing: its connection still looks established.
      assert.strictEqual(yield* server.state, "ESTABLISHED")
    }))).pipe(Effect.provide(SimulatedDriver.layer)))

  it.live("a send to a frozen peer ends at the caller's bound, and the connection still closes within its timeout", () =>
    Ledger.checked(Effect.gen(function*() {
      const closed = yield* Effect.scoped(Effect.gen(function*() {
        const { client, clientPeer } = yield* Conformance.connectedPair(address, 7623, {
          client: { timeout: `${TIMEOUT_MS} millis` },
          server: { timeout: `${TIMEOUT_MS} millis` }
        })
        const src = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
        yield* SimulatedDriver.fail({ operation: "rpma_send", nth: 1, freezePeer: true })
        // A send waits on the other side's application: only the caller bounds it.
        const sent = yield* Connection.send(client, { src, offset: 0, length: 8 }).pipe(Effect.timeout(`${TIMEOUT_MS} millis`), Effect.option)
        assert.strictEqual(sent._tag, "None")
        return performance.now()
      }))
      // The scope's close (disconnect unanswered, the send flushed, regions released) was bounded.
      assert.isBelow(performance.now() - closed, 4 * TIMEOUT_MS)
    })).pipe(Effect.provide(SimulatedDriver.layer)))
})
