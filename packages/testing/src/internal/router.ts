/**
 * The serving side of a shared simulated network: a Unix socket server that numbers the processes
 * joining it, keeps which one listens at each address, and forwards every other message to the
 * process it is addressed to. A process whose socket closes (it exited, or was killed) is announced
 * to the others, who treat its connections as lost. It holds no fabric state of its own.
 *
 * Every frame is checked before it goes anywhere: its size against the network's cap (as soon as
 * its header arrives), its shape against the wire's messages, and its sender against the
 * connections it names (ownership.ts). A frame that fails is logged with why, and its sender is
 * dropped from the network (the others see it leave, as if it had exited); nothing reaches anyone else.
 */
import * as net from "node:net"
import { makeOwnership } from "./ownership.js"
import * as wire from "./wire.js"

export interface Router {
  readonly server: net.Server
  readonly close: () => void
}

/** Routes for whoever connects to `server` (listening is the caller's); `log` hears of each refusal. */
export const makeRouter = (
  options: { readonly maxFrameSize: number; readonly log: (refusal: string) => void }
): Router => {
  const processes = new Map<number, net.Socket>()
  const owners = new Map<string, number>()
  const ownership = makeOwnership()
  let next = 1

  const to = (process: number, message: wire.Message) => {
    const socket = processes.get(process)
    if (socket !== undefined && socket.writable) socket.write(wire.frame(message))
  }

  const leave = (self: number) => {
    if (!processes.delete(self)) return
    ownership.forget(self)
    const keys: Array<string> = []
    for (const [key, owner] of owners) {
      if (owner === self) keys.push(key)
    }
    for (const key of keys) owners.delete(key)
    for (const other of processes.keys()) to(other, { t: "gone", process: self, keys })
  }

  const route = (self: number, message: wire.Message) => {
    switch (message.t) {
      case "claim": {
        const owner = owners.get(message.key)
        if (owner === undefined) owners.set(message.key, self)
        return to(self, { t: "claimed", ask: message.ask, ok: owner === undefined })
      }
      case "unclaim":
        if (owners.get(message.key) === self) owners.delete(message.key)
        return
      case "connect": {
        const owner = owners.get(message.key)
        if (owner === undefined) return to(self, { t: "event", to: message.from, event: "REJECTED" })
        ownership.asking(message.from, owner)
        return to(owner, message)
      }
      case "cmConnect": {
        const owner = owners.get(message.key)
        if (owner === undefined) {
          return to(self, { t: "cm", to: message.from, from: message.from, cm: { k: "unreachable" } })
        }
        ownership.asking(message.from, owner)
        return to(owner, message)
      }
      case "event":
        if (message.event === "ESTABLISHED" && message.from !== undefined) ownership.connected(message.to, message.from)
        return to(message.to.process, message)
      case "cm":
        if (message.cm.k === "accepted") ownership.connected(message.to, message.from)
        return to(message.to.process, message)
      case "notify":
      case "post":
      case "settle":
        return to(message.to.process, message)
    }
  }

  /** Why a well-formed message may not come from `self`, naming the message. */
  const refusalOf = (self: number, message: wire.Message): string | undefined => {
    const refusal = ownership.refusal(self, message)
    return refusal === undefined
      ? undefined
      : `a "${message.t}${message.t === "cm" ? ` ${message.cm.k}` : ""}" message that ${refusal}`
  }

  const server = net.createServer((socket) => {
    const self = next++
    processes.set(self, socket)
    let dropped = false
    const drop = (why: string) => {
      if (dropped) return
      dropped = true
      options.log(
        `simulated network: refused a frame from process ${self} (${why}); process ${self} is dropped from the network`
      )
      socket.destroy()
    }
    const read = wire.reader({
      maxFrameSize: options.maxFrameSize,
      onFrame: (body) => {
        if (dropped) return
        const problem = wire.malformed(body)
        if (problem !== undefined) return drop(problem.length > 300 ? `${problem.slice(0, 300)}...` : problem)
        const message = body as wire.Message
        // For a process that has left: it reaches nobody (and its connections are forgotten), so it is not checked.
        if ("to" in message && !processes.has(message.to.process)) return
        const refusal = refusalOf(self, message)
        if (refusal !== undefined) return drop(refusal)
        route(self, message)
      },
      onRefused: (refusal) =>
        drop(
          refusal.reason === "tooLarge"
            ? `its header announces ${refusal.size} bytes, over the network's maxFrameSize of ${options.maxFrameSize}`
            : `it does not decode: ${refusal.detail}`
        )
    })
    socket.on("data", read)
    // A killed process's socket closes (ECONNRESET first, sometimes): either way it has left.
    socket.on("error", () => socket.destroy())
    socket.on("close", () => leave(self))
    socket.write(wire.frame({ t: "welcome", self, maxFrameSize: options.maxFrameSize }))
  })

  return {
    server,
    close: () => {
      server.close()
      for (const socket of processes.values()) socket.destroy()
    }
  }
}
