/**
 * librdmacm's endpoints across processes on one simulated network: a server process
 * (fixtures/network-cm-server.ts) serves a CmEndpoint listener, this process connects to it.
 */
import { CmEndpoint, CmListener, RemoteKey } from "@effect-rdma/core"
import { Ledger, SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref } from "effect"
import { startServer } from "./fixtures/serverProcess.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const bytes = (text: string) => new TextEncoder().encode(text)
const text = (memory: Uint8Array) => new TextDecoder().decode(memory).replace(/\0+$/, "")
const fromHex = (hex: string) => Uint8Array.from(Buffer.from(hex, "hex"))

/** A new network with the server process listening at `port` on it; `body` runs joined to it, its ledger checked. */
const withServer = <E>(
  port: number,
  body: (server: Effect.Effect.Success<ReturnType<typeof startServer>>) => Effect.Effect<void, E, any>
) =>
  Effect.gen(function*() {
    const path = yield* SimulatedNetwork.serve()
    const server = yield* startServer(path, port, "network-cm-server")
    yield* server.line(/^listening$/)
    yield* Ledger.checked(Effect.scoped(body(server))).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
    return server
  })

/** Connects with `hello`, and the server's remote keys (a write target, a read source). */
const connected = (server: Effect.Effect.Success<ReturnType<typeof startServer>>, port: number) =>
  Effect.gen(function*() {
    const ep = yield* CmEndpoint.connect(address, port, { privateData: bytes("hello") })
    const keys = yield* server.line(/^keys ([0-9a-f]+) ([0-9a-f]+)$/)
    const target = yield* RemoteKey.decode(fromHex(keys[1]!)).pipe(Effect.flatMap(RemoteKey.require("write")))
    const source = yield* RemoteKey.decode(fromHex(keys[2]!)).pipe(Effect.flatMap(RemoteKey.require("read")))
    const msgs = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
    const replies = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4))
    return { ep, target, source, msgs, replies }
  })

/** One message and its answer (the server's count of its bytes). */
const roundTrip = (c: Effect.Effect.Success<ReturnType<typeof connected>>, message: string) =>
  Effect.gen(function*() {
    const reply = yield* CmEndpoint.postRecv(c.ep, { segments: [{ mr: c.replies }] })
    c.msgs.memory.set(bytes(message), 0)
    yield* CmEndpoint.send(c.ep, { src: c.msgs, length: message.length })
    yield* reply.completion
    return new DataView(c.replies.memory.buffer).getUint32(0, true)
  })

describe("librdmacm's endpoints on a simulated network shared by two processes", () => {
  it.scopedLive(
    "reject with private data, connect and accept with it, send/recv, write and read by remote key, disconnect seen there",
    () =>
      Effect.gen(function*() {
        const server = yield* withServer(7621, (server) =>
          Effect.gen(function*() {
            // Nobody listens on 7622 in any process: EHOSTUNREACH, as within one process.
            const nobody = yield* Effect.flip(Effect.scoped(CmEndpoint.connect(address, 7622)))
            assert.match(nobody.message, /EHOSTUNREACH|UNREACHABLE/)
            // Its address is the server process's: one listener in the whole network.
            const taken = yield* Effect.flip(Effect.scoped(CmListener.make(address, 7621)))
            assert.match(taken.message, /in use \(by another process on the simulated network\)/)

            const rejected = yield* Effect.scoped(Effect.gen(function*() {
              const ep = yield* CmEndpoint.make(address, 7621)
              const error = yield* Effect.flip(CmEndpoint.establish(ep, { privateData: bytes("reject me") }))
              return { error, privateData: ep.privateData }
            }))
            assert.match(rejected.error.message, /ECONNREFUSED/)
            assert.strictEqual(text(rejected.privateData), "go away")
            yield* server.line(/^rejected reject me$/)

            const c = yield* connected(server, 7621)
            assert.strictEqual(text(c.ep.privateData.subarray(0, 7)), "welcome")
            assert.strictEqual(c.ep.privateData.byteLength, 196)
            yield* server.line(/^accepted hello$/)
            assert.strictEqual(yield* roundTrip(c, "ping"), 4)
            yield* server.line(/^received ping$/)
            assert.strictEqual(yield* roundTrip(c, "a longer message"), 16)

            c.msgs.memory.set(bytes("written from the client"), 100)
            yield* CmEndpoint.write(c.ep, { src: c.msgs, srcOffset: 100, dst: c.target, length: 23 })
            yield* CmEndpoint.read(c.ep, { dst: c.msgs, dstOffset: 200, src: c.source, length: 18 })
            assert.strictEqual(text(c.msgs.memory.subarray(200, 218)), "the server's bytes")

            // A forged key reaches nothing there: REM_ACCESS_ERR, and what follows is flushed.
            const forged = { ...c.target, rkey: (c.target.rkey ^ 0x5a5a) >>> 0 }
            const refused = yield* Effect.flip(CmEndpoint.write(c.ep, { src: c.msgs, dst: forged, length: 8 }))
            assert.match(refused.message, /REM_ACCESS_ERR/)
            const next = yield* Effect.flip(CmEndpoint.write(c.ep, { src: c.msgs, dst: c.target, length: 8 }))
            assert.match(next.message, /WR_FLUSH_ERR|closed|lost/i)
          }))
        // The server kept what was written, and left nothing alive.
        // Its receive was flushed: the forged key put its queue pair in the error state too (the responder's NAK).
        yield* server.line(/^ended CompletionError .*IBV_WC_WR_FLUSH_ERR/)
        yield* server.line(/^target written from the client$/)
        yield* server.line(/^live 0$/)
        assert.strictEqual(yield* server.exited, 0)
      }),
    120_000
  )

  it.scopedLive(
    "the server process SIGKILLed mid-traffic: every wait ends with a tagged error within its bound, nothing left here",
    () =>
      Effect.gen(function*() {
        const server = yield* withServer(7623, (server) =>
          Effect.gen(function*() {
            const c = yield* connected(server, 7623)
            const rounds = yield* Ref.make(0)
            const busy = yield* Deferred.make<void>()
            const traffic = yield* Effect.fork(Effect.forever(Effect.gen(function*() {
              yield* roundTrip(c, "tick")
              yield* CmEndpoint.write(c.ep, { src: c.msgs, dst: c.target, length: 64 })
              if ((yield* Ref.updateAndGet(rounds, (n) => n + 1)) === 20) yield* Deferred.succeed(busy, undefined)
            })))
            yield* Deferred.await(busy)
            server.kill()
            // A generous bound on a hang: the loss arrives as soon as the socket closes.
            const error = yield* Fiber.join(traffic).pipe(Effect.flip, Effect.timeout("10 seconds"))
            // As a disconnect within one process: the request in flight is flushed, or the next one
            // finds the endpoint closed, depending on where the loss falls.
            assert.isTrue(
              error._tag === "ConnectionClosedError" ||
                (error._tag === "CompletionError" && /WR_FLUSH_ERR|RETRY_EXC_ERR/.test(error.message)),
              String(error)
            )
            assert.isAtLeast(yield* Ref.get(rounds), 20)
            const after = yield* Effect.flip(roundTrip(c, "after")).pipe(Effect.timeout("10 seconds"))
            assert.strictEqual(after._tag, "ConnectionClosedError", String(after))
            // A killed process's kernel disconnects its endpoints, as rdma_cm does: Closed, not Lost.
            assert.strictEqual(yield* CmEndpoint.awaitClosed(c.ep), "Closed")
            // Its listener went with it: a new connect is unreachable at once, not a wait for the timeout.
            const unreachable = yield* Effect.flip(Effect.scoped(CmEndpoint.connect(address, 7623)))
            assert.match(unreachable.message, /EHOSTUNREACH|UNREACHABLE/)
          }))
        assert.strictEqual(yield* server.exited, "SIGKILL")
      }),
    120_000
  )

  it.scopedLive(
    "a fault plan's lost connection on one side (LoseConnection): the other process's receive is flushed too",
    () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        const ready = yield* Deferred.make<void>()
        const serving = yield* Effect.fork(
          Effect.scoped(Effect.gen(function*() {
            const listener = yield* CmListener.make(address, 7625)
            yield* Deferred.succeed(ready, undefined)
            const request = yield* CmListener.next(listener)
            const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(64))
            const pending = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
            yield* CmListener.accept(request)
            return yield* Effect.flip(pending.completion)
          })).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
        )
        yield* Deferred.await(ready)
        yield* Effect.scoped(Effect.gen(function*() {
          const ep = yield* CmEndpoint.connect(address, 7625)
          yield* Effect.flatMap(SimulatedDriver.SimulationControl, (s) =>
            s.fail({ operation: "rdma_post_send", nth: 1, loseConnection: true }))
          const src = yield* CmEndpoint.registerMessages(ep, new Uint8Array(8))
          yield* Effect.flip(CmEndpoint.send(ep, { src, length: 8 }))
        })).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
        const flushed = yield* Fiber.join(serving).pipe(Effect.timeout("10 seconds"))
        assert.match(flushed.message, /WR_FLUSH_ERR|closed/, String(flushed))
      }),
    60_000
  )
})
