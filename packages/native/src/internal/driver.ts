/** @internal */
import type {
  CmIdHandle,
  CmMrHandle,
  Driver,
  IbvContextHandle,
  MrHandle,
  PeerHandle,
  RemoteMrHandle
} from "@effect-rdma/core/Driver"
import { fromErrno, fromRpmaCode, type RdmaCmError, type RpmaError } from "@effect-rdma/core/RdmaError"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"

interface NativeFailure {
  readonly operation?: unknown
  readonly detail?: unknown
  readonly code?: unknown
  readonly errno?: unknown
}

const field = (cause: unknown, key: keyof NativeFailure): unknown =>
  typeof cause === "object" && cause !== null ? (cause as NativeFailure)[key] : undefined

const text = (value: unknown): string | undefined => typeof value === "string" ? value : undefined

/**
 * The one place where the addon's failures become tagged errors, through core's mapping. A
 * failure without a code is a bug in the binding, not an RDMA error: it is a defect.
 */
const rpmaFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RpmaError> => {
  const code = field(cause, "code")
  return typeof code === "number"
    ? Effect.fail(fromRpmaCode(code, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause))
    : Effect.die(cause)
}

const cmFailure = (operation: string) => (cause: unknown): Effect.Effect<never, RdmaCmError> => {
  const errno = field(cause, "errno")
  return typeof errno === "number"
    ? Effect.fail(fromErrno(errno, text(field(cause, "operation")) ?? operation, text(field(cause, "detail")), cause))
    : Effect.die(cause)
}

const attempt = <A, E>(run: () => A, onFailure: (cause: unknown) => Effect.Effect<never, E>): Effect.Effect<A, E> =>
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

const rpma = <A>(operation: string, run: () => A) => attempt(run, rpmaFailure(operation))
const cm = <A>(operation: string, run: () => A) => attempt(run, cmFailure(operation))

// The addon's handles are the Driver's opaque handles; only their static kind is added here.
const as = <H>(handle: object): H => handle as H

const cmOperations = { msgs: "rdma_reg_msgs", read: "rdma_reg_read", write: "rdma_reg_write" } as const

/**
 * Connections (rpma_ep_*, rpma_conn_*, work requests) are a later issue; until the addon has
 * them, calling one is a defect that says so, as in FileSystem.layerNoop.
 */
type ConnectionCalls =
  | "epListen"
  | "epShutdown"
  | "epNextConnReq"
  | "connReqNew"
  | "connReqPrivateData"
  | "connReqConnect"
  | "connReqDelete"
  | "connNextEvent"
  | "connPrivateData"
  | "connDisconnect"
  | "connDelete"
  | "post"
  | "nextCompletions"

const notYet = (name: string) => () =>
  Effect.dieMessage(`Driver.${name} is not implemented by @effect-rdma/native yet`)

const connectionCalls: Pick<Driver, ConnectionCalls> = {
  epListen: notYet("epListen"),
  epShutdown: notYet("epShutdown"),
  epNextConnReq: notYet("epNextConnReq"),
  connReqNew: notYet("connReqNew"),
  connReqPrivateData: notYet("connReqPrivateData"),
  connReqConnect: notYet("connReqConnect"),
  connReqDelete: notYet("connReqDelete"),
  connNextEvent: notYet("connNextEvent"),
  connPrivateData: notYet("connPrivateData"),
  connDisconnect: notYet("connDisconnect"),
  connDelete: notYet("connDelete"),
  post: notYet("post"),
  nextCompletions: notYet("nextCompletions")
}

/** @internal */
export const makeDriver = (binding: Binding): Driver => ({
  ...connectionCalls,
  name: "native",

  getIbvContext: (address, kind) =>
    attemptPromise(() => binding.getIbvContext(address, kind), rpmaFailure("rpma_utils_get_ibv_context")).pipe(
      Effect.map(as<IbvContextHandle>)
    ),
  peerNew: (context) => rpma("rpma_peer_new", () => as<PeerHandle>(binding.peerNew(context))),
  peerDelete: (peer) => rpma("rpma_peer_delete", () => binding.peerDelete(peer)),

  mrReg: (peer, memory, usage) => rpma("rpma_mr_reg", () => as<MrHandle>(binding.mrReg(peer, memory, usage))),
  mrDereg: (mr) => rpma("rpma_mr_dereg", () => binding.mrDereg(mr)),
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
  cmDestroyId: (id) => cm("rdma_destroy_ep", () => binding.cmDestroyId(id)),
  cmReg: (id, kind, memory) =>
    cm(cmOperations[kind] ?? "rdma_reg_msgs", () => as<CmMrHandle>(binding.cmReg(id, kind, memory))),
  cmDeregMr: (mr) => cm("rdma_dereg_mr", () => binding.cmDeregMr(mr)),
  cmMrInfo: (mr) => cm("ibv_mr", () => binding.cmMrInfo(mr)),

  allocate: (size) => rpma("posix_memalign", () => binding.allocate(size)),
  // Core frees only what it allocated; anything else reaching here is a bug, hence a defect.
  free: (memory) => Effect.sync(() => binding.free(memory)),
  live: Effect.sync(() => ({ ...binding.liveHandles(), endpoints: 0, connectionRequests: 0, connections: 0 }))
})
