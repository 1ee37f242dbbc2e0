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
      yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, freezePeer: true })
      const started = performance.now()
      // A generous bound on a hang: the watchdog ends it after TIMEOUT_MS plus at most a period.
      const error = yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 }).pipe(
        Effect.flip,
        Effect.timeout("10 seconds")
      )
      const waited = performance.now() - started
      assert.isAtLeast(waited, TIMEOUT_MS, "not before the timeout")
      assert.isBelow(waited, 4 * TIMEOUT_MS, `within a few periods of the timeout (${Math.round(waited)} ms)`)
      assert.strictEqual(error._tag, "ConnectionClosedError", String(error))
      assert.match(error.message, /lost/)
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
