/**
 * Calling the addon from the driver's modules: a synchronous call or a promise as an Effect whose
 * failure goes through ./failures.ts, and a wait in the addon (an incoming request, a connection
 * event) as an interruptible Effect.
 */
import type { RdmaError } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import type { Binding, WaitCallback } from "../RpmaBinding.js"
import { cmFailure, rpmaFailure } from "./failures.js"

export const attempt = <A, E>(
  run: () => A,
  onFailure: (cause: unknown) => Effect.Effect<never, E>
): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(run())
    } catch (cause) {
      return onFailure(cause)
    }
  })

export const attemptPromise = <A, E>(
  run: () => Promise<A>,
  onFailure: (cause: unknown) => Effect.Effect<never, E>
): Effect.Effect<A, E> => Effect.tryPromise({ try: run, catch: (cause) => cause }).pipe(Effect.catchAll(onFailure))

/** A librpma call. */
export const rpma = <A>(operation: string, run: () => A): Effect.Effect<A, RdmaError.RpmaError> =>
  attempt(run, rpmaFailure(operation))

/** A librdmacm call. */
export const cm = <A>(operation: string, run: () => A): Effect.Effect<A, RdmaError.RdmaCmError> =>
  attempt(run, cmFailure(operation))

/** The addon's handles are the Driver's opaque handles; only their static kind is added here. */
export const as = <H>(handle: object): H => handle as H

/**
 * A wait in the addon as an interruptible Effect: the addon answers the callback once, from the
 * event loop; the canceller stops the wait (cancelWait, the one entry for every kind of wait), so
 * an interrupted fiber leaves no libuv watcher behind.
 */
export const wait = <A>(
  binding: Binding,
  operation: string,
  handle: unknown,
  start: (callback: WaitCallback<A>) => number
): Effect.Effect<A, RdmaError.RpmaError> =>
  Effect.async<A, RdmaError.RpmaError>((resume) => {
    let done = false
    const callback: WaitCallback<A> = (error, value) => {
      if (done) return
      done = true
      resume(error === undefined || error === null ? Effect.succeed(value) : rpmaFailure(operation)(error))
    }
    let id: number
    try {
      id = start(callback)
    } catch (cause) {
      done = true
      resume(rpmaFailure(operation)(cause))
      return
    }
    return Effect.sync(() => {
      if (done) return
      done = true
      binding.cancelWait(handle, id)
    })
  })
