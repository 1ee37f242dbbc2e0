/**
 * Connections and the data path on the simulated fabric: two peers in one process.
 */
import { Connection, Descriptor, Listener, LocalMr, Peer, RdmaError, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Conformance, Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Chunk, Clock, Effect, Exit, Fiber, Layer, Stream } from "effect"
import { asleepUntil, endsAfter } from "./clock.js"

const address = SimulatedDriver.DEFAULT_ADDRESS

/** A server with an exposed region and a client connected to it (`options`: the client's). */
const pair = (options?: Connection.Options) => Conformance.connectedPair(address, 7471, { client: options })

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

describe("connections", () => {
  it.effect("a timeout that is negative is refused as such (not read as 0); a fraction of a millisecond is rounded up, not refused", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      for (const timeout of [-1, "-2 seconds"] as const) {
        const refused = yield* Effect.flip(Effect.scoped(Connection.connect(peer, address, 7471, { timeout })))
        assert.strictEqual(refused._tag, "RpmaInvalidError")
        assert.include(refused.message, "a negative one")
      }
      // Nobody listens: a fractional timeout gets as far as the connect, which is rejected.
      for (const timeout of [0.5, "1 nanos"] as const) {
        const failed = yield* Effect.flip(Effect.scoped(Connection.connect(peer, address, 7471, { timeout })))
        assert.strictEqual(failed._tag, "ConnectionFailedError", `timeout ${timeout}: ${failed.message}`)
      }
    })))

  it.effect("connect, accept, exchange private data; the client's close is seen by the server", () =>
    inWorld(Effect.gen(function*() {
      const serverPeer = yield* Peer.make(address)
      const clientPeer = yield* Peer.make(address)
      const ep = yield* Listener.make(serverPeer, address, 7471)
      const accepting = yield* Effect.fork(
        Listener.acceptNext(ep, { privateData: new TextEncoder().encode("welcome") })
      )
      const server = yield* Effect.scoped(Effect.gen(function*() {
        const client = yield* Connection.connect(clientPeer, address, ep.port, {
          privateData: new TextEncoder().encode("hello")
        })
        const server = yield* Fiber.join(accepting)
        // Padded with zeros as rdma_cm on RoCE pads them: 56 bytes with a request, 196 with an accept.
        assert.strictEqual(new TextDecoder().decode(server.privateData.subarray(0, 5)), "hello")
        assert.strictEqual(server.privateData.byteLength, 56)
        assert.strictEqual(new TextDecoder().decode(client.privateData.subarray(0, 7)), "welcome")
        assert.strictEqual(client.privateData.byteLength, 196)
        assert.strictEqual(yield* Connection.state(client), "Connected")
        return server
      }))
      // The client's scope has closed: it disconnected, and the server saw it.
      const events = yield* Stream.runCollect(Connection.changes(server))
      assert.deepStrictEqual(Chunk.toReadonlyArray(events), ["Closed"])
      assert.strictEqual(yield* Connection.state(server), "Closed")
    })))

  it.effect("nobody listening → ConnectionFailedError (REJECTED); no device → RpmaProviderError", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const rejected = yield* Effect.flip(Effect.scoped(Connection.connect(peer, address, 4791)))
      assert.strictEqual(rejected._tag, "ConnectionFailedError")
      assert.match(rejected.message, /rejected/)
      const unreachable = yield* Effect.flip(Effect.scoped(Connection.connect(peer, "192.0.2.99", 4791)))
      assert.strictEqual(unreachable._tag, "RpmaProviderError")
    })))

  it.effect("a connect nobody accepts fails at its timeout, on Effect's Clock", () =>
    inWorld(Effect.gen(function*() {
      const serverPeer = yield* Peer.make(address)
      const clientPeer = yield* Peer.make(address)
      const ep = yield* Listener.make(serverPeer, address, 7472)
      const connecting = yield* Effect.fork(
        Effect.flip(Effect.scoped(Connection.connect(clientPeer, address, ep.port, { timeout: "30 seconds" })))
      )
      yield* asleepUntil((yield* Clock.currentTimeMillis) + 30_000)
      assert.strictEqual((yield* endsAfter(connecting, 30_000))._tag, "ConnectionFailedError")
    })))

  it.effect("an endpoint rejects the requests it never answered when it shuts down", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const port = yield* Effect.scoped(Effect.gen(function*() {
        const ep = yield* Listener.make(peer, address, 7471)
        const client = yield* Effect.fork(Effect.scoped(Connection.connect(peer, address, ep.port)))
        yield* Listener.requests(ep).pipe(Stream.take(1), Stream.runDrain)
        return { port: ep.port, client }
      }))
      const exit = yield* Fiber.await(port.client)
      assert.isTrue(Exit.isFailure(exit))
    })))
})

describe("operations", () => {
  it.effect("write, flush and read back", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
      src.memory.set(new TextEncoder().encode("record #1"), 0)
      yield* Connection.write(client, { dst: remote, dstOffset: 1000, src, srcOffset: 0, length: 9 })
      yield* Connection.flush(client, { dst: remote, dstOffset: 1000, length: 9 })
      assert.strictEqual(new TextDecoder().decode(target.memory.subarray(1000, 1009)), "record #1")
      yield* Connection.read(client, { dst, dstOffset: 100, src: remote, srcOffset: 1000, length: 9 })
      assert.strictEqual(new TextDecoder().decode(dst.memory.subarray(100, 109)), "record #1")
    })))

  it.effect("arguments whose getter throws, at any read: the operation dies with the caller's error, and the connection works on", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      // Arguments are read as given on the data path (a copy would cost every operation): the n-th
      // read throws, wherever in the checks, the packing or the post it falls.
      const throwingAt = (n: number): Connection.WriteArgs => {
        let reads = 0
        return new Proxy({ dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 }, {
          get: (values, key, receiver) => {
            if (typeof key === "string" && ++reads === n) throw new Error(`read ${n} threw`)
            return Reflect.get(values, key, receiver)
          }
        })
      }
      let died = 0
      for (let n = 1; n <= 12; n++) {
        for (
          const operation of [
            Connection.write(client, throwingAt(n)),
            Connection.writeMany(client, [throwingAt(n), { dst: remote, src, length: 64 }])
          ]
        ) {
          const exit = yield* Effect.exit(operation)
          if (Exit.isFailure(exit)) {
            assert.isTrue(Cause.isDie(exit.cause), "a defect: the caller's own error, not a tagged failure")
            assert.include(String(Cause.squash(exit.cause)), "threw")
            died++
          }
        }
      }
      assert.isAbove(died, 0)
      src.memory.fill(7, 0, 64)
      yield* Connection.writeMany(client, Array.from({ length: 100 }, () => ({ dst: remote, src, length: 64 })))
      assert.deepStrictEqual(Array.from(target.memory.subarray(0, 64)), new Array(64).fill(7))
    })))

  it.effect("atomic write of 8 aligned bytes; misaligned or wrong size refused before posting", () =>
    inWorld(Effect.gen(function*() {
      const { client, remote, target } = yield* pair()
      yield* Connection.atomicWrite(client, { dst: remote, offset: 64, value: Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8) })
      assert.deepStrictEqual(Array.from(target.memory.subarray(64, 72)), [1, 2, 3, 4, 5, 6, 7, 8])
      const misaligned = yield* Effect.flip(
        Connection.atomicWrite(client, { dst: remote, offset: 63, value: new Uint8Array(8) })
      )
      assert.strictEqual(misaligned._tag, "OutOfRangeError")
      const short = yield* Effect.flip(
        Connection.atomicWrite(client, { dst: remote, offset: 64, value: new Uint8Array(4) })
      )
      assert.strictEqual(short._tag, "OutOfRangeError")
    })))

  it.effect("send and recv; a message longer than the receive buffer fails on both sides", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, server, serverPeer } = yield* pair()
      const out = yield* LocalMr.allocate(clientPeer, 256, Usage.SEND)
      const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
      out.memory.set(new TextEncoder().encode("ping"))
      const received = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 128 }))
      yield* Connection.send(client, { src: out, offset: 0, length: 4 })
      assert.strictEqual((yield* Fiber.join(received)).byteLength, 4)
      assert.strictEqual(new TextDecoder().decode(inbox.memory.subarray(0, 4)), "ping")
      // Send before the receive is posted: it waits (receiver-not-ready retries), then lands.
      const early = yield* Effect.fork(Connection.send(client, { src: out, offset: 0, length: 4 }))
      assert.strictEqual((yield* Connection.recv(server, { dst: inbox, offset: 4, length: 4 })).byteLength, 4)
      yield* Fiber.join(early)
      const tooSmall = yield* Effect.fork(Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 2 })))
      const sendError = yield* Effect.flip(Connection.send(client, { src: out, offset: 0, length: 4 }))
      assert.strictEqual(sendError._tag === "CompletionError" && sendError.statusName, "IBV_WC_REM_INV_REQ_ERR")
      const recvError = yield* Fiber.join(tooSmall)
      assert.strictEqual(recvError._tag === "CompletionError" && recvError.statusName, "IBV_WC_LOC_LEN_ERR")
    })))

  it.effect("the fabric enforces rkeys, bounds and access rights; the queue pair then fails what follows", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      // A tampered descriptor: the right rkey, an address past the region.
      const d = yield* LocalMr.describe(target)
      const forged = yield* RemoteMr.fromDescriptor(Descriptor.encode({ ...d, address: d.address + 65536n })).pipe(
        Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
      )
      const error = yield* Effect.flip(
        Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 })
      )
      assert.strictEqual(error._tag, "CompletionError")
      assert.match(error.message, /IBV_WC_REM_ACCESS_ERR \(10\): the remote region refused/)
      const next = yield* Effect.flip(
        Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 16 })
      )
      assert.strictEqual(next._tag === "CompletionError" && next.statusName, "IBV_WC_WR_FLUSH_ERR")
      // A failed completion is no connection event: the state changes on rdma_cm's word, or a close.
      assert.strictEqual(yield* Connection.state(client), "Connected")
    })))

  it.effect("a region registered without WRITE_DST cannot be written, even with a forged usage", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, serverPeer } = yield* pair()
      const readOnly = yield* LocalMr.allocate(serverPeer, 4096, Usage.READ_SRC)
      const d = yield* LocalMr.describe(readOnly)
      const forged = yield* RemoteMr.fromDescriptor(Descriptor.encode({ ...d, usage: Usage.WRITE_DST })).pipe(
        Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
      )
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      const error = yield* Effect.flip(
        Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 })
      )
      assert.strictEqual(error._tag === "CompletionError" && error.status, 10)
    })))

  it.effect("offsets and lengths are checked against both regions before anything is posted", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      const before = yield* SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_write")))
      const cases: Array<[number, number, number, RegExp]> = [
        [0, 4000, 200, /source range \[4000, 4200\) is outside its 4096-byte region/],
        [65530, 0, 16, /destination range \[65530, 65546\) is outside its 65536-byte region/],
        [-1, 0, 1, /offset -1 is not a non-negative integer/],
        [0, 0, 2 ** 32, /exceeds 2\^32 - 1/]
      ]
      for (const [dstOffset, srcOffset, length, message] of cases) {
        const error = yield* Effect.flip(Connection.write(client, { dst: remote, dstOffset, src, srcOffset, length }))
        assert.strictEqual(error._tag, "OutOfRangeError")
        assert.match(error.message, message)
      }
      const after = yield* SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_write")))
      assert.strictEqual(after, before)
    })))

  it.effect("a persistent flush needs a peer that writes directly to persistent memory", () =>
    inWorld(Effect.gen(function*() {
      const { client, serverPeer } = yield* pair()
      const pmem = yield* LocalMr.allocate(
        serverPeer,
        4096,
        Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)
      )
      const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(pmem)).pipe(
        Effect.flatMap(RemoteMr.require(Usage.FLUSH_TYPE_PERSISTENT))
      )
      const error = yield* Effect.flip(
        Connection.flush(client, { type: "persistent", dst: remote, dstOffset: 0, length: 64 })
      )
      assert.strictEqual(error._tag, "RpmaNoSupportError")
    })))

  it.effect("many operations in flight at once", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 65536, Usage.WRITE_SRC)
      for (let i = 0; i < 512; i++) src.memory[i * 128] = i % 251
      yield* Effect.forEach(
        Array.from({ length: 512 }, (_, i) => i),
        (i) => Connection.write(client, { dst: remote, dstOffset: i * 128, src, srcOffset: i * 128, length: 128 }),
        { concurrency: "unbounded", discard: true }
      )
      for (let i = 0; i < 512; i++) assert.strictEqual(target.memory[i * 128], i % 251)
    })))

  it.effect("close, state, awaitClosed and changes read the connection when they run, not when they are made", () =>
    Effect.gen(function*() {
      const notOne = null as unknown as Connection.Connection
      // Made without throwing; run, each fails (as a defect: the value is no connection at all).
      const made = [Connection.close(notOne), Connection.state(notOne), Connection.awaitClosed(notOne)]
      for (const effect of made) assert.isTrue(Exit.isFailure(yield* Effect.exit(effect)))
      assert.isTrue(Exit.isFailure(yield* Effect.exit(Stream.runDrain(Connection.changes(notOne)))))
    }))

  it.effect("writeMany of a list that changes as it is read: each write read once; a hole is a tagged refusal, not a defect", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, target } = yield* pair()
      const src = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
      src.memory.set(new TextEncoder().encode("abcdefgh"))
      const writes = [0, 8, 16, 24].map((dstOffset) => ({ dst: remote, dstOffset, src, srcOffset: 0, length: 8 }))
      // Its length says 4, then 2: the batch is read to the first answer.
      let lengthReads = 0
      const shrinking = new Proxy(writes, {
        get: (array, property, receiver) =>
          property === "length" ? (lengthReads++ === 0 ? 4 : 2) : Reflect.get(array, property, receiver)
      })
      const first = yield* Effect.exit(Connection.writeMany(client, shrinking))
      assert.isTrue(Exit.isSuccess(first), String(first))
      assert.strictEqual(new TextDecoder().decode(target.memory.subarray(24, 32)), "abcdefgh")
      // A region getter that answers once with a region and then with nothing: read once.
      let srcReads = 0
      const shifty = {
        dst: remote,
        dstOffset: 40,
        get src() {
          return srcReads++ === 0 ? src : undefined
        },
        srcOffset: 0,
        length: 8
      } as unknown as Connection.WriteArgs
      const second = yield* Effect.exit(Connection.writeMany(client, [shifty]))
      assert.isTrue(Exit.isSuccess(second), String(second))
      assert.strictEqual(srcReads, 1)
      // A hole in the list: refused with the write's index, nothing posted.
      const holed = yield* Effect.flip(
        Connection.writeMany(client, [writes[0]!, undefined as unknown as Connection.WriteArgs])
      )
      assert.strictEqual(holed._tag, "OutOfRangeError")
      assert.match(holed.message, /write 1 of the batch is not a WriteArgs/)
    })))

  it.effect("writeMany asks a completion of one request per half queue and of the last of each post; every write arrives", () =>
    inWorld(Effect.gen(function*() {
      const driver = yield* Driver.RdmaDriver
      const asked: Array<Driver.Model.Signal> = []
      const recording: Driver.Driver = {
        ...driver,
        postMany: (conn, requests) => {
          for (const request of requests) {
            asked.push(("completion" in request ? request.completion : undefined) ?? "always")
          }
          return driver.postMany(conn, requests)
        }
      }
      const target = yield* Effect.provideService(
        Effect.gen(function*() {
          const { client, clientPeer, remote, target } = yield* pair({ sendQueueSize: 16 })
          const src = yield* LocalMr.allocate(clientPeer, 65536, Usage.WRITE_SRC)
          for (let i = 0; i < 40; i++) src.memory[i * 64] = i + 1
          const spans = Array.from({ length: 40 }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
          yield* Connection.writeMany(client, spans.map((span) => ({ dst: remote, src, ...span })))
          return target
        }),
        Driver.RdmaDriver,
        recording
      )
      for (let i = 0; i < 40; i++) assert.strictEqual(target.memory[i * 64], i + 1)
      assert.strictEqual(asked.length, 40)
      // The first post fills the queue: of its 16, the 8th and the 16th report.
      assert.deepStrictEqual(asked.slice(0, 16).map((a, i) => a === "always" ? i : -1).filter((i) => i >= 0), [7, 15])
      assert.strictEqual(asked[39], "always", "the batch's last request reports")
      assert.isAtMost(asked.filter((a) => a === "always").length, 12, `completions asked: ${asked.join(" ")}`)
    })))
})

describe("a lost connection", () => {
  it.effect("fails pending and later operations instead of hanging, and is seen as LOST", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote, server, serverPeer } = yield* pair()
      const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
      const waiting = yield* Effect.fork(Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 256 })))
      const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
      yield* SimulatedDriver.fail({ operation: "rpma_write", nth: 1, loseConnection: true })
      const lost = yield* Effect.flip(
        Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
      )
      assert.include(["ConnectionClosedError", "CompletionError"], lost._tag)
      const pending = yield* Fiber.join(waiting)
      assert.include(["ConnectionClosedError", "CompletionError"], pending._tag)
      const later = yield* Effect.flip(
        Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
      )
      assert.strictEqual(later._tag, "ConnectionClosedError")
      assert.strictEqual(yield* Connection.state(client), "Lost")
      assert.strictEqual(yield* Connection.state(server), "Lost")
    })))

  it.effect("a completion channel that fails ends the connection as LOST, with the channel's error as the cause", () => {
    // The simulated driver, with a channel whose wait fails: what a failing rpma_cq_wait does.
    const failing = new RdmaError.RpmaProviderError({
      operation: "rpma_cq_wait",
      detail: "the completion channel failed"
    })
    const withFailingChannel = Layer.effect(
      Driver.RdmaDriver,
      Effect.map(Driver.RdmaDriver, (driver): Driver.Driver => ({
        ...driver,
        armCompletions: (_conn, onReady) => {
          const timer = setImmediate(() => onReady(Exit.fail(failing)))
          return () => clearImmediate(timer)
        }
      }))
    ).pipe(Layer.provideMerge(SimulatedDriver.layer))
    return Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const { server, serverPeer } = yield* pair()
      const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
      // A receive waits for a message: the connection arms its channel, which fails.
      const error = yield* Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 256 }))
      assert.strictEqual(error._tag, "ConnectionClosedError")
      assert.strictEqual((error as Connection.ConnectionClosedError).reason, "LOST")
      assert.strictEqual((error as Connection.ConnectionClosedError).cause, failing)
      assert.strictEqual(yield* Connection.state(server), "Lost")
    }))).pipe(Effect.provide(withFailingChannel))
  })

  it.effect("a planned completion failure reaches the caller as a CompletionError", () =>
    inWorld(Effect.gen(function*() {
      const { client, clientPeer, remote } = yield* pair()
      const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
      yield* SimulatedDriver.fail({ operation: "rpma_read", nth: 1, completionStatus: 12 })
      const error = yield* Effect.flip(
        Connection.read(client, { dst, dstOffset: 0, src: remote, srcOffset: 0, length: 64 })
      )
      assert.strictEqual(error._tag === "CompletionError" && error.statusName, "IBV_WC_RETRY_EXC_ERR")
    })))
})
