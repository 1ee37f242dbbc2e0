/**
 * Conformance cases for when core reads an operation's arguments: when its Effect runs, for the
 * forms that post without waiting (postWrite, postRead, postSend, postRecv) as for the awaited ones
 * (write, read, send, recv). Building the Effect never throws nor decides anything.
 */
import { Connection, LocalMr, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { equal, outcome } from "./support.js"

/** Arguments a case may change after building an operation (an operation's own are read-only). */
type Mutable<A> = { -readonly [K in keyof A]: A[K] }

/** Builds an Effect, catching a throw: building must not throw. */
const build = <A>(what: string, make: () => A): Effect.Effect<A, Error> =>
  Effect.try({ try: make, catch: (cause) => new Error(`${what} threw while building its Effect: ${String(cause)}`) })

export const argumentCases: ReadonlyArray<Case> = [
  {
    name:
      "postWrite, postRead, postSend, postRecv check their arguments when the Effect runs, as write, read, send, recv do: changed after building, the run sees the change",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, remote, server, serverPeer } = yield* connectedPair(address, port)
        const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.combine(Usage.WRITE_SRC, Usage.SEND))
        const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
        const inbox = yield* LocalMr.allocate(serverPeer, 4096, Usage.RECV)
        const TOO_LONG = 8192

        // Each pair: the awaited form and the one that posts without waiting, built with good
        // arguments that are then made too long for their region, then run: both refuse them.
        const pairs: ReadonlyArray<
          readonly [string, () => { readonly args: { length: number }; readonly run: Effect.Effect<unknown, unknown> }]
        > = [
          ["write", () => {
            const args: Mutable<Connection.PostWriteArgs> = { dst: remote, src, length: 64 }
            return { args, run: Connection.write(client, args) }
          }],
          ["postWrite", () => {
            const args: Mutable<Connection.PostWriteArgs> = { dst: remote, src, length: 64 }
            return { args, run: Connection.postWrite(client, args) }
          }],
          ["read", () => {
            const args: Mutable<Connection.PostReadArgs> = { dst, src: remote, length: 64 }
            return { args, run: Connection.read(client, args) }
          }],
          ["postRead", () => {
            const args: Mutable<Connection.PostReadArgs> = { dst, src: remote, length: 64 }
            return { args, run: Connection.postRead(client, args) }
          }],
          ["send", () => {
            const args: Mutable<Connection.PostSendArgs> = { src, length: 8 }
            return { args, run: Connection.send(client, args) }
          }],
          ["postSend", () => {
            const args: Mutable<Connection.PostSendArgs> = { src, length: 8 }
            return { args, run: Connection.postSend(client, args) }
          }],
          ["recv", () => {
            const args = { dst: inbox, length: 64 }
            return { args, run: Connection.recv(server, args) }
          }],
          ["postRecv", () => {
            const args = { dst: inbox, length: 64 }
            return { args, run: Connection.postRecv(server, args) }
          }]
        ]
        for (const [what, make] of pairs) {
          const { args, run } = yield* build(what, make)
          args.length = TOO_LONG
          yield* equal(yield* outcome(run), "OutOfRangeError", `${what} built with a good length, run with ${TOO_LONG}`)
        }

        // The other way round: built with a bad length, run with a good one: both post.
        for (const form of ["write", "postWrite"] as const) {
          const args: Mutable<Connection.PostWriteArgs> = { dst: remote, src, length: TOO_LONG }
          const run = yield* build(form, () =>
            form === "write" ? Connection.write(client, args) : Connection.postWrite(client, args))
          args.length = 64
          yield* equal(yield* outcome(run), "success", `${form} built with length ${TOO_LONG}, run with 64`)
        }
      })
  }
]
