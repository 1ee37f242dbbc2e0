/**
 * The metrics as an exporter sees them: Prometheus-style names, the OpenTelemetry unit as the
 * `unit` tag, durations in seconds, and untagged series that are the totals of the tagged ones.
 */
import { LocalMr, Peer, RdmaMetrics, Tracing, Usage } from "@effect-rdma/core"
import { SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Metric, type MetricKey, Option } from "effect"

// An address of this test file alone.
const address = "10.77.0.43"

describe("metric names, units and totals", () => {
  it.effect("every metric has a conventional name and its unit", () =>
    Effect.sync(() => {
      const keys: Array<MetricKey.MetricKey.Untyped> = []
      const unitOf = (name: string) => {
        const key = keys.find((k) => k.name === name)
        return key?.tags.find((t) => t.key === "unit")?.value
      }
      const expected: Record<string, string> = {
        effect_rdma_live_regions: "{region}",
        effect_rdma_registered_bytes: "By",
        effect_rdma_registrations_total: "{registration}",
        effect_rdma_releases_total: "{release}",
        effect_rdma_registration_failures_total: "{registration}",
        effect_rdma_release_failures_total: "{release}",
        effect_rdma_registration_duration_seconds: "s"
      }
      // A metric appears in the registry on its first update: update each by nothing.
      for (const metric of [RdmaMetrics.liveRegions, RdmaMetrics.registeredBytes]) metric.unsafeModify(0, [])
      for (
        const metric of [
          RdmaMetrics.registrations,
          RdmaMetrics.releases,
          RdmaMetrics.registrationFailures,
          RdmaMetrics.releaseFailures
        ]
      ) metric.unsafeUpdate(0, [])
      RdmaMetrics.registrationDuration.unsafeUpdate(Duration.zero, [])
      for (const pair of Metric.unsafeSnapshot()) keys.push(pair.metricKey)
      for (const [name, unit] of Object.entries(expected)) {
        assert.strictEqual(unitOf(name), unit, name)
      }
      for (const key of keys.filter((k) => k.name.startsWith("effect_rdma_"))) {
        assert.isTrue(Option.isSome(key.description), `${key.name} has a description`)
        assert.notInclude(key.name, "_ms", key.name)
        assert.isUndefined(key.tags.find((t) => t.key === "time_unit"), key.name)
      }
    }))

  it.effect("the untagged counters and histogram are totals; durations are in seconds", () =>
    Effect.gen(function*() {
      const total = Effect.map(Metric.value(RdmaMetrics.registrations), (s) => s.count)
      const tagged = Effect.map(
        Metric.value(Metric.tagged(RdmaMetrics.registrations, "operation", "rpma_mr_reg")),
        (s) => s.count
      )
      const duration = Metric.value(RdmaMetrics.registrationDuration)
      const [totalBefore, taggedBefore, durationBefore] = [yield* total, yield* tagged, yield* duration]
      yield* Effect.scoped(Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        yield* LocalMr.register(peer, new Uint8Array(4096), Usage.READ_SRC)
        yield* LocalMr.register(peer, new Uint8Array(4096), Usage.WRITE_DST)
      })).pipe(Tracing.withPerOperation) // registrations are timed only with per-operation tracing on
      assert.isAtLeast((yield* tagged) - taggedBefore, 2)
      assert.isAtLeast((yield* total) - totalBefore, 2, "Metric.value(registrations) moves with the tagged series")
      const after = yield* duration
      assert.isAtLeast(after.count - durationBefore.count, 2)
      // Registering 4 KiB in the simulator takes well under a second: a value in seconds, not ms.
      assert.isBelow(after.max, 1)
    }).pipe(Effect.provide(SimulatedDriver.layerWith({ devices: [address] }))))
})
