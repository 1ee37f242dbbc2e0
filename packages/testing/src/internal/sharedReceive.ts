/**
 * The simulated fabric's shared receive queues: receives any connection made with a queue
 * consumes, in no particular order (librpma does not keep the RDMA order), completing on the
 * queue's own receive CQ with the connection's queue pair number (its handle id here).
 *
 * @internal
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import type { ResourceInUseError, RpmaError } from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

/** @internal A receive posted on a shared receive queue. */
export interface SharedRecv {
  readonly id: number
  readonly mr: fabric.MrLocal
  readonly offset: number
  readonly length: number
}

interface SrqState {
  readonly recvs: Array<SharedRecv>
  /** `undefined` wakes a waiter once the queue is deleted. */
  readonly completions: Queue.Queue<Driver.SrqCompletion | undefined>
}

/**
 * @internal `retry(srq)`: a receive was posted; the network delivers a message that waits for one
 * on a connection made with the queue, if any.
 */
export const makeSharedReceiveQueues = (world: fabric.Fabric, tools: Tools, retry: (srq: fabric.Srq) => void) => {
  const { acquire, deadOrWrong, inUse, invalid, peerOf, releaseHandle } = tools
  const states = new WeakMap<fabric.Srq, SrqState>()
  const srqOf = (value: unknown) => fabric.asHandle(value, "Srq")
  const stateOf = (srq: fabric.Srq) => states.get(srq)!

  /** Connection requests and connections alive that were made with the queue. */
  const usersOf = (srq: fabric.Srq): number => {
    let users = 0
    for (const handle of world.ledger.keys()) {
      const user = handle as fabric.AnyHandle
      if ((user.kind === "ConnReq" || user.kind === "Conn") && user.config.srq === (srq as unknown)) users++
    }
    return users
  }

  /** Drops what the completed receives held (the addon does it when it returns their completions). */
  const returned = (completions: ReadonlyArray<Driver.SrqCompletion>, held: Map<number, fabric.MrLocal>) => {
    for (const c of completions) {
      const mr = held.get(c.id)
      if (mr === undefined) continue
      held.delete(c.id)
      mr.inFlight--
    }
    return completions
  }
  const heldBy = new WeakMap<fabric.Srq, Map<number, fabric.MrLocal>>()
  const deleted = (operation: string) => invalid(operation, "the shared receive queue was deleted")

  const calls = {
    srqNew: (peerValue, config) =>
      Effect.suspend(() => {
        const peer = peerOf(peerValue)
        const refused = deadOrWrong("rpma_srq_new", "peer", peer)
        if (refused !== undefined) return refused
        const problem = DriverArguments.srqConfig(config)
        if (problem !== undefined) return invalid("rpma_srq_new", problem)
        const srq: fabric.Srq = {
          kind: "Srq",
          id: world.nextId++,
          alive: true,
          peer: peer!,
          config: { rqSize: config.rqSize, rcqSize: config.rcqSize }
        }
        states.set(srq, { recvs: [], completions: Effect.runSync(Queue.unbounded()) })
        heldBy.set(srq, new Map())
        return acquire(srq, "Srq", `shared receive queue of ${config.rqSize} receives`)
      }),

    srqDelete: (value) =>
      Effect.suspend((): Effect.Effect<void, RpmaError | ResourceInUseError> => {
        const srq = srqOf(value)
        const refused = deadOrWrong("rpma_srq_delete", "shared receive queue", srq)
        if (refused !== undefined) return refused
        const users = usersOf(srq!)
        if (users > 0) {
          return inUse(
            "rpma_srq_delete",
            `${users} ${
              users === 1 ? "connection or connection request still uses it" : "connections or connection requests still use it"
            }: delete them first`
          )
        }
        releaseHandle(srq!)
        const state = stateOf(srq!)
        state.recvs.splice(0)
        for (const mr of heldBy.get(srq!)!.values()) mr.inFlight--
        heldBy.get(srq!)!.clear()
        Queue.unsafeOffer(state.completions, undefined)
        return Effect.void
      }),

    srqRecv: (value, given) =>
      Effect.suspend(() => {
        const srq = srqOf(value)
        const fields = DriverArguments.workRequest({ ...(typeof given === "object" ? given : {}), op: "recv" })
        const mr = fabric.asHandle(given.dst, "MrLocal")
        const refused = deadOrWrong("rpma_srq_recv", "shared receive queue", srq) ??
          (fields.problem !== undefined ? invalid("rpma_srq_recv", fields.problem) : undefined) ??
          deadOrWrong("rpma_srq_recv", "local memory region", mr)
        if (refused !== undefined) return refused
        mr!.inFlight++
        heldBy.get(srq!)!.set(given.id, mr!)
        stateOf(srq!).recvs.push({ id: given.id, mr: mr!, offset: given.offset, length: given.length })
        retry(srq!)
        return Effect.void
      }),

    srqPollCompletions: (value) =>
      Effect.suspend(() => {
        const srq = srqOf(value)
        const refused = deadOrWrong("rpma_cq_get_wc", "shared receive queue", srq)
        if (refused !== undefined) return refused
        return Effect.map(
          Queue.takeAll(stateOf(srq!).completions),
          (chunk) => returned(Array.from(chunk).filter((c) => c !== undefined), heldBy.get(srq!)!)
        )
      }),

    srqNextCompletions: (value) =>
      Effect.suspend(() => {
        const srq = srqOf(value)
        const refused = deadOrWrong("rpma_cq_wait", "shared receive queue", srq)
        if (refused !== undefined) return refused
        const { completions } = stateOf(srq!)
        return Effect.flatMap(Queue.take(completions), (first) => {
          if (first === undefined || !srq!.alive) {
            Queue.unsafeOffer(completions, undefined)
            return deleted("rpma_cq_wait")
          }
          return Effect.map(
            Queue.takeAll(completions),
            (rest) => returned([first, ...Array.from(rest).filter((c) => c !== undefined)], heldBy.get(srq!)!)
          )
        })
      })
  } satisfies Partial<Driver.Driver>

  return {
    calls,
    srqOf,
    /** The queue a connection's config names, if it is one of ours. */
    ofConfig: (config: Driver.ConnConfig) => srqOf(config.srq),
    /** Checks a config's queue: a live one, or none. */
    refuseConfig: (operation: string, config: unknown) => {
      const cfg = typeof config === "object" && config !== null ? config as Driver.ConnConfig : undefined
      if (cfg?.srq === undefined) return undefined
      // As rpma_conn_req_new / rpma_ep_next_conn_req: the queue's receive CQ has a channel of its own.
      return deadOrWrong(operation, "shared receive queue", srqOf(cfg.srq)) ??
        (cfg.sharedCompletionChannel === true
          ? invalid(operation, "a shared completion channel cannot be used with a shared receive queue that has its own receive CQ")
          : undefined)
    },
    /** The next posted receive of the queue, if any (which one is unspecified; the oldest here). */
    take: (srq: fabric.Srq): SharedRecv | undefined => stateOf(srq).recvs.shift(),
    complete: (srq: fabric.Srq, completion: Driver.SrqCompletion) =>
      Queue.unsafeOffer(stateOf(srq).completions, completion),
    usersOf
  }
}
