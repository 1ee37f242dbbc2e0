/**
 * Metrics the library records, with Effect's Metric API: read them with `Metric.value`, or export
 * them with any Effect metrics exporter (OpenTelemetry, Prometheus).
 *
 * @since 0.1.0
 */
import * as Metric from "effect/Metric"

/**
 * Local registrations alive now (rpma_mr_reg and rdma_reg_*), tagged `peer` by address; the
 * untagged gauge is the total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const liveRegions = Metric.gauge("effect_rdma_live_regions", {
  description: "local memory registrations alive now"
})

/**
 * Bytes registered now, tagged `peer` by address; the untagged gauge is the total.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registeredBytes = Metric.gauge("effect_rdma_registered_bytes", {
  description: "bytes of memory registered (pinned) now"
})

/**
 * Successful registrations, tagged `operation` (rpma_mr_reg, rdma_reg_msgs, ...).
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrations = Metric.counter("effect_rdma_registrations", {
  description: "successful memory registrations",
  incremental: true
})

/**
 * Releases of registrations, tagged `operation` (rpma_mr_dereg, rdma_dereg_mr).
 *
 * @since 0.1.0
 * @category metrics
 */
export const releases = Metric.counter("effect_rdma_releases", {
  description: "memory deregistrations, successful or not",
  incremental: true
})

/**
 * Failed registrations, tagged `operation` and `error` (the tagged error's `_tag`).
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrationFailures = Metric.counter("effect_rdma_registration_failures", {
  description: "memory registrations that failed, by error",
  incremental: true
})

/**
 * Releases (rpma_mr_dereg, rpma_peer_delete, rdma_dereg_mr, ...) that failed, tagged by operation.
 * Each one is also logged; none is retried.
 *
 * @since 0.1.0
 * @category metrics
 */
export const releaseFailures = Metric.counter("effect_rdma_release_failures", {
  description: "releases of native handles that failed (logged, never retried; the memory is kept alive)",
  incremental: true
})

/**
 * How long registrations take, in milliseconds, tagged `operation`.
 *
 * @since 0.1.0
 * @category metrics
 */
export const registrationLatency = Metric.timerWithBoundaries(
  "effect_rdma_registration_ms",
  [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000],
  "time to register memory"
)
