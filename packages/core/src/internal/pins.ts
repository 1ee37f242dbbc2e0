/**
 * Memory that a device may reach. While a registration lives, its memory is held here, so that it
 * stays alive even when the caller drops every reference; when a release fails, the memory moves
 * to `quarantine` for the life of the process, because the device may still point at it.
 *
 * @internal
 */

const pinned = new Map<ArrayBufferLike, number>()
const quarantined = new Set<Uint8Array>()

/** @internal */
export const pin = (memory: Uint8Array): void => {
  pinned.set(memory.buffer, (pinned.get(memory.buffer) ?? 0) + 1)
}

/** @internal */
export const unpin = (memory: Uint8Array): void => {
  const count = pinned.get(memory.buffer) ?? 0
  if (count <= 1) pinned.delete(memory.buffer)
  else pinned.set(memory.buffer, count - 1)
}

/** @internal Keeps memory alive for good: a failed release may have left the device pointing at it. */
export const quarantine = (memory: Uint8Array): void => {
  unpin(memory)
  quarantined.add(memory)
}

/** @internal Whether any registration, live or failed to release, covers this memory's buffer. */
export const isReachableByDevice = (memory: Uint8Array): boolean => {
  if (pinned.has(memory.buffer)) return true
  for (const q of quarantined) if (q.buffer === memory.buffer) return true
  return false
}

type ReleaseHook = (buffer: ArrayBufferLike) => import("effect/Effect").Effect<void>
const releaseHooks = new Set<ReleaseHook>()

/** @internal Called before library-owned memory is freed, so that caches drop what covers it. */
export const onMemoryRelease = (hook: ReleaseHook): (() => void) => {
  releaseHooks.add(hook)
  return () => releaseHooks.delete(hook)
}

/** @internal */
export const memoryReleaseHooks = (): ReadonlyArray<ReleaseHook> => Array.from(releaseHooks)
