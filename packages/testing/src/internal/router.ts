/**
 * The serving side of a shared simulated network: a Unix socket server that numbers the processes
 * joining it, keeps which one listens at each address, and forwards every other message to the
 * process it is addressed to. A process whose socket closes (it exited, or was killed) is announced
 * to the others, who treat its connections as lost. It holds no fabric state of its own.
 */
import * as net from "node:net"
import * as wire from "./wire.js"

export interface Router {
  readonly server: net.Server
  readonly close: () => void
}

/** Routes for whoever connects to `server` (listening is the caller's). */
export const makeRouter = (): Router => {
  const processes = new Map<number, net.Socket>()
  const owners = new Map<string, number>()
  let next = 1

  const to = (process: number, message: wire.Message) => {
    const socket = processes.get(process)
    if (socket !== undefined && socket.writable) socket.write(wire.frame(message))
  }

  const leave = (self: number) => {
    if (!processes.delete(self)) return
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
        return owner === undefined
          ? to(self, { t: "event", to: message.from, event: "REJECTED" })
          : to(owner, message)
      }
      case "cmConnect": {
        const owner = owners.get(message.key)
        return owner === undefined
          ? to(self, { t: "cm", to: message.from, from: message.from, cm: { k: "unreachable" } })
          : to(owner, message)
      }
      case "cm":
      case "event":
      case "notify":
      case "post":
      case "settle":
        return to(message.to.process, message)
      default:
        return // welcome, claimed, gone: the router's own; a process does not send them
    }
  }

  const server = net.createServer((socket) => {
    const self = next++
    processes.set(self, socket)
    const read = wire.reader((message) => route(self, message))
    // A frame that does not decode: that process is not one of ours, and is let go.
    socket.on("data", (chunk) => {
      try {
        read(chunk)
      } catch {
        socket.destroy()
      }
    })
    // A killed process's socket closes (ECONNRESET first, sometimes): either way it has left.
    socket.on("error", () => socket.destroy())
    socket.on("close", () => leave(self))
    socket.write(wire.frame({ t: "welcome", self }))
  })

  return {
    server,
    close: () => {
      server.close()
      for (const socket of processes.values()) socket.destroy()
    }
  }
}
