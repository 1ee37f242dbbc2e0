/**
 * CmEndpoint on the simulated driver: two endpoints in one process, the bytes that arrive checked,
 * every resource accounted for by the leak ledger after each case.
 */
import { CmEndpoint, CmListener, RemoteKey, Tracing } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Chunk, Clock, type Duration, Effect, Exit, Fiber, Layer, Option, Stream, TestClock, Tracer } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS
const text = (bytes: Uint8Array, length = bytes.byteLength) => new TextDecoder().decode(bytes.subarray(0, length))
const bytesOf = (s: string) => new TextEncoder().encode(s)

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** Moves the TestClock on by `step` until `fiber` is done (the test's timeout bounds it); its result. */
const untilDone = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, step: Duration.DurationInput) =>
  Effect.repeat(TestClock.adjust(step), { until: () => fiber.unsafePoll() !== null }).pipe(
    Effect.zipRight(Fiber.join(fiber))
  )

/**
 * A connected pair: the server's request gets a message region and a receive posted before it is
 * accepted; the client's endpoint one posted before it connects. `serverRegions` registers more.
 */
const connectedPair = (options?: CmEndpoint.Options) =>
  Effect.gen(function*() {
    const listener = yield* CmListener.make(address, 0, options)
    const client = yield* CmEndpoint.make(address, listener.port, options)
    const clientInbox = yield* CmEndpoint.registerMessages(client, new Uint8Array(256))
    const clientOutbox = yield* CmEndpoint.registerMessages(client, new Uint8Array(256))
    const clientFirst = yield* CmEndpoint.postRecv(client, { segments: [{ mr: clientInbox }] })
    const connecting = yield* Effect.fork(CmEndpoint.establish(client, { privateData: bytesOf("hello") }))
    const server = yield* CmListener.next(listener)
    assert.strictEqual(yield* CmEndpoint.state(server), "Connecting")
    assert.strictEqual(text(server.privateData, 5), "hello")
    const serverInbox = yield* CmEndpoint.registerMessages(server, new Uint8Array(256))
    const serverOutbox = yield* CmEndpoint.registerMessages(server, new Uint8Array(256))
    const serverFirst = yield* CmEndpoint.postRecv(server, { segments: [{ mr: serverInbox }] })
    yield* CmListener.accept(server, { privateData: bytesOf("welcome") })
    yield* Fiber.join(connecting)
    assert.strictEqual(yield* CmEndpoint.state(client), "Connected")
    assert.strictEqual(text(client.privateData, 7), "welcome")
    return { listener, client, clientInbox, clientOutbox, clientFirst, server, serverInbox, serverOutbox, serverFirst }
  })

describe("CmEndpoint", () => {
  it.effect("a region is marked as one (isRegion) and pipes, as every other resource", () =>
    inWorld(Effect.gen(function*() {
      const ep = yield* CmEndpoint.make(address, 7471)
      const memory = new Uint8Array(64)
      const region = yield* CmEndpoint.registerMessages(ep, memory)
      assert.isTrue(CmEndpoint.isRegion(region))
      assert.strictEqual(region[CmEndpoint.RegionTypeId], CmEndpoint.RegionTypeId)
      assert.strictEqual(region.kind, "msgs")
      assert.strictEqual(region.memory, memory)
      assert.strictEqual(region.length, 64)
      assert.strictEqual(region.pipe((r) => r.endpoint), ep)
      // Not a region: its memory, its endpoint, nor a copy of its fields.
      assert.isFalse(CmEndpoint.isRegion(memory))
      assert.isFalse(CmEndpoint.isRegion(ep))
      assert.isFalse(CmEndpoint.isRegion({ ...region }))
      assert.isFalse(CmEndpoint.isRegion(undefined))
      assert.isFalse(CmEndpoint.isCmEndpoint(region))
    })))

  it.effect("messages both ways, into receives posted before connect and before accept; immediate data", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      p.clientOutbox.memory.set(bytesOf("ping"))
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 4 })
      const atServer = yield* p.serverFirst.completion
      assert.strictEqual(atServer.byteLength, 4)
      assert.strictEqual(text(p.serverInbox.memory, 4), "ping")
      p.serverOutbox.memory.set(bytesOf("pong!"))
      yield* CmEndpoint.send(p.server, { src: p.serverOutbox, length: 5, imm: 0xdeadbeef })
      const atClient = yield* p.clientFirst.completion
      assert.strictEqual(atClient.byteLength, 5)
      assert.strictEqual(atClient.imm, 0xdeadbeef)
      assert.strictEqual(text(p.clientInbox.memory, 5), "pong!")
    })))

  it.effect("postSend and postRecv take their waiting verbs' arguments (one region, plain bytes) as well as segments", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      p.clientOutbox.memory.set(bytesOf("first"))
      const sent = yield* CmEndpoint.postSend(p.client, { src: p.clientOutbox, length: 5 })
      yield* sent.completion
      assert.strictEqual((yield* p.serverFirst.completion).byteLength, 5)
      assert.strictEqual(text(p.serverInbox.memory, 5), "first")
      const inbox = yield* CmEndpoint.registerMessages(p.server, new Uint8Array(64))
      const posted = yield* CmEndpoint.postRecv(p.server, { dst: inbox, length: 16 })
      yield* CmEndpoint.postSend(p.client, { src: bytesOf("plain"), length: 5 })
      assert.strictEqual((yield* posted.completion).byteLength, 5)
      assert.strictEqual(text(inbox.memory, 5), "plain")
    })))

  it.effect("sendv gathers, recvv scatters; a send larger than the granted inline size goes from the region", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      // The pair's first receives first: a message to each.
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 1 })
      yield* p.serverFirst.completion
      const head = yield* CmEndpoint.registerMessages(p.server, new Uint8Array(3))
      const tail = yield* CmEndpoint.registerMessages(p.server, new Uint8Array(200))
      const receiving = yield* Effect.fork(
        CmEndpoint.recvv(p.server, { segments: [{ mr: head }, { mr: tail }] })
      )
      p.clientOutbox.memory.set(bytesOf("abc"), 0)
      const big = new Uint8Array(150).fill(0x5a)
      p.clientOutbox.memory.set(big, 100)
      const large = p.client.info.maxInlineData + 10
      assert.isTrue(large <= 150)
      yield* CmEndpoint.sendv(p.client, {
        segments: [{ mr: p.clientOutbox, offset: 0, length: 3 }, { mr: p.clientOutbox, offset: 100, length: large }]
      })
      const received = yield* Fiber.join(receiving)
      assert.strictEqual(received.byteLength, 3 + large)
      assert.strictEqual(text(head.memory), "abc")
      assert.isTrue(tail.memory.subarray(0, large).every((b) => b === 0x5a))
      assert.strictEqual(tail.memory[large], 0)
      // Asked inline but above what the device granted: refused before anything is posted.
      const refused = yield* Effect.flip(
        CmEndpoint.send(p.client, { src: p.clientOutbox, length: large, inline: true })
      )
      assert.strictEqual(refused._tag, "OutOfRangeError")
    })))

  it.effect("plain bytes go inline with no region: sent, written and called; refused not inline, too long or as a receive", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const message = bytesOf("plain")
      yield* CmEndpoint.send(p.client, { src: message, length: message.byteLength })
      message.fill(0) // copied when posted
      assert.strictEqual((yield* p.serverFirst.completion).byteLength, 5)
      assert.strictEqual(text(p.serverInbox.memory, 5), "plain")
      yield* CmEndpoint.send(p.server, { src: bytesOf("back"), length: 4 })
      assert.strictEqual((yield* p.clientFirst.completion).byteLength, 4)
      // An inline write from plain bytes, and a call whose request is plain bytes.
      const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
      const key = RemoteKey.make(target) as RemoteKey.RemoteKey<"write">
      // A message region has no remote key: refused, not encoded with no access.
      assert.throws(() => RemoteKey.make(p.serverInbox as never), "one of rdma_reg_msgs has no remote key")
      yield* CmEndpoint.write(p.client, { src: bytesOf("written"), dst: key, dstOffset: 4, length: 7 })
      assert.strictEqual(text(target.memory.subarray(4), 7), "written")
      const answering = yield* Effect.fork(Effect.gen(function*() {
        const request = yield* CmEndpoint.recv(p.server, { dst: p.serverInbox })
        yield* CmEndpoint.send(p.server, {
          src: bytesOf(`re: ${text(p.serverInbox.memory, request.byteLength)}`),
          length: 8
        })
      }))
      const answer = yield* CmEndpoint.call(p.client, {
        send: { src: bytesOf("ping"), length: 4 },
        recv: { dst: p.clientInbox }
      })
      yield* Fiber.join(answering)
      assert.strictEqual(text(p.clientInbox.memory, answer.byteLength), "re: ping")
      // What plain bytes cannot do, refused before anything is posted, saying what to do instead.
      const notInline = yield* Effect.flip(CmEndpoint.send(p.client, { src: bytesOf("x"), length: 1, inline: false }))
      assert.strictEqual(notInline._tag, "CmRegionError")
      assert.match(notInline.message, /go only inline.*registerMessages/)
      const tooLong = p.client.info.maxInlineData + 1
      const long = yield* Effect.flip(CmEndpoint.send(p.client, { src: new Uint8Array(tooLong), length: tooLong }))
      assert.strictEqual(long._tag, "OutOfRangeError")
      assert.match(long.message, new RegExp(`granted ${p.client.info.maxInlineData}.*registerMessages`))
      const pastEnd = yield* Effect.flip(CmEndpoint.send(p.client, { src: new Uint8Array(2), length: 3 }))
      assert.strictEqual(pastEnd._tag, "OutOfRangeError")
      const intoPlain = yield* Effect.flip(
        CmEndpoint.recvv(p.client, { segments: [{ mr: new Uint8Array(8) as unknown as CmEndpoint.MessageRegion }] })
      )
      assert.strictEqual(intoPlain._tag, "CmRegionError")
      assert.match(intoPlain.message, /registered memory/)
    })))

  it.effect("write and read the other side's regions by their remote keys; write with immediate data", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
      const source = yield* CmEndpoint.registerRead(p.server, bytesOf("the server's readable bytes"))
      const writeKey = yield* RemoteKey.decode(RemoteKey.encode(RemoteKey.make(target))).pipe(
        Effect.flatMap(RemoteKey.require("write"))
      )
      const readKey = yield* RemoteKey.decode(RemoteKey.encode(RemoteKey.make(source))).pipe(
        Effect.flatMap(RemoteKey.require("read"))
      )
      p.clientOutbox.memory.set(bytesOf("written by the client"))
      yield* CmEndpoint.write(p.client, { src: p.clientOutbox, dst: writeKey, dstOffset: 8, length: 21 })
      assert.strictEqual(text(target.memory.subarray(8), 21), "written by the client")
      yield* CmEndpoint.read(p.client, { dst: p.clientInbox, dstOffset: 1, src: readKey, srcOffset: 4, length: 6 })
      assert.strictEqual(text(p.clientInbox.memory.subarray(1), 6), "server")
      // With immediate data, a write consumes the receive posted before accept.
      yield* CmEndpoint.write(p.client, { src: p.clientOutbox, dst: writeKey, length: 4, imm: 7 })
      const consumed = yield* p.serverFirst.completion
      assert.strictEqual(consumed.imm, 7)
      // Out of the key's range: refused before posting.
      const outside = yield* Effect.flip(
        CmEndpoint.write(p.client, { src: p.clientOutbox, dst: writeKey, dstOffset: 60, length: 8 })
      )
      assert.strictEqual(outside._tag, "OutOfRangeError")
    })))

  it.effect("writeMany of a list that changes as it is read: each write read once, no defect, nothing out of range", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
      const key = RemoteKey.make(target) as RemoteKey.RemoteKey<"write">
      p.clientOutbox.memory.set(bytesOf("abcdefgh"))
      const writes = [0, 8, 16, 24].map((dstOffset) => ({ src: p.clientOutbox, dst: key, dstOffset, length: 8 }))
      // Its length says 4, then 2: the batch is read to the first answer, the holes are no writes.
      let lengthReads = 0
      const shrinking = new Proxy(writes, {
        get: (array, property, receiver) =>
          property === "length" ? (lengthReads++ === 0 ? 4 : 2) : Reflect.get(array, property, receiver)
      })
      const first = yield* Effect.exit(CmEndpoint.writeMany(p.client, shrinking))
      assert.isTrue(Exit.isSuccess(first), String(first))
      assert.strictEqual(text(target.memory.subarray(24), 8), "abcdefgh")
      // A write whose offset getter answers in range for the check and out of range after: read once.
      let offsetReads = 0
      const shifty = {
        src: p.clientOutbox,
        dst: key,
        get dstOffset() {
          return offsetReads++ === 0 ? 56 : 4096
        },
        length: 8
      }
      const second = yield* Effect.exit(CmEndpoint.writeMany(p.client, [shifty]))
      assert.isTrue(Exit.isSuccess(second), String(second))
      assert.strictEqual(offsetReads, 1)
      assert.strictEqual(text(target.memory.subarray(56), 8), "abcdefgh")
    })))

  it.effect("a forged remote key reaches nothing: the other side refuses it, and the error says so", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
      const key = RemoteKey.make(target)
      const forged: RemoteKey.RemoteKey<"write"> = { ...key, rkey: (key.rkey + 1) >>> 0 }
      p.clientOutbox.memory.set(bytesOf("forged"))
      const refused = yield* Effect.flip(CmEndpoint.write(p.client, { src: p.clientOutbox, dst: forged, length: 6 }))
      assert.strictEqual(refused._tag, "RemoteKeyRefusedError")
      assert.match(refused.message, /refused the remote key/)
      assert.isTrue(target.memory.every((b) => b === 0))
    })))

  it.effect("a read or write region cannot be posted, nor a region of another endpoint: tagged errors, nothing posted", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const readable = yield* CmEndpoint.registerRead(p.client, new Uint8Array(16))
      const kind = yield* Effect.flip(
        CmEndpoint.send(p.client, { src: readable as unknown as CmEndpoint.MessageRegion, length: 4 })
      )
      assert.strictEqual(kind._tag, "CmRegionError")
      assert.strictEqual((kind as CmEndpoint.CmRegionError).reason, "Kind")
      const other = yield* Effect.flip(CmEndpoint.send(p.client, { src: p.serverOutbox, length: 4 }))
      assert.strictEqual(other._tag, "CmRegionError")
      assert.strictEqual((other as CmEndpoint.CmRegionError).reason, "OtherEndpoint")
      // Nothing was posted: the server's first receive is still waiting for the next real message.
      p.clientOutbox.memory.set(bytesOf("real"))
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 4 })
      assert.strictEqual(text(p.serverInbox.memory, (yield* p.serverFirst.completion).byteLength), "real")
    })))

  it.effect("posted without waiting, unsignalled but the last; batches of sends and receives", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 1 })
      yield* p.serverFirst.completion
      const slots = yield* Effect.forEach([0, 1, 2, 3], () => CmEndpoint.registerMessages(p.server, new Uint8Array(8)))
      const receiving = yield* Effect.fork(CmEndpoint.recvMany(p.server, slots.map((dst) => ({ dst }))))
      const messages = yield* Effect.forEach(
        [0, 1, 2, 3],
        (i) =>
          Effect.map(CmEndpoint.registerMessages(p.client, new Uint8Array(8)), (mr) => {
            mr.memory.set(bytesOf(`msg${i}`))
            return mr
          })
      )
      yield* CmEndpoint.postSend(p.client, { segments: [{ mr: messages[0]!, length: 4 }], completion: "onError" })
      yield* CmEndpoint.postSend(p.client, { segments: [{ mr: messages[1]!, length: 4 }], completion: "onError" })
      const last = yield* CmEndpoint.postSend(p.client, { segments: [{ mr: messages[2]!, length: 4 }] })
      yield* last.completion
      yield* CmEndpoint.sendMany(p.client, [{ src: messages[3]!, length: 4 }])
      yield* Fiber.join(receiving)
      assert.deepStrictEqual(slots.map((mr) => text(mr.memory, 4)), ["msg0", "msg1", "msg2", "msg3"])
    })))

  it.effect("sends before connect are refused; a rejected request's client fails with ECONNREFUSED and the rejection's data", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const client = yield* CmEndpoint.make(address, listener.port)
      const outbox = yield* CmEndpoint.registerMessages(client, new Uint8Array(8))
      const early = yield* Effect.flip(CmEndpoint.send(client, { src: outbox, length: 4 }))
      assert.strictEqual(early._tag, "RdmaCmError")
      const connecting = yield* Effect.fork(CmEndpoint.establish(client))
      yield* Effect.scoped(Effect.gen(function*() {
        const request = yield* CmListener.next(listener)
        yield* CmListener.reject(request, { privateData: bytesOf("go away") })
        // Answered already: a second answer is refused.
        const again = yield* Effect.flip(CmListener.accept(request))
        assert.strictEqual(again._tag, "RdmaCmError")
      }))
      const refused = yield* Effect.flip(Fiber.join(connecting))
      assert.strictEqual(refused._tag, "RdmaCmError")
      assert.strictEqual(refused.errnoName, "ECONNREFUSED")
      assert.strictEqual(text(client.privateData, 7), "go away")
      assert.strictEqual(yield* CmEndpoint.state(client), "Closed")
    })))

  it.effect("a listener rejects the requests it handed out and nobody answered when it closes", () =>
    inWorld(Effect.gen(function*() {
      const client = yield* Effect.scoped(Effect.gen(function*() {
        const listener = yield* CmListener.make(address, 0)
        const client = yield* Effect.fork(Effect.scoped(CmEndpoint.connect(address, listener.port)))
        yield* CmListener.next(listener)
        return client
      }))
      const exit = yield* Fiber.await(client)
      assert.isTrue(Exit.isFailure(exit))
    })))

  it.effect("closing disconnects: the other side's waiting receive fails with ConnectionClosedError", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const serverSide = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
        const request = yield* CmListener.next(listener)
        const inbox = yield* CmEndpoint.registerMessages(request, new Uint8Array(8))
        const waiting = yield* CmEndpoint.postRecv(request, { segments: [{ mr: inbox }] })
        yield* CmListener.accept(request)
        return yield* Effect.flip(waiting.completion)
      })))
      yield* Effect.scoped(CmEndpoint.connect(address, listener.port))
      const ended = yield* Fiber.join(serverSide)
      assert.strictEqual(ended._tag, "ConnectionClosedError")
    })))

  it.effect("interrupted anywhere (listen, create, connect, accept, sends, a write, a receive), nothing stays alive", () =>
    Effect.gen(function*() {
      for (let at = 0; at < 120; at += at < 12 ? 1 : 3) {
        yield* inWorld(Effect.gen(function*() {
          const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            const p = yield* connectedPair()
            // Sends waiting for receives the server never posts, a write, and a receive: in flight.
            yield* Effect.fork(
              CmEndpoint.sendMany(p.client, Array.from({ length: 8 }, () => ({ src: p.clientOutbox, length: 4 })))
            )
            const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
            yield* Effect.fork(
              CmEndpoint.write(p.client, { src: p.clientOutbox, dst: RemoteKey.make(target), length: 8 })
            )
            yield* CmEndpoint.recv(p.client, { dst: p.clientInbox })
          })))
          for (let i = 0; i < at; i++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(fiber)
        }))
      }
    }))

  it.effect("bad settings are refused with EINVAL before the driver is asked", () =>
    inWorld(Effect.gen(function*() {
      const error = yield* Effect.flip(CmEndpoint.make(address, 1, { maxSendWr: 0 }))
      assert.strictEqual(error.errnoName, "EINVAL")
      assert.match(error.message, /maxSendWr/)
      // Negative amounts too (Duration.decode would read them as 0), and 0: as a connection refuses them.
      for (const timeout of ["soon", Infinity, "30 days", 0, -1, "-1 seconds", "0 millis"] as const) {
        const refused = yield* Effect.flip(CmEndpoint.make(address, 1, { timeout: timeout as Duration.DurationInput }))
        assert.strictEqual(refused.errnoName, "EINVAL")
        assert.match(refused.message, /timeout is .*: it must be a duration from 1 ms/)
      }
      const negative = yield* Effect.flip(CmEndpoint.make(address, 1, { timeout: -5 }))
      assert.include(negative.message, "a negative one")
      for (
        const [setting, most] of [[{ retryCount: 8 }, 7], [{ rnrRetryCount: -1 }, 7], [
          { initiatorDepth: 256 },
          255
        ]] as const
      ) {
        const refused = yield* Effect.flip(CmEndpoint.make(address, 1, setting))
        assert.strictEqual(refused.errnoName, "EINVAL")
        assert.include(
          refused.message,
          `${Object.keys(setting)[0]} is ${Object.values(setting)[0]}: it must be an integer from 0 to ${most}`
        )
      }
    })))

  it.effect("a write the other side never completes (a cut link, a frozen host): the watchdog, on Effect's Clock, fails it after the timeout; nothing leaks", () => {
    // The simulated driver, except that writes vanish on the wire: posted, never completed.
    const lossy = Layer.effect(
      Driver.RdmaDriver,
      Effect.map(Driver.RdmaDriver, (driver): Driver.Driver => ({
        ...driver,
        cmPostMany: (ep, requests) =>
          requests.every((r) => r.op === "write")
            ? { posted: requests.length, error: undefined, queueError: undefined, ready: [], turnDue: false }
            : driver.cmPostMany(ep, requests)
      }))
    ).pipe(Layer.provideMerge(SimulatedDriver.layer))
    return Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const p = yield* connectedPair({ timeout: "300 millis" })
      const target = yield* CmEndpoint.registerWrite(p.server, new Uint8Array(64))
      const started = yield* Clock.currentTimeMillis
      const writing = yield* Effect.fork(Effect.flip(
        CmEndpoint.write(p.client, { src: p.clientOutbox, dst: RemoteKey.make(target), length: 8 })
      ))
      const lost = yield* untilDone(writing, "10 millis")
      // The TestClock's time: the watchdog's timeout, a period or two to see it, the drain's timeout.
      const waited = (yield* Clock.currentTimeMillis) - started
      assert.strictEqual(lost._tag, "ConnectionClosedError")
      assert.strictEqual((lost as { reason?: string }).reason, "LOST")
      assert.match(lost.message, /does not answer/)
      assert.isTrue(waited > 300 && waited <= 2 * 300 + 3 * 30, `waited ${waited} ms`)
      assert.strictEqual(yield* CmEndpoint.state(p.client), "Lost")
      assert.strictEqual(yield* CmEndpoint.awaitClosed(p.client), "Lost")
    }))).pipe(Effect.provide(lossy))
  })

  it.effect("set-up and teardown run in spans named after their librdmacm calls", () =>
    Effect.gen(function*() {
      const spans: Array<Tracer.Span> = []
      const base = yield* Effect.tracer
      const recording = Tracer.make({
        span: (...args) => {
          const span = base.span(...args)
          spans.push(span)
          return span
        },
        context: base.context
      })
      yield* inWorld(connectedPair()).pipe(Effect.withTracer(recording))
      const names = spans.map((s) => s.name)
      for (
        const call of [
          "rdma_listen",
          "rdma_create_ep",
          "rdma_connect",
          "rdma_accept",
          "rdma_disconnect",
          "rdma_destroy_ep"
        ]
      ) {
        assert.include(names, call)
      }
      // Per operation, when asked for: rdma_post with the operation and its bytes.
      spans.length = 0
      yield* inWorld(
        Effect.flatMap(connectedPair(), (p) => CmEndpoint.send(p.client, { src: p.clientOutbox, length: 5 }))
      ).pipe(
        Effect.provide(Tracing.layerPerOperation),
        Effect.withTracer(recording)
      )
      const post = spans.find((s) => s.name === "rdma_post" && s.attributes.get("rdma.op") === "send")
      assert.strictEqual(post?.attributes.get("rdma.size"), 5)
      const listen = spans.find((s) => s.name === "rdma_listen")!
      assert.strictEqual(listen.attributes.get("server.address"), address)
      assert.strictEqual(listen.attributes.get("rdma.driver"), "simulated")
    }))

  it.effect("connect is bounded: a listener nobody takes requests from fails it with ETIMEDOUT at the endpoint's timeout, on Effect's Clock", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const started = yield* Clock.currentTimeMillis
      const opening = yield* Effect.fork(
        Effect.flip(Effect.scoped(CmEndpoint.connect(address, listener.port, { timeout: "300 millis" })))
      )
      const error = yield* untilDone(opening, "10 millis")
      const waited = (yield* Clock.currentTimeMillis) - started
      assert.strictEqual(error.errnoName, "ETIMEDOUT")
      assert.isTrue(waited >= 300 && waited <= 310, `the TestClock moved ${waited} ms`)
    })))

  it.effect("a next waiting when its listener closes fails with a tagged error, and nothing is left", () =>
    inWorld(Effect.gen(function*() {
      const waiting = yield* Effect.scoped(Effect.gen(function*() {
        const listener = yield* CmListener.make(address, 0)
        const waiting = yield* Effect.fork(Effect.scoped(CmListener.next(listener)))
        yield* Effect.yieldNow()
        return waiting
      }))
      const error = yield* Effect.flip(Fiber.join(waiting))
      assert.strictEqual(error._tag, "RdmaCmError")
    })))

  it.effect("a send queue of 4 takes 20 unsignalled sends and a batch of 20 without the driver's ENOMEM: the kernel counts its slots as the driver does", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair({ maxSendWr: 4, maxRecvWr: 48 })
      yield* CmEndpoint.send(p.client, { src: p.clientOutbox, length: 1 })
      yield* p.serverFirst.completion
      const slots = yield* Effect.forEach(
        Array.from({ length: 40 }),
        () => CmEndpoint.registerMessages(p.server, new Uint8Array(4))
      )
      const receiving = yield* Effect.fork(CmEndpoint.recvMany(p.server, slots.map((dst) => ({ dst }))))
      const messages = yield* Effect.forEach(
        Array.from({ length: 40 }, (_, i) => i),
        (i) =>
          Effect.map(CmEndpoint.registerMessages(p.client, new Uint8Array(4)), (mr) => {
            new DataView(mr.memory.buffer).setUint32(0, i, true)
            return mr
          })
      )
      let last: CmEndpoint.Posted | undefined
      for (const mr of messages.slice(0, 20)) {
        last = yield* CmEndpoint.postSend(p.client, { segments: [{ mr, length: 4 }], completion: "onError" })
      }
      yield* last!.completion
      yield* CmEndpoint.sendMany(p.client, messages.slice(20).map((src) => ({ src, length: 4 })))
      yield* Fiber.join(receiving)
      assert.deepStrictEqual(
        slots.map((mr) => new DataView(mr.memory.buffer).getUint32(0, true)),
        Array.from({ length: 40 }, (_, i) => i)
      )
    })))
})

describe("CmEndpoint's state", () => {
  it.effect("changes: Connecting, Connected, Closing, then Closed, where the stream ends", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const client = yield* CmEndpoint.make(address, listener.port)
      const seen = yield* Effect.fork(Stream.runCollect(CmEndpoint.changes(client)))
      const connecting = yield* Effect.fork(client.pipe(CmEndpoint.establish()))
      const request = yield* CmListener.next(listener)
      assert.strictEqual(yield* CmEndpoint.state(request), "Connecting")
      const server = yield* request.pipe(CmListener.accept())
      assert.strictEqual(server, request, "accept answers the request, connected")
      assert.strictEqual(yield* CmEndpoint.state(server), "Connected")
      yield* Fiber.join(connecting)
      yield* CmEndpoint.close(client)
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Fiber.join(seen)), [
        "Connecting",
        "Connected",
        "Closing",
        "Closed"
      ])
      // Ended: the stream of a closed endpoint is its final state alone.
      assert.deepStrictEqual(Chunk.toReadonlyArray(yield* Stream.runCollect(CmEndpoint.changes(client))), ["Closed"])
    })))

  it.effect("awaitClosed waits while the connection lives, and answers Closed once the other side disconnects", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const closed = yield* Effect.fork(CmEndpoint.awaitClosed(p.client))
      // The connection lives: a message crosses it, and the wait is still on.
      new TextEncoder().encodeInto("ping", p.serverOutbox.memory)
      yield* p.server.pipe(CmEndpoint.send({ src: p.serverOutbox, length: 4 }))
      assert.strictEqual((yield* p.clientFirst.completion).byteLength, 4)
      assert.isTrue(Option.isNone(yield* Fiber.poll(closed)), "awaitClosed answered while connected")
      yield* CmEndpoint.close(p.server)
      assert.strictEqual(yield* Fiber.join(closed), "Closed")
      assert.strictEqual(yield* CmEndpoint.state(p.client), "Closed")
      const after = yield* Effect.flip(CmEndpoint.send(p.client, { src: p.clientOutbox, length: 1 }))
      assert.strictEqual(after._tag, "ConnectionClosedError")
    })))

  it.effect("close is idempotent and bounded; what waits fails with ConnectionClosedError (CLOSED)", () =>
    inWorld(Effect.gen(function*() {
      const p = yield* connectedPair()
      const waiting = yield* Effect.fork(CmEndpoint.recv(p.client, { dst: p.clientInbox }))
      yield* Effect.yieldNow()
      yield* Effect.all([CmEndpoint.close(p.client), CmEndpoint.close(p.client)], { concurrency: "unbounded" })
      yield* CmEndpoint.close(p.client)
      const failed = yield* Effect.flip(Fiber.join(waiting))
      assert.strictEqual(failed._tag, "ConnectionClosedError")
      assert.strictEqual((failed as { reason?: string }).reason, "CLOSED")
      assert.strictEqual(yield* CmEndpoint.awaitClosed(p.client), "Closed")
      assert.strictEqual(yield* CmEndpoint.awaitClosed(p.server), "Closed")
    })))

  it.effect("a closed request is rejected: its client's connect fails, and both end Closed", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const client = yield* CmEndpoint.make(address, listener.port)
      const connecting = yield* Effect.fork(CmEndpoint.establish(client))
      const request = yield* CmListener.next(listener)
      yield* CmEndpoint.close(request)
      assert.strictEqual((yield* Effect.flip(Fiber.join(connecting))).errnoName, "ECONNREFUSED")
      assert.strictEqual(yield* CmEndpoint.awaitClosed(client), "Closed")
      assert.strictEqual(yield* CmEndpoint.awaitClosed(request), "Closed")
      assert.strictEqual((yield* Effect.flip(CmListener.accept(request)))._tag, "RdmaCmError")
    })))

  it.effect("guards: an endpoint and a listener are told apart from anything else", () =>
    inWorld(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      const ep = yield* CmEndpoint.make(address, listener.port)
      assert.isTrue(CmEndpoint.isCmEndpoint(ep))
      assert.isFalse(CmEndpoint.isCmEndpoint(listener))
      assert.isTrue(CmListener.isCmListener(listener))
      assert.isFalse(CmListener.isCmListener(ep))
      for (const other of [null, undefined, 0, "ep", {}, { handle: Driver.handleOf(ep), info: ep.info }]) {
        assert.isFalse(CmEndpoint.isCmEndpoint(other))
        assert.isFalse(CmListener.isCmListener(other))
      }
    })))
})
