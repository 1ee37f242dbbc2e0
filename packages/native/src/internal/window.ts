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
  /**
   * Posts `requests` on `queue` in order up to the first refusal; `posterOf` is
   * called only when a request goes one by one or is refused (a list the windows post whole needs none).
   */
  readonly post: <R, E>(
    queue: unknown,
    requests: ReadonlyArray<unknown>,
    posterOf: (queue: unknown) => Poster<R, E>
  ) => { readonly posted: number; readonly error: E | undefined }
}

/** One driver's windows: one array of numbers, reused by every call. */
export const makeWindows = (binding: Binding): Windows => {
  const fields = new Float64Array(WINDOW * FIELDS)
  // A getter run while a window is packed (or a setter while the addon makes a refusal) may post
  // on this driver: that post goes one by one, leaving the arrays to the window under way.
  let packing = false

  // A window's regions: its first two (most windows name no other), kept in the packing loop's
  // own variables where its requests find theirs, and any more in `more`. The two are handed over
  // in one of two kept arrays, filled for the call and emptied after it (they hold no region
  // between calls): a new array a window cost more.
  const none = {}
  let more: Array<unknown> | undefined
  const one: Array<unknown> = [none]
  const two: Array<unknown> = [none, none]
  /** The index of a window's third or later region, added if new. */
  const moreAt = (handle: unknown, first: unknown, second: unknown): number => {
    if (more === undefined) more = [first, second]
    for (let at = 2; at < more.length; at++) if (more[at] === handle) return at
    return more.push(handle) - 1
  }

  const post = <R, E>(
    queue: unknown,
    requests: ReadonlyArray<unknown>,
    posterOf: (queue: unknown) => Poster<R, E>
  ): { readonly posted: number; readonly error: E | undefined } => {
    if (packing || typeof binding.postWindow !== "function") return postFrom(requests, 0, posterOf(queue))
    let posted = 0
    const f = fields
    // `unset` matches no request's region.
    const unset = none
    let first: unknown = unset
    let second: unknown = unset
    for (;;) {
      let n = 0
      // The list ended inside this window (read as the loop went): nothing is left after it.
      let ended = false
      packing = true
      try {
        first = unset
        second = unset
        more = undefined
        // Each request packed here, not in a function of its own: V8 does not inline one this
        // large, and its call cost about as much as the packing.
        for (; n < WINDOW; n++) {
          if (posted + n >= requests.length) {
            ended = true
            break
          }
          const request: unknown = requests[posted + n]
          // A plain request of one of the four ops, else it and those after it go through post.
          if (typeof request !== "object" || request === null) break
          const r = request as Record<string, unknown>
          const op = opCode(r.op)
          if (op < 0) break
          // Every field post reads, in its order: a throwing getter leaves the request to post.
          const { completion, dst, dstOffset, id, imm, length, offset, src, srcOffset } = r
          if (r.type !== undefined || r.value !== undefined) break
          const flags =
            (completion === "onError" ? ON_ERROR : completion === undefined || completion === "always" ? 0 : -1) +
            (imm === undefined ? 0 : typeof imm === "number" ? WITH_IMM : -4)
          if (flags < 0 || typeof id !== "number" || typeof length !== "number") break
          // A write's and a read's regions are dst and src; a send's is src, a receive's dst, each at `offset`.
          const plain = op <= 1
          // Each region's index, a new one added (even for a request then not packed, as before).
          let dstAt = 0
          if (op !== 2 && dst !== first) {
            if (dst === second) dstAt = 1
            else if (typeof dst !== "object" || dst === null) dstAt = -1
            else if (first === unset) first = dst
            else if (second === unset) {
              second = dst
              dstAt = 1
            } else dstAt = moreAt(dst, first, second)
          }
          let srcAt = 0
          if (op !== 3 && src !== first) {
            if (src === second) srcAt = 1
            else if (typeof src !== "object" || src === null) srcAt = -1
            else if (first === unset) first = src
            else if (second === unset) {
              second = src
              srcAt = 1
            } else srcAt = moreAt(src, first, second)
          }
          const dstAtOffset = plain ? dstOffset : op === 3 ? offset : 0
          const srcAtOffset = plain ? srcOffset : op === 2 ? offset : 0
          if (dstAt < 0 || srcAt < 0 || typeof dstAtOffset !== "number" || typeof srcAtOffset !== "number") break
          const at = n * FIELDS
          f[at] = op
          f[at + 1] = id
          f[at + 2] = dstAt
          f[at + 3] = dstAtOffset
          f[at + 4] = srcAt
          f[at + 5] = srcAtOffset
          f[at + 6] = length
          f[at + 7] = flags
          f[at + 8] = typeof imm === "number" ? imm : 0
        }
      } catch {
        // A getter or a Proxy trap threw: post reads the request again and refuses it.
      } finally {
        packing = false
      }
      if (n === 0) break
      let answer: number
      packing = true // a refusal's error may run JavaScript (a setter) that posts on this driver
      const regions = more ?? (second === unset ? (one[0] = first, one) : (two[0] = first, two[1] = second, two))
      try {
        answer = binding.postWindow(queue, regions, f, n)
      } catch (cause) {
        const before = (cause as { readonly posted?: unknown } | null)?.posted
        posted += typeof before === "number" && Number.isInteger(before) && before >= 0 && before < n ? before : 0
        let refused: R
        try {
          refused = requests[posted] as R
        } catch {
          return { posted, error: posterOf(queue).notAList() }
        }
        return { posted, error: posterOf(queue).refused(refused, cause) }
      } finally {
        packing = false
        one[0] = two[0] = two[1] = none
      }
      // -1: not a connection (a shared receive queue, a connection request): post each.
      if (answer < 0) break
      posted += n
      if (ended) return { posted, error: undefined }
      if (n < WINDOW) break
    }
    return postFrom(requests, posted, posterOf(queue))
  }
  return { post }
}
