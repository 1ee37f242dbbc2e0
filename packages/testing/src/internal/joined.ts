/**
 * A process's side of a shared simulated network: its socket to the serving process, the claims
 * it waits for (each bounded), and the messages it hands to its fabric.
 */
import * as net from "node:net"
import * as wire from "./wire.js"

/**
 * Connects to the network at `path`; resolves once numbered, rejects with why not within `timeoutMs`.
 *
 * Its bounds (the join, each claim) are timers of the wall clock, not Effect's Clock: they bound a
 * hang of the network's own plumbing (the serving process gone or stuck), not a time the simulated
 * device keeps, and they run outside any fiber. A user's TestClock in this process must not hold
 * them: nothing would move it past a router that never answers. What the device times (rdma_connect,
 * rdma_accept) is on Effect's Clock (cmEndpoints.ts).
 */
export const join = (
  path: string,
  timeoutMs: number
): Promise<{ readonly link: wire.Link; readonly leave: () => void }> =>
  new Promise((resolve, reject) => {
    const socket = net.connect(path)
    const asks = new Map<number, (answer: "ok" | "taken" | "down") => void>()
    let nextAsk = 1
    let handler: wire.Handler | undefined
    let self: number | undefined
    let maxFrameSize = 0
    let down = false
    const early: Array<wire.Message> = []

    const fail = (detail: string) => {
      clearTimeout(timer)
      socket.destroy()
      reject(new Error(detail))
    }
    const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs)

    const send = (message: wire.Message) => {
      if (!down && socket.writable) socket.write(wire.frame(message))
    }
    const link: wire.Link = {
      get self() {
        return self!
      },
      path,
      get maxMessageSize() {
        return maxFrameSize - wire.ENVELOPE_SIZE
      },
      send,
      claim: (key) =>
        new Promise((answer) => {
          if (down) return answer("down")
          const ask = nextAsk++
          // Bounded: a router that stops answering is as good as gone.
          const bound = setTimeout(() => {
            asks.delete(ask)
            answer("down")
          }, timeoutMs)
          asks.set(ask, (result) => {
            clearTimeout(bound)
            answer(result)
          })
          send({ t: "claim", key, ask })
        }),
      attach: (h) => {
        handler = h
        for (const message of early.splice(0)) h.message(message)
        if (down) h.down()
      }
    }

    const onMessage = (message: wire.Message) => {
      if (message.t === "welcome") {
        self = message.self
        maxFrameSize = message.maxFrameSize
        clearTimeout(timer)
        return resolve({ link, leave: () => socket.destroy() })
      }
      if (message.t === "claimed") {
        const answer = asks.get(message.ask)
        asks.delete(message.ask)
        return answer?.(message.ok ? "ok" : "taken")
      }
      if (handler === undefined) early.push(message)
      else handler.message(message)
    }
    // The serving process's frames are checked there (its router): taken as they come.
    const read = wire.reader({
      maxFrameSize: 0xffffffff,
      onFrame: (body) => onMessage(body as wire.Message),
      onRefused: () => socket.destroy()
    })
    socket.on("data", (chunk) => {
      try {
        read(chunk)
      } catch {
        socket.destroy()
      }
    })
    socket.on("error", (error) => {
      if (self === undefined) fail(error.message)
    })
    socket.on("close", () => {
      down = true
      for (const answer of asks.values()) answer("down")
      asks.clear()
      if (self === undefined) fail("the network closed the connection")
      handler?.down()
    })
  })
