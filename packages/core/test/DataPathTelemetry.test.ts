/**
 * The data path's telemetry: a span per posted call with per-operation tracing (one per batch, with
 * its count), none without; request, byte and failure counters on every call; and README's metrics
 * table naming exactly the metrics RdmaMetrics exports, with their units.
 */
import { Connection, LocalMr, RdmaMetrics, Tracing, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Metric, MetricKeyType, Tracer } from "effect"
import { readFileSync } from "node:fs"

// An address of this test file alone.
const address = "10.77.0.61"

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layerWith({ devices: [address] })))

const recordingTracer = Effect.map(Effect.tracer, (base) => {
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (...args) => {
      const span = base.span(...args)
      spans.push(span)
      return span
    },
    context: base.context
  })
  return { spans, tracer }
})

const count = (metric: Metric.Metric.Counter<number>, tags: Record<string, string> = {}) =>
  Effect.map(
    Metric.value(Object.entries(tags).reduce((m, [k, v]) => Metric.tagged(m, k, v), metric)),
    (state) => state.count
  )

describe("data-path telemetry", () => {
  it.effect("per-operation tracing: a span per call, one per batch with its count; none when off", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, server, serverPeer } = yield* Conformance.connectedPair(address, 7491)
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.combine(Usage.WRITE_SRC, Usage.SEND))
      const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
      const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
      const spans = [0, 1, 2, 3, 4].map((i) => ({ dstOffset: i * 64, srcOffset: 0, length: 64 }))
      const calls = Effect.gen(function*() {
        yield* Connection.write(client, { dst: remote, src, length: 64 })
        yield* Connection.writeMany(client, spans.map((span) => ({ dst: remote, src, ...span })))
        yield* Connection.read(client, { dst, src: remote, length: 32 })
        yield* Connection.flush(client, { dst: remote, length: 64 })
        const receiving = yield* Effect.fork(Connection.recv(server, { dst: inbox }))
        yield* Connection.send(client, { src, length: 16 })
        yield* receiving.await
      })
      const { spans: recorded, tracer } = yield* recordingTracer
      yield* calls.pipe(Effect.withTracer(tracer))
      assert.strictEqual(recorded.filter((s) => s.name === "rpma_post").length, 0, "no span per operation when off")

      yield* calls.pipe(Tracing.withPerOperation, Effect.withTracer(tracer))
      const posts = recorded.filter((s) => s.name === "rpma_post")
      const ops = posts.map((s) => s.attributes.get("rdma.op"))
      assert.deepStrictEqual(ops.sort(), ["flush", "read", "recv", "send", "write", "write"])
      const batch = posts.find((s) => s.attributes.has("rdma.operation.batch.size"))!
      assert.strictEqual(batch.attributes.get("rdma.operation.batch.size"), 5)
      assert.strictEqual(batch.attributes.get("rdma.size"), 5 * 64)
      assert.strictEqual(batch.attributes.get("rdma.driver"), "simulated")
      for (const span of posts) assert.strictEqual(span.status._tag, "Ended")
    })))

  it.effect("requests and bytes are counted by operation with per-operation telemetry, failures by error type always", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* Conformance.connectedPair(address, 7492)
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      const writes = count(RdmaMetrics.operations, { operation: "rpma_write" })
      const bytes = count(RdmaMetrics.operationBytes, { operation: "rpma_write" })
      const total = count(RdmaMetrics.operations)
      const failures = count(RdmaMetrics.operationFailures, {
        operation: "rpma_write",
        "error.type": "CompletionError"
      })
      const before = { writes: yield* writes, bytes: yield* bytes, total: yield* total, failures: yield* failures }
      // Requests and bytes: with per-operation telemetry on.
      yield* Effect.gen(function*() {
        yield* Connection.write(client, { dst: remote, src, length: 100 })
        yield* Connection.writeMany(
          client,
          [{ dstOffset: 0, srcOffset: 0, length: 10 }, { dstOffset: 10, srcOffset: 0, length: 20 }].map((span) => ({
            dst: remote,
            src,
            ...span
          }))
        )
      }).pipe(Tracing.withPerOperation)
      const counted = { writes: yield* writes, bytes: yield* bytes }
      // Failures: always. The write before the fault is not counted, tracing off.
      // IBV_WC_REM_ACCESS_ERR (10): a completion that fails.
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, completionStatus: 10 })
      const failed = yield* Effect.flip(Connection.write(client, { dst: remote, src, length: 8 }))
      assert.strictEqual(failed._tag, "CompletionError")
      // Counters are process-wide and tests of this file run concurrently: at least what this one did.
      assert.isAtLeast(counted.writes - before.writes, 3)
      assert.isAtLeast(counted.bytes - before.bytes, 100 + 30)
      assert.isAtLeast((yield* total) - before.total, 3, "the untagged series is the total")
      assert.isAtLeast((yield* failures) - before.failures, 1)
    })))

  it.effect("an argument refused before anything is posted is counted as a failure of its operation", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* Conformance.connectedPair(address, 7493)
      const src = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
      const refusals = (operation: string) =>
        count(RdmaMetrics.operationFailures, { operation, "error.type": "OutOfRangeError" })
      const before = { write: yield* refusals("rpma_write"), flush: yield* refusals("rpma_flush") }
      const beyond = yield* Effect.flip(Connection.write(client, { dst: remote, src, srcOffset: 60, length: 8 }))
      assert.strictEqual(beyond._tag, "OutOfRangeError")
      const batch = yield* Effect.flip(
        Connection.writeMany(
          client,
          [{ dstOffset: -1, srcOffset: 0, length: 1 }].map((span) => ({ dst: remote, src, ...span }))
        )
      )
      assert.strictEqual(batch._tag, "OutOfRangeError")
      const prepared = yield* Effect.flip(Connection.prepareWrite(client, { dst: remote, src, length: 65 }))
      assert.strictEqual(prepared._tag, "OutOfRangeError")
      yield* Effect.flip(Connection.flush(client, { dst: remote, dstOffset: 0, length: -1 }))
      assert.isAtLeast((yield* refusals("rpma_write")) - before.write, 3)
      assert.isAtLeast((yield* refusals("rpma_flush")) - before.flush, 1)
    })))

  it.effect("README's metrics table lists every RdmaMetrics metric, with its name, type and unit", () =>
    Effect.sync(() => {
      const readme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8")
      const rows = new Map<string, { name: string; type: string; unit: string }>()
      for (const line of readme.split("\n")) {
        const cells = /^\| `(\w+)` \| `(effect_rdma_\w+)` \| ([^|]+) \| `([^`]+)` \|/.exec(line)
        if (cells !== null) rows.set(cells[1]!, { name: cells[2]!, type: cells[3]!.trim(), unit: cells[4]! })
      }
      const exported = Object.entries(RdmaMetrics).filter(([key, value]) =>
        key !== "registrationLatency" && (typeof value === "object" || typeof value === "function") && value !== null &&
        "keyType" in value
      ) as Array<[string, Metric.Metric<any, any, any>]>
      assert.isAbove(exported.length, 8)
      for (const [key, metric] of exported) {
        if (MetricKeyType.isGaugeKey(metric.keyType)) metric.unsafeModify(0, [])
        else metric.unsafeUpdate(key === "registrationDuration" ? Duration.zero : 0, [])
      }
      const snapshot = Metric.unsafeSnapshot()
      for (const [key] of exported) {
        const row = rows.get(key)
        assert.isDefined(row, `README's metrics table has a row for RdmaMetrics.${key}`)
        const pair = snapshot.find((p) => p.metricKey.name === row!.name && p.metricKey.tags.length === 1)
        assert.isDefined(pair, `RdmaMetrics.${key} is named ${row!.name}`)
        assert.strictEqual(pair!.metricKey.tags[0]!.value, row!.unit, `the unit of ${row!.name}`)
        const type = MetricKeyType.isCounterKey(pair!.metricKey.keyType)
          ? "counter"
          : MetricKeyType.isGaugeKey(pair!.metricKey.keyType)
          ? "gauge"
          : "histogram"
        assert.isTrue(row!.type.startsWith(type), `${row!.name} is a ${type}, README says ${row!.type}`)
      }
      assert.strictEqual(rows.size, exported.length, "no row for a metric that does not exist")
    }))
})
