/**
 * One simulated network shared by two processes: a server process (fixtures/network-server.ts,
 * started with node + tsx) and this one as the client, each with its own memory and ledger.
 */
import { Connection, Descriptor, Listener, LocalMr, Peer, RdmaClient, RemoteMr, Usage } from "@effect-rdma/core"
import { Conformance, Ledger, SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Ref, Schedule, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import { type ServerProcess, startServer } from "./fixtures/serverProcess.js"

const address = SimulatedDriver.DEFAULT_ADDRESS
const bytes = (text: string) => new TextEncoder().encode(text)
const text = (memory: Uint8Array) => new TextDecoder().decode(memory)

/**
 * A new network, the server process on it listening at `port`, and this process joined to it and
 * connected (`clientHalf`); `body` runs in this process, whose ledger is checked when it ends.
 */
const acrossProcesses = <E>(
  port: number,
  body: (
    server: ServerProcess,
    half: Effect.Effect.Success<ReturnType<typeof Conformance.clientHalf>> & { readonly descriptor: Uint8Array }
  ) => Effect.Effect<void, E, any>
) =>
  Effect.gen(function*() {
    const path = yield* SimulatedNetwork.serve()
    const server = yield* startServer(path, port)
    const found = yield* server.line(/^descriptor ([0-9a-f]+)/)
    const descriptor = Uint8Array.from(Buffer.from(found[1]!, "hex"))
    yield* Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const half = yield* Conformance.clientHalf(address, address, port, descriptor)
      yield* server.line(/^accepted/)
      yield* body(server, { ...half, descriptor })
    }))).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
    return server
  })

describe("a simulated network shared by two processes", () => {
  it.scopedLive(
    "a server process and a client process: connect, write, flush, read back, send; the server sees it all",
    () =>
      Effect.gen(function*() {
        const server = yield* acrossProcesses(7601, (server, { client, peer: clientPeer, remote }) =>
          Effect.gen(function*() {
            // Its address is the server process's: one listener in the whole network.
            const peer = yield* Peer.make(address)
            const taken = yield* Effect.flip(Listener.make(peer, address, 7601))
            assert.strictEqual(taken._tag, "RpmaProviderError")
            assert.match(taken.message, /7601 is in use \(by another process on the simulated network\)/)
            // Nobody listens on 7602 in any process: rejected, as within one process.
            const rejected = yield* Effect.flip(Effect.scoped(Connection.connect(peer, address, 7602)))
            assert.strictEqual(rejected._tag, "ConnectionFailedError")

            assert.strictEqual(text(client.privateData.subarray(0, 7)), "welcome")
            const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.combine(Usage.WRITE_SRC, Usage.SEND))
            const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
            src.memory.set(bytes("record #1"), 0)
            yield* Connection.write(client, { dst: remote, dstOffset: 1000, src, srcOffset: 0, length: 9 })
            yield* Connection.flush(client, { dst: remote, dstOffset: 1000, length: 9 })
            yield* Connection.read(client, { dst, dstOffset: 100, src: remote, srcOffset: 1000, length: 9 })
            assert.strictEqual(text(dst.memory.subarray(100, 109)), "record #1")
            src.memory.set(bytes("ping"), 100)
            yield* Connection.send(client, { src, offset: 100, length: 4 })
            yield* server.line(/^received ping$/)
          }))
        // This side's scope closed: the server saw CLOSED, kept what was written, and left nothing alive.
        yield* server.line(/^ended Closed$/)
        yield* server.line(/^target record #1$/)
        yield* server.line(/^live 0$/)
        assert.strictEqual(yield* server.exited, 0)
      }),
    120_000
  )

  it.scopedLive(
    "a forged rkey is refused by the other process (IBV_WC_REM_ACCESS_ERR), and what follows is flushed",
    () =>
      Effect.gen(function*() {
        const server = yield* acrossProcesses(7603, (_, { client, descriptor, peer, remote }) =>
          Effect.gen(function*() {
            const d = yield* Descriptor.decode(descriptor)
            const forged = yield* RemoteMr.fromDescriptor(Descriptor.encode({ ...d, rkey: (d.rkey ^ 0x5a5a) >>> 0 }))
              .pipe(
                Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
              )
            const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
            const error = yield* Effect.flip(
              Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 })
            )
            assert.strictEqual(error._tag, "CompletionError")
            assert.match(error.message, /IBV_WC_REM_ACCESS_ERR \(10\): the remote region refused/)
            const next = yield* Effect.flip(
              Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 16 })
            )
            assert.strictEqual(next._tag === "CompletionError" && next.statusName, "IBV_WC_WR_FLUSH_ERR")
          }))
        // Its receive ends with the connection (closed from this side).
        yield* server.line(/^receive failed ConnectionClosedError$/)
        yield* server.line(/^live 0$/)
        assert.strictEqual(yield* server.exited, 0)
      }),
    120_000
  )

  it.scopedLive(
    "the server process SIGKILLed mid-traffic: the client's operations end with a tagged error, and nothing is left",
    () =>
      Effect.gen(function*() {
        const server = yield* acrossProcesses(7605, (server, { client, peer, remote }) =>
          Effect.gen(function*() {
            const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
            const dst = yield* LocalMr.allocate(peer, 4096, Usage.READ_DST)
            const rounds = yield* Ref.make(0)
            const busy = yield* Deferred.make<void>()
            const traffic = yield* Effect.fork(Effect.forever(Effect.gen(function*() {
              yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
              yield* Connection.read(client, { dst, dstOffset: 0, src: remote, srcOffset: 0, length: 64 })
              if ((yield* Ref.updateAndGet(rounds, (n) => n + 1)) === 20) yield* Deferred.succeed(busy, undefined)
            })))
            yield* Deferred.await(busy)
            server.kill()
            // A generous bound on a hang: the loss arrives as soon as the socket closes.
            const error = yield* Fiber.join(traffic).pipe(Effect.flip, Effect.timeout("10 seconds"))
            // As a connection lost within one process: the request in flight is flushed, or the next one
            // finds the connection lost, depending on where the loss falls.
            assert.isTrue(
              error._tag === "CompletionError"
                ? error.statusName === "IBV_WC_WR_FLUSH_ERR"
                : /connection was lost/.test(error.message),
              String(error)
            )
            assert.isAtLeast(yield* Ref.get(rounds), 20)
            const after = yield* Effect.flip(
              Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
            )
            assert.strictEqual(after._tag, "ConnectionClosedError")
            assert.strictEqual(yield* Connection.state(client), "Lost")
          }))
        assert.strictEqual(yield* server.exited, "SIGKILL")
      }),
    120_000
  )

  it.scopedLive(
    "the key-value store's shape: its server process killed and restarted; the client reconnects with the new offer",
    () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        const port = 7607
        const table = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
        const offerOf = (server: ServerProcess) =>
          Effect.map(server.line(/^offer ([0-9a-f]+)/), (found) => Uint8Array.from(Buffer.from(found[1]!, "hex")))
        const first = yield* startServer(path, port, "network-kv-server")
        const current = yield* Ref.make(yield* offerOf(first))
        yield* Ledger.checked(Effect.scoped(Effect.gen(function*() {
          const peer = yield* Peer.make(address)
          const client = yield* RdmaClient.make({
            peer,
            // Fetched on every connect, as over TLS in the example: here, the offer the server process printed.
            offer: Effect.map(
              Ref.get(current),
              (descriptor) => ({ rdma: { address, port }, regions: { table: descriptor }, config: {} })
            ),
            regions: { table },
            reconnect: Schedule.spaced("50 millis"),
            whileDisconnected: { wait: "30 seconds" }
          })
          const reached = (tag: RdmaClient.State["_tag"]) =>
            client.changes.pipe(
              Stream.filter((state) => state._tag === tag),
              Stream.runHead,
              Effect.timeout("60 seconds")
            )
          const src = yield* LocalMr.allocate(peer, 64, Usage.WRITE_SRC)
          const dst = yield* LocalMr.allocate(peer, 64, Usage.READ_DST)
          const put = (value: string) =>
            Effect.gen(function*() {
              src.memory.fill(0).set(bytes(value))
              yield* RdmaClient.write(client, { dst: "table", dstOffset: 0, src, srcOffset: 0, length: 16 })
              yield* RdmaClient.flush(client, { dst: "table", dstOffset: 0, length: 16 })
            })
          const get = Effect.gen(function*() {
            yield* RdmaClient.read(client, { dst, dstOffset: 0, src: "table", srcOffset: 0, length: 16 })
            return text(dst.memory.subarray(0, 16)).replace(/\0+$/, "")
          })
          yield* reached("Connected")
          yield* put("first server")
          assert.strictEqual(yield* get, "first server")

          first.kill()
          yield* reached("Reconnecting")
          // The dead process's listening address is free again: a new server process takes it.
          const second = yield* startServer(path, port, "network-kv-server")
          yield* Ref.set(current, yield* offerOf(second))
          yield* reached("Connected")
          assert.strictEqual(yield* get, "", "a new server's table starts empty")
          yield* put("second server")
          assert.strictEqual(yield* get, "second server")
        }))).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
        assert.strictEqual(yield* first.exited, "SIGKILL")
      }),
    180_000
  )

  it.scopedLive(
    "a frozen peer across processes: this side's write ends at its watchdog (LOST), and nothing is left here",
    () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        const port = 7609
        const server = yield* startServer(path, port, "network-kv-server")
        const found = yield* server.line(/^offer ([0-9a-f]+)/)
        yield* Ledger.checked(Effect.scoped(Effect.gen(function*() {
          const { client, peer, remote } = yield* Conformance.clientHalf(
            address,
            address,
            port,
            Buffer.from(found[1]!, "hex"),
            {
              timeout: "400 millis"
            }
          )
          const src = yield* LocalMr.allocate(peer, 64, Usage.WRITE_SRC)
          yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
          yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, freezePeer: true })
          const error = yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
            .pipe(
              Effect.flip,
              Effect.timeout("10 seconds")
            )
          assert.strictEqual(error._tag, "ConnectionClosedError", String(error))
          assert.strictEqual(yield* Connection.state(client), "Lost")
        }))).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
      }),
    120_000
  )

  it.scopedLive(
    "the process that serves the network SIGKILLed: this one's connection is LOST, its operations end, nothing is left",
    () =>
      Effect.gen(function*() {
        const directory = yield* Effect.acquireRelease(
          Effect.sync(() => fs.mkdtempSync(nodePath.join(os.tmpdir(), "network-test-"))),
          (directory) => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true }))
        )
        const path = nodePath.join(directory, "network.sock")
        const port = 7611
        const server = yield* startServer(path, port, "network-kv-server", "serve")
        const found = yield* server.line(/^offer ([0-9a-f]+)/)
        yield* Ledger.checked(Effect.scoped(Effect.gen(function*() {
          const { client, peer, remote } = yield* Conformance.clientHalf(
            address,
            address,
            port,
            Buffer.from(found[1]!, "hex")
          )
          const src = yield* LocalMr.allocate(peer, 64, Usage.WRITE_SRC)
          yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
          server.kill()
          yield* Connection.awaitClosed(client).pipe(Effect.timeout("10 seconds"))
          assert.strictEqual(yield* Connection.state(client), "Lost")
          const after = yield* Effect.flip(
            Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 8 })
          )
          assert.strictEqual(after._tag, "ConnectionClosedError")
          // The network is gone with it: listening needs a network.
          const listening = yield* Effect.flip(Listener.make(peer, address, port))
          assert.match(listening.message, /the simulated network at .* is gone/)
        }))).pipe(Effect.provide(SimulatedNetwork.layer({ path })))
        assert.strictEqual(yield* server.exited, "SIGKILL")
      }),
    120_000
  )

  it.live("joining where nothing serves, bad options, serving where no socket can be made → SimulatedNetworkError", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.provide(Effect.void, SimulatedNetwork.layer({ path: "/nonexistent/network.sock", timeout: "2 seconds" }))
      )
      assert.strictEqual(error._tag, "SimulatedNetworkError")
      assert.match(error.message, /\/nonexistent\/network\.sock: .*serve it first/)
      // Bad options: the same tagged error, saying what was wrong.
      const badTimeout = yield* Effect.flip(
        Effect.provide(Effect.void, SimulatedNetwork.layer({ path: "/tmp/x.sock", timeout: -1 }))
      )
      assert.match(badTimeout.message, /timeout must be a positive, finite duration \(got -1\)/)
      const badPath = yield* Effect.flip(
        Effect.provide(Effect.void, SimulatedNetwork.layer({ path: 42 as unknown as string }))
      )
      assert.match(badPath.message, /path must be the non-empty string/)
      const noOptions = yield* Effect.flip(
        Effect.provide(Effect.void, SimulatedNetwork.layer(null as unknown as SimulatedNetwork.JoinOptions))
      )
      assert.match(noOptions.message, /layer takes \{ path \}/)
      // Serving where no socket can be made: the same tagged error.
      const unserved = yield* Effect.flip(
        Effect.scoped(SimulatedNetwork.serve({ path: "/nonexistent/dir/network.sock" }))
      )
      assert.strictEqual(unserved._tag, "SimulatedNetworkError")
      const notAPath = yield* Effect.flip(Effect.scoped(SimulatedNetwork.serve({ path: 42 as unknown as string })))
      assert.match(notAPath.message, /path must be a non-empty string/)
      // Options whose getters throw: the same tagged error, from serve's Effect (never thrown as it is called).
      const trapped = new Proxy({ path: "/tmp/x.sock" }, {
        get: () => {
          throw new Error("a trap")
        }
      })
      for (
        const made of [
          Effect.scoped(SimulatedNetwork.serve(trapped)),
          Effect.provide(Effect.void, SimulatedNetwork.layer(trapped))
        ]
      ) {
        const unread = yield* Effect.flip(made)
        assert.strictEqual(unread._tag, "SimulatedNetworkError")
        assert.include(unread.message, "the options cannot be read (Error: a trap)")
      }
    }))
})
