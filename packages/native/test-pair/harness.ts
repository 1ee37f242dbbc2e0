/**
 * What the two halves of a two-host test share (vm/pair): a message channel between the VMs (JSON
 * lines over TCP on the same wire as the RDMA traffic), the fault port to the host's controller,
 * checks, and the result record the runner writes for scripts/test-summary.mjs.
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import * as fs from "node:fs"
import * as net from "node:net"

/** A check that did not hold, or a step that did not happen in time. */
export class PairFailure extends Data.TaggedError("PairFailure")<{ readonly message: string }> {}

export const fail = (message: string) => Effect.fail(new PairFailure({ message }))

export const check = (condition: boolean, message: string): Effect.Effect<void, PairFailure> =>
  condition ? Effect.void : fail(message)

export type Message = { readonly [key: string]: any }

/** The other VM, over TCP: one message at a time, each a JSON object. */
export interface Channel {
  readonly send: (message: Message) => Effect.Effect<void>
  /** The next message, within `seconds`; an `end`/`abort` from the other side fails it. */
  readonly receive: (seconds?: number) => Effect.Effect<Message, PairFailure>
  /** The next message whatever it is (used by the loops that dispatch them). */
  readonly next: Effect.Effect<Message>
  readonly close: Effect.Effect<void>
}

const wrap = (socket: net.Socket): Effect.Effect<Channel> =>
  Effect.gen(function*() {
    const inbox = yield* Queue.unbounded<Message>()
    let buffer = ""
    socket.setNoDelay(true)
    socket.setEncoding("utf8")
    socket.on("data", (chunk: string) => {
      buffer += chunk
      for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
        const line = buffer.slice(0, i)
        buffer = buffer.slice(i + 1)
        Queue.unsafeOffer(inbox, JSON.parse(line))
      }
    })
    socket.on("close", () => Queue.unsafeOffer(inbox, { closed: true }))
    socket.on("error", () => {})
    const next = Queue.take(inbox)
    return {
      send: (message) => Effect.sync(() => void socket.write(JSON.stringify(message) + "\n")),
      next,
      receive: (seconds = 120) =>
        next.pipe(
          Effect.timeoutFail({
            duration: `${seconds} seconds`,
            onTimeout: () => new PairFailure({ message: `no message from the other VM within ${seconds} s` })
          }),
          Effect.flatMap((m) =>
            m.closed
              ? fail("the other VM closed the channel")
              : m.end !== undefined || m.abort !== undefined
              ? fail(`the other side ${m.abort !== undefined ? "aborted" : "ended"}: ${m.error ?? "(no error)"}`)
              : Effect.succeed(m)
          )
        ),
      close: Effect.sync(() => socket.destroy())
    }
  })

export const CHANNEL_PORT = 7399

/** VM a: waits for the runner on VM b to connect. */
export const listen = (address: string): Effect.Effect<Channel> =>
  Effect.flatMap(
    Effect.async<net.Socket>((resume) => {
      const server = net.createServer((socket) => {
        server.close()
        resume(Effect.succeed(socket))
      })
      server.listen(CHANNEL_PORT, address)
    }),
    wrap
  )

/** VM b: connects to the agent on VM a, retrying while it starts. */
export const dial = (address: string, seconds = 120): Effect.Effect<Channel, PairFailure> =>
  Effect.async<net.Socket, PairFailure>((resume) => {
    const deadline = Date.now() + seconds * 1000
    const attempt = () => {
      const socket = net.connect(CHANNEL_PORT, address)
      socket.once("connect", () => resume(Effect.succeed(socket)))
      socket.once("error", () => {
        socket.destroy()
        if (Date.now() > deadline) resume(fail(`the agent on ${address}:${CHANNEL_PORT} never answered`))
        else setTimeout(attempt, 200)
      })
    }
    attempt()
  }).pipe(Effect.flatMap(wrap))

/**
 * The fault port: /dev/ttyS3, a line protocol to vm/pair-control.mjs on the host, which drives
 * the VMs' QMP monitors. `request("link", "peer", "off")`, `("stop", "peer")`, `("cont", "peer")`.
 */
let faultPort: fs.promises.FileHandle | undefined
let faultId = 0
let faultBuffer = ""
export const fault = (verb: "link" | "stop" | "cont" | "ping", vm: "a" | "b" | "self" | "peer", arg?: "on" | "off") =>
  Effect.tryPromise({
    try: async () => {
      faultPort ??= await fs.promises.open("/dev/ttyS3", "r+")
      const id = ++faultId
      await faultPort.write(`${id} ${verb} ${vm}${arg ? " " + arg : ""}\n`)
      const chunk = Buffer.alloc(256)
      for (;;) {
        const newline = faultBuffer.indexOf("\n")
        if (newline >= 0) {
          const line = faultBuffer.slice(0, newline)
          faultBuffer = faultBuffer.slice(newline + 1)
          const [replyId, status, ...rest] = line.trim().split(" ")
          if (Number(replyId) !== id) continue
          if (status !== "ok") throw new Error(rest.join(" "))
          return rest.join(" ")
        }
        const { bytesRead } = await faultPort.read(chunk, 0, chunk.length, null)
        faultBuffer += chunk.subarray(0, bytesRead).toString("utf8")
      }
    },
    catch: (error) => new PairFailure({ message: `fault ${verb} ${vm} ${arg ?? ""}: ${String(error)}` })
  }).pipe(
    Effect.timeoutFail({
      duration: "30 seconds",
      onTimeout: () => new PairFailure({ message: `fault ${verb} ${vm}: the host's controller did not answer in 30 s` })
    })
  )

/** A readable account of how an Effect failed. */
export const describeCause = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (failure._tag === "Some") {
    const e = failure.value as { _tag?: string; message?: string }
    return e._tag === "PairFailure" ? String(e.message) : `${e._tag ?? "error"}: ${e.message ?? String(e)}`
  }
  return Cause.pretty(cause).split("\n").slice(0, 6).join("\n")
}

export const seconds = (from: number) => (performance.now() - from) / 1000

/** One line of the run's log, with the time since the program started. */
const t0 = performance.now()
export const log = (message: string) =>
  Effect.sync(() => console.log(`[${seconds(t0).toFixed(2).padStart(7)} s] ${message}`))

export interface Result {
  readonly group: string
  readonly name: string
  readonly status: "passed" | "failed"
  readonly seconds: number
  readonly error?: string | undefined
  readonly notes?: ReadonlyArray<string> | undefined
}
