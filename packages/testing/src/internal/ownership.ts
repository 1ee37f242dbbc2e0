/**
 * Which process may speak for which connection on a shared simulated network: the router's record
 * of every connection that crosses processes (who asked whom, who is connected to whom), and the
 * check each frame passes before it is forwarded. A process names only its own connections as the
 * sender, and addresses only a connection it asked for, answers, or is connected to; anything else
 * is a forgery, refused before it reaches anyone.
 */
import type * as wire from "./wire.js"

/** One connection's other side as the router knows it. */
interface Side {
  /** The process it asked (or that asked it): the only one that may answer it. */
  readonly process: number
  /** The other side's connection once they are connected. */
  far: wire.Far | undefined
}

const keyOf = (far: wire.Far) => `${far.process}:${far.conn}`
const same = (a: wire.Far | undefined, b: wire.Far) => a !== undefined && a.process === b.process && a.conn === b.conn
const show = (far: wire.Far) => `connection ${far.conn} of process ${far.process}`

/** The answers a listener's process gives a request before the two are connected. */
const ANSWERS: ReadonlySet<string> = new Set(["unreachable", "accepted", "rejected"])

export interface Ownership {
  /** Why `self` may not send `message`, or undefined when it may. */
  readonly refusal: (self: number, message: wire.Message) => string | undefined
  /** `from` asked a listener of `process` to connect. */
  readonly asking: (from: wire.Far, process: number) => void
  /** `asker`'s request was accepted by `accepter`: from now on the two speak only to each other. */
  readonly connected: (asker: wire.Far, accepter: wire.Far) => void
  /** A process left: its connections are forgotten. */
  readonly forget: (process: number) => void
}

export const makeOwnership = (): Ownership => {
  const sides = new Map<string, Side>()
  const sideOf = (far: wire.Far) => sides.get(keyOf(far))

  /** Why `self` may not name `from` as its own new connection. */
  const notOwn = (self: number, from: wire.Far): string | undefined =>
    from.process !== self
      ? `names ${show(from)} as its own`
      : sides.has(keyOf(from))
      ? `names ${show(from)} as new, which it already used`
      : undefined
  /** Why `self` may not answer `to`'s request (it did not ask `self`, or was answered already). */
  const notAsking = (self: number, to: wire.Far): string | undefined => {
    const side = sideOf(to)
    return side === undefined || side.process !== self || side.far !== undefined
      ? `answers ${show(to)}, which did not ask it to connect`
      : undefined
  }
  /** Why `self` may not address `to` as the other side of its connection (`from`, when named). */
  const notConnected = (self: number, to: wire.Far, from?: wire.Far): string | undefined => {
    const far = sideOf(to)?.far
    return far === undefined || far.process !== self || (from !== undefined && !same(far, from))
      ? `addresses ${show(to)}, which is not connected to ${from === undefined ? `process ${self}` : show(from)}`
      : undefined
  }

  const refusal = (self: number, message: wire.Message): string | undefined => {
    switch (message.t) {
      case "claim":
      case "unclaim":
        return undefined
      case "connect":
      case "cmConnect":
        return notOwn(self, message.from)
      case "event":
        return notAsking(self, message.to) ??
          (message.event === "ESTABLISHED"
            ? message.from === undefined
              ? "accepts a connection without naming its own side"
              : notOwn(self, message.from)
            : message.from !== undefined && message.from.process !== self
            ? `names ${show(message.from)} as its own`
            : undefined)
      case "notify":
      case "settle":
        return notConnected(self, message.to)
      case "post":
        return message.from.process !== self
          ? `names ${show(message.from)} as its own`
          : notConnected(self, message.to, message.from)
      case "cm": {
        if (message.from.process !== self) return `names ${show(message.from)} as its own`
        if (same(sideOf(message.to)?.far, message.from)) return undefined
        if (!ANSWERS.has(message.cm.k)) return notConnected(self, message.to, message.from)
        return notAsking(self, message.to) ?? (message.cm.k === "accepted" ? notOwn(self, message.from) : undefined)
      }
      default:
        return `sent "${message.t}", which only the network itself sends`
    }
  }

  return {
    refusal,
    asking: (from, process) => void sides.set(keyOf(from), { process, far: undefined }),
    connected: (asker, accepter) => {
      sides.set(keyOf(asker), { process: accepter.process, far: accepter })
      sides.set(keyOf(accepter), { process: asker.process, far: asker })
    },
    forget: (process) => {
      for (const [key, side] of sides) {
        if (side.process === process || key.startsWith(`${process}:`)) sides.delete(key)
      }
    }
  }
}
