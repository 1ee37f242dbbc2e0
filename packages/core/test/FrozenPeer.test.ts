/**
 * SimulatedDriver's FreezePeer fault: the other side stops answering while connected, without a
 * word. Operations end at their bounds (the connection's watchdog for one-sided requests), never hang,
 * and nothing is left; across processes (SimulatedNetwork) too.
 */
import { Connection, LocalMr, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { driven } from "./clock.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const TIMEOUT_MS = 400

const STEP_MS = TIMEOUT_MS / 40

/** Closes `scope` with the TestClock moving: the TestClock time it took. */
const closeDriven = (scope: Scope.CloseableScope) =>
  Effect.map(driven(Scope.close(scope, Exit.void), STEP_MS), (r) => r.tookMs)

describe("a peer frozen while connected", () => {
  it.effect("a write under a frozen peer ends when the watchdog, on Effect's Clock, declares the connection LOST after its timeout; nothing is left", () =>
    Ledger.checked(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { client, clientPeer, remote, server } = yield* Conformance.connectedPair(address, 7621, {
        client: { timeout: `${TIMEOUT_MS} millis` },
        server: { timeout: `${TIMEOUT_MS} millis` }
      }).pipe(Scope.extend(scope))
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC).pipe(Scope.extend(scope))
      const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST).pipe(Scope.extend(scope))
      yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, freezePeer: true })
      // Two operations waiting, a write and a read: the watchdog ends them after TIMEOUT_MS plus at
      // most two periods (of TIMEOUT_MS / 10), in the TestClock's time.
      const { tookMs: waited, value: errors } = yield* driven(
        Effect.all([
          Effect.flip(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })),
          Effect.flip(Connection.read(client, { dst, dstOffset: 0, src: remote, srcOffset: 0, length: 8 }))
        ], { concurrency: "unbounded" }),
        STEP_MS
      )
      assert.isAbove(waited, TIMEOUT_MS, "not before the timeout")
      assert.isAtMost(waited, TIMEOUT_MS + 3 * (TIMEOUT_MS / 10), `within a few periods of the timeout (${waited} ms)`)
      for (const error of errors) {
        assert.strictEqual(error._tag, "ConnectionClosedError", String(error))
        if (error._tag !== "ConnectionClosedError") continue
        assert.strictEqual(error.reason, "LOST")
        assert.match(String((error.cause as Error)?.message), /^no completion for over \d+ ms \(timeout 400 ms\)/)
        assert.match(error.message, /lost/)
      }
      assert.deepStrictEqual(errors.map((e) => e._tag === "ConnectionClosedError" && e.operation), [
        "rpma_write",
        "rpma_read"
      ])
      const causes = errors.map((e) => e._tag === "ConnectionClosedError" ? e.cause : undefined)
      assert.strictEqual(causes[0], causes[1], "one cause: the watchdog's")
      assert.strictEqual(yield* Connection.state(client), "Lost")
      // The frozen side heard nothing: its connection still looks established.
      assert.strictEqual(yield* Connection.state(server), "Connected")
      // Its close waits for an answer to its disconnect until its timeout: on the TestClock too.
      yield* closeDriven(scope)
    })).pipe(Effect.provide(SimulatedDriver.layer)))

  it.effect("a send to a frozen peer ends at the caller's bound; the connection's close ends at its timeout, on Effect's Clock", () =>
    Ledger.checked(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { client, clientPeer } = yield* Conformance.connectedPair(address, 7623, {
        client: { timeout: `${TIMEOUT_MS} millis` },
        server: { timeout: `${TIMEOUT_MS} millis` }
      }).pipe(Scope.extend(scope))
      const src = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND).pipe(Scope.extend(scope))
      yield* SimulatedDriver.fail({ operation: "rpma_send", nth: 1, freezePeer: true })
      // A send waits on the other side's application: only the caller bounds it.
      const sent = yield* driven(
        Connection.send(client, { src, offset: 0, length: 8 }).pipe(
          Effect.timeout(`${TIMEOUT_MS} millis`),
          Effect.option
        ),
        STEP_MS
      )
      assert.strictEqual(sent.value._tag, "None")
      // The scope's close (disconnect unanswered, the send flushed, regions released) is bounded as
      // a whole by the timeout: its waits share one deadline.
      const took = yield* closeDriven(scope)
      // Each side's connection waits for an answer to its disconnect until its timeout, no longer:
      // its close shares one deadline.
      assert.isAtLeast(took, TIMEOUT_MS, "the close waited for the disconnect's answer until its timeout")
      assert.isAtMost(took, 2 * TIMEOUT_MS + STEP_MS, `the close took ${took} ms of the TestClock`)
    })).pipe(Effect.provide(SimulatedDriver.layer)))
})
