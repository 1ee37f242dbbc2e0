/** @internal */
import type {
  CmIdHandle,
  CmMrHandle,
  Completion,
  CompletionsReady,
  ConnEvent,
  ConnHandle,
  ConnReqHandle,
  Driver,
  EndpointHandle,
  IbvContextHandle,
  MrRegistration,
  PeerHandle,
  PostOutcome,
  RemoteMrHandle,
  WorkRequest
} from "@effect-rdma/core/Driver"
import { synchronousCall } from "@effect-rdma/core/Driver"
import {
  fromErrno,
  fromRpmaCode,
  type MapFileError,
  mapFileError,
  type RdmaCmError,
  ResourceInUseError,
  type RpmaError
} from "@effect-rdma/core/RdmaError"
import * as DriverArguments from "@effect-rdma/core/DriverArguments"
import { RpmaCode } from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Binding, WaitCallback } from "../RpmaBinding.js"
import { type LoopTurns, makeLoopTurns } from "./loopTurns.js"
import { srqCalls } from "./srq.js"

interface NativeFailure {
  readonly operation?: unknown
  readonly detail?: unknown
  readonly code?: unknown
  readonly errno?: unknown
  readonly inUse?: unknown
}

const field = (cause: unknown, key: keyof NativeFailure): unknown =>
  typeof cause === "object" && cause !== null ? (cause as NativeFailure)[key] : undefined

const text = (value: unknown): string | undefined => typeof value === "string" ? value : undefined

/** The addon's failure as a tagged error; undefined for one without a code (a bug in the binding). */
const rpmaError = (operation: string, cause: unknown): RpmaError | undefined => {
  const code = field(cause, "code")
  return typeof code === "number"
    ? fromRpmaCode(code, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause)
    : undefined
}

/**
 * The one place where the addon's failures become tagged errors, through core's mapping. A
 * failure without a code is a bug in the binding, not an RDMA error: it is a defect.
 */
export const rpmaFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RpmaError> => {
  const error = rpmaError(operation, cause)
  return error !== undefined ? Effect.fail(error) : Effect.die(cause)
}

/** As {@link rpmaFailure}, for the calls that answer in JavaScript; a defect is thrown. */
const rpmaErrorOrThrow = (operation: string, cause: unknown): RpmaError => {
  const error = rpmaError(operation, cause)
  if (error === undefined) throw cause
  return error
}

const exitOf = (operation: string, cause: unknown): Exit.Exit<never, RpmaError> => {
  const error = rpmaError(operation, cause)
  return error !== undefined ? Exit.fail(error) : Exit.die(cause)
}

const cmFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RdmaCmError> => {
  const errno = field(cause, "errno")
  return typeof errno === "number"
    ? Effect.fail(fromErrno(errno, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause))
    : Effect.die(cause)
}

/** The addon's mapFile / unmapFile failures: `errno` and, for what it checked itself, `reason`. */
const mapFailure = (path: string, operation: string) => (cause: unknown): Effect.Effect<never, MapFileError> => {
  const errno = field(cause, "errno")
  return typeof errno === "number"
    ? Effect.fail(mapFileError({
      path,
      operation: text(field(cause, "operation")) ?? operation,
      errno,
      reason: text((cause as { readonly reason?: unknown }).reason),
      detail: text(field(cause, "detail")),
      cause
    }))
    : Effect.die(cause)
}

export const attempt = <A, E>(run: () => A, onFailure: (cause: unknown) => Effect.Effect<never, E>): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(run())
    } catch (cause) {
      return onFailure(cause)
    }
  })

const attemptPromise = <A, E>(
  run: () => Promise<A>,
  onFailure: (cause: unknown) => Effect.Effect<never, E>
): Effect.Effect<A, E> =>
  Effect.tryPromise({ try: run, catch: (cause) => cause }).pipe(Effect.catchAll(onFailure))

/** The addon's refusal of a release because the handle is in use (it stays alive), if it is one. */
const inUseError = (operation: string, cause: unknown): ResourceInUseError | undefined =>
  field(cause, "inUse") === true
    ? new ResourceInUseError({
      operation: text(field(cause, "operation")) ?? operation,
      detail: text(field(cause, "detail")) ?? "the handle is in use",
      cause
    })
    : undefined

/** A release the addon refused because the handle is in use (it stays alive), else `otherwise`. */
export const inUseOr = <E>(operation: string, otherwise: (cause: unknown) => Effect.Effect<never, E>) =>
(cause: unknown): Effect.Effect<never, E | ResourceInUseError> => {
  const inUse = inUseError(operation, cause)
  return inUse !== undefined ? Effect.fail(inUse) : otherwise(cause)
}

/** {@link inUseOr} of an rpma release, as an Exit. */
const inUseExitOr = (operation: string, cause: unknown): Exit.Exit<never, RpmaError | ResourceInUseError> => {
  const inUse = inUseError(operation, cause)
  return inUse !== undefined ? Exit.fail(inUse) : exitOf(operation, cause)
}

export const rpma = <A>(operation: string, run: () => A) => attempt(run, rpmaFailure(operation))
const cm = <A>(operation: string, run: () => A) => attempt(run, cmFailure(operation))

// The addon's handles are the Driver's opaque handles; only their static kind is added here.
const as = <H>(handle: object): H => handle as H

const cmOperations = { msgs: "rdma_reg_msgs", read: "rdma_reg_read", write: "rdma_reg_write" } as const

const postOperations = {
  write: "rpma_write",
  read: "rpma_read",
  flush: "rpma_flush",
  atomicWrite: "rpma_atomic_write",
  send: "rpma_send",
  recv: "rpma_recv"
} as const

/** The operation a work request names, for error messages; never throws (a getter or Proxy trap may). */
const operationOf = (request: WorkRequest): string => {
  try {
    const op: unknown = typeof request === "object" && request !== null ? request.op : undefined
    return typeof op === "string" && Object.hasOwn(postOperations, op) ? postOperations[op as WorkRequest["op"]] : "rpma_write"
  } catch {
    return "rpma_write"
  }
}

const cmOperationOf = (kind: unknown): string =>
  typeof kind === "string" && Object.hasOwn(cmOperations, kind) ? cmOperations[kind as keyof typeof cmOperations] : "rdma_reg_msgs"

/**
 * A wait in the addon (an incoming request, a connection event, completions) as an interruptible
 * Effect: the addon answers the callback once, from the event loop; the canceller stops the wait
 * (cancelWait), so an interrupted fiber leaves no libuv watcher behind.
 */
export const wait = <A>(
  binding: Binding,
  operation: string,
  handle: unknown,
  start: (callback: WaitCallback<A>) => number
): Effect.Effect<A, RpmaError> =>
  Effect.async<A, RpmaError>((resume) => {
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

/** Outgoing requests: their private data goes with a connection request (56 bytes on RoCE), not an accept. */
const outgoing = new WeakSet<object>()

const connectionCalls = (binding: Binding, loop: LoopTurns = makeLoopTurns()): Pick<
  Driver,
  | "epListen"
  | "epShutdown"
  | "epNextConnReq"
  | "connReqNew"
  | "connReqPrivateData"
  | "connReqConnect"
  | "connReqDelete"
  | "connReqRecv"
  | "peerCfgDescriptor"
  | "connApplyRemotePeerCfg"
  | "connNextEvent"
  | "connPrivateData"
  | "connDisconnect"
  | "connDelete"
  | "post"
  | "pollCompletions"
  | "nextCompletions"
  | "postMany"
  | "armCompletions"
> => ({
  epListen: (peer, address, port) =>
    rpma("rpma_ep_listen", () => as<EndpointHandle>(binding.epListen(peer, address, port))),
  epShutdown: (ep) => rpma("rpma_ep_shutdown", () => binding.epShutdown(ep)),
  epNextConnReq: (ep, config) =>
    wait<object>(binding, "rpma_ep_next_conn_req", ep, (callback) => binding.epNextConnReq(ep, config, callback)).pipe(
      Effect.map(as<ConnReqHandle>)
    ),
  connReqNew: (peer, address, port, config) =>
    attemptPromise(() => binding.connReqNew(peer, address, port, config), rpmaFailure("rpma_conn_req_new")).pipe(
      Effect.map((req) => {
        outgoing.add(req)
        return as<ConnReqHandle>(req)
      })
    ),
  connReqPrivateData: (req) => rpma("rpma_conn_req_get_private_data", () => binding.connReqPrivateData(req)),
  // The Driver's contract: the request is consumed, success or not. The addon leaves it alive when
  // it refuses the arguments before librpma sees them (private data too long, say): delete it then
  // (which rejects an incoming one at once instead of leaving its client waiting out its timeout).
  connReqConnect: (req, privateData) =>
    attempt(
      () => {
        // rdma_cm refuses more than the CM message carries with a bare EINVAL: name the limit first.
        const side = typeof req === "object" && req !== null && outgoing.has(req) ? "connect" : "accept"
        const refused = DriverArguments.privateData(privateData, side)
        if (refused !== undefined && DriverArguments.privateData(privateData) === undefined) {
          throw Object.assign(new Error(refused), { operation: "rpma_conn_req_connect", code: RpmaCode.RPMA_E_INVAL, detail: refused })
        }
        return as<ConnHandle>(binding.connReqConnect(req, privateData))
      },
      (cause) => {
        try {
          binding.connReqDelete(req)
        } catch {
          // Already consumed: nothing left to delete.
        }
        return rpmaFailure("rpma_conn_req_connect")(cause)
      }
    ),
  connReqDelete: (req) => rpma("rpma_conn_req_delete", () => binding.connReqDelete(req)),
  connReqRecv: (req, request) => rpma("rpma_conn_req_recv", () => binding.connReqRecv(req, request)),
  peerCfgDescriptor: (direct) => rpma("rpma_peer_cfg_get_descriptor", () => binding.peerCfgDescriptor(direct)),
  // Stricter than librpma, which reads the first byte of a longer descriptor: exactly 1 byte, as
  // the simulated driver requires.
  connApplyRemotePeerCfg: (conn, descriptor) =>
    rpma("rpma_conn_apply_remote_peer_cfg", () => {
      const refused = DriverArguments.peerCfgDescriptor(descriptor)
      if (refused !== undefined) {
        throw Object.assign(new Error(refused), {
          operation: "rpma_conn_apply_remote_peer_cfg",
          code: RpmaCode.RPMA_E_INVAL,
          detail: refused
        })
      }
      return binding.connApplyRemotePeerCfg(conn, descriptor)
    }),
  connNextEvent: (conn) =>
    wait<string>(binding, "rpma_conn_next_event", conn, (callback) => binding.connNextEvent(conn, callback)).pipe(
      Effect.map((event) => event as ConnEvent)
    ),
  connPrivateData: (conn) => rpma("rpma_conn_get_private_data", () => binding.connPrivateData(conn)),
  connDisconnect: (conn) => rpma("rpma_conn_disconnect", () => binding.connDisconnect(conn)),
  connDelete: (conn) => rpma("rpma_conn_delete", () => binding.connDelete(conn)),
  post: (conn, request) => Effect.suspend(() => rpma(operationOf(request), () => binding.post(conn, request))),
  // Core polls right after each post: the same fairness as below applies.
  pollCompletions: (conn) =>
    Effect.zipRight(loop.fair, rpma("rpma_cq_get_wc", (): ReadonlyArray<Completion> => binding.connPollCompletions(conn))),
  // What the queue holds already, else a wait on the completion channel. The event loop gets a
  // turn first when the queue has kept answering synchronously for too long (see LOOP_BUDGET_MS).
  nextCompletions: (conn) =>
    Effect.flatMap(
      Effect.zipRight(
        loop.fair,
        rpma("rpma_cq_get_wc", (): ReadonlyArray<Completion> => binding.connPollCompletions(conn))
      ),
      (ready) =>
        ready.length > 0 ?
          Effect.succeed(ready) :
          wait<ReadonlyArray<Completion>>(
            binding,
            "rpma_cq_wait",
            conn,
            (callback) => binding.connWaitCompletions(conn, callback)
          )
    ),
  postMany: (conn, requests): PostOutcome => {
    let posted = 0
    let error: RpmaError | undefined
    for (const request of requests) {
      try {
        binding.post(conn, request)
      } catch (cause) {
        error = rpmaErrorOrThrow(operationOf(request), cause)
        break
      }
      posted++
    }
    // Nothing posted: nothing new to read (the armed channel reports what was there before).
    if (posted === 0) return { posted, error, ready: NONE, queueError: undefined, turnDue: false }
    let ready: ReadonlyArray<Completion> = NONE
    let queueError: RpmaError | undefined
    try {
      ready = binding.connPollCompletions(conn)
    } catch (cause) {
      queueError = rpmaErrorOrThrow("rpma_cq_get_wc", cause)
    }
    return { posted, error, ready, queueError, turnDue: loop.due() }
  },
  // The addon's wait (uv_poll on the channel's descriptor) answers one callback; core re-arms.
  armCompletions: (conn, onReady: CompletionsReady) => {
    let done = false
    let id: number | undefined
    let refused: ReturnType<typeof setImmediate> | undefined
    try {
      id = binding.connWaitCompletions(conn, (error, value) => {
        if (done) return
        done = true
        onReady(error === undefined || error === null ? Exit.succeed(value) : exitOf("rpma_cq_wait", error))
      })
    } catch (cause) {
      // Never during the call: the refusal is reported from the event loop, like an answer.
      refused = setImmediate(() => {
        if (done) return
        done = true
        onReady(exitOf("rpma_cq_wait", cause))
      })
    }
    return () => {
      if (done) return
      done = true
      if (refused !== undefined) clearImmediate(refused)
      if (id !== undefined) binding.cancelWait(conn, id)
    }
  }
})

const NONE: ReadonlyArray<Completion> = []

/** Registrations of this many bytes or more run on a worker thread (about 10 ms of pinning). */
const LARGE_REGISTRATION = 16 * 2 ** 20

/** Whether `memory` is a large Uint8Array; false for anything else (a Proxy's getters may throw: the addon refuses it). */
const isLarge = (memory: unknown): boolean => {
  try {
    return memory instanceof Uint8Array && memory.byteLength >= LARGE_REGISTRATION
  } catch {
    return false
  }
}

/** @internal */
export const makeDriver = (binding: Binding): Driver => {
  // The handles of large regions, deregistered on a worker too (the handle does not tell its size).
  const large = new WeakSet<object>()
  return {
  ...connectionCalls(binding),
  ...srqCalls(binding),
  name: "native",

  getIbvContext: (address, kind) =>
    attemptPromise(() => binding.getIbvContext(address, kind), rpmaFailure("rpma_utils_get_ibv_context")).pipe(
      Effect.map(as<IbvContextHandle>)
    ),
  peerNew: (context) => rpma("rpma_peer_new", () => as<PeerHandle>(binding.peerNew(context))),
  peerDelete: (peer) =>
    attempt(() => binding.peerDelete(peer), inUseOr("rpma_peer_delete", rpmaFailure("rpma_peer_delete"))),

  // Pinning and unpinning are proportional to size (hundreds of milliseconds for 512 MiB): large
  // regions are registered and deregistered on a worker thread so that the event loop keeps
  // running. The rest is synchronous in the addon, so `now` makes those calls (and declines the large).
  mrReg: synchronousCall(
    (peer, memory, usage) => {
      if (isLarge(memory)) return undefined
      try {
        return Exit.succeed(as<MrRegistration>(binding.mrReg(peer, memory, usage)))
      } catch (cause) {
        return exitOf("rpma_mr_reg", cause)
      }
    },
    (peer, memory, usage) =>
      attemptPromise(() => binding.mrRegAsync(peer, memory, usage), rpmaFailure("rpma_mr_reg")).pipe(
        Effect.map((registered) => {
          large.add(registered.handle)
          return as<MrRegistration>(registered)
        })
      )
  ),
  mrDereg: synchronousCall(
    (mr) => {
      if (large.has(mr)) return undefined
      try {
        binding.mrDereg(mr)
        return Exit.void
      } catch (cause) {
        return inUseExitOr("rpma_mr_dereg", cause)
      }
    },
    (mr) => attemptPromise(() => binding.mrDeregAsync(mr), inUseOr("rpma_mr_dereg", rpmaFailure("rpma_mr_dereg")))
  ),
  mrGetDescriptorSize: (mr) => rpma("rpma_mr_get_descriptor_size", () => binding.mrGetDescriptorSize(mr)),
  mrGetDescriptor: (mr) => rpma("rpma_mr_get_descriptor", () => binding.mrGetDescriptor(mr)),
  mrGetPtr: (mr) => rpma("rpma_mr_get_ptr", () => binding.mrGetPtr(mr)),
  mrGetSize: (mr) => rpma("rpma_mr_get_size", () => binding.mrGetSize(mr)),

  mrRemoteFromDescriptor: (descriptor) =>
    rpma("rpma_mr_remote_from_descriptor", () => as<RemoteMrHandle>(binding.mrRemoteFromDescriptor(descriptor))),
  mrRemoteDelete: (mr) => rpma("rpma_mr_remote_delete", () => binding.mrRemoteDelete(mr)),
  mrRemoteGetSize: (mr) => rpma("rpma_mr_remote_get_size", () => binding.mrRemoteGetSize(mr)),
  mrRemoteGetFlushType: (mr) => rpma("rpma_mr_remote_get_flush_type", () => binding.mrRemoteGetFlushType(mr)),

  cmCreateId: (address) =>
    attemptPromise(() => binding.cmCreateId(address), cmFailure("rdma_create_ep")).pipe(Effect.map(as<CmIdHandle>)),
  cmDestroyId: (id) =>
    attempt(() => binding.cmDestroyId(id), inUseOr("rdma_destroy_ep", cmFailure("rdma_destroy_ep"))),
  cmReg: (id, kind, memory) =>
    cm(cmOperationOf(kind), () => as<CmMrHandle>(binding.cmReg(id, kind, memory))),
  cmDeregMr: (mr) => cm("rdma_dereg_mr", () => binding.cmDeregMr(mr)),
  cmMrInfo: (mr) => cm("ibv_mr", () => binding.cmMrInfo(mr)),

  allocate: (size) => rpma("posix_memalign", () => binding.allocate(size)),
  // Core frees only what it allocated; anything else reaching here is a bug, hence a defect.
  free: (memory) => Effect.sync(() => binding.free(memory)),
  mapFile: (request) =>
    attempt(
      () => binding.mapFile(request.path, request.offset, request.size, request.create),
      mapFailure(request.path, "mmap")
    ),
  unmapFile: (memory) => attempt(() => binding.unmapFile(memory), mapFailure("the mapping", "msync")),
  live: Effect.sync(() => binding.liveHandles())
  }
}
