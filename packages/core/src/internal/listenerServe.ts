/**
 * A librpma listener served: each incoming request accepted (admitted first when the options carry
 * an admission) and its connection handed to a handler, in a fiber and a scope of its own, at most
 * `concurrency` at once. The same shape as the librdmacm listener's serve (internal/cmServe.ts):
 * every request's scope is a child of one parent scope made before the FiberSet, so closing the
 * server interrupts the handlers (each closing its connection) and then closes whatever scope a
 * handler never got to run.
 *
 * Declared and documented in Listener.ts.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as FiberSet from "effect/FiberSet"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import type * as Connection from "../Connection.js"
import { ConnectionFailedError } from "../ConnectionError.js"
import type { RdmaDriver } from "../Driver.js"
import type * as Listener from "../Listener.js"
import { Peer } from "../Peer.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import { AdmissionRefusedError, type InvalidTokenError } from "./admission.js"
import { readSettings } from "./connectionConfig.js"
import * as instrument from "./instrument.js"
import { acceptClient, clientKeys, isolationProblem } from "./isolation.js"
import { next, notAListener, reject } from "./listener.js"
import type { Keys } from "./optionsOnce.js"

/** What one client costs only its own request: it was refused, or it left before it was connected. */
const isClientsFailure = (error: unknown): error is AdmissionRefusedError | ConnectionFailedError =>
  error instanceof AdmissionRefusedError || error instanceof ConnectionFailedError

/**
 * Requests in a row that the provider could not set up before the listener itself counts as failed.
 * One such failure is that request's (rpma_ep_next_conn_req makes the request's queue pair, and a
 * client that has just gone can leave the device refusing it); a listener that sets up none is broken.
 */
const MAX_FAILED_REQUESTS = 64

const serveKeys: Keys<Listener.ServeOptions> = { ...clientKeys, concurrency: true, handshakeTimeout: true }

export const serve = <A, E, R>(
  listener: Listener.Listener,
  handler: (conn: Connection.Connection) => Effect.Effect<A, E, R>,
  given?: Listener.ServeOptions
): Effect.Effect<never, RpmaError | InvalidTokenError | E, RdmaDriver | Exclude<R, Scope.Scope | Peer>> =>
  Effect.scoped(Effect.gen(function*() {
    const notListener = notAListener("rpma_ep_next_conn_req", listener)
    if (notListener !== undefined) return yield* instrument.refused(notListener)
    const options = yield* readSettings(given, "rpma_ep_next_conn_req", serveKeys)
    // Refused before any client is taken: every one of them would be.
    const problem = isolationProblem(listener, options)
    if (problem !== undefined) return yield* Effect.fail(fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_ep_listen", problem))
    const concurrency = options?.concurrency ?? "unbounded"
    const handshake = options?.handshakeTimeout === undefined
      ? undefined
      : Option.getOrUndefined(Duration.decodeUnknown(options.handshakeTimeout))
    if (options?.handshakeTimeout !== undefined && handshake === undefined) {
      return yield* Effect.fail(
        fromRpmaCode(
          RpmaCode.RPMA_E_INVAL,
          "Listener.serve",
          `handshakeTimeout must be a duration (e.g. "10 seconds"), got ${String(options.handshakeTimeout)}`
        )
      )
    }
    const parent = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const handlers = yield* FiberSet.make<unknown, RpmaError | InvalidTokenError | E>()
    const permits = yield* Effect.makeSemaphore(concurrency === "unbounded" ? Number.MAX_SAFE_INTEGER : concurrency)

    // The accept (isolated: the rendezvous and the client's own connection), bounded by the
    // handshake timeout: a client that never completes it is dropped.
    const connect = (req: Listener.ConnectionRequest) => {
      const accepting = Effect.tapError(acceptClient(req, options), () => reject(req))
      return handshake === undefined ? accepting : Effect.timeoutFail(accepting, {
        duration: handshake,
        onTimeout: () => new ConnectionFailedError({ address: listener.address, port: listener.port, event: "TIMEOUT" })
      })
    }

    // Forked uninterruptible (from takeOne), so that its scope's close is in place before the
    // accept and the handler run, interruptibly.
    const handle = (req: Listener.ConnectionRequest, scope: Scope.CloseableScope) =>
      Effect.interruptible(Effect.flatMap(
        connect(req),
        ({ connection, peer }) => Effect.provideService(handler(connection), Peer, peer)
      )).pipe(
        Scope.extend(scope),
        // A client refused, or gone before it was connected, spent only its own request: the server goes on.
        Effect.catchAll((error) => isClientsFailure(error) ? Effect.logDebug(error.message) : Effect.fail(error)),
        Effect.onExit((exit) => Scope.close(scope, exit)),
        Effect.ensuring(permits.release(1))
      )

    // The request and its handler's fiber in one uninterruptible step: a request taken is always
    // owned by a fiber (or, at the server's end, by the parent scope).
    const takeOne = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
        const req = yield* restore(next(listener, options)).pipe(
          // Rejected with its scope if nothing answered it (a no-op once it is).
          Effect.tap((req) =>
            Effect.flatMap(Effect.context<RdmaDriver>(), (context) =>
              Scope.addFinalizer(scope, Effect.provide(reject(req), context)))
          ),
          Effect.onError((cause) =>
            Effect.zipRight(Scope.close(scope, Exit.failCause(cause)), permits.release(1))
          )
        )
        yield* FiberSet.run(handlers, handle(req, scope))
      })
    )

    // A request the provider could not set up spent only itself: logged, and the next one taken.
    let failedInARow = 0
    const takeNext = Effect.zipRight(permits.take(1), takeOne).pipe(
      Effect.zipRight(Effect.sync(() => (failedInARow = 0))),
      Effect.catchIf(
        (error) => error._tag === "RpmaProviderError" && ++failedInARow < MAX_FAILED_REQUESTS,
        (error) =>
          Effect.logWarning(`Listener.serve: a request could not be set up, the server goes on: ${error.message}`)
      )
    )
    yield* FiberSet.run(handlers, Effect.forever(takeNext))
    return yield* Effect.flatMap(FiberSet.join(handlers), () => Effect.never)
    // The handlers' Peer is provided (the client's): R less Peer is all that is still needed.
  })) as Effect.Effect<never, RpmaError | InvalidTokenError | E, RdmaDriver | Exclude<R, Scope.Scope | Peer>>
