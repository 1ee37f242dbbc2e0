/**
 * A listener served: each incoming request handed to a handler in a scope of its own, at most
 * `concurrency` at once (@effect/platform's SocketServer.run is the model: one scope and one fiber
 * per connection, all in a FiberSet whose first failure ends the server).
 *
 * Ownership, so that nothing outlives the server: every request's scope is a child of one parent
 * scope made before the FiberSet. Closing the server interrupts the handlers first (the FiberSet's
 * finalizer runs first), each closing its request's scope (rejected if unanswered, else
 * disconnected and destroyed); the parent then closes whatever scope a handler never got to run.
 *
 * Declared and documented in CmListener.ts.
 */
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as FiberSet from "effect/FiberSet"
import { dual } from "effect/Function"
import * as Scope from "effect/Scope"
import type * as CmEndpoint from "../CmEndpoint.js"
import { ClientGoneError } from "../CmEndpointError.js"
import type * as CmListener from "../CmListener.js"
import type { RdmaDriver } from "../Driver.js"
import type { RdmaCmError } from "../RdmaError.js"
import { AdmissionImpl, AdmissionRefusedError, InvalidTokenError } from "./admission.js"
import { admit, isCmListener, next } from "./cmListener.js"
import { readCmSettings } from "./optionsOnce.js"
import { dataFirst } from "./resourceGuard.js"

/** A client whose request is spent on its own account: gone before its accept, or refused admission. */
const isClientsOwn = (error: unknown): error is ClientGoneError | AdmissionRefusedError =>
  error instanceof ClientGoneError || error instanceof AdmissionRefusedError

type ServeError<E> = RdmaCmError | InvalidTokenError | Exclude<E, ClientGoneError>

export const serve: {
  <A, E, R>(
    handler: (request: CmEndpoint.CmEndpoint) => Effect.Effect<A, E, R>,
    options?: CmListener.ServeOptions
  ): (
    self: CmListener.CmListener
  ) => Effect.Effect<never, ServeError<E>, RdmaDriver | Exclude<R, Scope.Scope>>
  <A, E, R>(
    self: CmListener.CmListener,
    handler: (request: CmEndpoint.CmEndpoint) => Effect.Effect<A, E, R>,
    options?: CmListener.ServeOptions
  ): Effect.Effect<never, ServeError<E>, RdmaDriver | Exclude<R, Scope.Scope>>
} = dual(dataFirst(isCmListener), <A, E, R>(
  listener: CmListener.CmListener,
  handler: (request: CmEndpoint.CmEndpoint) => Effect.Effect<A, E, R>,
  given?: CmListener.ServeOptions
): Effect.Effect<never, ServeError<E>, RdmaDriver | Exclude<R, Scope.Scope>> =>
  Effect.scoped(Effect.gen(function*() {
    const options = yield* readCmSettings(given, "rdma_listen", { concurrency: true, admission: true })
    const admission = options?.admission
    if (admission !== undefined && !(admission instanceof AdmissionImpl)) {
      return yield* new InvalidTokenError({
        reason: "admission takes an Admission: make one with Admission.make(token)"
      })
    }
    const concurrency = options?.concurrency ?? "unbounded"
    const parent = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const handlers = yield* FiberSet.make<unknown, ServeError<E>>()
    const permits = yield* Effect.makeSemaphore(concurrency === "unbounded" ? Number.MAX_SAFE_INTEGER : concurrency)

    // Forked uninterruptible (from acceptOne), so that its scope's close is in place before the
    // handler runs, interruptibly.
    const handle = (request: CmEndpoint.CmEndpoint, scope: Scope.CloseableScope) =>
      Effect.interruptible(
        admission === undefined ? handler(request) : Effect.zipRight(admit(request, admission), handler(request))
      ).pipe(
        Scope.extend(scope),
        // A client gone before its accept, or refused admission, spent only its own request: the
        // server goes on.
        Effect.catchAll((error) =>
          isClientsOwn(error) ? Effect.logDebug(error.message) : Effect.fail(error as Exclude<E, ClientGoneError>)
        ),
        Effect.onExit((exit) => Scope.close(scope, exit)),
        Effect.ensuring(permits.release(1))
      )

    // The request and its handler's fiber in one uninterruptible step: a request taken is always
    // owned by a fiber (or, at the server's end, by the parent scope).
    const acceptOne = Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
        const request = yield* restore(Scope.extend(next(listener), scope)).pipe(
          Effect.onError((cause) => Effect.zipRight(Scope.close(scope, Exit.failCause(cause)), permits.release(1)))
        )
        yield* FiberSet.run(handlers, handle(request, scope))
      })
    )

    yield* FiberSet.run(handlers, Effect.forever(Effect.zipRight(permits.take(1), acceptOne)))
    return yield* Effect.flatMap(FiberSet.join(handlers), () => Effect.never)
  })))
