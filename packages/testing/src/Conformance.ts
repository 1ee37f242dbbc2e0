/**
 * The driver conformance suite: one list of cases that every `RdmaDriver` must pass, run on the
 * simulated driver on any host and on the native driver where a device is. It is the single source
 * of truth for driver behaviour. Where hardware legitimately differs (addresses, keys), a case
 * compares properties, not values. The cases live in `conformance/`, one module per subject.
 *
 * @example
 * ```ts
 * import { Conformance, SimulatedDriver } from "@effect-rdma/testing"
 * import { describe, it } from "@effect/vitest"
 *
 * describe("conformance", () => {
 *   for (const testCase of Conformance.cases) {
 *     it.effect(testCase.name, () => Conformance.runCase(testCase, SimulatedDriver.layer, SimulatedDriver.DEFAULT_ADDRESS))
 *   }
 * })
 * ```
 *
 * @since 0.1.0
 */
import type { Connection, Listener, LocalMr, Peer, RemoteMr } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { argumentCases } from "./conformance/arguments.js"
import { configurationCases } from "./conformance/configurations.js"
import { connectionCases, connectionPairCases } from "./conformance/connection.js"
import { connectionFeatureCases } from "./conformance/connectionFeatures.js"
import { dataPathCases } from "./conformance/dataPath.js"
import * as fuzzer from "./conformance/fuzz.js"
import type * as halves from "./conformance/halves.js"
import { interruptionCases } from "./conformance/interruption.js"
import { isolationCases } from "./conformance/isolation.js"
import { lifecycleCases } from "./conformance/lifecycle.js"
import { malformedArgumentCases } from "./conformance/malformedArguments.js"
import { mappingCases } from "./conformance/mapping.js"
import * as pair from "./conformance/pair.js"
import { realLengthCases } from "./conformance/realLength.js"
import { resourceCases } from "./conformance/resources.js"
import { sharedReceiveCases } from "./conformance/sharedReceive.js"
// Issue 19: a flush near a region's end, a close after unsignalled requests.
import { closingCases } from "./conformance/closing.js"
import { flushRangeCases } from "./conformance/flushRange.js"
import { pollingCases } from "./conformance/polling.js"
import { check } from "./conformance/support.js"
import * as validation from "./conformance/validation.js"
// Issue 20: librdmacm's verbs API (endpoints, posting, completions).
import { cmBatchCases } from "./conformance/cmBatches.js"
import { cmEndpointCases } from "./conformance/cmEndpoint.js"
import { cmEndpointPairCases } from "./conformance/cmEndpointPairs.js"
import { inProcess } from "./conformance/halves.js"

/**
 * One case: a program over the driver in context that fails (or dies) when the driver does not
 * behave as librpma does. It may leave handles to its scope; {@link runCase} checks that none is
 * left alive afterwards.
 *
 * @since 0.1.0
 * @category models
 */
export interface Case {
  readonly name: string
  /** `address` has a device; `port` is free for this case alone, for an endpoint to listen on. */
  readonly run: (address: string, port: number) => Effect.Effect<void, unknown, Driver.RdmaDriver | Scope.Scope>
}

/**
 * Every case.
 *
 * @since 0.1.0
 * @category cases
 */
export const cases: ReadonlyArray<Case> = [
  ...resourceCases,
  ...connectionCases,
  ...lifecycleCases,
  ...mappingCases,
  ...dataPathCases,
  ...connectionFeatureCases,
  ...sharedReceiveCases,
  ...configurationCases,
  ...validation.cases,
  ...realLengthCases,
  ...interruptionCases,
  ...argumentCases,
  ...malformedArgumentCases,
  ...flushRangeCases,
  ...closingCases,
  ...pollingCases,
  ...cmEndpointPairCases.map(inProcess),
  ...cmEndpointCases,
  ...cmBatchCases,
  ...isolationCases
]

/** A port for each case, so that cases never share one (rdma_cm keeps a port busy for a while). */
const portOf = (testCase: Case): number => 17000 + cases.indexOf(testCase)

/**
 * Runs one case against a driver Layer (built for this case alone), then checks that the driver
 * holds nothing. Runs on the live clock: connection timeouts are real, and a case run under a test
 * clock (@effect/vitest's `it.effect`) would wait forever.
 *
 * @since 0.1.0
 * @category running
 */
export const runCase = <E>(
  testCase: Case,
  layer: Layer.Layer<Driver.RdmaDriver, E>,
  address: string
): Effect.Effect<void, unknown> =>
  Effect.gen(function*() {
    yield* Effect.scoped(testCase.run(address, portOf(testCase)))
    const live = yield* Effect.flatMap(Driver.RdmaDriver, (d) => d.live)
    const total = Object.values(live).reduce((a, b) => a + b, 0)
    yield* check(total === 0, `handles alive at the end: ${JSON.stringify(live)}`)
  }).pipe(Effect.provide(layer), Effect.withClock(Clock.make()))

/**
 * Random and hostile values fed to every Driver method and to core's public functions: no defect,
 * no hang, nothing left alive. Fails with every problem found (shrunk by fast-check).
 *
 * @since 0.1.0
 * @category running
 */
export const fuzz: <E>(layer: Layer.Layer<Driver.RdmaDriver, E>, options: FuzzOptions) => Promise<void> = fuzzer.fuzz

/**
 * How {@link fuzz} runs: `runs` runs of up to `steps` calls each, on `address`, listening on `port`.
 *
 * @since 1.0.0
 * @category models
 */
export interface FuzzOptions extends fuzzer.FuzzOptions {}

/**
 * The two sides of a connected pair's options; each side sends private data ("hello" from the
 * client, "welcome" from the server) unless its options give other.
 *
 * @since 1.0.0
 * @category models
 */
export interface PairOptions extends pair.PairOptions {}

/**
 * What the connection cases start from, in one process on one device: a server peer with a 64 KiB
 * region exposed for write, flush and read, one accepted connection, and a client peer connected
 * to it with that region as a remote one. Everything is released with the caller's scope.
 *
 * @since 1.0.0
 * @category pairs
 */
export const connectedPair: (address: string, port: number, options?: PairOptions) => Effect.Effect<
  {
    readonly serverPeer: Peer.Peer
    readonly clientPeer: Peer.Peer
    readonly ep: Listener.Listener
    readonly target: LocalMr.LocalMr<pair.Exposed>
    readonly server: Connection.Connection
    readonly client: Connection.Connection
    readonly remote: RemoteMr.RemoteMr<pair.Exposed>
  },
  unknown,
  Driver.RdmaDriver | Scope.Scope
> = pair.connectedPair

/**
 * The server half of {@link connectedPair}, for a pair across two hosts: `listening` is given the
 * exposed region's descriptor once the endpoint listens (to send to the client's host), before the
 * connection is accepted.
 *
 * @since 1.0.0
 * @category pairs
 */
export const serverHalf: <E, R>(
  address: string,
  port: number,
  options: Connection.Options | undefined,
  listening: (descriptor: Uint8Array) => Effect.Effect<void, E, R>
) => Effect.Effect<
  {
    readonly peer: Peer.Peer
    readonly target: LocalMr.LocalMr<pair.Exposed>
    readonly ep: Listener.Listener
    readonly server: Connection.Connection
  },
  unknown,
  Driver.RdmaDriver | Scope.Scope | R
> = pair.serverHalf

/**
 * The client half of {@link connectedPair}: a peer on `address`, connected to the server half at
 * `serverAddress:port`, whose exposed region `descriptor` describes.
 *
 * @since 1.0.0
 * @category pairs
 */
export const clientHalf: (
  address: string,
  serverAddress: string,
  port: number,
  descriptor: Uint8Array,
  options?: Connection.Options
) => Effect.Effect<
  {
    readonly peer: Peer.Peer
    readonly client: Connection.Connection
    readonly remote: RemoteMr.RemoteMr<pair.Exposed>
  },
  unknown,
  Driver.RdmaDriver | Scope.Scope
> = pair.clientHalf

/**
 * A message between the two halves of a {@link PairCase}: a JSON object.
 *
 * @since 1.0.0
 * @category pairs
 */
export type Message = halves.Message

/**
 * What the two halves of a {@link PairCase} talk over: an in-memory channel in one process, TCP
 * between two hosts.
 *
 * @since 1.0.0
 * @category pairs
 */
export interface Channel extends halves.Channel {}

/**
 * What one half of a {@link PairCase} is given: its own address, where the server half listens,
 * the port, and the channel to the other half.
 *
 * @since 1.0.0
 * @category pairs
 */
export interface HalfContext extends halves.HalfContext {}

/**
 * A connection case written as a server half and a client half. {@link cases} runs each in one
 * process; the two-host runner (packages/native/test-pair) runs the server half on one host and
 * the client half on the other, under the same name.
 *
 * @since 1.0.0
 * @category pairs
 */
export interface PairCase extends halves.PairCase {}

/**
 * The connection cases that need two sides, as halves (in {@link cases} too, run in one process):
 * librpma's connections, then the endpoints of librdmacm's verbs API.
 *
 * @since 1.0.0
 * @category cases
 */
export const pairCases: ReadonlyArray<PairCase> = [...connectionPairCases, ...cmEndpointPairCases]
