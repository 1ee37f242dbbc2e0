/**
 * Metrics the library records, with Effect's Metric API: read them with `Metric.value`, or export
 * them with any Effect metrics exporter (OpenTelemetry, Prometheus).
 *
 * Names follow Prometheus' conventions, which OpenTelemetry's Prometheus exporter also produces:
 * `effect_rdma_` then what is measured, durations in seconds (`_seconds`), sizes in bytes
 * (`_bytes`), counters ending in `_total`. Each metric carries its OpenTelemetry unit as the
 * `unit` tag (`s`, `By`, `{region}`, `{registration}`, ...), which is where
 * `@effect/opentelemetry` reads a metric's unit from.
 *
 * Tagged series (`operation`, `error`, `peer`) add up to the untagged one: for the counters and
 * the histogram, every update of a tagged series also updates the untagged total, so
 * `Metric.value(RdmaMetrics.registrations)` is the number of registrations of any kind.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as MetricKey from "effect/MetricKey"
import type * as MetricKeyType from "effect/MetricKeyType"
import * as MetricLabel from "effect/MetricLabel"
import type * as MetricState from "effect/MetricState"

/**
 * `self`, where an update with tags also updates the series without them: the untagged series is
 * the total over every tag set.
 */
const totalled = <Type, In, Out>(self: Metric.Metric<Type, In, Out>): Metric.Metric<Type, In, Out> =>
  Metric.make(
    self.keyType,
    (input, extraTags) => {
      self.unsafeUpdate(input, [])
      if (extraTags.length > 0) self.unsafeUpdate(input, extraTags)
    },
    self.unsafeValue,
    (input, extraTags) => {
      self.unsafeModify(input, [])
      if (extraTags.length > 0) self.unsafeModify(input, extraTags)
    }
  )

// Each metric's key with its `unit` tag, for {@link series}.
const keys = new WeakMap<Metric.Metric<any, any, any>, MetricKey.MetricKey<any>>()

/** A metric built from its fully tagged key: an update without extra tags takes Effect's cached hook. */
const keyed = <Type extends MetricKey.MetricKey<any>, M extends Metric.Metric<any, any, any>>(
  key: Type,
  wrap: (metric: Metric.Metric<any, any, any>) => M
): M => {
  const metric = wrap(Metric.fromMetricKey(key))
  keys.set(metric, key)
  return metric
}

const counter = (name: string, unit: string, description: string): Metric.Metric.Counter<number> =>
  keyed(MetricKey.counter(name, { description, incremental: true }).pipe(MetricKey.tagged("unit", unit)), totalled)

const gauge = (name: string, unit: string, description: string): Metric.Metric.Gauge<number> =>
  keyed(MetricKey.gauge(name, { description }).pipe(MetricKey.tagged("unit", unit)), (m) => m)

/**
 * @internal One series of a counter or gauge of this module: `metric` with `tags` after its `unit`
 * tag, as `Metric.tagged` would give, but built once from the fully tagged key. `Metric.tagged`
 * of a tagged metric makes a new tag array per update, which misses Effect's hook cache (a
 * registry lookup and a key hash every time); an update of this one, without extra tags, is a
 * cached hook call. It does not update the total: the caller updates both.
 */
export const series = <Type, In, Out>(
  metric: Metric.Metric<Type, In, Out>,
  tags: ReadonlyArray<readonly [key: string, value: string]>
): Metric.Metric<Type, In, Out> => {
  const key = keys.get(metric)
  if (key === undefined) throw new Error("RdmaMetrics.series: not a metric of RdmaMetrics")
  return Metric.fromMetricKey(MetricKey.taggedWithLabels(key, tags.map(([k, v]) => MetricLabel.make(k, v)))) as never
}

/**
 * Local registrations alive now (rpma_mr_reg and rdma_reg_*), unit `{region}`. Also tagged `peer`
 * (the peer's address); the untagged gauge is the total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const liveRegions: Metric.Metric.Gauge<number> = gauge(
  "effect_rdma_live_regions",
  "{region}",
  "Local memory registrations alive now"
)

/**
 * Bytes registered (pinned) now, unit `By`. Also tagged `peer`; the untagged gauge is the total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registeredBytes: Metric.Metric.Gauge<number> = gauge(
  "effect_rdma_registered_bytes",
  "By",
  "Bytes of memory registered (pinned) now"
)

/**
 * Successful registrations, unit `{registration}`; per `operation` (rpma_mr_reg, rdma_reg_msgs,
 * ...) and in total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrations: Metric.Metric.Counter<number> = counter(
  "effect_rdma_registrations_total",
  "{registration}",
  "Successful memory registrations"
)

/**
 * Releases of registrations, successful or not, unit `{release}`; per `operation` (rpma_mr_dereg,
 * rdma_dereg_mr) and in total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const releases: Metric.Metric.Counter<number> = counter(
  "effect_rdma_releases_total",
  "{release}",
  "Memory deregistrations, successful or not"
)

/**
 * Failed registrations, unit `{registration}`; per `operation` and `error` (the tagged error's
 * `_tag`) and in total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrationFailures: Metric.Metric.Counter<number> = counter(
  "effect_rdma_registration_failures_total",
  "{registration}",
  "Memory registrations that failed"
)

/**
 * Releases of native handles (rpma_mr_dereg, rpma_peer_delete, rdma_dereg_mr, ...) that failed,
 * unit `{release}`; per `operation` and in total. Each one is also logged; none is retried.
 *
 * @since 0.1.0
 * @category metrics
 */
export const releaseFailures: Metric.Metric.Counter<number> = counter(
  "effect_rdma_release_failures_total",
  "{release}",
  "Releases of native handles that failed (logged, never retried; the memory is kept alive)"
)

/**
 * How long registrations take, a histogram in seconds (unit `s`, buckets from 1 µs to 10 s); per
 * `operation` and in total. It takes `Duration`s, so `Metric.trackDuration` feeds it.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrationDuration: Metric.Metric<
  MetricKeyType.MetricKeyType.Histogram,
  Duration.Duration,
  MetricState.MetricState.Histogram
> = totalled(
  Metric.histogram(
    "effect_rdma_registration_duration_seconds",
    MetricBoundaries.fromIterable([1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10]),
    "Time to register memory"
  ).pipe(
    Metric.tagged("unit", "s"),
    Metric.mapInput((duration: Duration.Duration) => Duration.toSeconds(duration))
  )
)

/**
 * Work requests posted on the data path (writes, reads, flushes, atomic writes, sends, receives;
 * each request of a batch), unit `{request}`; per `operation` (`rpma_write`, `rpma_read`,
 * `rpma_flush`, `rpma_send`, `rpma_recv`, ...) and in total. Counted when posted, on any driver,
 * with per-operation telemetry on (`Tracing.layerPerOperation`): at a few hundred instructions a
 * post, always-on counters would slow the data path by about a fifth.
 *
 * @since 1.0.0
 * @category metrics
 */
export const operations: Metric.Metric.Counter<number> = counter(
  "effect_rdma_operations_total",
  "{request}",
  "Work requests posted on the data path"
)

/**
 * Payload bytes moved by the data path, unit `By`: a write's, read's, send's or atomic write's
 * length when posted, an awaited receive's bytes when it completes (a flush moves none); per
 * `operation` and in total. Like {@link operations}, with per-operation telemetry on.
 *
 * @since 1.0.0
 * @category metrics
 */
export const operationBytes: Metric.Metric.Counter<number> = counter(
  "effect_rdma_operation_bytes_total",
  "By",
  "Payload bytes written, read, sent and received"
)

/**
 * Data-path requests that failed, unit `{request}`: an argument refused before anything was
 * posted (`OutOfRangeError`, `CmRegionError`), refused by the queue or the driver, failed by their completion's
 * status, or failed by the connection's end; per `operation` and `error.type` (the tagged error's
 * `_tag`: `CompletionError`, `ConnectionClosedError`, `OutOfRangeError`, `RpmaInvalidError`, ...,
 * OpenTelemetry's attribute for the class of error an operation ended with, whatever stage it ended
 * at) and in total. Always counted (nothing on the success path).
 *
 * @since 1.0.0
 * @category metrics
 */
export const operationFailures: Metric.Metric.Counter<number> = counter(
  "effect_rdma_operation_failures_total",
  "{request}",
  "Data-path requests that failed"
)

/**
 * Reconnect attempts of `RdmaClient`s, unit `{attempt}`; per `reason` (`lost`: the first attempt
 * after a connection ended, `failed`: one after a failed attempt) and in total.
 *
 * @since 1.0.0
 * @category metrics
 */
export const clientReconnects: Metric.Metric.Counter<number> = counter(
  "effect_rdma_client_reconnects_total",
  "{attempt}",
  "Reconnect attempts of RDMA clients"
)

/**
 * The former name of {@link registrationDuration} (which is now in seconds, not milliseconds).
 *
 * @since 0.1.0
 * @category metrics
 * @deprecated Use {@link registrationDuration}.
 */
export const registrationLatency: typeof registrationDuration = registrationDuration
