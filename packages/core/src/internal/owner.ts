/**
 * Handles that others depend on. A peer is used by its regions, endpoints and connections; a
 * region by the requests in flight that name it; an rdma_cm endpoint by its regions. The C libraries
 * refuse (or, for librpma's peer, would crash on) a release while such users remain, and Scope
 * order alone cannot prevent it: a peer's scope may close before its regions' scope, and a region's
 * scope may close while a receive posted on it is still waiting. So a release asked for while users
 * remain is deferred, and runs when the last user lets go: never early, never forgotten.
 */
import * as Effect from "effect/Effect"

export interface Owner {
  /** What the log says this is, e.g. "the peer at 192.168.77.1". */
  readonly what: string
  users: number
  /** The release, once asked for while users remained. */
  deferred: Effect.Effect<void> | undefined
}

const owners = new WeakMap<object, Owner>()

/**
 * The owner record of a peer, region or endpoint, made on first use. Kept beside the object,
 * not in it, so that an object a caller built by hand (a Peer from a raw handle, say) works too.
 */
export const of = (resource: object, what: () => string): Owner => {
  let owner = owners.get(resource)
  if (owner === undefined) owners.set(resource, owner = { what: what(), users: 0, deferred: undefined })
  return owner
}

/** The owner record if one was made (a resource nobody used has none). */
export const peek = (resource: object): Owner | undefined => owners.get(resource)

/** A new user: the owner's release waits for it. */
export const retain = (owner: Owner): void => {
  owner.users++
}

/**
 * A user is gone: the owner's deferred release, if this was the last user, else
 * undefined (a plain value so that the data path allocates nothing when there is nothing to do).
 */
export const dropUnsafe = (owner: Owner): Effect.Effect<void> | undefined => {
  owner.users--
  if (owner.users > 0 || owner.deferred === undefined) return undefined
  const deferred = owner.deferred
  owner.deferred = undefined
  return deferred
}

/** A user is gone; runs the owner's release if it was waiting for this one. */
export const drop = (owner: Owner): Effect.Effect<void> => Effect.suspend(() => dropUnsafe(owner) ?? Effect.void)

/** Releases now, or when the last user lets go. */
export const releaseWhenUnused = (owner: Owner, release: Effect.Effect<void>): Effect.Effect<void> =>
  Effect.suspend(() => releaseWhenUnusedUnsafe(owner, release))

/** {@link releaseWhenUnused}, deciding now: what to run next. */
const releaseWhenUnusedUnsafe = (owner: Owner, release: Effect.Effect<void>): Effect.Effect<void> => {
  if (owner.users <= 0) return release
  owner.deferred = release
  return Effect.logDebug(
    `${owner.what} is released when its last user is (${owner.users} still ${owner.users === 1 ? "uses" : "use"} it)`
  )
}
