/**
 * Memory that a device may reach. While a registration lives, its memory is held here, so that it
 * stays alive even when the caller drops every reference; when a release fails, the memory moves
 * to `quarantine` for the life of the process, because the device may still point at it.
 */
import type * as Effect from "effect/Effect"

const pinned = new Map<ArrayBufferLike, number>()
const quarantined = new Set<Uint8Array>()

export const pin = (memory: Uint8Array): void => {
  pinned.set(memory.buffer, (pinned.get(memory.buffer) ?? 0) + 1)
}

// Releases of memory asked for while registrations covered it (a file mapping's unmap, an
// allocation's free): each runs
// when the last registration over its buffer is released, never while one remains.
const deferred = new Map<ArrayBufferLike, Effect.Effect<void>>()

/**
 * A registration over this memory is gone. Returns the memory's deferred release when
 * this was the last one (callers run it: `Effect.tap(dereg, () => pins.unpin(memory))` does), else
 * undefined.
 */
export const unpin = (memory: Uint8Array): Effect.Effect<void> | undefined => {
  const count = pinned.get(memory.buffer) ?? 0
  if (count > 1) {
    pinned.set(memory.buffer, count - 1)
    return undefined
  }
  pinned.delete(memory.buffer)
  const release = deferred.get(memory.buffer)
  if (release === undefined || isReachableByDevice(memory)) return undefined
  deferred.delete(memory.buffer)
  return release
}

/**
 * Keeps memory alive for good: a failed release may have left the device pointing at it.
 * A release deferred for it never runs.
 */
export const quarantine = (memory: Uint8Array): void => {
  // The deferred release unpin hands back, if any, is dropped: it must never run.
  unpin(memory)
  quarantined.add(memory)
}

/**
 * Runs `release` now if no registration covers the memory, else when the last one is
 * released (deregistered, not failed: memory a failed release left reachable is never released).
 * Returns whether it ran now.
 */
export const releaseWhenUnpinned = (memory: Uint8Array, release: Effect.Effect<void>): boolean => {
  if (!isReachableByDevice(memory)) return true
  deferred.set(memory.buffer, release)
  return false
}

/** Whether a failed release may have left the device pointing at this memory's buffer. */
export const isQuarantined = (memory: Uint8Array): boolean => {
  for (const q of quarantined) if (q.buffer === memory.buffer) return true
  return false
}

/** Whether any registration, live or failed to release, covers this memory's buffer. */
export const isReachableByDevice = (memory: Uint8Array): boolean => pinned.has(memory.buffer) || isQuarantined(memory)

type ReleaseHook = (buffer: ArrayBufferLike) => Effect.Effect<void>
const releaseHooks = new Set<ReleaseHook>()

/** Called before library-owned memory is freed, so that caches drop what covers it. */
export const onMemoryRelease = (hook: ReleaseHook): () => void => {
  releaseHooks.add(hook)
  return () => releaseHooks.delete(hook)
}

export const memoryReleaseHooks = (): ReadonlyArray<ReleaseHook> => Array.from(releaseHooks)
