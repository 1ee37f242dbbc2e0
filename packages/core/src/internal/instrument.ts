/**
 * The one place where every native call gets a span and every registration its metrics, whatever
 * the driver: core reaches the driver through {@link driver}, which wraps it once.
 */
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Metric from "effect/Metric"
import type * as MetricLabel from "effect/MetricLabel"
import type { Driver } from "../Driver.js"
import { RdmaDriver } from "../Driver.js"
import type { CmWorkRequest, WorkRequest } from "../DriverModel.js"
import * as RdmaMetrics from "../RdmaMetrics.js"
import * as Tracing from "../Tracing.js"
import * as Usage from "../Usage.js"

type Attributes = (...args: ReadonlyArray<any>) => Record<string, unknown>

const bytes = (memory: unknown) => (memory instanceof Uint8Array ? memory.byteLength : 0)

// The C function behind each Driver method, and the attributes its span carries: OpenTelemetry's
// semantic conventions where one exists (server.address, server.port, network.peer.address,
// network.local.address), `rdma.*` for the rest. The table in README.md lists them.
const calls: { readonly [K in keyof Driver]?: readonly [name: string, attributes?: Attributes] } = {
  getIbvContext: ["rpma_utils_get_ibv_context", (address, kind) => ({
    [kind === "remote" ? "network.peer.address" : "network.local.address"]: address,
    "rdma.address_kind": kind
  })],
  peerNew: ["rpma_peer_new"],
  peerDelete: ["rpma_peer_delete"],
  mrReg: ["rpma_mr_reg", (_peer, memory, usage) => ({ "rdma.size": bytes(memory), "rdma.usage": Usage.format(usage) })],
  mrDereg: ["rpma_mr_dereg"],
  mrGetDescriptor: ["rpma_mr_get_descriptor"],
  mrRemoteFromDescriptor: ["rpma_mr_remote_from_descriptor", (d) => ({ "rdma.size": bytes(d) })],
  mrRemoteDelete: ["rpma_mr_remote_delete"],
  cmReg: ["rdma_reg", (_ep, kind, memory) => ({ "rdma.kind": kind, "rdma.size": bytes(memory) })],
  cmDeregMr: ["rdma_dereg_mr"],
  allocate: ["posix_memalign", (size) => ({ "rdma.size": size })],
  mapFile: ["mmap", (request) => ({ "file.path": request?.path, "rdma.size": request?.size })],
  unmapFile: ["msync", (memory) => ({ "rdma.size": bytes(memory) })],
  epListen: ["rpma_ep_listen", (_peer, address, port) => ({ "server.address": address, "server.port": port })],
  epShutdown: ["rpma_ep_shutdown"],
  connReqNew: ["rpma_conn_req_new", (_peer, address, port) => ({ "server.address": address, "server.port": port })],
  connReqConnect: ["rpma_conn_req_connect"],
  connReqDelete: ["rpma_conn_req_delete"],
  connDisconnect: ["rpma_conn_disconnect"],
  connDelete: ["rpma_conn_delete"],
  srqNew: ["rpma_srq_new", (_peer, config) => ({ "rdma.rq_size": config?.rqSize, "rdma.rcq_size": config?.rcqSize })],
  srqDelete: ["rpma_srq_delete"],
  // librdmacm's endpoints (CmEndpoint.ts): set-up and teardown. The waits for a request or an
  // event (cmGetRequest, cmNextEvent) last as long as the server or the connection: no span.
  cmEpCreate: ["rdma_create_ep", (address, port) => ({ "server.address": address, "server.port": port })],
  cmListen: ["rdma_listen", (address, port) => ({ "server.address": address, "server.port": port })],
  cmConnect: ["rdma_connect"],
  cmAccept: ["rdma_accept"],
  cmReject: ["rdma_reject"],
  cmDisconnect: ["rdma_disconnect"],
  cmEpDestroy: ["rdma_destroy_ep"],
  cmListenerDestroy: ["rdma_destroy_ep"]
}

// Registrations and the data path: a span each only with per-operation tracing on (Tracing.ts).
const perOperationCalls: ReadonlySet<keyof Driver> = new Set<keyof Driver>([
  "mrReg",
  "mrDereg",
  "mrGetDescriptor",
  "mrRemoteFromDescriptor",
  "mrRemoteDelete",
  "cmReg",
  "cmDeregMr",
  "allocate"
])

const wrap = (driver: Driver): Driver => {
  const wrapped: Record<string, unknown> = { ...driver }
  for (const [method, [name, attributes]] of Object.entries(calls) as Array<[keyof Driver, [string, Attributes?]]>) {
    const call = driver[method] as (...args: ReadonlyArray<unknown>) => Effect.Effect<unknown, unknown>
    const traced = (...args: ReadonlyArray<unknown>) =>
      Effect.withSpan(call(...args), name, {
        attributes: attributes === undefined
          ? { "rdma.driver": driver.name }
          : { "rdma.driver": driver.name, ...attributes(...args) },
        captureStackTrace: false
      })
    wrapped[method] = perOperationCalls.has(method)
      ? (...args: ReadonlyArray<unknown>) =>
        FiberRef.getWith(Tracing.perOperation, (on) => on ? traced(...args) : call(...args))
      : traced
  }
  return wrapped as unknown as Driver
}

const instrumentedDrivers = new WeakMap<Driver, Driver>()

/** `d` with its calls traced (the per-operation ones only when Tracing.perOperation is on). */
export const instrumented = (d: Driver): Driver => {
  let w = instrumentedDrivers.get(d)
  if (w === undefined) {
    w = wrap(d)
    instrumentedDrivers.set(d, w)
  }
  return w
}

/** The current driver, instrumented. */
export const driver: Effect.Effect<Driver, never, RdmaDriver> = Effect.map(RdmaDriver, instrumented)

// Tagged series are built once per tag set (a fully tagged key: see RdmaMetrics.series).
const memo = <A>(make: (key: string) => A) => {
  const cache = new Map<string, A>()
  return (key: string): A => {
    let value = cache.get(key)
    if (value === undefined) cache.set(key, value = make(key))
    return value
  }
}
const latencyOf = memo((op) => Metric.tagged(RdmaMetrics.registrationDuration, "operation", op))
const registrationsOf = memo((op) => RdmaMetrics.series(RdmaMetrics.registrations, [["operation", op]]))
const releasesOf = memo((op) => RdmaMetrics.series(RdmaMetrics.releases, [["operation", op]]))
const failuresOf = memo((key) => {
  const [op, error] = key.split("\u0000") as [string, string]
  return RdmaMetrics.series(RdmaMetrics.registrationFailures, [["operation", op], ["error", error]])
})
const peerGaugesOf = memo((peer) => ({
  regions: RdmaMetrics.series(RdmaMetrics.liveRegions, [["peer", peer]]),
  bytes: RdmaMetrics.series(RdmaMetrics.registeredBytes, [["peer", peer]])
}))

/**
 * Counts one event of a totalled counter: the total, and the series with the fiber's
 * metric labels (Effect.tagMetrics) if any, as `Metric.increment` of the tagged metric did.
 * Plain JavaScript, for an Effect.sync.
 */
const countUnsafe = (
  total: Metric.Metric.Counter<number>,
  series: Metric.Metric.Counter<number>,
  labels: ReadonlyArray<MetricLabel.MetricLabel>
): void => {
  total.unsafeUpdate(1, [])
  series.unsafeUpdate(1, labels)
}

/**
 * A region of `size` bytes registered (`size` > 0) or released (`size` < 0), in plain
 * JavaScript: the live gauges, and the registration or release counter of `operation`.
 */
export const regionUnsafe = (
  operation: string,
  peer: string,
  size: number,
  labels: ReadonlyArray<MetricLabel.MetricLabel>
): void => {
  gaugesUnsafe(peer, size)
  if (size > 0) countUnsafe(RdmaMetrics.registrations, registrationsOf(operation), labels)
  else countUnsafe(RdmaMetrics.releases, releasesOf(operation), labels)
}

/** A registration failed (plain JavaScript). */
export const failedUnsafe = (operation: string, error: string, labels: ReadonlyArray<MetricLabel.MetricLabel>): void =>
  countUnsafe(RdmaMetrics.registrationFailures, failuresOf(`${operation}\u0000${error}`), labels)

const gaugesUnsafe = (peer: string, size: number): void => {
  const sign = size < 0 ? -1 : 1
  const gauges = peerGaugesOf(peer)
  RdmaMetrics.liveRegions.unsafeModify(sign, [])
  gauges.regions.unsafeModify(sign, [])
  RdmaMetrics.registeredBytes.unsafeModify(size, [])
  gauges.bytes.unsafeModify(size, [])
}

/** The fiber's metric labels (Effect.tagMetrics), for the unsafe updates above. */
export const labelsOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): ReadonlyArray<MetricLabel.MetricLabel> =>
  fiber.getFiberRef(FiberRef.currentMetricLabels)

/** Times a registration into the duration histogram (only with per-operation tracing on). */
export const timed = <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Metric.trackDuration(effect, latencyOf(operation))

/** Times a registration (with per-operation tracing on) and counts its outcome. */
export const registration = <A, E extends { readonly _tag: string }, R>(
  operation: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  FiberRef.getWith(Tracing.perOperation, (on) => on ? Metric.trackDuration(effect, latencyOf(operation)) : effect).pipe(
    Effect.onExit((exit) =>
      Effect.withFiberRuntime<void>((fiber) => {
        const labels = labelsOf(fiber)
        if (exit._tag === "Success") countUnsafe(RdmaMetrics.registrations, registrationsOf(operation), labels)
        else if (exit.cause._tag === "Fail") failedUnsafe(operation, exit.cause.error._tag, labels)
        return Effect.void
      })
    )
  )

/** Adds `size` bytes (negative to remove) to the live gauges, in total and for the peer. */
export const registered = (peer: string, size: number): Effect.Effect<void> =>
  Effect.sync(() => gaugesUnsafe(peer, size))

export const released = (operation: string): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    countUnsafe(RdmaMetrics.releases, releasesOf(operation), labelsOf(fiber))
    return Effect.void
  })

const reconnectsOf = memo((reason) => RdmaMetrics.series(RdmaMetrics.clientReconnects, [["reason", reason]]))

/** A client starts a reconnect attempt: after a lost connection, or a failed attempt. */
export const reconnectUnsafe = (reason: "lost" | "failed"): void =>
  countUnsafe(RdmaMetrics.clientReconnects, reconnectsOf(reason), [])

// The data path: failures are counted always (when a request fails or is refused: nothing on the
// success path); requests and bytes with per-operation telemetry on (when posted; an awaited
// receive's bytes when it completes), since four counter updates a post cost a write about a fifth
// more instructions (bench/instructions.ts: write.queued 6594 -> 7932). Plain JavaScript, called
// by the posting kernel; the series carry no fiber labels (a FiberRef lookup per request).
const dataPathOf = memo((op) => ({
  operations: RdmaMetrics.series(RdmaMetrics.operations, [["operation", op]]),
  bytes: RdmaMetrics.series(RdmaMetrics.operationBytes, [["operation", op]])
}))
const operationFailuresOf = memo((key) => {
  const [op, error] = key.split("\u0000") as [string, string]
  return RdmaMetrics.series(RdmaMetrics.operationFailures, [["operation", op], ["error.type", error]])
})

/** What the byte counters read of a request: librpma's, or an endpoint's (librdmacm). */
export type CountedRequest = WorkRequest | CmWorkRequest

/** The payload of a posted request: what a write, read, send or atomic write moves (a flush: none). */
export const requestBytes = (request: CountedRequest): number => {
  switch (request.op) {
    case "flush":
    case "recv":
      return 0
    case "atomicWrite":
      return request.value.byteLength
    default:
      if ("segments" in request) {
        let bytes = 0
        for (const segment of request.segments) bytes += segment.length
        return bytes
      }
      return request.length
  }
}

/** The payload of the first `count` requests of a post. */
export const requestsBytes = (requests: ReadonlyArray<CountedRequest>, count: number): number => {
  let bytes = 0
  for (let i = 0; i < count; i++) bytes += requestBytes(requests[i]!)
  return bytes
}

/** `count` requests of `operation` posted, `bytes` of payload in all. */
export const postedUnsafe = (operation: string, count: number, bytes: number): void => {
  const series = dataPathOf(operation)
  RdmaMetrics.operations.unsafeUpdate(count, [])
  series.operations.unsafeUpdate(count, [])
  if (bytes > 0) {
    RdmaMetrics.operationBytes.unsafeUpdate(bytes, [])
    series.bytes.unsafeUpdate(bytes, [])
  }
}

/** A receive completed with `bytes` bytes. */
export const receivedUnsafe = (operation: string, bytes: number): void => {
  if (bytes <= 0) return
  RdmaMetrics.operationBytes.unsafeUpdate(bytes, [])
  dataPathOf(operation).bytes.unsafeUpdate(bytes, [])
}

/** A request of `operation` failed (or was refused) with the error tagged `error`. */
export const operationFailedUnsafe = (operation: string, error: string): void =>
  countUnsafe(RdmaMetrics.operationFailures, operationFailuresOf(`${operation}\u0000${error}`), [])

/**
 * Fails with `error`, an argument refused before anything was posted (a range, a segment
 * list, a region name), counted as a failure of its operation: OpenTelemetry's `error.type` is the
 * class of error an operation ended with, whatever stage it ended at.
 */
export const refused = <E extends { readonly _tag: string; readonly operation: string }>(
  error: E
): Effect.Effect<never, E> => {
  operationFailedUnsafe(error.operation, error._tag)
  return Effect.fail(error)
}
