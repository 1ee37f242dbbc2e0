/**
 * A window of work requests in one addon call (post_window.cc's postWindow): each plain write,
 * read, send and receive is read here, through JavaScript's inline caches, and packed as numbers,
 * where the addon's post reads eleven fields per request through napi. At the first request that
 * is not plain (a flush, an atomic write, a field of another type, a getter that throws) it and
 * those after it go through `post`, one call each, whose checks and refusals are the addon's own.
 */
import type { Binding } from "../RpmaBinding.js"
import { type Poster, postFrom } from "./posting.js"

/** post_window.cc's Field: the numbers of one request. */
const FIELDS = 9
/** Requests per call: a longer list takes several. */
const WINDOW = 32
const ON_ERROR = 1
const WITH_IMM = 2

/** post_window.cc's op codes; -1 for any other op. */
const opCode = (op: unknown): number =>
  op === "write" ? 0 : op === "read" ? 1 : op === "send" ? 2 : op === "recv" ? 3 : -1

export interface Windows {
  /** Posts `requests` on `queue` in order up to the first refusal. */
  readonly post: <R, E>(
    queue: unknown,
    requests: ReadonlyArray<unknown>,
    poster: Poster<R, E>
  ) => { readonly posted: number; readonly error: E | undefined }
}

/** One driver's windows: one array of numbers and one of regions, reused by every call. */
export const makeWindows = (binding: Binding): Windows => {
  const fields = new Float64Array(WINDOW * FIELDS)
  // A window's regions (usually one or two), new for each: emptying one kept array costs more.
  let regions: Array<object> = []
  // A getter run while a window is packed (or a setter while the addon makes a refusal) may post
  // on this driver: that post goes one by one, leaving the arrays to the window under way.
  let packing = false

  // Its first two, where most of its requests find theirs without a call; `none` matches no request's.
  const none = {}
  let first: unknown = none
  let second: unknown = none
  const regionOf = (handle: unknown): number => {
    if (typeof handle !== "object" || handle === null) return -1
    for (let at = 0; at < regions.length; at++) if (regions[at] === handle) return at
    if (regions.length === 0) first = handle
    else if (regions.length === 1) second = handle
    return regions.push(handle) - 1
  }

  /** Packs `request` at slot `n`: false if it is not a plain request of one of the four ops. */
  const pack = (request: unknown, n: number): boolean => {
    if (typeof request !== "object" || request === null) return false
    const r = request as Record<string, unknown>
    const op = opCode(r.op)
    if (op < 0) return false
    // Every field post reads, in its order: a throwing getter leaves the request to post.
    const { completion, dst, dstOffset, id, imm, length, offset, src, srcOffset } = r
    if (r.type !== undefined || r.value !== undefined) return false
    const flags = (completion === "onError" ? ON_ERROR : completion === undefined || completion === "always" ? 0 : -1) +
      (imm === undefined ? 0 : typeof imm === "number" ? WITH_IMM : -4)
    if (flags < 0 || typeof id !== "number" || typeof length !== "number") return false
    // A write's and a read's regions are dst and src; a send's is src, a receive's dst, each at `offset`.
    const plain = op <= 1
    const dstAt = op === 2 ? 0 : dst === first ? 0 : dst === second ? 1 : regionOf(dst)
    const srcAt = op === 3 ? 0 : src === first ? 0 : src === second ? 1 : regionOf(src)
    const dstAtOffset = plain ? dstOffset : op === 3 ? offset : 0
    const srcAtOffset = plain ? srcOffset : op === 2 ? offset : 0
    if (dstAt < 0 || srcAt < 0 || typeof dstAtOffset !== "number" || typeof srcAtOffset !== "number") return false
    const at = n * FIELDS
    fields[at] = op
    fields[at + 1] = id
    fields[at + 2] = dstAt
    fields[at + 3] = dstAtOffset
    fields[at + 4] = srcAt
    fields[at + 5] = srcAtOffset
    fields[at + 6] = length
    fields[at + 7] = flags
    fields[at + 8] = typeof imm === "number" ? imm : 0
    return true
  }

  const post = <R, E>(
    queue: unknown,
    requests: ReadonlyArray<unknown>,
    poster: Poster<R, E>
  ): { readonly posted: number; readonly error: E | undefined } => {
    if (packing || typeof binding.postWindow !== "function") return postFrom(requests, 0, poster)
    let posted = 0
    for (;;) {
      let n = 0
      packing = true
      try {
        regions = []
        first = none
        second = none
        while (n < WINDOW && posted + n < requests.length && pack(requests[posted + n], n)) n++
      } catch {
        // A getter or a Proxy trap threw: post reads the request again and refuses it.
      } finally {
        packing = false
      }
      if (n === 0) break
      let answer: number
      packing = true // a refusal's error may run JavaScript (a setter) that posts on this driver
      try {
        answer = binding.postWindow(queue, regions, fields, n)
      } catch (cause) {
        const before = (cause as { readonly posted?: unknown } | null)?.posted
        posted += typeof before === "number" && Number.isInteger(before) && before >= 0 && before < n ? before : 0
        let refused: R
        try {
          refused = requests[posted] as R
        } catch {
          return { posted, error: poster.notAList() }
        }
        return { posted, error: poster.refused(refused, cause) }
      } finally {
        packing = false
      }
      // -1: not a connection (a shared receive queue, a connection request): post each.
      if (answer < 0) break
      posted += n
      if (n < WINDOW) break
    }
    return postFrom(requests, posted, poster)
  }
  return { post }
}
