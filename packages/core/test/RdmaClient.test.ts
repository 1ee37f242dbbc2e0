/**
 * RdmaClient on the simulated fabric: a server that can be killed, restarted and frozen, a client
 * that reconnects, and operations that each end with a result or a tagged error within their bound.
 */
import {
  Admission,
  Connection,
  Listener,
  LocalMr,
  Peer,
  RdmaClient,
  RdmaMetrics,
  RdmaStream,
  Usage
} from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import {
  Chunk,
  Clock,
  Deferred,
  Effect,
  Fiber,
  Metric,
  Schedule,
  Schema,
  Scope,
  Stream,
  TestClock,
  TestServices
} from "effect"
import * as Exit from "effect/Exit"

const address = SimulatedDriver.DEFAULT_ADDRESS
const storeUsage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
const regions = { store: storeUsage }

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/**
 * A server that can be started (a new region, a new endpoint on `port`, accepting every client
 * until stopped) and stopped (its scope closed: its connections end, as a killed process's do).
 */
const makeServer = (port: number) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    let running: { scope: Scope.CloseableScope; descriptor: Uint8Array; memory: Uint8Array } | undefined
    let offers = 0
    const start = (options?: { readonly frozen?: boolean }) =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const started = yield* Effect.gen(function*() {
          const mr = yield* LocalMr.allocate(peer, 4096, storeUsage)
          const ep = yield* Listener.make(peer, address, port)
          // Frozen: it listens and never answers, as a stopped process whose kernel still queues requests.
          if (options?.frozen !== true) {
            // Each client served in a fiber of its own until its connection ends.
            yield* Effect.forkScoped(Effect.forever(Effect.flatMap(
              Listener.next(ep),
              (req) =>
                Effect.forkScoped(
                  Effect.scoped(Effect.flatMap(Listener.accept(req), (conn) => Connection.awaitClosed(conn)))
                )
            )))
          }
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
    // What DescriptorExchange.fetch gives a client: fails while the server is down.
    const offer = Effect.suspend(() => {
      offers++
      return running === undefined
        ? Effect.fail(new Error("the server is down"))
        : Effect.succeed<RdmaClient.Offer>({
          rdma: { address, port },
          regions: { store: running.descriptor },
          config: {}
        })
    })
    return { start, stop, offer, offers: () => offers, memory: () => running?.memory, peer }
  })

const fast = Schedule.spaced("5 millis")

/** A wait under TestClock, bounded on the wall clock (a bound on a hang, never the thing measured). */
const live = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.raceFirst(
    effect,
    Effect.zipRight(
      TestServices.provideLive(Effect.sleep("5 seconds")),
      Effect.dieMessage("no end in 5 s of wall-clock time")
    )
  )

const waitFor = (client: RdmaClient.RdmaClient<any>, tag: RdmaClient.State["_tag"]) =>
  client.changes.pipe(Stream.filter((s) => s._tag === tag), Stream.runHead, Effect.timeout("5 seconds"))

const clientOf = <E>(
  server: { offer: Effect.Effect<RdmaClient.Offer, E> },
  options?: Partial<RdmaClient.MakeOptions<typeof regions, E, never, unknown, never>>
) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const client = yield* RdmaClient.make({
      offer: server.offer,
      regions,
      reconnect: fast,
      peer,
      pollMillis: 20,
      ...options
    })
    const src = yield* LocalMr.allocate(peer, 4096, Usage.WRITE_SRC)
    const dst = yield* LocalMr.allocate(peer, 4096, Usage.READ_DST)
    return { client, src, dst }
  })

const put = (
  client: RdmaClient.RdmaClient<typeof regions>,
  src: LocalMr.LocalMr<"WRITE_SRC">,
  at: number,
  byte: number
) =>
  Effect.gen(function*() {
    src.memory[at] = byte
    yield* RdmaClient.write(client, { dst: "store", dstOffset: at, src, srcOffset: at, length: 1 })
    yield* RdmaClient.flush(client, { dst: "store", dstOffset: at, length: 1 })
  })

describe("RdmaClient", () => {
  it.live("connects, runs operations on its connection, and closes with its scope, leaving nothing", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7481)
      yield* server.start()
      const states: Array<string> = []
      const clientScope = yield* Scope.make()
      const { client, dst, src } = yield* clientOf(server).pipe(Scope.extend(clientScope))
      yield* Effect.forkIn(
        Stream.runForEach(client.changes, (s) => Effect.sync(() => states.push(s._tag))),
        clientScope
      )
      yield* waitFor(client, "Connected")
      yield* put(client, src, 10, 42)
      assert.strictEqual(server.memory()![10], 42)
      yield* RdmaClient.read(client, { dst, dstOffset: 0, src: "store", srcOffset: 0, length: 64 })
      assert.strictEqual(dst.memory[10], 42)
      yield* RdmaClient.writeMany(client, {
        dst: "store",
        src,
        spans: [{ dstOffset: 100, srcOffset: 10, length: 1 }, { dstOffset: 200, srcOffset: 10, length: 1 }]
      })
      assert.strictEqual(server.memory()![200], 42)
      // The array form, as Connection.writeMany takes it: each write names its region.
      yield* RdmaClient.writeMany(client, [
        { dst: "store", dstOffset: 300, src, srcOffset: 10, length: 1 },
        { dst: "store", dstOffset: 400, src, srcOffset: 10, length: 1 }
      ])
      assert.strictEqual(server.memory()![300], 42)
      assert.strictEqual(server.memory()![400], 42)
      const unknown = yield* Effect.flip(RdmaClient.writeMany(client, [
        { dst: "store", dstOffset: 500, src, srcOffset: 10, length: 1 },
        // From untyped code: not one of the client's regions (a type error in TypeScript).
        { dst: "elsewhere" as "store", dstOffset: 0, src, srcOffset: 10, length: 1 }
      ]))
      assert.strictEqual(unknown._tag, "OutOfRangeError")
      assert.match(unknown.message, /write 1 of the batch: no region named "elsewhere"/)
      assert.strictEqual(server.memory()![500], 0, "a refused batch posts nothing")
      const withImm = yield* Effect.flip(RdmaClient.writeMany(client, [
        { dst: "store", dstOffset: 500, src, srcOffset: 10, length: 1, imm: 7 }
      ]))
      assert.match(withImm.message, /carries no immediate data/)
      assert.strictEqual((yield* client.offer).rdma.port, 7481)
      yield* Scope.close(clientScope, Exit.void)
      assert.strictEqual((yield* client.state)._tag, "Closed")
      const after = yield* Effect.flip(put(client, src, 0, 1))
      assert.strictEqual(after._tag, "NotConnectedError")
      assert.match(after.message, /closed/)
      assert.deepStrictEqual(states.slice(0, 2), ["Connecting", "Connected"])
    })))

  it.live("a lost connection: the operation fails with its error, the client reconnects with a fresh offer", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7482)
      yield* server.start()
      const { client, src } = yield* clientOf(server)
      yield* waitFor(client, "Connected")
      const before = (yield* Metric.value(RdmaMetrics.clientReconnects)).count
      const offersBefore = server.offers()
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      const lost = yield* Effect.flip(put(client, src, 1, 7))
      assert.include(["ConnectionClosedError", "CompletionError"], lost._tag)
      yield* waitFor(client, "Reconnecting")
      yield* waitFor(client, "Connected")
      assert.isAbove(server.offers(), offersBefore)
      assert.isAbove((yield* Metric.value(RdmaMetrics.clientReconnects)).count, before)
      yield* put(client, src, 1, 8)
      assert.strictEqual(server.memory()![1], 8)
    })))

  it.live("a killed server: operations fail at once while it is down; the client reconnects to the restarted one", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7483)
      yield* server.start()
      const { client, src } = yield* clientOf(server)
      yield* waitFor(client, "Connected")
      yield* server.stop
      const reconnecting = yield* waitFor(client, "Reconnecting")
      assert.isTrue(reconnecting._tag === "Some")
      const down = yield* Effect.flip(put(client, src, 2, 1))
      assert.strictEqual(down._tag, "NotConnectedError")
      assert.strictEqual((down as RdmaClient.NotConnectedError).waitedMs, 0)
      assert.match(down.message, /reconnecting/)
      yield* server.start()
      yield* waitFor(client, "Connected")
      yield* put(client, src, 2, 9)
      // The restarted server's new region got it: the client fetched the new descriptor.
      assert.strictEqual(server.memory()![2], 9)
    })))

  it.live("whileDisconnected wait: an operation waits for the reconnect, or fails when its bound passes", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7484)
      yield* server.start()
      const { client, src } = yield* clientOf(server, { whileDisconnected: { wait: "3 seconds" } })
      yield* waitFor(client, "Connected")
      yield* server.stop
      yield* waitFor(client, "Reconnecting")
      const waiting = yield* Effect.fork(put(client, src, 3, 5))
      yield* server.start()
      yield* Fiber.join(waiting)
      assert.strictEqual(server.memory()![3], 5)

      const { client: short, src: src2 } = yield* clientOf(server, { whileDisconnected: { wait: "50 millis" } })
      yield* waitFor(short, "Connected")
      yield* server.stop
      yield* waitFor(short, "Reconnecting")
      const timedOut = yield* Effect.flip(put(short, src2, 3, 6))
      assert.strictEqual(timedOut._tag, "NotConnectedError")
      assert.strictEqual((timedOut as RdmaClient.NotConnectedError).waitedMs, 50)
    })))

  it.live("a frozen server: each connect ends at the connection's timeout, and the state says why", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7485)
      yield* server.start({ frozen: true })
      const { client } = yield* clientOf(server, { connection: { timeout: "100 millis" } })
      const state = yield* waitFor(client, "Reconnecting")
      assert.isTrue(state._tag === "Some")
      const error = (state as { value: { lastError: { _tag: string } } }).value.lastError
      assert.strictEqual(error._tag, "ConnectionFailedError")
    })))

  it.live("a schedule that ends closes the client; an offer without a named region fails each attempt", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const client = yield* RdmaClient.make({
        offer: Effect.succeed<RdmaClient.Offer>({ rdma: { address, port: 7486 }, regions: {}, config: {} }),
        regions,
        reconnect: Schedule.recurs(2),
        peer
      })
      const closed = yield* waitFor(client, "Closed")
      assert.isTrue(closed._tag === "Some")
      const state = yield* client.state
      assert.strictEqual(state._tag, "Closed")
      const lastError = (state as { lastError: { _tag: string; message: string } }).lastError
      assert.strictEqual(lastError._tag, "InvalidOfferError")
      assert.match(lastError.message, /no region "store"/)
      const refused = yield* Effect.flip(RdmaClient.send(client, { src: undefined as never, length: 1 }))
      assert.strictEqual(refused._tag, "NotConnectedError")
      assert.match(refused.message, /schedule ended/)
    })))

  it.live("interrupting a waiting operation and closing a connecting client leave nothing alive", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7487)
      yield* server.start({ frozen: true })
      const scope = yield* Scope.make()
      const { client, src } = yield* clientOf(server, {
        connection: { timeout: "200 millis" },
        whileDisconnected: { wait: "10 seconds" }
      }).pipe(Scope.extend(scope))
      const waiting = yield* Effect.fork(put(client, src, 0, 1))
      const gate = yield* Deferred.make<void>()
      yield* Effect.fork(Effect.zipRight(Effect.sleep("20 millis"), Deferred.succeed(gate, undefined)))
      yield* Deferred.await(gate)
      yield* Fiber.interrupt(waiting)
      yield* Scope.close(scope, Exit.void)
      const state = yield* client.state
      assert.strictEqual(state._tag, "Closed")
    })))

  it.live("bad options and an unknown region name are tagged errors that say what to give", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7488)
      const peer = yield* Peer.make(address)
      const options = { peer, offer: server.offer, regions, reconnect: fast }
      const badWait = yield* Effect.flip(
        RdmaClient.make({ ...options, whileDisconnected: { wait: "forever" } } as unknown as typeof options)
      )
      assert.strictEqual(badWait._tag, "InvalidOptionsError")
      assert.match(badWait.message, /whileDisconnected must be "fail" or \{ wait: a finite duration \}/)
      const badUsage = yield* Effect.flip(
        RdmaClient.make({ ...options, regions: { store: -1 } } as unknown as typeof options)
      )
      assert.match(badUsage.message, /regions\.store must be a Usage/)
      const badSchedule = yield* Effect.flip(
        RdmaClient.make({ ...options, reconnect: "1 second" } as unknown as typeof options)
      )
      assert.match(badSchedule.message, /reconnect must be a Schedule/)
      // Options whose getters throw: refused, never thrown as the Effect is made.
      const trapped = new Proxy({}, {
        get: () => {
          throw new Error("a trap")
        }
      }) as typeof options
      const made = RdmaClient.make(trapped)
      const badRead = yield* Effect.flip(made)
      assert.strictEqual(badRead._tag, "InvalidOptionsError")
      assert.match(badRead.message, /the option transport could not be read \(Error: a trap\)/)
      yield* server.start()
      const { client, src } = yield* clientOf(server)
      yield* waitFor(client, "Connected")
      const unknown = yield* Effect.flip(RdmaClient.write(client, { dst: "nope" as never, src, length: 1 }))
      assert.strictEqual(unknown._tag, "OutOfRangeError")
      assert.match(unknown.message, /no region named "nope": the client's regions are "store"/)
    })))

  it.live("a lost link retires the session at once: the state leaves Connected, the next operation fails, a retry reaches the next session", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7489)
      yield* server.start()
      const { client, src } = yield* clientOf(server, { reconnect: Schedule.spaced("20 millis") })
      yield* waitFor(client, "Connected")
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      const lost = yield* Effect.flip(put(client, src, 5, 1))
      assert.include(["ConnectionClosedError", "CompletionError"], lost._tag)
      // Said by the failing operation itself, before its supervisor runs.
      const state = yield* client.state
      assert.strictEqual(state._tag, "Reconnecting")
      assert.strictEqual((state as { lastError: { _tag: string } }).lastError._tag, "ConnectionClosedError")
      const next = yield* Effect.flip(put(client, src, 5, 2))
      assert.strictEqual(next._tag, "NotConnectedError")
      const retried = yield* Effect.flip(put(client, src, 5, 3).pipe(Effect.retry({ times: 3 })))
      assert.strictEqual(retried._tag, "NotConnectedError")
      // Once the next session is up, a retry without delay runs there at its first attempt.
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      let attempts = 0
      yield* Effect.suspend(() => {
        attempts++
        return put(client, src, 5, 4)
      }).pipe(Effect.retry({ times: 3 }))
      assert.strictEqual(attempts, 1)
      assert.strictEqual(server.memory()![5], 4)
    })))

  it.live("a bad offer (null, null or missing regions, a throwing getter, a dying Effect) is a failed attempt, followed by another", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7490)
      yield* server.start()
      const rdma = { address, port: 7490 }
      const hostile = new Proxy({}, {
        get: () => {
          throw new Error("a hostile getter")
        }
      })
      const bad: Array<Effect.Effect<RdmaClient.Offer, Error>> = [
        Effect.succeed(null as never),
        Effect.succeed({ rdma, regions: null, config: {} } as never),
        Effect.succeed({ rdma, config: {} } as never),
        Effect.succeed(hostile as never),
        Effect.sync(() => {
          throw new Error("the offer code threw")
        })
      ]
      let fetched = 0
      const offer = Effect.suspend(() => fetched < bad.length ? bad[fetched++]! : server.offer)
      const { client, src } = yield* clientOf({ offer })
      const states: Array<RdmaClient.State> = []
      yield* Effect.forkScoped(Stream.runForEach(client.changes, (s) => Effect.sync(() => states.push(s))))
      yield* waitFor(client, "Connected")
      const failures = states.flatMap((s) =>
        s._tag === "Reconnecting" ? [s.lastError as { _tag: string; message: string }] : []
      )
      assert.deepStrictEqual(failures.map((e) => e._tag), Array(5).fill("InvalidOfferError"))
      const expected = [
        /it is null/,
        /its regions are null/,
        /its regions are undefined/,
        /reading it threw: a hostile getter/,
        /fetching it died: the offer code threw/
      ]
      failures.forEach((e, i) => assert.match(e.message, expected[i]!))
      yield* put(client, src, 6, 1)
      assert.strictEqual(server.memory()![6], 1)
    })))

  it.live("librpma's rejection says nothing: a token this client spent is said as a possibility and retried until the schedule ends; a wrong one says what the rejection can mean", () =>
    inWorld(Effect.gen(function*() {
      const port = 7491
      const peer = yield* Peer.make(address)
      const mr = yield* LocalMr.allocate(peer, 4096, storeUsage)
      const token = new Uint8Array([7, 1, 2, 3, 4, 5, 6, 7])
      const admission = yield* Admission.make(token) // Admission.make's default: one connection
      const ep = yield* Listener.make(peer, address, port)
      yield* Effect.forkScoped(
        Effect.forever(Effect.flatMap(Listener.next(ep), (req) =>
          Effect.forkScoped(Effect.scoped(
            Listener.accept(req, { admission }).pipe(
              Effect.flatMap((conn) => Connection.awaitClosed(conn)),
              Effect.ignore
            )
          ))))
      )
      const descriptor = yield* LocalMr.descriptor(mr)
      const offerWith = (token: Uint8Array) => ({
        offer: Effect.succeed<RdmaClient.Offer>({
          rdma: { address, port },
          regions: { store: descriptor },
          config: {},
          token
        })
      })
      const { client, src } = yield* clientOf(offerWith(token), {
        reconnect: Schedule.intersect(fast, Schedule.recurs(4))
      })
      yield* waitFor(client, "Connected")
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      yield* Effect.flip(put(client, src, 7, 1))
      const retried = yield* client.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting" && s.attempt >= 2),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      assert.isTrue(retried._tag === "Some", "a rejection that says nothing is retried")
      const spent = (retried as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
      assert.strictEqual(spent._tag, "AdmissionRejectedError")
      assert.strictEqual(spent.reason, "Unexplained")
      assert.isTrue(spent.admittedBefore)
      assert.match(spent.message, /this client's earlier connection spent the token .*give each offer a new token/)
      // The schedule's end closes it, with that error.
      yield* waitFor(client, "Closed")
      const refused = yield* Effect.flip(put(client, src, 7, 2))
      assert.match(refused.message, /it is closed: its reconnect schedule ended .*spent the token/)

      const { client: wrong } = yield* clientOf(offerWith(new Uint8Array([9, 9, 9])))
      const third = yield* wrong.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting" && s.attempt >= 3),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      assert.isTrue(third._tag === "Some")
      const unexplained = (third as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
      assert.strictEqual(unexplained._tag, "AdmissionRejectedError")
      assert.strictEqual(unexplained.reason, "Unexplained")
      assert.isFalse(unexplained.admittedBefore)
      assert.match(unexplained.message, /carries no reason: nobody listens there, the token is wrong or expired/)
    })))

  it.live("a server down for a while, then back with the same multi-use token: the rejections in between are retried, and the client connects again", () =>
    inWorld(Effect.gen(function*() {
      const port = 7497
      const token = new Uint8Array([3, 1, 4, 1, 5, 9, 2, 6])
      const peer = yield* Peer.make(address)
      const mr = yield* LocalMr.allocate(peer, 4096, storeUsage)
      // The offer stays as it was while the server is down (a cached offer, a fixed token).
      const descriptor = yield* LocalMr.descriptor(mr)
      const offer = Effect.succeed<RdmaClient.Offer>({
        rdma: { address, port },
        regions: { store: descriptor },
        config: {},
        token
      })
      const serve = Effect.gen(function*() {
        const scope = yield* Scope.make()
        yield* Effect.gen(function*() {
          const admission = yield* Admission.make(token, { uses: 100 })
          const listener = yield* Listener.make(peer, address, port)
          yield* Effect.forkScoped(
            Listener.serve(listener, Connection.awaitClosed, { admission, isolation: "shared" })
          )
        }).pipe(Scope.extend(scope))
        return scope
      })
      const first = yield* serve
      const { client, src } = yield* clientOf({ offer })
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* Scope.close(first, Exit.void)
      // Nobody listens: librpma's rejection, of a token this client was admitted with.
      const down = yield* client.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting" && s.attempt >= 3),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      assert.isTrue(down._tag === "Some")
      const rejected = (down as { value: { lastError: RdmaClient.AdmissionRejectedError } }).value.lastError
      assert.strictEqual(rejected._tag, "AdmissionRejectedError")
      assert.strictEqual(rejected.reason, "Unexplained")
      const second = yield* serve
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* put(client, src, 9, 4)
      assert.strictEqual(mr.memory[9], 4)
      yield* Scope.close(second, Exit.void)
    })))

  it.live("flush takes dstOffset as Connection.flush names it (offset, its old name, still read)", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7499)
      yield* server.start()
      const { client, src } = yield* clientOf(server)
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      yield* put(client, src, 4, 9)
      yield* RdmaClient.flush(client, { dst: "store", dstOffset: 4088, length: 8 })
      const beyond = yield* Effect.flip(RdmaClient.flush(client, { dst: "store", dstOffset: 4096, length: 1 }))
      assert.strictEqual(beyond._tag, "OutOfRangeError")
      assert.match(beyond.message, /4096/)
      const old = yield* Effect.flip(RdmaClient.flush(client, { dst: "store", offset: 4096, length: 1 }))
      assert.strictEqual(old._tag, "OutOfRangeError")
      // A persistent flush names a region the client's usages give FLUSH_TYPE_PERSISTENT.
      // @ts-expect-error: "store" is not FLUSH_TYPE_PERSISTENT
      const persistent = yield* Effect.flip(RdmaClient.flush(client, { dst: "store", length: 1, type: "persistent" }))
      // The type reaches Connection.flush: librpma refuses it here (no persistent memory).
      assert.strictEqual(persistent._tag, "RpmaNoSupportError")
      assert.strictEqual((yield* client.state)._tag, "Connected")
    })))

  it.live("closing the client wakes what waits for a connection: operations and awaitConnected fail at once, and changes ends with Closed", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7498)
      const scope = yield* Scope.make()
      const { client, src } = yield* clientOf(server, { whileDisconnected: { wait: "1 hour" } }).pipe(
        Scope.extend(scope)
      )
      const states = yield* Effect.fork(Stream.runCollect(client.changes))
      yield* waitFor(client, "Reconnecting")
      const operation = yield* Effect.fork(Effect.flip(put(client, src, 1, 1)))
      const awaiting = yield* Effect.fork(Effect.flip(RdmaClient.awaitConnected(client)))
      // Both are waiting on the client (the operation's bound is an hour) when it closes.
      yield* Effect.yieldNow().pipe(Effect.repeatN(20))
      yield* Scope.close(scope, Exit.void)
      const failed = yield* Fiber.join(operation).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(failed._tag, "NotConnectedError")
      assert.strictEqual((failed as RdmaClient.NotConnectedError).state._tag, "Closed")
      assert.match(failed.message, /no connection will come/)
      const notConnected = yield* Fiber.join(awaiting).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(notConnected._tag, "NotConnectedError")
      assert.strictEqual(notConnected.state._tag, "Closed")
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(states).pipe(Effect.timeout("5 seconds")))
      assert.strictEqual(seen.at(-1)?._tag, "Closed")
      assert.isTrue(seen.some((s) => s._tag === "Reconnecting"))
    })))

  it.live("awaitConnected waits for a connection, bounded by its caller and interruptible; it fails once the client is closed", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7492)
      const scope = yield* Scope.make()
      const { client } = yield* clientOf(server).pipe(Scope.extend(scope))
      const bounded = yield* Effect.flip(RdmaClient.awaitConnected(client).pipe(Effect.timeout("30 millis")))
      assert.strictEqual(bounded._tag, "TimeoutException")
      const waiting = yield* Effect.fork(RdmaClient.awaitConnected(client))
      yield* Fiber.interrupt(waiting)
      const connected = yield* Effect.fork(client.pipe(RdmaClient.awaitConnected))
      yield* server.start()
      assert.deepStrictEqual(yield* Fiber.join(connected), { _tag: "Connected", address, port: 7492 })
      yield* Scope.close(scope, Exit.void)
      const closed = yield* Effect.flip(RdmaClient.awaitConnected(client))
      assert.strictEqual(closed._tag, "NotConnectedError")
      assert.match(closed.message, /closed/)
    })))

  it.live("the offer's config, typed by a schema: a config it refuses is a failed attempt; client.offer follows the disconnected policy", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7493)
      yield* server.start()
      let slots: unknown = "four"
      const offer = Effect.map(server.offer, (o): RdmaClient.Offer => ({ ...o, config: { slots } as never }))
      const peer = yield* Peer.make(address)
      const client = yield* RdmaClient.make({
        offer,
        regions,
        reconnect: fast,
        peer,
        config: Schema.Struct({ slots: Schema.Number })
      })
      const disconnected = yield* Effect.flip(client.offer)
      assert.strictEqual(disconnected._tag, "NotConnectedError")
      const refused = yield* client.changes.pipe(
        Stream.filter((s) => s._tag === "Reconnecting"),
        Stream.runHead,
        Effect.timeout("5 seconds")
      )
      const error = (refused as { value: { lastError: { _tag: string; message: string } } }).value.lastError
      assert.strictEqual(error._tag, "InvalidOfferError")
      assert.match(error.message, /config does not fit the client's config schema/)
      slots = 4
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      const typed: number = (yield* client.offer).config.slots
      assert.strictEqual(typed, 4)

      const bad = yield* Effect.flip(
        RdmaClient.make({ offer, regions, reconnect: fast, peer, config: "slots" as never })
      )
      assert.match(bad.message, /config must be a Schema/)
    })))

  it.effect("under TestClock, the clock drives the reconnect: the schedule's delay passes when the test says", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7494)
      yield* server.start()
      const { client, src } = yield* clientOf(server, { reconnect: Schedule.spaced("1 minute") })
      yield* live(RdmaClient.awaitConnected(client))
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      yield* Effect.flip(put(client, src, 8, 1))
      // The supervisor waits out the schedule's minute on the test's clock, and only then connects.
      const start = yield* Clock.currentTimeMillis
      yield* live(Effect.repeat(
        Effect.zipLeft(TestClock.sleeps(), TestServices.provideLive(Effect.sleep("2 millis"))),
        { until: (sleeps) => Chunk.toReadonlyArray(sleeps).includes(start + 60_000) }
      ))
      assert.strictEqual((yield* client.state)._tag, "Reconnecting")
      yield* TestClock.adjust("1 minute")
      yield* live(RdmaClient.awaitConnected(client))
      yield* put(client, src, 8, 2)
      assert.strictEqual(server.memory()![8], 2)
    })))

  it.effect("under TestClock, an operation's wait for a connection ends when the test's clock passes its bound", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7495) // never started: every attempt fails, an hour apart
      const { client, src } = yield* clientOf(server, {
        reconnect: Schedule.spaced("1 hour"),
        whileDisconnected: { wait: "1 minute" }
      })
      const waiting = yield* Effect.fork(put(client, src, 0, 1))
      const start = yield* Clock.currentTimeMillis
      yield* live(Effect.repeat(
        Effect.zipLeft(TestClock.sleeps(), TestServices.provideLive(Effect.sleep("2 millis"))),
        { until: (sleeps) => Chunk.toReadonlyArray(sleeps).includes(start + 60_000) }
      ))
      yield* TestClock.adjust("1 minute")
      const error = yield* live(Effect.flip(Fiber.join(waiting)))
      assert.strictEqual(error._tag, "NotConnectedError")
      assert.strictEqual((error as RdmaClient.NotConnectedError).waitedMs, 60_000)
    })))

  it.live("an RdmaStream Sink over the client: typed regions and the driver given by withConnection; a lost link fails it, and a rerun writes on the next session", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7496)
      yield* server.start()
      const { client } = yield* clientOf(server)
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      const records = [new Uint8Array(100).fill(1), new Uint8Array(100).fill(2)]
      // No driver provided here, and `regions.store` is a RemoteMr<"WRITE_DST" | ...>: both from the client.
      const log = RdmaClient.withConnection(
        client,
        (conn, regions, peer) =>
          Stream.run(
            Stream.fromIterable(records),
            RdmaStream.writeRange(peer, conn, { dst: regions.store, offset: 1000 })
          )
      )
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      const lost = yield* Effect.flip(log)
      assert.include(["ConnectionClosedError", "CompletionError"], lost._tag)
      assert.strictEqual((yield* client.state)._tag, "Reconnecting")
      yield* RdmaClient.awaitConnected(client).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(yield* log, 200)
      assert.deepStrictEqual(server.memory()!.slice(1000, 1200), new Uint8Array([...records[0]!, ...records[1]!]))
    })))

  it.live("arguments that are no object are refused when the operation runs, and anything but a client dies naming the call", () =>
    inWorld(Effect.gen(function*() {
      const server = yield* makeServer(7497)
      yield* server.start()
      const { client, src } = yield* clientOf(server)
      yield* waitFor(client, "Connected")
      type Bad = never
      for (const bad of [null, undefined, 5]) {
        // Made outside a run: making the Effect reads nothing.
        const made = [
          RdmaClient.write(client, bad as Bad),
          RdmaClient.read(client, bad as Bad),
          RdmaClient.flush(client, bad as Bad),
          RdmaClient.writeMany(client, bad as Bad),
          RdmaClient.send(client, bad as Bad),
          RdmaClient.recv(client, bad as Bad),
          RdmaClient.writeMany(client, { dst: "store", src, spans: bad as Bad })
        ]
        for (const operation of made) {
          const error = yield* Effect.flip(operation)
          assert.strictEqual(error._tag, "OutOfRangeError")
        }
        const notClient = [
          RdmaClient.write(bad as Bad, { dst: "store", dstOffset: 0, src, srcOffset: 0, length: 1 }),
          RdmaClient.send(bad as Bad, { src: src as Bad, length: 1 }),
          RdmaClient.awaitConnected(bad as Bad),
          RdmaClient.withConnection(bad as Bad, () => Effect.void)
        ]
        for (const operation of notClient) {
          const exit = yield* Effect.exit(operation)
          assert.isTrue(Exit.isFailure(exit))
          assert.match(String(Exit.isFailure(exit) && exit.cause), /must be an RdmaClient/)
        }
      }
      // Still connected, and still working.
      yield* put(client, src, 3, 9)
      assert.strictEqual(server.memory()![3], 9)
    })))
})
