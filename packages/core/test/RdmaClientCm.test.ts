/**
 * RdmaClient over librdmacm (`transport: "cm"`) on the simulated driver: the same supervision as
 * the librpma client (Connected, reconnect on loss on its schedule, NotConnectedError while down,
 * Closed on a spent token, spent once admitted even if the client refuses its acceptance), the
 * server's keys from its acceptance (RdmaClient.acceptData), the admission's reason in the
 * client's error, and the other transport's operations refused. Every resource is accounted for by
 * the leak ledger after each case.
 */
import { Admission, CmEndpoint, CmListener, Peer, RdmaClient, RemoteKey, Usage } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, Context, Effect, Exit, Schedule, Scope, Stream, TestClock, TestServices } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const regions = { store: Usage.WRITE_DST, snap: Usage.READ_SRC }

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/**
 * A librdmacm server that can be started (new memory, a listener on `port`, each client's regions
 * registered on its request and their keys sent with the acceptance) and stopped (its scope
 * closed: its endpoints end, as a killed process's do).
 */
const makeServer = (port: number, options?: { readonly admission?: Admission.Admission; readonly keys?: boolean }) =>
  Effect.gen(function*() {
    let running: { scope: Scope.CloseableScope; store: Uint8Array; snap: Uint8Array } | undefined
    const start = Effect.gen(function*() {
      const scope = yield* Scope.make()
      const store = new Uint8Array(4096)
      const snap = new Uint8Array(4096).fill(0x5a)
      const listener = yield* CmListener.make(address, port).pipe(Scope.extend(scope))
      const handler = (request: CmEndpoint.CmEndpoint) =>
        Effect.gen(function*() {
          const storeMr = yield* CmEndpoint.registerWrite(request, store)
          const snapMr = yield* CmEndpoint.registerRead(request, snap)
          const privateData = options?.keys === false
            ? undefined
            : yield* RdmaClient.acceptData({ store: RemoteKey.make(storeMr), snap: RemoteKey.make(snapMr) })
          const ep = yield* CmListener.accept(request, { privateData })
          yield* CmEndpoint.awaitClosed(ep)
        }).pipe(Effect.catchAll(() => Effect.void))
      yield* Effect.forkIn(CmListener.serve(listener, handler, { admission: options?.admission }), scope)
      running = { scope, store, snap }
    })
    const stop = Effect.suspend(() => {
      const r = running
      running = undefined
      return r === undefined ? Effect.void : Scope.close(r.scope, Exit.void)
    })
    yield* Effect.addFinalizer(() => stop)
    const offerWith = (token?: Uint8Array) =>
      Effect.succeed<RdmaClient.Offer>({ rdma: { address, port }, regions: {}, config: {}, token })
    return { start, stop, offer: offerWith(), offerWith, store: () => running?.store }
  })

const waitFor = (client: RdmaClient.RdmaClient<any, any, RdmaClient.Transport>, tag: RdmaClient.State["_tag"]) =>
  client.changes.pipe(Stream.filter((s) => s._tag === tag), Stream.runHead, Effect.timeout("5 seconds"))

/** A wait under TestClock, bounded on the wall clock (a bound on a hang, never the thing measured). */
const live = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.raceFirst(
    effect,
    Effect.zipRight(
      TestServices.provideLive(Effect.sleep("5 seconds")),
      Effect.dieMessage("no end in 5 s of wall-clock time")
    )
  )

/** One byte written inline into the server's region `store`, on the client's current session. */
const put = (client: RdmaClient.RdmaClient<typeof regions, any, "cm">, at: number, byte: number) =>
  RdmaClient.withEndpoint(
    client,
    (ep, keys) => CmEndpoint.write(ep, { dst: keys.store, dstOffset: at, src: new Uint8Array([byte]), length: 1 })
  )

describe("RdmaClient over librdmacm", () => {
  it.live("connects to a CmListener, writes and reads with the keys of its acceptance, refuses librpma's operations, and closes with its scope", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7601)
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offer,
        regions,
        reconnect: Schedule.spaced("5 millis"),
        pollMillis: 20
      })
      assert.strictEqual(client.transport, "cm")
      const connected = yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      assert.deepStrictEqual(connected, { _tag: "Connected", address, port: 7601 })
      yield* put(client, 9, 42)
      assert.strictEqual(server.store()![9], 42)
      const read = yield* RdmaClient.withEndpoint(client, (ep, keys) =>
        Effect.scoped(Effect.gen(function*() {
          assert.strictEqual(keys.snap.access, "read")
          const into = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4))
          yield* CmEndpoint.read(ep, { dst: into, src: keys.snap, srcOffset: 100, length: 4 })
          return Array.from(into.memory)
        })))
      assert.deepStrictEqual(read, [0x5a, 0x5a, 0x5a, 0x5a])

      // librpma's operations on a cm client (untyped code): a tagged error naming what to use.
      const wrong = yield* Effect.flip(
        RdmaClient.send(client as never, { src: undefined as never, length: 1 })
      )
      assert.strictEqual(wrong._tag, "WrongTransportError")
      assert.match(
        wrong.message,
        /rpma_send runs on a librpma connection, and this client's transport is "cm".*use RdmaClient\.withEndpoint/
      )
      const wrongConn = yield* Effect.flip(RdmaClient.withConnection(client as never, () => Effect.void))
      assert.strictEqual(wrongConn._tag, "WrongTransportError")
    })))

  it.live("a lost link under an operation retires the session at once: the operation fails with its error, the next with NotConnectedError, a retry reaches the next session", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7605)
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offer,
        regions,
        reconnect: Schedule.spaced("20 millis"),
        pollMillis: 1000
      })
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* SimulatedDriver.fail({ operation: "rdma_post_write", nth: 1, loseConnection: true })
      const lost = yield* Effect.flip(put(client, 3, 1))
      assert.include(["ConnectionClosedError", "CompletionError"], lost._tag)
      // Retired before the operation returned: not left for the 1 s poll to find.
      assert.strictEqual((yield* client.state)._tag, "Reconnecting")
      const next = yield* Effect.flip(put(client, 3, 2))
      assert.strictEqual(next._tag, "NotConnectedError")
      yield* put(client, 3, 3).pipe(
        Effect.retry({ while: (e) => e._tag === "NotConnectedError", schedule: Schedule.spaced("10 millis") }),
        Effect.timeout("5 seconds")
      )
      assert.strictEqual(server.store()![3], 3)
    })))

  it.live("RdmaClient.layer with transport \"cm\": the client as a Layer of the user's Tag, no Peer needed", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7606)
      yield* server.start
      class Store extends Context.Tag("Store")<Store, RdmaClient.RdmaClient<typeof regions, any, "cm">>() {}
      const StoreLive = RdmaClient.layer(Store, {
        transport: "cm",
        offer: server.offer,
        regions,
        reconnect: Schedule.spaced("5 millis")
      })
      yield* Effect.gen(function*() {
        const store = yield* Store
        assert.strictEqual(store.transport, "cm")
        yield* RdmaClient.awaitConnected(store).pipe(Effect.timeout("5 seconds"))
        yield* put(store, 5, 55)
      }).pipe(Effect.provide(StoreLive))
      assert.strictEqual(server.store()![5], 55)
    })))

  it.effect("under TestClock: a lost server fails operations at once; the client reconnects on its schedule to the restarted one", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7602)
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offer,
        regions,
        reconnect: Schedule.spaced("1 minute"),
        pollMillis: 20
      })
      yield* live(RdmaClient.awaitConnected(client))
      yield* put(client, 1, 1)
      const before = server.store()!
      assert.strictEqual(before[1], 1)
      // Killed: its endpoints end, the client's with them, and the session is retired.
      yield* server.stop
      const reconnecting = yield* live(waitFor(client, "Reconnecting"))
      assert.strictEqual(reconnecting._tag, "Some")
      const down = yield* Effect.flip(put(client, 1, 2))
      assert.strictEqual(down._tag, "NotConnectedError")
      assert.match(down.message, /RdmaClient\.withEndpoint: the RDMA client is not connected: it is reconnecting/)
      // Back up: the supervisor waits out the schedule's minute on the test's clock, and only then
      // dials, to the new server's new regions.
      yield* server.start
      const start = yield* Clock.currentTimeMillis
      yield* live(Effect.repeat(
        Effect.zipLeft(TestClock.sleeps(), TestServices.provideLive(Effect.sleep("2 millis"))),
        { until: (sleeps) => Chunk.toReadonlyArray(sleeps).some((at) => at >= start + 59_000) }
      ))
      assert.strictEqual((yield* client.state)._tag, "Reconnecting")
      yield* TestClock.adjust("1 minute")
      yield* live(RdmaClient.awaitConnected(client))
      yield* put(client, 1, 3)
      assert.strictEqual(server.store()![1], 3)
      assert.strictEqual(before[1], 1, "the old server's memory is not written")
    })))

  it.live("admission: a wrong token is refused saying so and retried; a spent one ends the client in Closed with the reason", () =>
    inWorld(Effect.gen(function*() {
      const token = new Uint8Array([3, 1, 4, 1, 5, 9, 2, 6])
      const admission = yield* Admission.make(token) // one connection
      const server = yield* makeServer(7603, { admission })
      yield* server.start

      const wrong = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offerWith(new Uint8Array([9, 9, 9])),
        regions,
        reconnect: Schedule.spaced("5 millis")
      })
      const second = yield* wrong.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting" && s.attempt >= 2),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      assert.strictEqual(second._tag, "Some")
      const refused = (second as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
      assert.strictEqual(refused._tag, "AdmissionRejectedError")
      assert.strictEqual(refused.reason, "WrongToken")
      assert.match(refused.message, /the server says it is not the token it expects \(retried/)

      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offerWith(token),
        regions,
        reconnect: Schedule.spaced("5 millis"),
        pollMillis: 20
      })
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* put(client, 0, 7)
      // The server restarts with the same admission: the token's one use is spent.
      yield* server.stop
      yield* server.start
      yield* waitFor(client, "Closed")
      const closed = yield* client.state
      assert.strictEqual(closed._tag, "Closed")
      const spent = (closed as { lastError: RdmaClient.AdmissionRejectedError }).lastError
      assert.strictEqual(spent._tag, "AdmissionRejectedError")
      assert.strictEqual(spent.reason, "Spent")
      const after = yield* Effect.flip(put(client, 0, 8))
      assert.strictEqual(after._tag, "NotConnectedError")
      assert.match(after.message, /it is closed: .*spent/)

      // Another client given the spent token hears whose use it was not: retried.
      const other = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offerWith(token),
        regions,
        reconnect: Schedule.spaced("5 millis")
      })
      const failed = yield* waitFor(other, "Reconnecting")
      const used = (failed as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
      assert.strictEqual(used.reason, "TokenUsed")
      assert.match(used.message, /its uses are spent, by another client/)
    })))

  it.effect("under TestClock: a token the server admitted is spent even when the client refuses the acceptance: offered again, it ends the client in Closed", () =>
    inWorld(Effect.gen(function*() {
      const token = new Uint8Array([1, 6, 1, 8, 0, 3, 3, 9])
      // One connection, accepted without the keys the client needs.
      const server = yield* makeServer(7607, { admission: yield* Admission.make(token), keys: false })
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offerWith(token),
        regions,
        reconnect: Schedule.spaced("1 minute")
      })
      const refused = yield* live(waitFor(client, "Reconnecting"))
      const invalid = (refused as { value: { lastError: RdmaClient.InvalidOfferError } }).value.lastError
      assert.strictEqual(invalid._tag, "InvalidOfferError")
      assert.match(invalid.message, /carries no region keys/)
      // The next attempt, on the schedule's minute, offers the token its acceptance spent.
      const start = yield* Clock.currentTimeMillis
      yield* live(Effect.repeat(
        Effect.zipLeft(TestClock.sleeps(), TestServices.provideLive(Effect.sleep("2 millis"))),
        { until: (sleeps) => Chunk.toReadonlyArray(sleeps).some((at) => at >= start + 59_000) }
      ))
      yield* TestClock.adjust("1 minute")
      const next = yield* live(client.changes.pipe(
        Stream.filter((s) => s._tag === "Closed" || (s._tag === "Reconnecting" && s.attempt >= 2)),
        Stream.runHead
      ))
      assert.strictEqual(next._tag, "Some")
      const state = (next as { value: RdmaClient.State }).value
      assert.strictEqual(state._tag, "Closed", `a spent token ends the client, not ${JSON.stringify(state)}`)
      const spent = (state as { lastError: RdmaClient.AdmissionRejectedError }).lastError
      assert.strictEqual(spent._tag, "AdmissionRejectedError")
      assert.strictEqual(spent.reason, "Spent")
    })))

  it.live("a rejection that gives no reason (not an admission's) is a failed attempt, retried, even with a token admitted before", () =>
    inWorld(Effect.gen(function*() {
      const token = new Uint8Array([2, 7, 1, 8, 2, 8, 1, 8])
      const server = yield* makeServer(7605, {
        admission: yield* Admission.make(token, { singleUse: false, uses: 100 })
      })
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offerWith(token),
        regions,
        reconnect: Schedule.spaced("5 millis"),
        pollMillis: 20
      })
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* server.stop
      // In the server's place, a listener that rejects every request and says nothing.
      const silent = yield* CmListener.make(address, 7605)
      yield* Effect.forkScoped(
        Effect.forever(Effect.flatMap(CmListener.next(silent), (request) => CmListener.reject(request)))
      )
      const retried = yield* client.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting" && s.attempt >= 3),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      assert.strictEqual(retried._tag, "Some")
      const lastError = (retried as { value: { lastError: { _tag: string; errnoName?: string } } }).value.lastError
      assert.strictEqual(lastError._tag, "RdmaCmError")
      assert.strictEqual(lastError.errnoName, "ECONNREFUSED")
      assert.notStrictEqual((yield* client.state)._tag, "Closed")
    })))

  it.live("an acceptance without the keys, bad options, and keys that do not fit are tagged errors that say what to give", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7604, { keys: false })
      yield* server.start
      const client = yield* RdmaClient.make({
        transport: "cm",
        offer: server.offer,
        regions,
        reconnect: Schedule.spaced("5 millis")
      })
      const failed = yield* waitFor(client, "Reconnecting")
      const invalid = (failed as { value: { lastError: RdmaClient.InvalidOfferError } }).value.lastError
      assert.strictEqual(invalid._tag, "InvalidOfferError")
      assert.match(invalid.message, /the server's acceptance carries no region keys/)

      const both = yield* Effect.flip(RdmaClient.make({
        transport: "cm",
        offer: server.offer,
        regions: { store: Usage.combine(Usage.WRITE_DST, Usage.READ_SRC) } as never,
        reconnect: Schedule.spaced("5 millis")
      }))
      assert.strictEqual(both._tag, "InvalidOptionsError")
      assert.match(both.message, /regions\.store must be Usage\.WRITE_DST or Usage\.READ_SRC on the "cm" transport/)

      const key: RemoteKey.RemoteKey = { address: 4096n, length: 64n, rkey: 7, access: "write" }
      const many = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`region${i}`, key]))
      const tooMany = yield* Effect.flip(RdmaClient.acceptData(many))
      assert.match(tooMany.message, /RdmaClient\.acceptData: the option keys must fit an acceptance's 196 bytes/)
      // 5 + 5 × (1 + 7 + 24) bytes fit; a sixth key takes 197.
      const five = yield* RdmaClient.acceptData(Object.fromEntries(Object.entries(many).slice(0, 5)))
      assert.strictEqual(five.byteLength, 165)
      const six = yield* Effect.flip(RdmaClient.acceptData(Object.fromEntries(Object.entries(many).slice(0, 6))))
      assert.match(six.message, /these take 197/)
      const notKey = yield* Effect.flip(RdmaClient.acceptData({ a: 5 } as never))
      assert.match(notKey.message, /must hold RemoteKeys/)

      // The librdmacm operation on a librpma client.
      const rpma = yield* RdmaClient.make({
        offer: server.offer,
        regions: {},
        reconnect: Schedule.spaced("1 hour"),
        peer: yield* Peer.make(address)
      })
      const wrong = yield* Effect.flip(RdmaClient.withEndpoint(rpma as never, () => Effect.void))
      assert.strictEqual(wrong._tag, "WrongTransportError")
      assert.match(wrong.message, /runs on a librdmacm endpoint, and this client's transport is "rpma"/)
    })))
})
