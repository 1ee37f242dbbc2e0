/**
 * Conformance case for arguments that are not arguments at all: null, a number, a string, an object
 * that names no region. Every operation of both paths refuses them with a tagged error when its
 * Effect runs (never a defect, never when the Effect is made), and posts nothing.
 */
import { CmEndpoint, Connection } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { check } from "./support.js"

/** What is passed where an operation's arguments go (or a batch's element). */
const BAD: ReadonlyArray<unknown> = [null, undefined, 5, "write", {}]

/** A tagged failure, or what it was instead. */
const verdict = (exit: Exit.Exit<unknown, unknown>): string =>
  Exit.isSuccess(exit)
    ? "success"
    : exit.cause._tag === "Fail" && typeof (exit.cause.error as { _tag?: unknown })._tag === "string"
    ? "tagged"
    : `defect: ${String(exit.cause)}`

const describe = (value: unknown): string => value === undefined ? "undefined" : JSON.stringify(value)

export const malformedArgumentCases: ReadonlyArray<Case> = [
  {
    name: "every operation of both paths refuses arguments that are no object, or name no region, with a tagged " +
      "error when it runs (null, undefined, a number, a string, {}; as a batch's element too)",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client } = yield* connectedPair(address, port)
        const ep = yield* CmEndpoint.make(address, port + 1)
        type Bad = never
        const operations: ReadonlyArray<readonly [string, (bad: unknown) => Effect.Effect<unknown, unknown>]> = [
          ["Connection.write", (b) => Connection.write(client, b as Bad)],
          ["Connection.read", (b) => Connection.read(client, b as Bad)],
          ["Connection.send", (b) => Connection.send(client, b as Bad)],
          ["Connection.recv", (b) => Connection.recv(client, b as Bad)],
          ["Connection.flush", (b) => Connection.flush(client, b as Bad)],
          ["Connection.atomicWrite", (b) => Connection.atomicWrite(client, b as Bad)],
          ["Connection.postWrite", (b) => Connection.postWrite(client, b as Bad)],
          ["Connection.postRead", (b) => Connection.postRead(client, b as Bad)],
          ["Connection.postSend", (b) => Connection.postSend(client, b as Bad)],
          ["Connection.postRecv", (b) => Connection.postRecv(client, b as Bad)],
          ["Connection.writeMany", (b) => Connection.writeMany(client, [b as Bad])],
          ["Connection.call", (b) => Connection.call(client, b as Bad)],
          ["Connection.call's send and recv", (b) => Connection.call(client, { send: b, recv: b } as Bad)],
          ["Connection.prepareWrite", (b) => Connection.prepareWrite(client, b as Bad)],
          ["CmEndpoint.send", (b) => CmEndpoint.send(ep, b as Bad)],
          ["CmEndpoint.sendv", (b) => CmEndpoint.sendv(ep, b as Bad)],
          ["CmEndpoint.recv", (b) => CmEndpoint.recv(ep, b as Bad)],
          ["CmEndpoint.write", (b) => CmEndpoint.write(ep, b as Bad)],
          ["CmEndpoint.read", (b) => CmEndpoint.read(ep, b as Bad)],
          ["CmEndpoint.postSend", (b) => CmEndpoint.postSend(ep, b as Bad)],
          ["CmEndpoint.postRecv", (b) => CmEndpoint.postRecv(ep, b as Bad)],
          ["CmEndpoint.postWrite", (b) => CmEndpoint.postWrite(ep, b as Bad)],
          ["CmEndpoint.postRead", (b) => CmEndpoint.postRead(ep, b as Bad)],
          ["CmEndpoint.sendMany", (b) => CmEndpoint.sendMany(ep, [b as Bad])],
          ["CmEndpoint.recvMany", (b) => CmEndpoint.recvMany(ep, [b as Bad])],
          ["CmEndpoint.writeMany", (b) => CmEndpoint.writeMany(ep, [b as Bad])],
          ["CmEndpoint.call", (b) => CmEndpoint.call(ep, b as Bad)],
          ["CmEndpoint.call's send and recv", (b) => CmEndpoint.call(ep, { send: b, recv: b } as Bad)]
        ]
        const wrong: Array<string> = []
        for (const [name, operation] of operations) {
          for (const bad of BAD) {
            // Made outside the run: making the Effect must not read the arguments.
            let made: Effect.Effect<unknown, unknown>
            try {
              made = operation(bad)
            } catch (cause) {
              wrong.push(`${name}(${describe(bad)}) threw when made: ${String(cause)}`)
              continue
            }
            const outcome = verdict(yield* Effect.exit(made))
            if (outcome !== "tagged") wrong.push(`${name}(${describe(bad)}): ${outcome}`)
          }
        }
        yield* check(wrong.length === 0, `not refused with a tagged error:\n${wrong.join("\n")}`)
      })
  }
]
