/**
 * What operators see: metrics read back through Effect's Metric API, and a span around every
 * native call with its size and usage.
 */
import { LocalMr, Peer, RdmaMetrics, Tracing, Usage } from "@effect-rdma/core"
import { SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Metric, Option, Tracer } from "effect"

// An address of this test file alone, so that the per-peer metrics are not shared with other tests.
const address = "10.77.0.42"

const gauge = (metric: Metric.Metric.Gauge<number>) => Effect.map(Metric.value(metric), (s) => s.value)

describe("metrics", () => {
  it.effect("live regions and registered bytes per peer, registrations, failures by error, latency", () =>
    Effect.gen(function*() {
      const regions = Metric.tagged(RdmaMetrics.liveRegions, "peer", address)
      const bytes = Metric.tagged(RdmaMetrics.registeredBytes, "peer", address)
      const failures = Metric.tagged(
        Metric.tagged(RdmaMetrics.registrationFailures, "operation", "rpma_mr_reg"),
        "error",
        "RpmaInvalidError"
      )
      const latency = Metric.tagged(RdmaMetrics.registrationLatency, "operation", "rpma_mr_reg")
      const failuresBefore = (yield* Metric.value(failures)).count
      const latencyBefore = (yield* Metric.value(latency)).count

      yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* LocalMr.register(peer, new Uint8Array(4096), Usage.READ_SRC)
        yield* LocalMr.register(peer, new Uint8Array(1000), Usage.SEND)
        assert.strictEqual(yield* gauge(regions), 2)
        assert.strictEqual(yield* gauge(bytes), 5096)
        yield* Effect.flip(LocalMr.register(peer, new Uint8Array(0), Usage.SEND))
      }))
      assert.strictEqual(yield* gauge(regions), 0)
      assert.strictEqual(yield* gauge(bytes), 0)
      assert.strictEqual((yield* Metric.value(failures)).count - failuresBefore, 1)
      // Timed only with per-operation tracing on: the two successful registrations (a failure is
      // counted, not timed).
      assert.strictEqual((yield* Metric.value(latency)).count - latencyBefore, 0)
      yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* LocalMr.register(peer, new Uint8Array(4096), Usage.READ_SRC)
        yield* LocalMr.register(peer, new Uint8Array(1000), Usage.SEND)
      })).pipe(Tracing.withPerOperation)
      assert.isAtLeast((yield* Metric.value(latency)).count - latencyBefore, 2)
    }).pipe(Effect.provide(SimulatedDriver.layerWith({ devices: [address] }))))

  it.effect("registrations and releases: per operation, in total, and with the fiber's metric labels", () =>
    Effect.gen(function*() {
      const count = (metric: Metric.Metric.Counter<number>) => Effect.map(Metric.value(metric), (s) => s.count)
      const series = {
        registrations: RdmaMetrics.registrations,
        registered: Metric.tagged(RdmaMetrics.registrations, "operation", "rpma_mr_reg"),
        labelled: Metric.tagged(Metric.tagged(RdmaMetrics.registrations, "operation", "rpma_mr_reg"), "tenant", "t1"),
        releases: RdmaMetrics.releases,
        released: Metric.tagged(RdmaMetrics.releases, "operation", "rpma_mr_dereg"),
        releasedLabelled: Metric.tagged(
          Metric.tagged(RdmaMetrics.releases, "operation", "rpma_mr_dereg"),
          "tenant",
          "t1"
        ),
        refused: Metric.tagged(
          Metric.tagged(
            Metric.tagged(RdmaMetrics.registrationFailures, "operation", "rpma_mr_reg"),
            "error",
            "MemoryRefusedError"
          ),
          "tenant",
          "t1"
        )
      }
      const read = Effect.all(Object.fromEntries(Object.entries(series).map(([k, m]) => [k, count(m)])))
      const before = yield* read
      yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* LocalMr.register(peer, new Uint8Array(64), Usage.READ_SRC)
        yield* LocalMr.use(peer, new Uint8Array(64), Usage.READ_SRC, () => Effect.void).pipe(
          Effect.tagMetrics("tenant", "t1")
        )
        yield* Effect.flip(LocalMr.register(peer, "not bytes" as never, Usage.READ_SRC)).pipe(
          Effect.tagMetrics("tenant", "t1")
        )
      }))
      const after = yield* read
      const delta = Object.fromEntries(Object.keys(series).map((k) => [k, after[k]! - before[k]!]))
      // A labelled update goes to the labelled series and the total (Effect's rule for tagMetrics).
      assert.deepStrictEqual(delta, {
        registrations: 2,
        registered: 1,
        labelled: 1,
        releases: 2,
        released: 1,
        releasedLabelled: 1,
        refused: 1
      })
    }).pipe(Effect.provide(SimulatedDriver.layerWith({ devices: [address] }))))
})

describe("spans", () => {
  it.effect("control-path calls have a span; registrations one with their size and usage when asked for", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.Span> = []
      const base = yield* Effect.tracer
      const recording = Tracer.make({
        span: (...args) => {
          const span = base.span(...args)
          spans.push(span)
          return span
        },
        context: base.context
      })
      const register = Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* LocalMr.register(peer, new Uint8Array(8192), Usage.combine(Usage.WRITE_DST, Usage.READ_SRC))
      })).pipe(Effect.withSpan("handler"), Effect.withTracer(recording))
      // By default the control path only: no span per registration.
      yield* register
      assert.includeMembers(spans.map((s) => s.name), ["rpma_peer_new", "rpma_peer_delete"])
      assert.notInclude(spans.map((s) => s.name), "rpma_mr_reg")
      spans.length = 0
      yield* register.pipe(Effect.provide(Tracing.layerPerOperation))
      const names = spans.map((s) => s.name)
      for (
        const call of [
          "rpma_utils_get_ibv_context",
          "rpma_peer_new",
          "rpma_mr_reg",
          "rpma_mr_dereg",
          "rpma_peer_delete"
        ]
      ) {
        assert.include(names, call)
      }
      const reg = spans.find((s) => s.name === "rpma_mr_reg")!
      assert.strictEqual(reg.attributes.get("rdma.size"), 8192)
      assert.strictEqual(reg.attributes.get("rdma.usage"), "READ_SRC|WRITE_DST (0x09)")
      assert.strictEqual(reg.attributes.get("rdma.driver"), "simulated")
      assert.strictEqual(Option.getOrUndefined(reg.parent)?.spanId, spans.find((s) => s.name === "handler")!.spanId)
    }).pipe(Effect.provide(SimulatedDriver.layerWith({ devices: [address] }))))
})
