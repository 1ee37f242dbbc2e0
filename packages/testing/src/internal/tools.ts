/**
 * The rules every simulated call shares: argument checks as the C libraries make them, planned
 * faults, and the ledger of live handles.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Tracer from "effect/Tracer"
import * as fabric from "./fabric.js"

const spanChain = (span: Option.Option<Tracer.AnySpan>): string => {
  const names: Array<string> = []
  let current = Option.getOrUndefined(span)
  while (current !== undefined) {
    if (current._tag === "Span") names.unshift(current.name)
    current = current._tag === "Span" ? Option.getOrUndefined(current.parent) : undefined
  }
  return names.length === 0 ?
    "(no span: wrap the acquiring code in Effect.withSpan or Effect.fn to name it)" :
    names.join(" > ")
}

export const makeTools = (world: fabric.Fabric) => {
  // Every refusal is an error value: a call fails with it (Effect.fail) or returns it (Exit.fail, PostOutcome).
  const rpma = (operation: string, code: number, detail?: string) => RdmaError.fromRpmaCode(code, operation, detail)
  const invalid = (operation: string, detail: string) => rpma(operation, RdmaError.RpmaCode.RPMA_E_INVAL, detail)
  /** RPMA_E_INVAL with the addon's words, or nothing. */
  const problem = (operation: string, detail: string | undefined) =>
    detail === undefined ? undefined : invalid(operation, detail)
  const errno = (operation: string, code: number, detail?: string) => RdmaError.fromErrno(code, operation, detail)
  /** A release refused because the handle is in use: it stays alive (the Driver's contract). */
  const inUse = (operation: string, detail: string) => new RdmaError.ResourceInUseError({ operation, detail })

  /** Fails with the refusal, if there is one; else runs `effect`. */
  const refusedOr = <A, E, E2>(refused: E | undefined, effect: () => Effect.Effect<A, E2>): Effect.Effect<A, E | E2> =>
    refused !== undefined ? Effect.fail(refused) : effect()

  /** Runs `body` after counting the call; a planned fault wins over success, not over bad arguments. */
  const call = <A, E>(
    operation: fabric.Operation,
    validate: () => E | undefined,
    fault: (code: number) => E,
    body: (planned?: fabric.Fault) => Effect.Effect<A, E>
  ): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const refused = validate()
      if (refused !== undefined) return Effect.fail(refused)
      const planned = fabric.countCall(world, operation)
      return planned !== undefined && "code" in planned ? Effect.fail(fault(planned.code)) : body(planned)
    })

  /**
   * {@link call} for a driver call's synchronous form (Driver.SynchronousCall): the same checks,
   * count and planned fault, the outcome as an Exit.
   */
  const callNow = <A, E>(
    operation: fabric.Operation,
    validate: () => E | undefined,
    fault: (code: number) => E,
    body: () => Exit.Exit<A, E>
  ): Exit.Exit<A, E> => {
    const refused = validate()
    if (refused !== undefined) return Exit.fail(refused)
    const planned = fabric.countCall(world, operation)
    return planned !== undefined && "code" in planned ? Exit.fail(fault(planned.code)) : body()
  }

  const record = <H extends fabric.SimHandle>(
    handle: H,
    kind: fabric.LedgerEntry["kind"],
    description: string,
    span: Option.Option<Tracer.AnySpan>
  ) => {
    world.ledger.set(handle, {
      kind,
      id: handle.id,
      description,
      get acquiredIn() {
        return spanChain(span)
      }
    })
    return fabric.track(handle)
  }

  const acquire = <H extends fabric.SimHandle>(handle: H, kind: fabric.LedgerEntry["kind"], description: string) =>
    // serviceOption, not Effect.currentSpan: the latter fails (building an exception) when there is no span.
    Effect.map(Effect.serviceOption(Tracer.ParentSpan), (span) => record(handle, kind, description, span))

  /** {@link acquire} from a synchronous call: the span is the running fiber's, if any. */
  const acquireNow = <H extends fabric.SimHandle>(handle: H, kind: fabric.LedgerEntry["kind"], description: string) =>
    record(
      handle,
      kind,
      description,
      Option.flatMap(Fiber.getCurrentFiber(), (fiber) => Option.fromNullable(fiber.currentSpan))
    )

  const releaseHandle = (handle: fabric.SimHandle) => {
    handle.alive = false
    world.ledger.delete(handle)
  }

  /** The refusal of a handle that is not of the kind expected, or already released; or nothing. */
  const deadOrWrong = (operation: string, what: string, handle: fabric.SimHandle | undefined) =>
    handle === undefined
      ? invalid(operation, `expected ${what} handle`)
      : !handle.alive
      ? invalid(operation, `the ${what} was already released; a handle is not usable after its release`)
      : undefined

  const peerOf = (value: unknown) => fabric.asHandle(value, "Peer")
  const mrOf = (value: unknown) => fabric.asHandle(value, "MrLocal")
  const remoteOf = (value: unknown) => fabric.asHandle(value, "MrRemote")
  const cmMrOf = (value: unknown) => fabric.asHandle(value, "CmMr")

  const liveMr = (operation: string, value: unknown) => {
    const mr = mrOf(value)
    return { mr: mr!, refused: deadOrWrong(operation, "local memory region", mr) }
  }

  const getMr = <A>(operation: string, value: Driver.Model.MrHandle, f: (mr: fabric.MrLocal) => A) =>
    Effect.suspend(() => {
      const { mr, refused } = liveMr(operation, value)
      return refusedOr(refused, () => Effect.succeed(f(mr)))
    })

  const getRemote = <A>(operation: string, value: Driver.Model.RemoteMrHandle, f: (mr: fabric.MrRemote) => A) =>
    Effect.suspend(() => {
      const mr = remoteOf(value)
      return refusedOr(deadOrWrong(operation, "remote memory region", mr), () => Effect.succeed(f(mr!)))
    })

  return {
    acquire,
    acquireNow,
    call,
    callNow,
    deadOrWrong,
    errno,
    inUse,
    invalid,
    problem,
    refusedOr,
    releaseHandle,
    rpma,
    cmMrOf,
    getMr,
    getRemote,
    liveMr,
    mrOf,
    peerOf,
    remoteOf
  }
}

export type Tools = ReturnType<typeof makeTools>
