/**
 * The raw addon as a service, so that tests and embedders can load it from another path or
 * provide a fake. Loading happens when a layer is built, never on import: a machine without the
 * built addon or without the RDMA libraries can still import this package and fall back to
 * another driver.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { join } from "node:path"
import * as Load from "./internal/load.js"

/**
 * A new registration as the addon returns it: the handle and the region's address.
 *
 * @since 1.0.0
 * @category models
 */
export interface Registered {
  readonly handle: object
  readonly address: bigint
}

/**
 * What the addon exports. Handles are opaque objects; arguments are typed `unknown` because the
 * addon checks them at run time (a wrong kind, a closed handle or a `null` is RPMA_E_INVAL or
 * EINVAL, never a crash). Failures are thrown (or rejected) as Errors with `operation`, an
 * optional `detail`, and `code` (librpma) or `errno` (librdmacm, verbs).
 *
 * @since 0.1.0
 * @category models
 */
export interface Binding {
  /** Routes librpma's log into the failing call's `detail`. Idempotent. */
  readonly installLogCapture: () => void
  /** rdma_cm's private-data limits the addon enforces (private_data.h), as core's `Arguments.PRIVATE_DATA_LIMIT`. */
  readonly privateDataLimits: { readonly connect: number; readonly accept: number; readonly reject: number }
  readonly getIbvContext: (address: unknown, kind: unknown) => Promise<object>
  readonly peerNew: (context: unknown) => object
  readonly peerDelete: (peer: unknown) => void
  /** rpma_mr_reg, with the region's address (rpma_mr_get_ptr) from the same call. */
  readonly mrReg: (peer: unknown, memory: unknown, usage: unknown) => Registered
  /** rpma_mr_reg on a worker thread (for large regions: pinning takes long), serialised with the rest. */
  readonly mrRegAsync: (peer: unknown, memory: unknown, usage: unknown) => Promise<Registered>
  readonly mrDereg: (mr: unknown) => void
  /**
   * rpma_mr_dereg on a worker thread (for large regions: unpinning takes long), serialised with
   * the rest. Refused at once, as mrDereg, while requests in flight use the region.
   */
  readonly mrDeregAsync: (mr: unknown) => Promise<void>
  readonly mrGetDescriptorSize: (mr: unknown) => number
  readonly mrGetDescriptor: (mr: unknown) => Uint8Array
  readonly mrGetPtr: (mr: unknown) => bigint
  readonly mrGetSize: (mr: unknown) => number
  readonly mrRemoteFromDescriptor: (descriptor: unknown) => object
  readonly mrRemoteDelete: (mr: unknown) => void
  readonly mrRemoteGetSize: (mr: unknown) => bigint
  readonly mrRemoteGetFlushType: (mr: unknown) => number
  readonly cmReg: (ep: unknown, kind: unknown, memory: unknown) => object
  readonly cmDeregMr: (mr: unknown) => void
  readonly cmMrInfo: (mr: unknown) => { address: bigint; length: number; lkey: number; rkey: number }
  readonly epListen: (peer: unknown, address: unknown, port: unknown) => object
  readonly epShutdown: (ep: unknown) => void
  /** Starts waiting for an incoming request; returns the wait's id for {@link Binding.cancelWait}. */
  readonly epNextConnReq: (ep: unknown, config: unknown, callback: WaitCallback<object>) => number
  readonly connReqNew: (peer: unknown, address: unknown, port: unknown, config: unknown) => Promise<object>
  readonly connReqPrivateData: (req: unknown) => Uint8Array
  readonly connReqConnect: (req: unknown, privateData: unknown) => object
  readonly connReqDelete: (req: unknown) => void
  /** rpma_peer_cfg_get_descriptor of a peer cfg with direct_write_to_pmem set as given. */
  readonly peerCfgDescriptor: (directWriteToPmem: unknown) => Uint8Array
  /** rpma_peer_cfg_from_descriptor + rpma_conn_apply_remote_peer_cfg. */
  readonly connApplyRemotePeerCfg: (conn: unknown, descriptor: unknown) => void
  readonly connNextEvent: (conn: unknown, callback: WaitCallback<string>) => number
  readonly connPrivateData: (conn: unknown) => Uint8Array
  readonly connDisconnect: (conn: unknown) => void
  readonly connDelete: (conn: unknown) => void
  /** rpma_srq_new with an rpma_srq_cfg: `config` is { rqSize, rcqSize }. */
  readonly srqNew: (peer: unknown, config: unknown) => object
  readonly srqDelete: (srq: unknown) => void
  /**
   * One work request (core's WorkRequest) on a queue: rpma_write ... rpma_recv on a connection,
   * rpma_srq_recv on a shared receive queue, rpma_conn_req_recv on a connection request (those two
   * take receives only: anything else is RPMA_E_INVAL). The request's region is held until its
   * completion is returned, or until its queue is deleted.
   */
  readonly post: (queue: unknown, request: unknown) => void
  /**
   * Plain writes, reads, sends and receives on a connection in one call: `count` requests of nine
   * numbers each in `fields` (op 0 write, 1 read, 2 send, 3 recv; id; dst, an index into
   * `regions`; dstOffset; src, an index; srcOffset; length; flags, 1 onError + 2 imm given; imm). A
   * send's region and offset are src and srcOffset, a receive's dst and dstOffset. Post's checks
   * and refusals, in order up to the first refusal, which is thrown with `posted` (how many before it
   * were posted). Returns `count`, or -1 with nothing posted on a shared receive queue or a
   * connection request.
   */
  readonly postWindow: (conn: unknown, regions: unknown, fields: unknown, count: unknown) => number
  /**
   * The completions already queued (possibly none), without waiting: a connection's CQ and receive
   * CQ, a shared receive queue's receive CQ (each completion with `qpNum`); none on a connection
   * request, whose receives complete on the connection it becomes.
   */
  readonly pollCompletions: (queue: unknown) => Array<WaitedCompletion>
  /**
   * Starts waiting for completions (at least one) on a connection or a shared receive queue;
   * returns the wait's id for {@link Binding.cancelWait}.
   */
  readonly waitCompletions: (queue: unknown, callback: WaitCallback<Array<WaitedCompletion>>) => number
  /**
   * {@link Binding.pollCompletions}, polling again until something is queued or `budgetNs`
   * nanoseconds (0 to 10 ms, whole) have passed on the monotonic clock: none then.
   */
  readonly spinCompletions: (queue: unknown, budgetNs: unknown) => Array<WaitedCompletion>
  /**
   * {@link Binding.pollCompletions} as numbers in `into`, seven a completion (id, status,
   * byteLength, opcode, flags, imm, qpNum or -1), as many as fit; returns how many. A full array
   * may leave completions in the CQs: call again.
   */
  readonly pollPacked: (queue: unknown, into: Float64Array) => number
  /** {@link Binding.pollPacked}, polling again until something is queued or `budgetNs` (0 to 10 ms) have passed. */
  readonly spinPacked: (queue: unknown, into: Float64Array, budgetNs: unknown) => number
  /**
   * {@link Binding.waitCompletions}, the completions drained into `into` as {@link Binding.pollPacked}
   * does and the callback told how many (at least one; a full array may leave more queued).
   */
  readonly waitPacked: (queue: unknown, into: Float64Array, callback: WaitCallback<number>) => number
  /** rpma_conn_get_qp_num. */
  readonly connQpNum: (conn: unknown) => number
  /**
   * Stops a wait of any kind (an endpoint's, a connection's events, a connection's or a shared
   * receive queue's completions): its callback is never called. False if it had already ended.
   * Never throws.
   */
  readonly cancelWait: (handle: unknown, id: unknown) => boolean
  readonly allocate: (size: unknown) => Uint8Array
  readonly free: (memory: unknown) => void
  /**
   * librdmacm's verbs API (cm_ep.cc): an endpoint's handle at once (rdma_create_id on a channel of
   * its own + rdma_resolve_addr of a numeric address); `callback` hears when the route is resolved
   * and the queue pair made, or why not. `config` is core's CmEpConfig.
   */
  readonly cmEpCreate: (address: unknown, port: unknown, config: unknown, callback: WaitCallback<undefined>) => object
  /** rdma_connect; `callback` hears ESTABLISHED or the refusal. Returns the wait's id for cmCancel. */
  readonly cmConnect: (ep: unknown, privateData: unknown, callback: WaitCallback<undefined>) => number
  /** rdma_bind_addr + rdma_listen of a numeric address; the port it listens on. */
  readonly cmListen: (address: unknown, port: unknown, config: unknown) => { handle: object; port: number }
  /** The next incoming request as an endpoint with its queue pair. Returns the wait's id. */
  readonly cmGetRequest: (listener: unknown, callback: WaitCallback<object>) => number
  readonly cmPrivateData: (ep: unknown) => Uint8Array
  /** rdma_accept; `callback` hears ESTABLISHED or the failure. Returns the wait's id. */
  readonly cmAccept: (ep: unknown, privateData: unknown, callback: WaitCallback<undefined>) => number
  readonly cmReject: (ep: unknown, privateData: unknown) => void
  /** The next event of an established endpoint ("DISCONNECTED", ...). Returns the wait's id. */
  readonly cmNextEvent: (ep: unknown, callback: WaitCallback<string>) => number
  readonly cmDisconnect: (ep: unknown) => void
  /** Refused (`inUse`) while regions are registered on the endpoint. */
  readonly cmEpDestroy: (ep: unknown) => void
  /** Refused (`inUse`) while endpoints it handed out are alive. */
  readonly cmListenerDestroy: (listener: unknown) => void
  readonly cmEpInfo: (ep: unknown) => {
    qpNum: number
    maxInlineData: number
    localAddress: string
    localPort: number
    remoteAddress: string
    remotePort: number
  }
  /** One of core's CmWorkRequest on an endpoint (ibv_post_send / ibv_post_recv); throws the refusal. */
  readonly cmPost: (ep: unknown, request: unknown) => void
  /** A request of one segment, its fields given in order (cmPost's checks and refusals). */
  readonly cmPostOne: (
    ep: unknown,
    op: unknown,
    id: unknown,
    mr: unknown,
    offset: unknown,
    length: unknown,
    imm: unknown,
    inline: unknown,
    completion: unknown,
    remoteAddress: unknown,
    rkey: unknown
  ) => void
  /**
   * `count` requests of one segment in one call (cmPostOne's checks and refusals, in order), eight
   * numbers each in `fields`: op (0 send, 1 recv, 2 read, 3 write), id, index of its region in
   * `regions`, offset, length, flags (1 signalled, 2 inline, 4 imm), imm, rkey; a read's or a write's
   * remote address at its index in `remotes`. Each run of one queue's requests goes in one post.
   * Returns how many were posted; a refusal ends the window and carries `posted`.
   */
  readonly cmPostWindow: (
    ep: unknown,
    regions: ReadonlyArray<unknown>,
    fields: Float64Array,
    count: number,
    remotes?: BigUint64Array
  ) => number
  /**
   * ibv_poll_cq on the endpoint's send and receive CQs, without waiting, into `into`: six numbers
   * a completion (id, status, byteLength, opcode, flags, imm: 0 unless flags has
   * IBV_WC_WITH_IMM), as many as it holds; returns how many. What did not fit stays in the CQs.
   */
  readonly cmPollPacked: (ep: unknown, into: Float64Array) => number
  /** {@link Binding.cmPollPacked}, polling again until something is queued or `budgetNs` (0 to 10 ms) have passed. */
  readonly cmSpinPacked: (ep: unknown, into: Float64Array, budgetNs: unknown) => number
  /** Waits for completions (at least one) on the endpoint's completion channel (both CQs'). Returns the wait's id. */
  readonly cmWaitCompletions: (ep: unknown, callback: WaitCallback<Array<WaitedCompletion>>) => number
  /**
   * {@link Binding.cmWaitCompletions}, the completions drained into `into` as {@link Binding.cmPollPacked}
   * does and the callback told how many (at least one; a full array may leave more queued).
   */
  readonly cmWaitPacked: (ep: unknown, into: Float64Array, callback: WaitCallback<number>) => number
  /** Stops a wait of an endpoint or a listener; false if it had already ended. Never throws. */
  readonly cmCancel: (handle: unknown, id: unknown) => boolean
  /** Live native objects by kind, process-wide. */
  readonly liveHandles: () => {
    peers: number
    localRegions: number
    remoteRegions: number
    cmRegions: number
    endpoints: number
    connectionRequests: number
    connections: number
    sharedReceiveQueues: number
    cmEndpoints: number
    cmListeners: number
  }
  /** How many allocate() blocks are not yet freed (kept alive by an ArrayBuffer or a registration). */
  readonly liveAllocations: () => number
  /** Bytes in use from malloc, process-wide (glibc's mallinfo2), for leak tests; undefined off glibc. */
  readonly mallocInUse: () => number | undefined
  /**
   * mmap(MAP_SHARED, PROT_READ | PROT_WRITE) of `path` from `offset`, `size` bytes or (undefined)
   * to the end of the file; `create` makes and sizes a missing file. Throws with `errno`,
   * `operation` and, for what it checks itself, `reason`.
   */
  readonly mapFile: (path: unknown, offset: unknown, size: unknown, create: unknown) => Uint8Array
  /** msync(MS_SYNC), then detaches; munmap follows when no registration holds the bytes. */
  readonly unmapFile: (memory: unknown) => void
  /** How many mapFile() mappings are not yet unmapped (kept alive by an ArrayBuffer or a registration). */
  readonly liveMappings: () => number
  /**
   * The doctor's: every device libibverbs lists, with its ports (each opened only for the call).
   * Throws with `errno` when the list itself fails (ENOSYS: no RDMA support in the kernel).
   */
  readonly ibvDevices: () => Array<IbvDeviceInfo>
  /** The doctor's: `ibv_is_fork_initialized()`, after libibverbs has initialised. */
  readonly ibvForkStatus: () => "disabled" | "enabled" | "unneeded"
  /** The doctor's: the name of the device behind a handle from {@link Binding.getIbvContext}. */
  readonly ibvContextDeviceName: (context: unknown) => string
  /** The doctor's: how the addon was built. */
  readonly buildInfo: () => { napiVersion: number }
}

/**
 * A device as libibverbs lists it (for the doctor). `error` says why it could not be opened or
 * queried; a port's `error` why that port could not be queried.
 *
 * @since 0.1.0
 * @category models
 */
export interface IbvDeviceInfo {
  readonly name: string
  /** As ibv_devinfo prints it: "0002:c9ff:fe12:3456". */
  readonly nodeGuid: string
  /** ibv_node_type_str: "InfiniBand channel adapter", "iWARP", ... */
  readonly nodeType: string
  readonly ports: ReadonlyArray<{
    readonly port: number
    /** As ibv_devinfo prints it: "PORT_ACTIVE", "PORT_DOWN", ... */
    readonly state?: string
    /** Bytes: 256 to 4096. */
    readonly activeMtu?: number
    readonly linkLayer?: "InfiniBand" | "Ethernet" | "unspecified"
    readonly error?: string
  }>
  readonly error?: string
}

/**
 * How a wait answers: once, with an error (an Error like the thrown ones) or a value. Called from
 * the event loop, or synchronously when the wait ends by a call (a shutdown, a delete).
 *
 * @since 0.1.0
 * @category models
 */
export type WaitCallback<A> = (error: unknown, value: A) => void

/**
 * A work completion as the addon reports it.
 *
 * @since 0.1.0
 * @category models
 */
export interface WaitedCompletion {
  readonly id: number
  readonly status: number
  readonly byteLength: number
  readonly opcode: number
  readonly flags: number
  readonly imm?: number
  /** On a shared receive queue's completions: the queue pair the message came on. */
  readonly qpNum?: number
}

/**
 * The addon.
 *
 * @since 0.1.0
 * @category tags
 */
export class RpmaBinding extends Context.Tag("@effect-rdma/native/RpmaBinding")<RpmaBinding, Binding>() {}

/**
 * The addon could not be loaded. `AddonNotBuilt`: there is neither a build for this machine nor a
 * prebuilt addon that fits it. `AbiMismatch`: the build was made for another Node.js (it must be
 * rebuilt with the Node.js that runs it). `LibraryMissing`: a shared library it links is not
 * installed; `library` and `debianPackage` say which. `Bundled`: a bundler copied the package away
 * from its addons (mark it external). The message says what to run.
 *
 * @since 0.1.0
 * @category errors
 */
export class NativeLoadError extends Data.TaggedError("NativeLoadError")<{
  readonly reason: "AddonNotBuilt" | "AbiMismatch" | "LibraryMissing" | "Bundled" | "Unknown"
  readonly path: string
  readonly library?: string | undefined
  readonly debianPackage?: string | undefined
  readonly cause: unknown
}> {
  override get message(): string {
    switch (this.reason) {
      case "AddonNotBuilt":
        return `the @effect-rdma/native addon is not built for this machine (${causeMessage(this.cause)}): ` +
          `install the C libraries and a compiler (\`sudo apt-get install ${Load.buildPackages}\`), then ${Load.rebuildHelp}`
      case "AbiMismatch":
        return `the @effect-rdma/native addon does not fit this Node.js: ${causeMessage(this.cause)}; ` +
          `with the Node.js that runs your program, ${Load.rebuildHelp}`
      case "LibraryMissing":
        return `the @effect-rdma/native addon needs ${this.library ?? "a shared library"}, which is not installed` +
          (this.debianPackage === undefined ?
            "" :
            `: install it with \`sudo apt-get install ${this.debianPackage}\` (the prebuilt addons need librpma0, ` +
            `librdmacm1, libibverbs1 and ibverbs-providers at run time; a build from source, the libraries it was built against)`) +
          ` (${causeMessage(this.cause)})`
      case "Bundled":
        return Load.bundledHelp
      case "Unknown":
        return `the @effect-rdma/native addon at ${this.path} failed to load: ${causeMessage(this.cause)}; ` +
          `if it is a stale or broken build, ${Load.rebuildHelp}`
    }
  }
}

const causeMessage = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

const causeCode = (cause: unknown): unknown =>
  typeof cause === "object" && cause !== null ? (cause as { readonly code?: unknown }).code : undefined

/**
 * Debian names a library's runtime package after its soname: libibverbs.so.1 → libibverbs1,
 * librpma.so.0 → librpma0, libfoo-2.so.3 → libfoo-2-3.
 */
const debianPackageOf = (soname: string): string | undefined => {
  const match = /^(lib.+?)\.so\.(\d+)/.exec(soname)
  if (match === null) return undefined
  const [, name, major] = match as unknown as [string, string, string]
  return /\d$/.test(name) ? `${name}-${major}` : `${name}${major}`
}

/** @internal */
export const classify = (path: string, cause: unknown): NativeLoadError => {
  const code = causeCode(cause)
  const message = causeMessage(cause)
  if (code === "MODULE_NOT_FOUND") return new NativeLoadError({ reason: "AddonNotBuilt", path, cause })
  if (code === "ERR_ADDON_BUNDLED") return new NativeLoadError({ reason: "Bundled", path, cause })
  if (code === "ERR_ADDON_ABI_MISMATCH") return new NativeLoadError({ reason: "AbiMismatch", path, cause })
  if (code === "ERR_DLOPEN_FAILED") {
    const missing = /([^\s:/]+\.so[.\d]*): cannot open shared object file/.exec(message)
    if (missing !== null) {
      const library = missing[1]!
      return new NativeLoadError({
        reason: "LibraryMissing",
        path,
        library,
        debianPackage: debianPackageOf(library),
        cause
      })
    }
    // Built for another Node.js ABI: a rebuild fixes it.
    if (message.includes("NODE_MODULE_VERSION")) return new NativeLoadError({ reason: "AbiMismatch", path, cause })
  }
  return new NativeLoadError({ reason: "Unknown", path, cause })
}

/**
 * Where node-gyp puts the addon when it is built on this machine: `build/Release/rpma_addon.node`
 * under the package root, the same whether this module runs from `src/` or from `dist/`. Without
 * such a build, {@link load} uses the prebuilt addon in `prebuilds/linux-x64/` if it fits.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultPath: string = join(Load.packageRoot, "build", "Release", "rpma_addon.node")

/**
 * Loads the addon at `path`; by default the one Load.resolveAddon picks (a build made on this
 * machine, else the prebuilt one for this platform and Node.js ABI). An addon built for another
 * Node.js ABI is refused (`AbiMismatch`) before it is loaded.
 *
 * @since 0.1.0
 * @category constructors
 */
export const load = (path?: string): Effect.Effect<Binding, NativeLoadError> =>
  Effect.suspend(() => {
    let resolved = path ?? defaultPath
    return Effect.try({
      try: () => {
        if (path === undefined) resolved = Load.resolveAddon()
        return Load.requireAddon(resolved) as Binding
      },
      catch: (cause) => classify(resolved, cause)
    })
  })

/**
 * The addon from {@link defaultPath}.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<RpmaBinding, NativeLoadError> = Layer.effect(RpmaBinding, Effect.suspend(() => load()))

/**
 * The addon from another path (a debug build, a prebuilt copy).
 *
 * @since 0.1.0
 * @category layers
 */
export const layerFromPath = (path: string): Layer.Layer<RpmaBinding, NativeLoadError> =>
  Layer.effect(RpmaBinding, load(path))
