/**
 * One simulated RDMA network shared by several processes on one machine, so that a server process
 * and a client process are tested together without a device. One process serves the network (a
 * Unix socket in a fresh temporary directory); every process that takes part, the serving one
 * included if it does, builds its simulated driver with {@link layer} on that socket's path.
 *
 * Each process keeps its own registered memory, ledger and fault plan. A connection may join two
 * processes: a write, read, flush or send that reaches the other side becomes a message to the
 * process whose region or receive it is, which runs the same checks as within one process (rkey,
 * bounds, access) and answers with the same completion status (IBV_WC_REM_ACCESS_ERR for a forged
 * rkey, IBV_WC_WR_FLUSH_ERR after a failure). A process that ends, even by SIGKILL, is seen by the
 * others as a lost connection: their connections with it get LOST and their requests in flight
 * complete with IBV_WC_WR_FLUSH_ERR; a connect waiting for its listener gets UNREACHABLE.
 *
 * librpma's connections (Connection, RdmaClient, RdmaChannel, ...) and librdmacm's endpoints
 * (CmEndpoint) both cross processes. An endpoint's request reaches a listener in another process,
 * with its private data both ways (a rejection's too); a send there waits for a receive, a read or
 * write by remote key is checked there (IBV_WC_REM_ACCESS_ERR, then IBV_WC_WR_FLUSH_ERR); a
 * disconnect is DISCONNECTED there; a process that dies is a disconnect for the endpoints connected
 * to it (their requests flushed) and EHOSTUNREACH for a connect waiting on its listener. A frozen
 * peer (FreezePeer) stays librpma's only. A process lists among its devices every address it
 * connects to (the default, one device at {@link SimulatedDriver.DEFAULT_ADDRESS}, serves all).
 *
 * The serving process trusts no one: a process may speak only for its own connections, and only to
 * the processes it connects with. A frame that names another process's connection (a forged
 * disconnect, a write through a connection the sender is not part of), that is not a message of the
 * network, or that announces more than {@link ServeOptions.maxFrameSize} bytes is refused before
 * it reaches anyone, logged (a warning, with why), and its sender dropped from the network: the
 * other processes see it leave, and only their connections with it end.
 *
 * @since 1.0.0
 */
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { join } from "./internal/joined.js"
import { makeRouter } from "./internal/router.js"
import { makeLinked } from "./internal/simulatedDriver.js"
import * as SimulatedDriver from "./SimulatedDriver.js"

/**
 * The network could not be served or joined: `detail` says why (no process serves it at `path`,
 * the socket path is taken, no answer within the timeout).
 *
 * @since 1.0.0
 * @category errors
 */
export class SimulatedNetworkError extends Data.TaggedError("SimulatedNetworkError")<{
  readonly path: string
  readonly detail: string
}> {
  override get message(): string {
    return `simulated network at ${this.path}: ${this.detail} ` +
      "(serve it first with SimulatedNetwork.serve in one process, and pass its path to the others)"
  }
}

/**
 * @since 1.0.0
 * @category models
 */
export interface ServeOptions {
  /** Where the socket goes. Default: `network.sock` in a new directory under the system's temporary directory. */
  readonly path?: string | undefined
  /**
   * The largest frame, in bytes, the network takes from a process (default {@link DEFAULT_MAX_FRAME_SIZE},
   * 64 MiB; at least 64 KiB, at most 4 GiB - 1). A frame announcing more is refused as soon as its
   * header arrives, and its sender dropped. It bounds what one request carries across processes too:
   * a write, send or read of more than this less 4 KiB (the frame's other fields) completes with
   * IBV_WC_LOC_LEN_ERR on its own side, as a request longer than a device's max_msg_sz does.
   */
  readonly maxFrameSize?: number | undefined
}

/**
 * The default of {@link ServeOptions.maxFrameSize}: 64 MiB.
 *
 * @since 1.0.0
 * @category constants
 */
export const DEFAULT_MAX_FRAME_SIZE = 64 * 1024 * 1024

const MIN_FRAME_SIZE = 64 * 1024
const MAX_FRAME_SIZE = 0xffffffff

/**
 * @since 1.0.0
 * @category models
 */
export interface JoinOptions extends SimulatedDriver.Options {
  /** The path {@link serve} returned, in the serving process. */
  readonly path: string
  /** Bound on joining, and on each answer a listener waits for from the serving process. Default 5 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
}

/**
 * Serves a network for this scope and returns its socket's path, for the processes that join it
 * (pass it to a child process as an argument or in its environment). When the scope closes, every
 * process still on it sees its connections across processes lost. Fails with
 * {@link SimulatedNetworkError} when the socket cannot be made there (a path in use, a missing
 * directory, a path that is not a string).
 *
 * @example
 * ```ts
 * import { Effect } from "effect"
 * import { SimulatedNetwork } from "@effect-rdma/testing"
 *
 * const program = Effect.scoped(Effect.gen(function*() {
 *   const path = yield* SimulatedNetwork.serve()
 *   // start the server process with `path`, then join it here with SimulatedNetwork.layer({ path })
 * }))
 * ```
 *
 * @since 1.0.0
 * @category constructors
 */
export const serve = (given?: ServeOptions): Effect.Effect<string, SimulatedNetworkError, Scope.Scope> =>
  Effect.suspend(() => {
    const options = readOnce(given)
    return options instanceof SimulatedNetworkError ? Effect.fail(options) : serveWith(options)
  })

/**
 * The options' values, read once into a plain object used from then on: a getter or Proxy trap
 * that throws is a SimulatedNetworkError, not a throw or a defect.
 */
const readOnce = <O extends object>(options: O | undefined): O | undefined | SimulatedNetworkError => {
  if (typeof options !== "object" || options === null) return options
  try {
    const copy: Record<string, unknown> = {}
    for (const key in options) copy[key] = options[key]
    return copy as O
  } catch (cause) {
    return new SimulatedNetworkError({
      path: "(unread)",
      detail: `the options cannot be read (${String(cause)}): give plain options`
    })
  }
}

const serveWith = (options: ServeOptions | undefined): Effect.Effect<string, SimulatedNetworkError, Scope.Scope> => {
  const maxFrameSize = options?.maxFrameSize ?? DEFAULT_MAX_FRAME_SIZE
  if (options?.path !== undefined && (typeof options.path !== "string" || options.path.length === 0)) {
    return Effect.fail(
      new SimulatedNetworkError({
        path: String(options.path),
        detail: "path must be a non-empty string (a socket file's path)"
      })
    )
  }
  if (!Number.isInteger(maxFrameSize) || maxFrameSize < MIN_FRAME_SIZE || maxFrameSize > MAX_FRAME_SIZE) {
    return Effect.fail(
      new SimulatedNetworkError({
        path: String(options?.path),
        detail: `maxFrameSize must be a whole number of bytes from ${MIN_FRAME_SIZE} to ${MAX_FRAME_SIZE} (got ${
          String(maxFrameSize)
        })`
      })
    )
  }
  return serveAt(options?.path, maxFrameSize)
}

const serveAt = (
  given: string | undefined,
  maxFrameSize: number
): Effect.Effect<string, SimulatedNetworkError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.flatMap(Effect.runtime<never>(), (runtime) =>
      Effect.async<{ readonly path: string; readonly close: () => void }, SimulatedNetworkError>((resume) => {
        const directory = given === undefined
          ? fs.mkdtempSync(nodePath.join(os.tmpdir(), "effect-rdma-network-"))
          : undefined
        const path = given ?? nodePath.join(directory!, "network.sock")
        // A refused frame is logged through the serving fiber's logger (the user's, in a test).
        const log = (refusal: string) =>
          Runtime.runSync(runtime)(Effect.logWarning(refusal))
        const router = makeRouter({ maxFrameSize, log })
        const close = () => {
          router.close()
          if (directory !== undefined) fs.rmSync(directory, { recursive: true, force: true })
        }
        router.server.once("error", (error) => {
          close()
          resume(Effect.fail(new SimulatedNetworkError({ path, detail: error.message })))
        })
        router.server.listen(path, () => resume(Effect.succeed({ path, close })))
      })),
    ({ close }) =>
      Effect.sync(close)
  ).pipe(Effect.map(({ path }) => path))

/**
 * The simulated driver and its control for a process that joins the network served at `path`:
 * a new, empty world of its own (its devices, faults and ledger, as {@link SimulatedDriver.layerWith}),
 * whose connections reach the listeners of every process on the network. Fails with
 * {@link SimulatedNetworkError} when nothing answers at `path` within the timeout, or when `path`
 * or `timeout` is not one. It leaves the network when its scope closes: the other processes see
 * its connections lost.
 *
 * @example
 * ```ts
 * import { Layer } from "effect"
 * import { Peer } from "@effect-rdma/core"
 * import { SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
 *
 * // In a child process started with the network's path as its argument.
 * const Joined = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(
 *   Layer.provideMerge(SimulatedNetwork.layer({ path: process.argv[2]! }))
 * )
 * ```
 *
 * @since 1.0.0
 * @category layers
 */
export const layer = (
  given: JoinOptions
): Layer.Layer<RdmaDriver | SimulatedDriver.SimulationControl, SimulatedNetworkError> =>
  Layer.scopedContext(Effect.gen(function*() {
    const options = readOnce(given)
    if (options instanceof SimulatedNetworkError) return yield* options
    if (typeof options !== "object" || options === null) {
      return yield* new SimulatedNetworkError({
        path: "",
        detail: `layer takes { path } (what SimulatedNetwork.serve returned), not ${String(options)}`
      })
    }
    const path = String(options.path)
    const refuse = (detail: string) => new SimulatedNetworkError({ path, detail })
    if (typeof options.path !== "string" || options.path.length === 0) {
      return yield* refuse("path must be the non-empty string SimulatedNetwork.serve returned")
    }
    const timeout = Option.getOrUndefined(Duration.decodeUnknown(options.timeout ?? "5 seconds"))
    if (timeout === undefined || !Duration.isFinite(timeout) || Duration.toMillis(timeout) <= 0) {
      return yield* refuse(`timeout must be a positive, finite duration (got ${String(options.timeout)})`)
    }
    const timeoutMs = Duration.toMillis(timeout)
    const { link } = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => join(path, timeoutMs),
        catch: (error) => refuse(error instanceof Error ? error.message : String(error))
      }),
      ({ leave }) => Effect.sync(leave)
    )
    const { control, driver } = makeLinked(options, link)
    return Context.make(RdmaDriver, driver).pipe(Context.add(SimulatedDriver.SimulationControl, control))
  }))
