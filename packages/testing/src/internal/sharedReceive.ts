/**
 * The simulated fabric's shared receive queues: receives any connection made with a queue
 * consumes, in no particular order (librpma does not keep the RDMA order), completing on the
 * queue's own receive CQ, or without one on the connection's CQ, with the connection's queue pair
 * number (its handle id here).
 */
import type { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"

/** A receive posted on a shared receive queue. */
export interface SharedRecv {
  readonly id: number
  readonly mr: fabric.MrLocal
  readonly offset: number
  readonly length: number
}

interface SrqState {
  readonly recvs: Array<SharedRecv>
  /** The queue's receive CQ. */
  readonly completions: CompletionQueue.CompletionQueue
  /** The region each posted receive holds, by id, until its completion is returned. */
  readonly held: Map<number, fabric.MrLocal>
}

/** What receive `id` held is let go: its completion was returned. */
const letGo = (held: Map<number, fabric.MrLocal>, id: number) => {
  const mr = held.get(id)
  if (mr === undefined) return
  held.delete(id)
  mr.inFlight--
}

/**
 * `retry(srq)`: a receive was posted; the network delivers a message that waits for one
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

  const calls = {
    srqNew: (peerValue, config) =>
      Effect.suspend(() => {
        const peer = peerOf(peerValue)
        const refused = deadOrWrong("rpma_srq_new", "peer", peer)
        if (refused !== undefined) return Effect.fail(refused)
        const problem = Arguments.srqConfig(config)
        if (problem !== undefined) return Effect.fail(invalid("rpma_srq_new", problem))
        const srq: fabric.Srq = {
          kind: "Srq",
          id: world.nextId++,
          alive: true,
          peer: peer!,
          config: { rqSize: config.rqSize, rcqSize: config.rcqSize }
        }
        const held = new Map<number, fabric.MrLocal>()
        // The addon lets go of what a receive held when it returns its completion.
        const completions = CompletionQueue.make((taken) => {
          for (const c of taken) letGo(held, c.id)
        })
        states.set(srq, { recvs: [], completions, held })
        return acquire(srq, "Srq", `shared receive queue of ${config.rqSize} receives`)
      }),

    srqDelete: (value) =>
      Effect.suspend((): Effect.Effect<void, RdmaError.RpmaError | RdmaError.ResourceInUseError> => {
        const srq = srqOf(value)
        const refused = deadOrWrong("rpma_srq_delete", "shared receive queue", srq)
        if (refused !== undefined) return Effect.fail(refused)
        const users = usersOf(srq!)
        if (users > 0) {
          return Effect.fail(inUse(
            "rpma_srq_delete",
            `${users} ${
              users === 1
                ? "connection or connection request still uses it"
                : "connections or connection requests still use it"
            }: delete them first`
          ))
        }
        releaseHandle(srq!)
        const state = stateOf(srq!)
        state.recvs.splice(0)
        for (const mr of state.held.values()) mr.inFlight--
        state.held.clear()
        state.completions.close(invalid("rpma_cq_wait", "the shared receive queue was deleted"))
        return Effect.void
      })
  } satisfies Partial<Driver.Driver>

  /**
   * rpma_srq_recv of a receive already read and checked (DriverArguments.workRequest): undefined
   * once posted, else the refusal.
   */
  const post = (
    srq: fabric.Srq,
    recv: Extract<Driver.Model.WorkRequest, { op: "recv" }>
  ): RdmaError.RpmaError | undefined => {
    const mr = fabric.asHandle(recv.dst, "MrLocal")
    const refused = deadOrWrong("rpma_srq_recv", "local memory region", mr)
    if (refused !== undefined) return refused
    const state = stateOf(srq)
    mr!.inFlight++
    state.held.set(recv.id, mr!)
    state.recvs.push({ id: recv.id, mr: mr!, offset: recv.offset, length: recv.length })
    retry(srq)
    return undefined
  }

  return {
    calls,
    srqOf,
    /** The queue a connection's config names, if it is one of ours. */
    ofConfig: (config: Driver.Model.ConnConfig) => srqOf(config.srq),
    /** Checks a config's queue: a live one, or none. */
    refuseConfig: (operation: string, config: unknown) => {
      const cfg = typeof config === "object" && config !== null ? config as Driver.Model.ConnConfig : undefined
      if (cfg?.srq === undefined) return undefined
      // As rpma_conn_req_new / rpma_ep_next_conn_req: the queue's receive CQ has a channel of its own.
      const srq = srqOf(cfg.srq)
      return deadOrWrong(operation, "shared receive queue", srq) ??
        (cfg.sharedCompletionChannel === true && srq!.config.rcqSize > 0
          ? invalid(
            operation,
            "a shared completion channel cannot be used with a shared receive queue that has its own receive CQ"
          )
          : undefined)
    },
    /** The next posted receive of the queue, if any (which one is unspecified; the oldest here). */
    take: (srq: fabric.Srq): SharedRecv | undefined => stateOf(srq).recvs.shift(),
    post,
    /**
     * The queue's receive CQ; undefined without one (rcqSize 0): its receives complete on the
     * connection the message came on (a receive CQ of the connection's own or its CQ: one queue here).
     */
    completionsOf: (srq: fabric.Srq) => srq.config.rcqSize === 0 ? undefined : stateOf(srq).completions,
    /** A receive of the queue completed on a connection's CQ was returned: what it held is let go. */
    letGo: (srq: fabric.Srq, id: number) => letGo(stateOf(srq).held, id),
    usersOf
  }
}

export type SharedReceiveQueues = ReturnType<typeof makeSharedReceiveQueues>
