/**
 * The rules every simulated call shares: argument checks as the C libraries make them, planned
 * faults, and the ledger of live handles.
 *
 * @internal
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import * as RdmaError from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
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
  return names.length === 0 ? "(no span: wrap the acquiring code in Effect.withSpan or Effect.fn to name it)" :
    names.join(" > ")
}

/** @internal */
export const makeTools = (world: fabric.Fabric) => {
  const rpma = (operation: string, code: number, detail?: string) =>
    Effect.fail(RdmaError.fromRpmaCode(code, operation, detail))
  const invalid = (operation: string, detail: string) => rpma(operation, RdmaError.RpmaCode.RPMA_E_INVAL, detail)
  const errno = (operation: string, code: number, detail?: string) =>
    Effect.fail(RdmaError.fromErrno(code, operation, detail))
  /** A release refused because the handle is in use: it stays alive (the Driver's contract). */
  const inUse = (operation: string, detail: string) =>
    Effect.fail(new RdmaError.ResourceInUseError({ operation, detail }))

  /** Runs `body` after counting the call; a planned fault wins over success, not over bad arguments. */
  const call = <A, E>(
    operation: fabric.Operation,
    validate: () => Effect.Effect<never, E> | undefined,
    fault: (code: number) => Effect.Effect<never, E>,
    body: (planned?: fabric.Fault) => Effect.Effect<A, E>
  ): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const refused = validate()
      if (refused !== undefined) return refused
      const planned = fabric.countCall(world, operation)
      return planned !== undefined && "code" in planned ? fault(planned.code) : body(planned)
    })

  const acquire = <H extends fabric.SimHandle>(handle: H, kind: fabric.LedgerEntry["kind"], description: string) =>
    // serviceOption, not Effect.currentSpan: the latter fails (building an exception) when there is no span.
    Effect.map(Effect.serviceOption(Tracer.ParentSpan), (span) => {
      world.ledger.set(handle, {
        kind,
        id: handle.id,
        description,
        get acquiredIn() {
          return spanChain(span)
        }
      })
      return fabric.track(handle)
    })

  const releaseHandle = (handle: fabric.SimHandle) => {
    handle.alive = false
    world.ledger.delete(handle)
  }

  const deadOrWrong = (operation: string, what: string, handle: fabric.SimHandle | undefined) =>
    handle === undefined
      ? invalid(operation, `expected ${what} handle`)
      : !handle.alive
      ? invalid(operation, `the ${what} was already released; a handle is not usable after its release`)
      : undefined

  /** The addon's memory checks (core's DriverArguments.memory): the same refusals, the same words. */
  const validMemory = (operation: string, memory: unknown, onBad: (detail: string) => Effect.Effect<never, any>) => {
    const problem = DriverArguments.memory(memory)
    return problem === undefined ? undefined : onBad(problem)
  }

  const peerOf = (value: unknown) => fabric.asHandle(value, "Peer")
  const mrOf = (value: unknown) => fabric.asHandle(value, "MrLocal")
  const remoteOf = (value: unknown) => fabric.asHandle(value, "MrRemote")
  const cmIdOf = (value: unknown) => fabric.asHandle(value, "CmId")
  const cmMrOf = (value: unknown) => fabric.asHandle(value, "CmMr")

  const liveMr = (operation: string, value: unknown) => {
    const mr = mrOf(value)
    return { mr: mr!, refused: deadOrWrong(operation, "local memory region", mr) }
  }

  const getMr = <A>(operation: string, value: Driver.MrHandle, f: (mr: fabric.MrLocal) => A) =>
    Effect.suspend(() => {
      const { mr, refused } = liveMr(operation, value)
      return refused ?? Effect.succeed(f(mr))
    })

  const getRemote = <A>(operation: string, value: Driver.RemoteMrHandle, f: (mr: fabric.MrRemote) => A) =>
    Effect.suspend(() => {
      const mr = remoteOf(value)
      return deadOrWrong(operation, "remote memory region", mr) ?? Effect.succeed(f(mr!))
    })

  return { acquire, call, deadOrWrong, errno, inUse, invalid, releaseHandle, rpma, validMemory, cmIdOf, cmMrOf, getMr, getRemote, liveMr, mrOf, peerOf, remoteOf }
}

/** @internal */
export type Tools = ReturnType<typeof makeTools>
