/**
 * Metrics the library records.
 *
 * @since 0.1.0
 */
import * as Metric from "effect/Metric"

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
