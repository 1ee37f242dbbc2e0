// RdmaClient on the device: connected to a server in the same VM, it reconnects to the server
// restarted after a kill (its connections closed, its endpoint gone), fails or bounds operations
// while the server is down, and leaves no handle alive. The live clock: the timeouts must fire.
import { Connection, Listener, LocalMr, Peer, RdmaClient, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Schedule, Scope, Stream } from "effect"
import * as NativeDriver from "../src/NativeDriver.js"
import { address } from "./support.js"

const storeUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
const regions = { store: storeUsage }

/** A server that can be killed (its scope closed) and started again with a new region. */
const makeServer = (port: number) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    let running: { scope: Scope.CloseableScope; descriptor: Uint8Array; memory: Uint8Array } | undefined
    const start = Effect.gen(function*() {
      const scope = yield* Scope.make()
      const started = yield* Effect.gen(function*() {
        const mr = yield* LocalMr.allocate(peer, 4096, storeUsage)
        const ep = yield* Listener.make(peer, address, port)
        yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
          Listener.next(ep),
          (req) =>
            Effect.forkScoped(
              Effect.scoped(Effect.flatMap(Listener.accept(req), (conn) => Connection.awaitClosed(conn)))
            )
        )))
        return { descriptor: yield* LocalMr.descriptor(mr), memory: mr.memory }
      }).pipe(Scope.extend(scope))
      running = { scope, ...started }
    })
    const stop = Effect.suspend(() => {
      const r = running
      running = undefined
      return r === undefined ? Effect.void : Scope.close(r.scope, Exit.void)
    })
    yield* Effect.addFinalizer(() => stop)
    const offer = Effect.suspend(() =>
      running === undefined
        ? Effect.fail(new Error("the server is down"))
        : Effect.succeed<RdmaClient.Offer>({
          rdma: { address, port },
          regions: { store: running.descriptor },
          config: {}
        })
    )
    return { start, stop, offer, memory: () => running?.memory }
  })

const waitFor = (client: RdmaClient.RdmaClient<any>, tag: RdmaClient.State["_tag"]) =>
  client.changes.pipe(Stream.filter((s) => s._tag === tag), Stream.runHead, Effect.timeout("120 seconds"))

describe("RdmaClient on the device", () => {
  it.live(
    "reconnects to a restarted server, fails operations at once while it is down, leaves nothing",
    () =>
      Effect.gen(function*() {
        yield* Effect.scoped(Effect.gen(function*() {
          const server = yield* makeServer(18131)
          yield* server.start
          const peer = yield* Peer.make(address)
          const client = yield* RdmaClient.make({
            peer,
            offer: server.offer,
            regions,
            reconnect: Schedule.spaced("50 millis"),
            connection: { timeout: "20 seconds" },
            pollMillis: 200
          })
          const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
          const put = (at: number, byte: number) =>
            Effect.gen(function*() {
              src.memory[at] = byte
              yield* RdmaClient.write(client, { dst: "store", dstOffset: at, src, srcOffset: at, length: 1 })
              yield* RdmaClient.flush(client, { dst: "store", dstOffset: at, length: 1 })
            })
          yield* waitFor(client, "Connected")
          yield* put(1, 11)
          assert.strictEqual(server.memory()![1], 11)
          yield* server.stop
          yield* waitFor(client, "Reconnecting")
          const down = yield* Effect.flip(put(2, 22))
          assert.include(["NotConnectedError", "ConnectionClosedError", "CompletionError"], down._tag)
          yield* server.start
          yield* waitFor(client, "Connected")
          yield* put(2, 22)
          assert.strictEqual(server.memory()![2], 22, "the restarted server's new region")
        }))
        const live = yield* (yield* RdmaDriver).live
        assert.isTrue(Object.values(live).every((n) => n === 0), JSON.stringify(live))
      }).pipe(Effect.provide(NativeDriver.layer)),
    { timeout: 600_000 }
  )
})
