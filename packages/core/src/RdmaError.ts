/**
 * Tagged errors for every failure the native libraries report, and the one function that maps
 * their codes to those errors. Every driver uses {@link fromRpmaCode} and {@link fromErrno}, so
 * the same bad input gives the same error whichever driver runs.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import { constants as osConstants } from "node:os"

interface RpmaErrorFields {
  /** The librpma function that failed, e.g. "rpma_mr_reg". */
  readonly operation: string
  /** What was wrong and, where it is known, what to do. */
  readonly detail?: string | undefined
  readonly cause?: unknown
}

const formatRpma = (e: RpmaErrorFields & { readonly code: number; readonly codeName: string }, summary: string) => {
  const head = `${e.operation} failed with ${e.codeName} (${e.code}): ${summary}`
  return e.detail === undefined ? head : `${head}: ${e.detail}`
}

/**
 * RPMA_E_UNKNOWN (-100000).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaUnknownError extends Data.TaggedError("RpmaUnknownError")<RpmaErrorFields> {
  static readonly code = -100000
  readonly code = -100000 as const
  readonly codeName = "RPMA_E_UNKNOWN" as const
  override get message(): string {
    return formatRpma(this, "unknown error")
  }
}

/**
 * RPMA_E_NOSUPP (-100001).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaNoSupportError extends Data.TaggedError("RpmaNoSupportError")<RpmaErrorFields> {
  static readonly code = -100001
  readonly code = -100001 as const
  readonly codeName = "RPMA_E_NOSUPP" as const
  override get message(): string {
    return formatRpma(this, "not supported")
  }
}

/**
 * RPMA_E_PROVIDER (-100002): the verbs provider refused, e.g. memory registration failed or no
 * RDMA device answers at an address.
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaProviderError extends Data.TaggedError("RpmaProviderError")<RpmaErrorFields> {
  static readonly code = -100002
  readonly code = -100002 as const
  readonly codeName = "RPMA_E_PROVIDER" as const
  override get message(): string {
    return formatRpma(this, "the RDMA provider refused")
  }
}

/**
 * RPMA_E_NOMEM (-100003).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaNoMemoryError extends Data.TaggedError("RpmaNoMemoryError")<RpmaErrorFields> {
  static readonly code = -100003
  readonly code = -100003 as const
  readonly codeName = "RPMA_E_NOMEM" as const
  override get message(): string {
    return formatRpma(this, "out of memory")
  }
}

/**
 * RPMA_E_INVAL (-100004): a NULL argument, a size of 0, a usage of 0 or with unknown bits, a short
 * descriptor.
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaInvalidError extends Data.TaggedError("RpmaInvalidError")<RpmaErrorFields> {
  static readonly code = -100004
  readonly code = -100004 as const
  readonly codeName = "RPMA_E_INVAL" as const
  override get message(): string {
    return formatRpma(this, "invalid argument")
  }
}

/**
 * RPMA_E_NO_COMPLETION (-100005).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaNoCompletionError extends Data.TaggedError("RpmaNoCompletionError")<RpmaErrorFields> {
  static readonly code = -100005
  readonly code = -100005 as const
  readonly codeName = "RPMA_E_NO_COMPLETION" as const
  override get message(): string {
    return formatRpma(this, "no completion available")
  }
}

/**
 * RPMA_E_NO_EVENT (-100006).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaNoEventError extends Data.TaggedError("RpmaNoEventError")<RpmaErrorFields> {
  static readonly code = -100006
  readonly code = -100006 as const
  readonly codeName = "RPMA_E_NO_EVENT" as const
  override get message(): string {
    return formatRpma(this, "no next event available")
  }
}

/**
 * RPMA_E_AGAIN (-100007).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaAgainError extends Data.TaggedError("RpmaAgainError")<RpmaErrorFields> {
  static readonly code = -100007
  readonly code = -100007 as const
  readonly codeName = "RPMA_E_AGAIN" as const
  override get message(): string {
    return formatRpma(this, "temporary error, try again")
  }
}

/**
 * RPMA_E_SHARED_CHANNEL (-100008).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaSharedChannelError extends Data.TaggedError("RpmaSharedChannelError")<RpmaErrorFields> {
  static readonly code = -100008
  readonly code = -100008 as const
  readonly codeName = "RPMA_E_SHARED_CHANNEL" as const
  override get message(): string {
    return formatRpma(this, "the completion channel is shared")
  }
}

/**
 * RPMA_E_NOT_SHARED_CHNL (-100009).
 *
 * @since 0.1.0
 * @category errors
 */
export class RpmaNotSharedChannelError extends Data.TaggedError("RpmaNotSharedChannelError")<RpmaErrorFields> {
  static readonly code = -100009
  readonly code = -100009 as const
  readonly codeName = "RPMA_E_NOT_SHARED_CHNL" as const
  override get message(): string {
    return formatRpma(this, "the completion channel is not shared")
  }
}

/**
 * Any librpma error.
 *
 * @since 0.1.0
 * @category errors
 */
export type RpmaError =
  | RpmaUnknownError
  | RpmaNoSupportError
  | RpmaProviderError
  | RpmaNoMemoryError
  | RpmaInvalidError
  | RpmaNoCompletionError
  | RpmaNoEventError
  | RpmaAgainError
  | RpmaSharedChannelError
  | RpmaNotSharedChannelError

const rpmaErrorsByCode = new Map<number, new(fields: RpmaErrorFields) => RpmaError>(
  [
    RpmaUnknownError,
    RpmaNoSupportError,
    RpmaProviderError,
    RpmaNoMemoryError,
    RpmaInvalidError,
    RpmaNoCompletionError,
    RpmaNoEventError,
    RpmaAgainError,
    RpmaSharedChannelError,
    RpmaNotSharedChannelError
  ].map((ctor) => [ctor.code, ctor])
)

/**
 * The librpma codes, by name.
 *
 * @since 0.1.0
 * @category constants
 */
export const RpmaCode = {
  RPMA_E_UNKNOWN: -100000,
  RPMA_E_NOSUPP: -100001,
  RPMA_E_PROVIDER: -100002,
  RPMA_E_NOMEM: -100003,
  RPMA_E_INVAL: -100004,
  RPMA_E_NO_COMPLETION: -100005,
  RPMA_E_NO_EVENT: -100006,
  RPMA_E_AGAIN: -100007,
  RPMA_E_SHARED_CHANNEL: -100008,
  RPMA_E_NOT_SHARED_CHNL: -100009
} as const

/**
 * The name of a librpma code.
 *
 * @since 0.1.0
 * @category models
 */
export type RpmaCodeName = keyof typeof RpmaCode

/**
 * Maps a librpma return code to its tagged error. A code librpma does not define becomes
 * RPMA_E_UNKNOWN with the raw code in the detail, so nothing is lost.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromRpmaCode = (code: number, operation: string, detail?: string, cause?: unknown): RpmaError => {
  const ctor = rpmaErrorsByCode.get(code)
  if (ctor !== undefined) return new ctor({ operation, detail, cause })
  return new RpmaUnknownError({
    operation,
    detail: `unexpected return code ${code}${detail === undefined ? "" : `: ${detail}`}`,
    cause
  })
}

/**
 * Whether a value is one of the librpma errors.
 *
 * @since 0.1.0
 * @category refinements
 */
export const isRpmaError = (u: unknown): u is RpmaError =>
  typeof u === "object" && u !== null && "_tag" in u && "code" in u &&
  rpmaErrorsByCode.get((u as { code: number }).code)?.name === (u as { _tag: string })._tag

/**
 * errno values by name, the one table core and every driver name codes with (`Errno.ETIMEDOUT`):
 * the platform's, as `node:os` has them, which on Linux are librdmacm's and the addon's.
 *
 * @since 1.0.0
 * @category constants
 */
export const Errno: typeof osConstants.errno = osConstants.errno

const errnoNames: ReadonlyMap<number, string> = new Map(
  Object.entries(Errno).map(([name, value]) => [value, name])
)

/**
 * The symbolic name of an errno value (`12` → `"ENOMEM"`).
 *
 * @since 0.1.0
 * @category getters
 */
export const errnoName = (errno: number): string => errnoNames.get(errno) ?? `E${errno}`

/**
 * A failure of librdmacm (rdma_reg_msgs, rdma_dereg_mr, rdma_create_ep, ...), which reports through
 * errno.
 *
 * @since 0.1.0
 * @category errors
 */
export class RdmaCmError extends Data.TaggedError("RdmaCmError")<{
  readonly operation: string
  readonly errno: number
  readonly errnoName: string
  readonly detail?: string | undefined
  readonly cause?: unknown
}> {
  override get message(): string {
    const head = `${this.operation} failed with ${this.errnoName} (errno ${this.errno})`
    return this.detail === undefined ? head : `${head}: ${this.detail}`
  }
}

/**
 * Maps an errno from librdmacm to its tagged error.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fromErrno = (errno: number, operation: string, detail?: string, cause?: unknown): RdmaCmError =>
  new RdmaCmError({ operation, errno, errnoName: errnoName(errno), detail, cause })

/**
 * An option a constructor cannot use (from untyped code, or a value its type allows but the
 * module does not): which module's constructor, which option, and what it takes.
 *
 * @since 1.0.0
 * @category errors
 */
export class InvalidOptionsError extends Data.TaggedError("InvalidOptionsError")<{
  readonly module: "RegistrationCache" | "RdmaClient"
  /** The function that refused it: `make` when absent. */
  readonly operation?: string | undefined
  readonly option: string
  readonly detail: string
}> {
  override get message(): string {
    return `${this.module}.${this.operation ?? "make"}: the option ${this.option} ${this.detail}`
  }
}

/**
 * A release the driver refused because something still uses the handle: a region with requests in
 * flight, a peer with regions, endpoints or connections, an rdma_cm id with regions. Unlike a
 * failed release (after which the handle is gone, as librpma frees it either way), the handle is
 * still alive and usable, and can be released once its users are gone.
 *
 * @since 1.0.0
 * @category errors
 */
export class ResourceInUseError extends Data.TaggedError("ResourceInUseError")<{
  /** The release that was refused, e.g. "rpma_peer_delete". */
  readonly operation: string
  /** What still uses the handle. */
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `${this.operation} refused: ${this.detail}; the handle is still alive`
  }
}

/**
 * Memory the library will not register, with the reason and what to use instead.
 *
 * @since 0.1.0
 * @category errors
 */
export class MemoryRefusedError extends Data.TaggedError("MemoryRefusedError")<{
  readonly reason: "SharedBufferPool" | "Detached" | "NotBytes" | "Released" | "SharedMemory" | "Resizable"
  readonly byteLength: number
}> {
  override get message(): string {
    switch (this.reason) {
      case "SharedBufferPool":
        return `a ${this.byteLength}-byte Buffer that is a slice of Node's shared Buffer pool (Buffer.allocUnsafe, ` +
          `Buffer.from and Buffer.concat use it for small sizes) cannot be registered: the registration would pin ` +
          `pages shared with unrelated Buffers, and the pool, not you, decides how long those bytes live. ` +
          `Use Buffer.alloc, new Uint8Array(size) or Memory.allocate instead`
      case "Detached":
        return "the memory's ArrayBuffer is detached (transferred): there is nothing left to register"
      case "NotBytes":
        return "memory to register must be a Uint8Array (or a Buffer)"
      case "Released":
        return "this allocation was released when its scope closed and can no longer be registered"
      case "SharedMemory":
        return "memory backed by a SharedArrayBuffer cannot be registered: another thread could hold it, and the " +
          "addon cannot keep it alive"
      case "Resizable":
        return "memory backed by a resizable ArrayBuffer cannot be registered: resizing could move or free the " +
          "pages the device points at"
    }
  }
}

/**
 * Why a file could not be mapped (or its mapping synced) by {@link Memory.mapFile}.
 *
 * @since 1.0.0
 * @category models
 */
export type MapFileReason =
  | "NotFound"
  | "PermissionDenied"
  | "SizeZero"
  | "Unaligned"
  | "OutOfRange"
  | "NotMappable"
  | "Invalid"
  | "WriteBack"
  | "Unknown"

/**
 * A file that could not be mapped, or a mapping whose writes could not be synced to its file,
 * with what to do about it.
 *
 * @since 1.0.0
 * @category errors
 */
export class MapFileError extends Data.TaggedError("MapFileError")<{
  readonly reason: MapFileReason
  /** The file or device. */
  readonly path: string
  /** The system call that failed ("open", "mmap", "msync", ...), or "mapFile" for a refused argument. */
  readonly operation: string
  /** The errno, when a system call failed. */
  readonly errno?: number | undefined
  readonly detail?: string | undefined
  readonly cause?: unknown
}> {
  override get message(): string {
    const call = this.errno === undefined ? this.operation : `${this.operation} failed with ${errnoName(this.errno)}`
    const what = this.operation === "msync"
      ? `cannot write the mapping of ${this.path} back`
      : `cannot map ${this.path}`
    const head = `${what}: ${call}${this.detail === undefined ? "" : ` (${this.detail})`}`
    switch (this.reason) {
      case "NotFound":
        return `${head}: the file does not exist; create it first, or pass create: true with a size`
      case "PermissionDenied":
        return `${head}: the file must be readable and writable by this process (a shared mapping is written ` +
          `back to it); change its mode or owner, or map a file you own`
      case "SizeZero":
        return `${head}: nothing to map; give a positive size (a device, whose size stat does not report, ` +
          `always needs one; for a device DAX read /sys/bus/dax/devices/<dax>/size)`
      case "Unaligned":
        return `${head}: the offset must be a multiple of the page size (4096), and on a device DAX the offset ` +
          `and size a multiple of its alignment (/sys/bus/dax/devices/<dax>/align, usually 2 MiB)`
      case "OutOfRange":
        return `${head}: the range passes the end of the file, where a mapping would fault (SIGBUS); ` +
          `map less, or grow the file first (truncate -s)`
      case "NotMappable":
        return `${head}: only a regular file or a character or block device can be mapped`
      case "Invalid":
        return `${head}: check the options (path a non-empty string, offset and size non-negative integers)`
      case "WriteBack":
        return `${head}: some writes may not have reached the file; check its file system and storage ` +
          `(the kernel log tells), and do not trust the file's contents until they are checked`
      case "Unknown":
        return head
    }
  }
}

const mapFileReasons: ReadonlySet<string> = new Set<MapFileReason>([
  "NotFound",
  "PermissionDenied",
  "SizeZero",
  "Unaligned",
  "OutOfRange",
  "NotMappable",
  "Invalid",
  "WriteBack",
  "Unknown"
])

/**
 * The one mapping of a mapping's failures: a reason a driver already decided, else one read from
 * the errno (ENOENT and ENOTDIR: NotFound; EACCES, EPERM and EROFS: PermissionDenied; EISDIR and
 * ENODEV: NotMappable; EINVAL: Invalid); any failure of msync is WriteBack.
 *
 * @since 1.0.0
 * @category constructors
 */
export const mapFileError = (fields: {
  readonly path: string
  readonly operation: string
  readonly errno?: number | undefined
  readonly reason?: string | undefined
  readonly detail?: string | undefined
  readonly cause?: unknown
}): MapFileError => {
  const name = fields.errno === undefined ? undefined : errnoName(fields.errno)
  const reason: MapFileReason = fields.reason !== undefined && mapFileReasons.has(fields.reason)
    ? fields.reason as MapFileReason
    : fields.operation === "msync"
    ? "WriteBack"
    : name === "ENOENT" || name === "ENOTDIR"
    ? "NotFound"
    : name === "EACCES" || name === "EPERM" || name === "EROFS"
    ? "PermissionDenied"
    : name === "EISDIR" || name === "ENODEV"
    ? "NotMappable"
    : name === "EINVAL"
    ? "Invalid"
    : "Unknown"
  return new MapFileError({ ...fields, reason })
}

const wcStatusNames = [
  "IBV_WC_SUCCESS",
  "IBV_WC_LOC_LEN_ERR",
  "IBV_WC_LOC_QP_OP_ERR",
  "IBV_WC_LOC_EEC_OP_ERR",
  "IBV_WC_LOC_PROT_ERR",
  "IBV_WC_WR_FLUSH_ERR",
  "IBV_WC_MW_BIND_ERR",
  "IBV_WC_BAD_RESP_ERR",
  "IBV_WC_LOC_ACCESS_ERR",
  "IBV_WC_REM_INV_REQ_ERR",
  "IBV_WC_REM_ACCESS_ERR",
  "IBV_WC_REM_OP_ERR",
  "IBV_WC_RETRY_EXC_ERR",
  "IBV_WC_RNR_RETRY_EXC_ERR",
  "IBV_WC_LOC_RDD_VIOL_ERR",
  "IBV_WC_REM_INV_RD_REQ_ERR",
  "IBV_WC_REM_ABORT_ERR",
  "IBV_WC_INV_EECN_ERR",
  "IBV_WC_INV_EEC_STATE_ERR",
  "IBV_WC_FATAL_ERR",
  "IBV_WC_RESP_TIMEOUT_ERR",
  "IBV_WC_GENERAL_ERR"
] as const

/**
 * The values of `enum ibv_wc_status` this library names.
 *
 * @since 0.1.0
 * @category constants
 */
export const WcStatus = {
  SUCCESS: 0,
  LOC_LEN_ERR: 1,
  LOC_PROT_ERR: 4,
  WR_FLUSH_ERR: 5,
  REM_INV_REQ_ERR: 9,
  REM_ACCESS_ERR: 10,
  REM_OP_ERR: 11,
  RETRY_EXC_ERR: 12,
  RNR_RETRY_EXC_ERR: 13
} as const

/**
 * The name of a work-completion status (`10` → `"IBV_WC_REM_ACCESS_ERR"`).
 *
 * @since 0.1.0
 * @category getters
 */
export const wcStatusName = (status: number): string => wcStatusNames[status] ?? `IBV_WC_STATUS_${status}`

const wcHints: Partial<Record<number, string>> = {
  1: "the received message is longer than the posted receive buffer",
  4: "the local region is not registered for this operation, or belongs to another peer",
  5: "the connection went into the error state before this request ran (an earlier request failed, or it closed)",
  10: "the remote region refused: wrong rkey, out of its bounds, or not registered for this access",
  12: "the remote side did not answer (transport retries exhausted)",
  13: "the remote side had no receive posted (receiver-not-ready retries exhausted)"
}

/**
 * An operation was posted but its work completion reports a failure.
 *
 * @since 0.1.0
 * @category errors
 */
export class CompletionError extends Data.TaggedError("CompletionError")<{
  /** "rpma_write", "rpma_read", ... */
  readonly operation: string
  /** The `enum ibv_wc_status` value. */
  readonly status: number
}> {
  /** The status's name, e.g. "IBV_WC_REM_ACCESS_ERR". */
  get statusName(): string {
    return wcStatusName(this.status)
  }
  override get message(): string {
    const hint = wcHints[this.status]
    return `${this.operation} completed with ${this.statusName} (${this.status})${
      hint === undefined ? "" : `: ${hint}`
    }`
  }
}
