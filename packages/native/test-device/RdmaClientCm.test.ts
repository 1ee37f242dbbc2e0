// RdmaClient over librdmacm (transport "cm") on the device: against a CmListener in the same VM
// that admits with a token and sends its regions' keys with each acceptance, it writes and reads
// with those keys, reconnects to the server restarted after a kill, fails operations at once while
// it is down, hears a wrong token's refusal with its reason (the rejection's private data, through
// the real CM), and leaves no handle alive. The live clock: the timeouts must fire.
import { Admission, CmEndpoint, CmListener, RdmaClient, RemoteKey, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Schedule, Scope, Stream } from "effect"
import * as NativeDriver from "../src/NativeDriver.js"
import { address } from "./support.js"

const regions = { store: Usage.WRITE_DST, snap: Usage.READ_SRC }

/** A CmListener server that can be killed (its scope closed) and started again with new memory. */
const makeServer = (port: number, admission: Admission.Admission) =>
  Effect.gen(function*() {
    let running: { scope: Scope.CloseableScope; store: Uint8Array } | undefined
    const start = Effect.gen(function*() {
      const scope = yield* Scope.make()
      const store = new Uint8Array(4096)
      const snap = new Uint8Array(4096).fill(0x5a)
      const listener = yield* CmListener.make(address, port, { timeout: "20 seconds" }).pipe(Scope.extend(scope))
      const handler = (request: CmEndpoint.CmEndpoint) =>
        Effect.gen(function*() {
          const storeMr = yield* CmEndpoint.registerWrite(request, store)
          const snapMr = yield* CmEndpoint.registerRead(request, snap)
          const privateData = yield* RdmaClient.acceptData({
            store: RemoteKey.make(storeMr),
            snap: RemoteKey.make(snapMr)
          })
          yield* CmEndpoint.awaitClosed(yield* CmListener.accept(request, { privateData }))
        }).pipe(Effect.catchAll(() => Effect.void))
      yield* Effect.forkIn(CmListener.serve(listener, handler, { admission }), scope)
      running = { scope, store }
    })
    const stop = Effect.suspend(() => {
      const r = running
      running = undefined
      return r === undefined ? Effect.void : Scope.close(r.scope, Exit.void)
    })
    yield* Effect.addFinalizer(() => stop)
    const offerWith = (token: Uint8Array) =>
      Effect.succeed<RdmaClient.Offer>({ rdma: { address, port }, regions: {}, config: {}, token })
    return { start, stop, offerWith, store: () => running?.store }
  })

const waitFor = (client: RdmaClient.RdmaClient<any, any, "cm">, tag: RdmaClient.State["_tag"]) =>
  client.changes.pipe(Stream.filter((s) => s._tag === tag), Stream.runHead, Effect.timeout("120 seconds"))

describe("RdmaClient over librdmacm on the device", () => {
  it.live(
    "writes and reads with the acceptance's keys, reconnects to a restarted server, hears why a wrong token is refused, leaves nothing",
    () =>
      Effect.gen(function*() {
        yield* Effect.scoped(Effect.gen(function*() {
          const token = new Uint8Array([8, 6, 7, 5, 3, 0, 9, 1])
          const admission = yield* Admission.make(token, { uses: 10 })
          const server = yield* makeServer(18141, admission)
          yield* server.start
          const client = yield* RdmaClient.make({
            transport: "cm",
            offer: server.offerWith(token),
            regions,
            reconnect: Schedule.spaced("50 millis"),
            endpoint: { timeout: "20 seconds" },
            pollMillis: 200
          })
          const put = (at: number, byte: number) =>
            RdmaClient.withEndpoint(client, (ep, keys) =>
              CmEndpoint.write(ep, { dst: keys.store, dstOffset: at, src: new Uint8Array([byte]), length: 1 }))
          yield* waitFor(client, "Connected")
          yield* put(1, 11)
          // The write has completed at the client: the server's memory holds it.
          assert.strictEqual(server.store()![1], 11)
          const read = yield* RdmaClient.withEndpoint(client, (ep, keys) =>
            Effect.scoped(Effect.gen(function*() {
              const into = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4))
              yield* CmEndpoint.read(ep, { dst: into, src: keys.snap, srcOffset: 100, length: 4 })
              return Array.from(into.memory)
            })))
          assert.deepStrictEqual(read, [0x5a, 0x5a, 0x5a, 0x5a])

          yield* server.stop
          yield* waitFor(client, "Reconnecting")
          const down = yield* Effect.flip(put(2, 22))
          assert.include(["NotConnectedError", "ConnectionClosedError", "CompletionError"], down._tag)
          yield* server.start
          yield* waitFor(client, "Connected")
          yield* put(2, 22)
          assert.strictEqual(server.store()![2], 22, "the restarted server's new memory")

          const wrong = yield* RdmaClient.make({
            transport: "cm",
            offer: server.offerWith(new Uint8Array([1, 2, 3])),
            regions,
            reconnect: Schedule.spaced("50 millis"),
            endpoint: { timeout: "20 seconds" }
          })
          const refused = yield* waitFor(wrong, "Reconnecting")
          const error = (refused as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
          assert.strictEqual(error._tag, "AdmissionRejectedError")
          assert.strictEqual(error.reason, "WrongToken", error.message)
        }))
        const live = yield* (yield* RdmaDriver).live
        assert.isTrue(
          Object.values(live).every((n) =>
            n === 0
          ),
          JSON.stringify(live)
        )
      }).pipe(Effect.provide(NativeDriver.layer)),
    { timeout: 600_000 }
  )
})
