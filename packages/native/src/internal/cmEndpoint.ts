/**
 * The native driver's endpoints of librdmacm's verbs API (the addon's cm_ep.cc, cm_ep_post.cc):
 * endpoints with a queue pair, listeners and their requests, the set-up waits (bounded here by
 * their timeouts), the posting call and the completions. Every wait is the addon's (a Poller on a
 * channel), stopped by cmCancel when its fiber is interrupted.
 */
import { RdmaError } from "@effect-rdma/core"
import { Arguments, type Model } from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { promises as dns } from "node:dns"
import { isIP } from "node:net"
import type { Binding, WaitCallback } from "../RpmaBinding.js"
import { as, attempt, cm } from "./addon.js"
import { cmErrorOrThrow, cmExit, cmFailure, inUseOr } from "./failures.js"
import { type LoopTurns, makeLoopTurns } from "./loopTurns.js"
import { CM_FIELDS, packedArray, readPacked } from "./packedCompletions.js"
import { afterPosting, armOnce, postInOrder } from "./posting.js"

const { EADDRNOTAVAIL, EINVAL, ETIMEDOUT } = RdmaError.Errno
/** How long a name's resolution may take (the addon takes numeric addresses only). */
const NAME_RESOLUTION_MS = 5_000

const invalid = (operation: string, detail: string): RdmaError.RdmaCmError =>
  RdmaError.fromErrno(EINVAL, operation, detail)

/** A timeout in milliseconds: a non-negative integer, as the addon takes it. */
const timeoutOf = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= 2_147_483_647 ? value : undefined

/** `effect` failed with ETIMEDOUT once `ms` have passed (its wait then stops: cmCancel, or the endpoint is destroyed). */
const within = (ms: number, operation: string) => <A>(effect: Effect.Effect<A, RdmaError.RdmaCmError>) =>
  Effect.timeoutFail(effect, {
    duration: Duration.millis(ms),
    onTimeout: () => RdmaError.fromErrno(ETIMEDOUT, operation, `no answer within ${ms} ms`)
  })

/**
 * The addon takes numeric addresses only (it never waits for a name server): a name is resolved
 * here first, bounded. Anything else goes to the addon as it is, to be refused there.
 */
const numeric = (address: unknown, operation: string): Effect.Effect<unknown, RdmaError.RdmaCmError> =>
  typeof address !== "string" || address === "" || isIP(address) !== 0
    ? Effect.succeed(address)
    : Effect.tryPromise({
      try: () => dns.lookup(address),
      catch: (cause) => RdmaError.fromErrno(EADDRNOTAVAIL, operation, `cannot resolve ${address}`, cause)
    }).pipe(
      Effect.map((found) => found.address),
      within(NAME_RESOLUTION_MS, operation)
    )

/** Releases a handle the caller will never see (an interrupted or failed set-up); never throws. */
const destroyQuietly = (binding: Binding, handle: unknown) => {
  try {
    binding.cmEpDestroy(handle)
  } catch {
    // Already destroyed.
  }
}

/** A wait in the addon as an interruptible Effect; interruption stops it (cmCancel). */
const cmWait = <A>(
  binding: Binding,
  operation: string,
  handle: unknown,
  start: (callback: WaitCallback<A>) => number
): Effect.Effect<A, RdmaError.RdmaCmError> =>
  Effect.async<A, RdmaError.RdmaCmError>((resume) => {
    let done = false
    let id: number | undefined
    try {
      id = start((error, value) => {
        if (done) return
        done = true
        resume(error === undefined || error === null ? Effect.succeed(value) : cmFailure(operation)(error))
      })
    } catch (cause) {
      if (!done) resume(cmFailure(operation)(cause))
      done = true
      return
    }
    return Effect.sync(() => {
      if (done) return
      done = true
      if (id !== undefined) binding.cmCancel(handle, id)
    })
  })

/** rdma_create_ep's resolution, bounded: address then route, each within the config's timeout. */
const createEndpoint = (binding: Binding, address: unknown, port: unknown, config: unknown) =>
  Effect.async<Model.CmEpHandle, RdmaError.RdmaCmError>((resume) => {
    let done = false
    let handle: object | undefined
    try {
      handle = binding.cmEpCreate(address, port, config, (error) => {
        if (done) return
        done = true
        if (error === undefined || error === null) return resume(Effect.succeed(as<Model.CmEpHandle>(handle!)))
        destroyQuietly(binding, handle)
        resume(cmFailure("rdma_create_ep")(error))
      })
    } catch (cause) {
      done = true
      return resume(cmFailure("rdma_create_ep")(cause))
    }
    return Effect.sync(() => {
      if (done) return
      done = true
      destroyQuietly(binding, handle)
    })
  })

/**
 * ibv_poll_cq on both of the endpoint's CQs, the completions read as numbers (cmPollPacked) and
 * made objects in JavaScript (packedCompletions.ts). `into` is the driver's one array.
 */
const pollPacked = (
  binding: Binding,
  ep: Model.CmEpHandle,
  into: Float64Array,
  first: number = binding.cmPollPacked(ep, into)
): ReadonlyArray<Model.Completion> => readPacked(into, CM_FIELDS, first, binding, ep, pollAgain) ?? NONE

const NONE: ReadonlyArray<Model.Completion> = []

/** A full array's rest, read without waiting. */
const pollAgain = (binding: Binding, ep: unknown, into: Float64Array): number => binding.cmPollPacked(ep, into)

const postOperations = {
  send: "rdma_post_send",
  recv: "rdma_post_recv",
  read: "rdma_post_read",
  write: "rdma_post_write"
}

/** The operation a work request names, for a failure the addon did not name; never throws. */
const operationOf = (request: Model.CmWorkRequest): string => {
  try {
    const op: unknown = typeof request === "object" && request !== null ? request.op : undefined
    return typeof op === "string" && Object.hasOwn(postOperations, op)
      ? postOperations[op as keyof typeof postOperations]
      : "rdma_post_send"
  } catch {
    return "rdma_post_send"
  }
}

/**
 * Posts one request: one of a single segment field by field (cmPostOne), since JavaScript reads the
 * fields through its inline caches where the addon would look each one up (napi_get_property);
 * any other shape, or one whose fields cannot be read, through cmPost, whose checks, order and
 * messages are the same. A refusal is thrown, as cmPost's.
 */
const postOne = (binding: Binding, ep: Model.CmEpHandle, request: Model.CmWorkRequest): void => {
  let op, id, mr, offset, length, imm, inline, completion, remoteAddress, rkey: unknown
  let single = false
  try {
    const segments = request.segments
    const one: Partial<Record<string, unknown>> | undefined = Array.isArray(segments) && segments.length === 1
      ? segments[0]
      : undefined
    if (typeof one === "object" && one !== null) {
      ;({ length, mr, offset } = one)
      ;({ completion, id, imm, inline, op, remoteAddress, rkey } = request as Partial<Record<string, unknown>>)
      single = true
    }
  } catch {
    // A getter or a Proxy that throws: cmPost reads the request again and refuses it.
    single = false
  }
  if (single) binding.cmPostOne(ep, op, id, mr, offset, length, imm, inline, completion, remoteAddress, rkey)
  else binding.cmPost(ep, request)
}

/** Requests a cmPostWindow call takes at most (a longer list goes in several). */
const WINDOW = 64
/** Numbers a request in cmPostWindow's fields. */
const WINDOW_FIELDS = 8
const MAX_ADDRESS = 2n ** 64n - 1n
/** cmPostWindow's op codes (send 0, recv 1, read 2, write 3); -1 for anything else. Compared, not looked up by name. */
const opCodeOf = (op: unknown): number =>
  op === "write" ? 3 : op === "send" ? 0 : op === "recv" ? 1 : op === "read" ? 2 : -1
const opNames = ["rdma_post_send", "rdma_post_recv", "rdma_post_read", "rdma_post_write"] as const

/** One driver's arrays for cmPostWindow, filled anew by each call (nothing allocated per call). */
interface Window {
  readonly fields: Float64Array
  readonly remotes: BigUint64Array
  /** The regions the packed requests name, each once; emptied after each call. */
  readonly regions: Array<unknown>
  /**
   * A window is being packed or posted: a post that a getter (or a refusal's error, whose
   * properties a setter on Object.prototype sees) starts meanwhile goes one by one, leaving these
   * arrays to the window under way.
   */
  busy: boolean
}

const makeWindow = (): Window => ({
  fields: new Float64Array(WINDOW * WINDOW_FIELDS),
  remotes: new BigUint64Array(WINDOW),
  regions: [],
  busy: false
})

/**
 * Packs requests `from`.. of `requests` into `w`, up to WINDOW and the list's `end`: those of one
 * segment on a region whose fields have the types the addon takes (whose refusals the addon words
 * as cmPostOne's: a NaN offset is packed, a string is not). Stops at the first it cannot pack (a
 * throwing getter, several segments, plain bytes, other types): it and the rest go one by one.
 * Returns how many it packed; never throws.
 */
const pack = (w: Window, requests: ReadonlyArray<Model.CmWorkRequest>, from: number, end: number): number => {
  const { fields, regions, remotes } = w
  let n = 0
  for (const last = Math.min(end, from + WINDOW); from + n < last; n++) {
    let op, id, mr, offset, length, imm, inline, completion, remoteAddress, rkey: unknown
    try {
      const request = requests[from + n] as Partial<Record<string, unknown>>
      const segments = request.segments
      if (!Array.isArray(segments) || segments.length !== 1) break
      ;({ length, mr, offset } = segments[0] as Partial<Record<string, unknown>>)
      ;({ completion, id, imm, inline, op, remoteAddress, rkey } = request)
    } catch {
      break
    }
    const code = opCodeOf(op)
    if (
      code < 0 || typeof id !== "number" || typeof mr !== "object" || mr === null || ArrayBuffer.isView(mr) ||
      typeof offset !== "number" || typeof length !== "number" || (imm !== undefined && typeof imm !== "number") ||
      (inline !== undefined && typeof inline !== "boolean") ||
      (completion !== undefined && completion !== "always" && completion !== "onError")
    ) break
    if (code >= 2) {
      if (typeof remoteAddress !== "bigint" || remoteAddress < 0n || remoteAddress > MAX_ADDRESS) break
      if (typeof rkey !== "number") break
      remotes[n] = remoteAddress
    }
    let region = 0
    while (region < regions.length && regions[region] !== mr) region++
    if (region === regions.length) regions.push(mr)
    const at = n * WINDOW_FIELDS
    fields[at] = code
    fields[at + 1] = id
    fields[at + 2] = region
    fields[at + 3] = offset
    fields[at + 4] = length
    fields[at + 5] = (completion === "onError" ? 0 : 1) | (inline === true ? 2 : 0) | (imm === undefined ? 0 : 4)
    fields[at + 6] = imm === undefined ? 0 : imm as number
    fields[at + 7] = code >= 2 ? rkey as number : 0
  }
  return n
}

/**
 * cmPostMany: in order, each request posted or refused as {@link postOne} does, the first refusal
 * ending the list. A list of two or more goes in windows (cmPostWindow: one addon call for up to
 * WINDOW requests, each run of one queue's requests in one post, where each request took a call and,
 * on Soft-RoCE, a system call of its own) from its head up to its first request that cannot be
 * packed; that one and the rest are posted one by one. One request keeps its one call (cmPostOne).
 */
const postList = (
  binding: Binding,
  ep: Model.CmEpHandle,
  requests: ReadonlyArray<Model.CmWorkRequest>,
  loop: LoopTurns,
  completions: Float64Array,
  w: Window
): Model.PostOutcome<RdmaError.RdmaCmError> => {
  const poster = {
    post: (request: Model.CmWorkRequest) => postOne(binding, ep, request),
    poll: () => pollPacked(binding, ep, completions),
    refused: (request: Model.CmWorkRequest, cause: unknown) => cmErrorOrThrow(operationOf(request), cause),
    pollFailed: (cause: unknown) => cmErrorOrThrow("ibv_poll_cq", cause),
    notAList
  }
  let count: number
  try {
    count = Array.isArray(requests) ? requests.length : 0
  } catch {
    count = 0
  }
  if (count < 2 || w.busy) return postInOrder<Model.CmWorkRequest, RdmaError.RdmaCmError>(requests, poster, loop)
  let posted = 0
  let error: RdmaError.RdmaCmError | undefined
  w.busy = true
  try {
    for (let packed = WINDOW; packed === WINDOW && posted < count && error === undefined;) {
      packed = pack(w, requests, posted, count)
      if (packed === 0) break
      try {
        posted += binding.cmPostWindow(ep, w.regions, w.fields, packed, w.remotes)
      } catch (cause) {
        // The first refusal: those before it are posted, it and the rest are not.
        const before = (cause as { readonly posted?: unknown } | null)?.posted
        const n = typeof before === "number" && Number.isInteger(before) && before >= 0 && before < packed ? before : 0
        error = cmErrorOrThrow(opNames[w.fields[n * WINDOW_FIELDS]!] ?? "rdma_post_send", cause)
        posted += n
      } finally {
        w.regions.length = 0 // holds no handle past the call
      }
    }
  } finally {
    w.busy = false
  }
  if (posted === 0 && error === undefined) {
    return postInOrder<Model.CmWorkRequest, RdmaError.RdmaCmError>(requests, poster, loop)
  }
  if (error === undefined && posted < count) {
    let rest: ReadonlyArray<Model.CmWorkRequest> | undefined
    try {
      rest = requests.slice(posted)
    } catch {
      error = notAList()
    }
    if (rest !== undefined) {
      const outcome = postInOrder<Model.CmWorkRequest, RdmaError.RdmaCmError>(rest, poster, loop)
      if (outcome.posted > 0) {
        return {
          posted: posted + outcome.posted,
          error: outcome.error,
          ready: outcome.ready,
          queueError: outcome.queueError,
          turnDue: outcome.turnDue
        }
      }
      // Nothing of the rest was posted, and so nothing polled: the windows' completions are polled below.
      error = outcome.error
    }
  }
  return afterPosting(posted, error, poster, loop)
}

const notAList = () => invalid("rdma_post_send", "the requests must be an array of work requests")

/** Private data refused by core's rule before the addon sees it (rdma_cm answers a bare EINVAL). */
const checkPrivateData = (privateData: unknown, side: "connect" | "accept", operation: string) => {
  const refused = Arguments.privateData(privateData, side)
  return refused === undefined ? Effect.void : Effect.fail(invalid(operation, refused))
}

const checkTimeout = (timeoutMs: unknown, operation: string) => {
  const ms = timeoutOf(timeoutMs)
  return ms === undefined
    ? Effect.fail(invalid(operation, `timeoutMs must be an integer from 0 to 2147483647, not ${String(timeoutMs)}`))
    : Effect.succeed(ms)
}

/**
 * rdma_connect or rdma_accept: its private data and timeout checked, then its wait on the
 * endpoint's channel, bounded by the timeout.
 */
const handshake = (
  binding: Binding,
  ep: Model.CmEpHandle,
  privateData: unknown,
  timeoutMs: unknown,
  side: "connect" | "accept",
  operation: string,
  start: (callback: WaitCallback<unknown>) => number
) =>
  Effect.zipRight(
    checkPrivateData(privateData, side, operation),
    Effect.flatMap(checkTimeout(timeoutMs, operation), (ms) =>
      cmWait<unknown>(binding, operation, ep, start).pipe(
        within(ms, operation),
        Effect.asVoid
      ))
  )

export const cmEndpointCalls = (
  binding: Binding,
  loop: LoopTurns = makeLoopTurns()
): Model.CmEndpointCalls => {
  const completions = packedArray(CM_FIELDS)
  const packing = makeWindow()
  return {
    // Two resolutions, each bounded by the kernel with the config's timeout; the overall bound is a
    // backstop in case an event never comes.
    cmEpCreate: (address, port, config) =>
      numeric(address, "rdma_getaddrinfo").pipe(
        Effect.flatMap((resolved) => {
          let ms = 0
          try {
            ms = timeoutOf(typeof config === "object" && config !== null ? config.timeoutMs : undefined) ?? 0
          } catch {
            // A hostile config: the addon refuses it.
          }
          return createEndpoint(binding, resolved, port, config).pipe(within(2 * ms + 1_000, "rdma_resolve_route"))
        })
      ),
    cmConnect: (ep, privateData, timeoutMs) =>
      handshake(
        binding,
        ep,
        privateData,
        timeoutMs,
        "connect",
        "rdma_connect",
        (callback) => binding.cmConnect(ep, privateData, callback)
      ),
    cmListen: (address, port, config) =>
      numeric(address, "rdma_getaddrinfo").pipe(
        Effect.flatMap((resolved) =>
          cm("rdma_listen", () => {
            const listening = binding.cmListen(resolved, port, config)
            return { handle: as<Model.CmListenerHandle>(listening.handle), port: listening.port }
          })
        )
      ),
    cmGetRequest: (listener) =>
      cmWait<object>(binding, "rdma_get_request", listener, (callback) => binding.cmGetRequest(listener, callback))
        .pipe(
          Effect.map(as<Model.CmEpHandle>)
        ),
    cmPrivateData: (ep) => cm("rdma_cm private data", () => binding.cmPrivateData(ep)),
    cmAccept: (ep, privateData, timeoutMs) =>
      handshake(
        binding,
        ep,
        privateData,
        timeoutMs,
        "accept",
        "rdma_accept",
        (callback) => binding.cmAccept(ep, privateData, callback)
      ),
    cmReject: (ep, privateData) => cm("rdma_reject", () => binding.cmReject(ep, privateData)),
    cmNextEvent: (ep) =>
      cmWait<string>(binding, "rdma_get_cm_event", ep, (callback) => binding.cmNextEvent(ep, callback)).pipe(
        Effect.map((event) => event as Model.CmEvent)
      ),
    cmDisconnect: (ep) => cm("rdma_disconnect", () => binding.cmDisconnect(ep)),
    cmEpDestroy: (ep) =>
      attempt(() => binding.cmEpDestroy(ep), inUseOr("rdma_destroy_ep", cmFailure("rdma_destroy_ep"))),
    cmListenerDestroy: (listener) =>
      attempt(() => binding.cmListenerDestroy(listener), inUseOr("rdma_destroy_ep", cmFailure("rdma_destroy_ep"))),
    cmEpInfo: (ep) => cm("rdma_cm endpoint", () => binding.cmEpInfo(ep)),
    cmPostMany: (ep, requests): Model.PostOutcome<RdmaError.RdmaCmError> =>
      postList(binding, ep, requests, loop, completions, packing),
    cmPollCompletions: (ep) =>
      Effect.zipRight(
        loop.fair,
        cm("ibv_poll_cq", (): ReadonlyArray<Model.Completion> => pollPacked(binding, ep, completions))
      ),
    // The spin's first read waits up to the budget; a full array's rest is read without waiting.
    cmSpinCompletions: (ep, budgetNs) => {
      try {
        return Exit.succeed(
          pollPacked(binding, ep, completions, binding.cmSpinPacked(ep, completions, budgetNs))
        )
      } catch (cause) {
        return cmExit("ibv_poll_cq", cause)
      }
    },
    // Packed, the callback reads the driver's array at once: nothing else runs in between.
    cmArmCompletions: (ep, onReady: Model.CompletionsReady<RdmaError.RdmaCmError>) =>
      armOnce(
        (callback: WaitCallback<ReadonlyArray<Model.Completion>>) =>
          typeof binding.cmWaitPacked !== "function"
            ? binding.cmWaitCompletions(ep, callback)
            : binding.cmWaitPacked(ep, completions, (error, count) =>
              error !== undefined && error !== null
                ? callback(error, NONE)
                : callback(null, pollPacked(binding, ep, completions, count!))),
        (id) => binding.cmCancel(ep, id),
        (cause) => cmExit("ibv_get_cq_event", cause),
        onReady
      )
  }
}
