/**
 * Conformance case for arguments that are not arguments at all: null, a number, a string, an object
 * that names no region. Every operation of both paths refuses them with a tagged error when its
 * Effect runs (never a defect, never when the Effect is made), and posts nothing.
 */
import { CmEndpoint, CmListener, Connection, Listener, LocalMr, SharedReceiveQueue, Usage } from "@effect-rdma/core"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Stream from "effect/Stream"
import type { Case } from "../Conformance.js"
import { connectedPair } from "./pair.js"
import { check } from "./support.js"

/** What is passed where a connection, an endpoint, a region or a queue goes. */
const NOT_ONE: ReadonlyArray<unknown> = [null, undefined, 5, {}]

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
  },
  {
    name: "no peer, or no endpoint, where one goes is refused as a NULL one is: RPMA_E_INVAL (register, use, " +
      "connect, listen), EINVAL (an endpoint's registrations)",
    run: (address, port) =>
      Effect.gen(function*() {
        const memory = new Uint8Array(64)
        const entries: ReadonlyArray<
          readonly [string, string, (bad: unknown) => Effect.Effect<unknown, unknown, any>]
        > = [
          ["LocalMr.register", "RpmaInvalidError", (b) => LocalMr.register(b as never, memory, Usage.SEND)],
          ["LocalMr.allocate", "RpmaInvalidError", (b) => LocalMr.allocate(b as never, 64, Usage.SEND)],
          ["LocalMr.use", "RpmaInvalidError", (b) => LocalMr.use(b as never, memory, Usage.SEND, () => Effect.void)],
          ["Connection.connect", "RpmaInvalidError", (b) => Connection.connect(b as never, address, port)],
          ["Listener.make", "RpmaInvalidError", (b) => Listener.make(b as never, address, port)],
          ["CmEndpoint.registerMessages", "RdmaCmError", (b) => CmEndpoint.registerMessages(b as never, memory)],
          ["CmEndpoint.registerWrite", "RdmaCmError", (b) => CmEndpoint.registerWrite(b as never, memory)]
        ]
        const wrong: Array<string> = []
        for (const [name, tag, entry] of entries) {
          // An object where a peer goes is the driver's to refuse (a handle it does not know: the
          // validation cases); an endpoint is core's, so any object that is not one is refused too.
          for (const bad of tag === "RdmaCmError" ? [null, undefined, 5, {}] : [null, undefined, 5]) {
            let made: Effect.Effect<unknown, unknown, any>
            try {
              made = entry(bad)
            } catch (cause) {
              wrong.push(`${name}(${describe(bad)}) threw when made: ${String(cause)}`)
              continue
            }
            const exit = yield* Effect.exit(Effect.scoped(made))
            const got = Exit.isFailure(exit) && exit.cause._tag === "Fail"
              ? String((exit.cause.error as { _tag?: unknown })._tag)
              : verdict(exit)
            if (got !== tag) wrong.push(`${name}(${describe(bad)}): ${got}, not ${tag}`)
          }
        }
        yield* check(wrong.length === 0, `not refused as a NULL resource is:\n${wrong.join("\n")}`)
      })
  },
  {
    name: "anything but a connection, an endpoint, a region or a queue where one goes is refused as a NULL one " +
      "is, when the Effect runs: RPMA_E_INVAL on librpma's path, EINVAL on librdmacm's; a state or a close, " +
      "which cannot fail, dies saying what it was given",
    run: (address, port) =>
      Effect.gen(function*() {
        const { clientPeer, remote } = yield* connectedPair(address, port)
        const ep = yield* CmEndpoint.make(address, port + 1)
        const messages = yield* CmEndpoint.registerMessages(ep, new Uint8Array(64))
        const local = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.WRITE_SRC, Usage.RECV))
        const write = { src: local, srcOffset: 0, dst: remote, dstOffset: 0, length: 8 }
        const recv = { dst: local, offset: 0, length: 8 }
        const message = { src: messages, offset: 0, length: 8 }
        type Bad = never
        const refusals: ReadonlyArray<
          readonly [string, string, (bad: unknown) => Effect.Effect<unknown, unknown, any>]
        > = [
          ["Connection.write", "RpmaInvalidError", (b) => Connection.write(b as Bad, write)],
          ["Connection.writeMany", "RpmaInvalidError", (b) => Connection.writeMany(b as Bad, [write])],
          ["Connection.prepareWrite's Effect", "RpmaInvalidError", (b) =>
            Effect.flatten(Connection.prepareWrite(b as Bad, write))],
          ["Connection.recv", "RpmaInvalidError", (b) =>
            Connection.recv(b as Bad, recv)],
          ["Connection.postRecv", "RpmaInvalidError", (b) =>
            Connection.postRecv(b as Bad, recv)],
          ["Connection.call", "RpmaInvalidError", (b) =>
            Connection.call(b as Bad, { send: { src: local, length: 8 } as Bad, recv })],
          ["Connection.qpNum", "RpmaInvalidError", (b) =>
            Connection.qpNum(b as Bad)],
          ["Connection.peerConfigDescriptor", "RpmaInvalidError", (b) =>
            Connection.peerConfigDescriptor(b as Bad)],
          ["LocalMr.descriptor", "RpmaInvalidError", (b) =>
            LocalMr.descriptor(b as Bad)],
          ["SharedReceiveQueue.make", "RpmaInvalidError", (b) => SharedReceiveQueue.make(b as Bad)],
          ["SharedReceiveQueue.recv", "RpmaInvalidError", (b) => SharedReceiveQueue.recv(b as Bad, recv)],
          ["Listener.next", "RpmaInvalidError", (b) => Listener.next(b as Bad)],
          ["Listener.accept", "RpmaInvalidError", (b) => Listener.accept(b as Bad)],
          ["Listener.acceptClient", "RpmaInvalidError", (b) => Listener.acceptClient(b as Bad)],
          ["Listener.postRecv", "RpmaInvalidError", (b) => Listener.postRecv(b as Bad, recv)],
          ["Listener.serve", "RpmaInvalidError", (b) => Listener.serve(b as Bad, () => Effect.void)],
          ["CmEndpoint.send", "RdmaCmError", (b) => CmEndpoint.send(b as Bad, message)],
          ["CmEndpoint.postRecv", "RdmaCmError", (b) =>
            CmEndpoint.postRecv(b as Bad, { segments: [{ mr: messages, offset: 0, length: 8 }] })],
          ["CmEndpoint.writeMany", "RdmaCmError", (b) =>
            CmEndpoint.writeMany(b as Bad, [])],
          ["CmEndpoint.call", "RdmaCmError", (b) =>
            CmEndpoint.call(b as Bad, { send: message, recv: { dst: messages, offset: 0, length: 8 } })],
          ["CmEndpoint.establish", "RdmaCmError", (b) =>
            CmEndpoint.establish(b as Bad)],
          ["CmListener.next", "RdmaCmError", (b) =>
            CmListener.next(b as Bad)],
          ["CmListener.accept", "RdmaCmError", (b) =>
            CmListener.accept(b as Bad)],
          ["CmListener.reject", "RdmaCmError", (b) =>
            CmListener.reject(b as Bad)]
        ]
        // Calls whose data-last form starts with options or a handler: there, undefined or an
        // object is that form (it returns a function, as the call's type says), not a mistake.
        const dataLast = new Set([
          "Listener.next",
          "Listener.accept",
          "Listener.serve",
          "CmEndpoint.establish",
          "CmListener.accept",
          "CmListener.reject"
        ])
        const dying: ReadonlyArray<readonly [string, (bad: unknown) => Effect.Effect<unknown, never, any>]> = [
          ["Connection.state", (b) =>
            Connection.state(b as Bad)],
          ["Connection.close", (b) => Connection.close(b as Bad)],
          ["Connection.changes", (b) => Stream.runDrain(Connection.changes(b as Bad))],
          ["Listener.reject", (b) => Listener.reject(b as Bad)],
          ["CmEndpoint.state", (b) => CmEndpoint.state(b as Bad)],
          ["CmEndpoint.awaitClosed", (b) => CmEndpoint.awaitClosed(b as Bad)],
          ["CmEndpoint.close", (b) => CmEndpoint.close(b as Bad)],
          ["CmEndpoint.changes", (b) => Stream.runDrain(CmEndpoint.changes(b as Bad))]
        ]
        const wrong: Array<string> = []
        const made = <A>(name: string, bad: unknown, make: () => A): A | undefined => {
          try {
            return make()
          } catch (cause) {
            wrong.push(`${name}(${describe(bad)}) threw when made: ${String(cause)}`)
            return undefined
          }
        }
        for (const bad of NOT_ONE) {
          for (const [name, tag, operation] of refusals) {
            // A region that is an object is the driver's to refuse (an unknown handle).
            if (bad !== null && typeof bad === "object" && name.startsWith("LocalMr")) continue
            if ((bad === undefined || typeof bad === "object") && bad !== null && dataLast.has(name)) continue
            const effect = made(name, bad, () => operation(bad))
            if (effect === undefined) continue
            const exit = yield* Effect.exit(Effect.scoped(effect))
            const got = Exit.isFailure(exit) && exit.cause._tag === "Fail"
              ? String((exit.cause.error as { _tag?: unknown })._tag)
              : verdict(exit)
            if (got !== tag) wrong.push(`${name}(${describe(bad)}): ${got}, not ${tag}`)
          }
          for (const [name, operation] of dying) {
            const effect = made(name, bad, () => operation(bad))
            if (effect === undefined) continue
            const exit = yield* Effect.exit(effect)
            const defect = Exit.isFailure(exit) ? Cause.dieOption(exit.cause) : undefined
            const said = defect?._tag === "Some" && Cause.isIllegalArgumentException(defect.value)
              ? defect.value.message
              : undefined
            if (said === undefined || !said.startsWith(`${name} takes`)) {
              wrong.push(`${name}(${describe(bad)}): ${Exit.isSuccess(exit) ? "success" : String(exit.cause)}`)
            }
          }
        }
        yield* check(wrong.length === 0, `not refused as a NULL resource is:\n${wrong.join("\n")}`)
      })
  }
]
