// Needs an RDMA device (Soft-RoCE will do) bound to RDMA_ADDRESS:
//   RDMA_ADDRESS=192.168.122.10 pnpm test:device (from the repository root)
// Without RDMA_ADDRESS the suite fails: a device run that silently skips proves nothing.
import { CmEndpoint, Connection, Descriptor, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import * as TestServices from "effect/TestServices"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { address, nextCompletions, postOne, withPeer } from "./support.js"

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void
const settle = Effect.promise(() => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve))))
const collect = Effect.gen(function*() {
  for (let i = 0; i < 5; i++) {
    gc()
    yield* settle
  }
})

const withTwoPeers = <A, E>(
  f: (driver: Driver, server: Model.PeerHandle, client: Model.PeerHandle) => Effect.Effect<A, E>
) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const context = yield* driver.getIbvContext(address, "local")
    const peers = Effect.acquireRelease(driver.peerNew(context), (peer) => Effect.orDie(driver.peerDelete(peer)))
    return yield* Effect.scoped(
      Effect.flatMap(Effect.zip(peers, peers), ([server, client]) => f(driver, server, client))
    )
  })

const config: Model.ConnConfig = { timeoutMs: 5000, sqSize: 8, rqSize: 8, cqSize: 16, directWriteToPmem: false }

// A connection made with the raw calls, both sides ESTABLISHED.
const rawPair = (driver: Driver, server: Model.PeerHandle, client: Model.PeerHandle, port: number) =>
  Effect.gen(function*() {
    const ep = yield* driver.epListen(server, address, port)
    const incoming = yield* Effect.fork(driver.epNextConnReq(ep, config))
    const outgoing = yield* driver.connReqNew(client, address, port, config)
    const clientConn = yield* driver.connReqConnect(outgoing, new TextEncoder().encode("hi"))
    const serverConn = yield* driver.connReqConnect(yield* Fiber.join(incoming), undefined)
    assert.strictEqual(yield* driver.connNextEvent(clientConn), "ESTABLISHED")
    assert.strictEqual(yield* driver.connNextEvent(serverConn), "ESTABLISHED")
    return { ep, clientConn, serverConn }
  })

const READ_SRC = 0x01
const WRITE_DST = 0x08
const FLUSH_VISIBILITY = 0x10

layer(NativeDriver.layer, { timeout: "30 seconds" })("on a device", (it) => {
  describe("peers and local regions", () => {
    it.effect("peer new and delete", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const context = yield* driver.getIbvContext(address, "local")
        const peer = yield* driver.peerNew(context)
        assert.strictEqual((yield* driver.live).peers, 1)
        yield* driver.peerDelete(peer)
        assert.strictEqual((yield* driver.live).peers, 0)
        const again = yield* Effect.flip(driver.peerDelete(peer))
        assert.strictEqual(again._tag, "RpmaInvalidError")
      }))

    it.effect("register, describe, deregister", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const memory = yield* driver.allocate(8192)
          const registered = yield* driver.mrReg(peer, memory, READ_SRC | WRITE_DST | FLUSH_VISIBILITY)
          const mr = registered.handle
          assert.strictEqual(yield* driver.mrGetSize(mr), 8192)
          const ptr = yield* driver.mrGetPtr(mr)
          assert.strictEqual(registered.address, ptr, "mrReg's address is rpma_mr_get_ptr's")
          assert.strictEqual(ptr % 4096n, 0n, "page-aligned")
          assert.strictEqual(yield* driver.mrGetDescriptorSize(mr), Descriptor.SIZE)
          const bytes = yield* driver.mrGetDescriptor(mr)
          const decoded = yield* Descriptor.decode(bytes)
          assert.strictEqual(decoded.address, ptr)
          assert.strictEqual(decoded.length, 8192n)
          assert.strictEqual(decoded.usage, READ_SRC | WRITE_DST | FLUSH_VISIBILITY)

          // The real descriptor through librpma's decoder.
          const remote = yield* driver.mrRemoteFromDescriptor(bytes)
          assert.strictEqual(yield* driver.mrRemoteGetSize(remote), 8192n)
          assert.strictEqual(yield* driver.mrRemoteGetFlushType(remote), FLUSH_VISIBILITY)
          yield* driver.mrRemoteDelete(remote)

          yield* driver.mrDereg(mr)
          yield* driver.free(memory)
        })
      ))

    it.effect("double dereg and use after dereg are RpmaInvalidError", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const mr = (yield* driver.mrReg(peer, new Uint8Array(4096), WRITE_DST)).handle
          yield* driver.mrDereg(mr)
          for (const effect of [driver.mrDereg(mr), driver.mrGetPtr(mr), driver.mrGetDescriptor(mr)]) {
            const error = yield* Effect.flip(effect)
            assert.strictEqual(error._tag, "RpmaInvalidError")
            assert.strictEqual(error.detail, "the mr_local was already deregistered")
          }
        })
      ))

    it.effect("a peer with live regions is not deleted", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const context = yield* driver.getIbvContext(address, "local")
        const peer = yield* driver.peerNew(context)
        const a = (yield* driver.mrReg(peer, new Uint8Array(4096), WRITE_DST)).handle
        const b = (yield* driver.mrReg(peer, new Uint8Array(4096), READ_SRC)).handle
        const error = yield* Effect.flip(driver.peerDelete(peer))
        assert.strictEqual(error._tag, "ResourceInUseError")
        assert.strictEqual(error.detail, "2 regions still registered: deregister them first")
        // The peer is intact and still usable.
        const c = (yield* driver.mrReg(peer, new Uint8Array(4096), READ_SRC)).handle
        for (const mr of [a, b, c]) yield* driver.mrDereg(mr)
        yield* driver.peerDelete(peer)
      }))

    it.effect("argument checks mirror librpma", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const cases: Array<[string, Effect.Effect<unknown, { readonly _tag: string }>]> = [
            ["size 0", driver.mrReg(peer, new Uint8Array(0), WRITE_DST)],
            ["usage 0", driver.mrReg(peer, new Uint8Array(64), 0)],
            ["usage 0x100", driver.mrReg(peer, new Uint8Array(64), 0x100)],
            ["usage -1", driver.mrReg(peer, new Uint8Array(64), -1)],
            ["memory null", driver.mrReg(peer, null as never, WRITE_DST)],
            ["memory detached", driver.mrReg(peer, detached(), WRITE_DST)],
            ["SharedArrayBuffer", driver.mrReg(peer, new Uint8Array(new SharedArrayBuffer(64)), WRITE_DST)],
            ["peer is a region", regionAsPeer(driver, peer)]
          ]
          for (const [name, effect] of cases) {
            const error = yield* Effect.flip(effect)
            assert.strictEqual(error._tag, "RpmaInvalidError", name)
          }
          assert.strictEqual((yield* driver.live).localRegions, 0)
        })
      ))
  })

  describe("registered memory outlives JavaScript's hold on it", () => {
    it.effect("a transferred (detached) caller buffer stays registered and alive", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          let memory: Uint8Array<ArrayBuffer> | undefined = new Uint8Array(1 << 16).fill(0x5a)
          const mr = (yield* driver.mrReg(peer, memory, WRITE_DST)).handle
          const ptr = yield* driver.mrGetPtr(mr)
          // Harmless, not refused: the registration holds a share of the backing store.
          let moved: ArrayBuffer | undefined = structuredClone(memory.buffer, { transfer: [memory.buffer] })
          assert.strictEqual(memory.byteLength, 0)
          assert.strictEqual(new Uint8Array(moved)[100], 0x5a)
          memory = undefined
          moved = undefined
          yield* collect
          assert.strictEqual(yield* driver.mrGetPtr(mr), ptr)
          yield* driver.mrDereg(mr)
        })
      ))

    it.effect("free() of a registered allocation waits for the dereg", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const binding = yield* RpmaBinding.load()
          const base = binding.liveAllocations()
          const memory = yield* driver.allocate(1 << 16)
          const mr = (yield* driver.mrReg(peer, memory, WRITE_DST)).handle
          yield* driver.free(memory)
          yield* collect
          assert.strictEqual(binding.liveAllocations(), base + 1, "kept by the registration")
          yield* driver.mrDereg(mr)
          yield* collect
          assert.strictEqual(binding.liveAllocations(), base, "freed after dereg")
        })
      ))

    it.effect("a registration nobody references is deregistered by GC, before its peer", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const context = yield* driver.getIbvContext(address, "local")
        yield* Effect.gen(function*() {
          const peer = yield* driver.peerNew(context)
          yield* driver.mrReg(peer, new Uint8Array(4096), WRITE_DST)
        })
        yield* collect
        const live = yield* driver.live
        assert.strictEqual(live.localRegions, 0)
        assert.strictEqual(live.peers, 0)
      }))
  })

  describe("rdma_cm registrations", () => {
    // An endpoint whose route is resolved (to this host: nothing needs to listen) has its own
    // protection domain, which rdma_reg_* register on.
    const cmConfig: Model.CmEpConfig = {
      timeoutMs: 5_000,
      maxSendWr: 4,
      maxRecvWr: 4,
      maxSendSge: 1,
      maxRecvSge: 1,
      maxInlineData: 0
    }

    it.effect("the three registrations on an endpoint, their info, and release", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const ep = yield* driver.cmEpCreate(address, 7471, cmConfig)
        for (const kind of ["msgs", "read", "write"] as const) {
          const memory = new Uint8Array(4096)
          const mr = yield* driver.cmReg(ep, kind, memory)
          const info = yield* driver.cmMrInfo(mr)
          assert.strictEqual(info.length, 4096, kind)
          assert.isAbove(info.lkey + info.rkey, 0, kind)
          assert.isAbove(Number(info.address), 0, kind)
          yield* driver.cmDeregMr(mr)
          const again = yield* Effect.flip(driver.cmDeregMr(mr))
          assert.strictEqual(again.errnoName, "EINVAL", kind)
        }
        yield* driver.cmEpDestroy(ep)
        const twice = yield* Effect.flip(driver.cmEpDestroy(ep))
        assert.strictEqual(twice._tag === "RdmaCmError" && twice.errnoName, "EINVAL")
      }))

    it.effect("an endpoint with live regions is not destroyed", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        const ep = yield* driver.cmEpCreate(address, 7471, cmConfig)
        const mr = yield* driver.cmReg(ep, "msgs", new Uint8Array(4096))
        const error = yield* Effect.flip(driver.cmEpDestroy(ep))
        assert.strictEqual(error._tag, "ResourceInUseError")
        assert.strictEqual(error.detail, "1 region still registered on the endpoint: deregister them first")
        yield* driver.cmDeregMr(mr)
        yield* driver.cmEpDestroy(ep)
      }))

    it.effect("a peer handle is not an endpoint", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(driver.cmReg(peer as never, "msgs", new Uint8Array(64)))
          assert.strictEqual(error.errnoName, "EINVAL")
          assert.include(error.detail, "expected a cm_ep, got a peer")
        })
      ))
  })

  describe("connections, raw", () => {
    it.effect("epListen: port 0 or out of range is RpmaInvalidError; a peer with an endpoint is not deleted", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          for (const port of [0, -1, 65536, 1.5]) {
            const error = yield* Effect.flip(driver.epListen(peer, address, port))
            assert.strictEqual(error._tag, "RpmaInvalidError", String(port))
          }
          const ep = yield* driver.epListen(peer, address, 18101)
          assert.strictEqual((yield* driver.live).endpoints, 1)
          const refused = yield* Effect.flip(driver.peerDelete(peer))
          assert.strictEqual(refused._tag, "ResourceInUseError")
          assert.include(refused.detail, "endpoint, connection request or connection still uses it")
          yield* driver.epShutdown(ep)
          assert.strictEqual((yield* Effect.flip(driver.epShutdown(ep)))._tag, "RpmaInvalidError")
        })
      ))

    it.effect("connReqNew to an address no device reaches is RpmaProviderError saying so and what to check", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const error = yield* Effect.flip(driver.connReqNew(peer, "192.0.2.99", 18102, config))
          assert.strictEqual(error._tag, "RpmaProviderError")
          assert.include(error.message, "cannot resolve an RDMA route to 192.0.2.99:18102 (no RDMA device reaches it)")
          assert.include(error.message, "check that an RDMA device is up on that network")
          assert.strictEqual((yield* driver.live).connectionRequests, 0)
        })
      ))

    it.effect("epShutdown fails a pending epNextConnReq; an interrupted one leaves nothing behind", () =>
      withPeer((driver, peer) =>
        Effect.gen(function*() {
          const ep = yield* driver.epListen(peer, address, 18103)
          const interrupted = yield* Effect.fork(driver.epNextConnReq(ep, config))
          yield* settle
          yield* Fiber.interrupt(interrupted)
          const pending = yield* Effect.fork(driver.epNextConnReq(ep, config))
          yield* settle
          yield* driver.epShutdown(ep)
          const error = yield* Effect.flip(Fiber.join(pending))
          assert.strictEqual(error._tag, "RpmaInvalidError")
          assert.strictEqual(error.detail, "the endpoint was shut down")
        })
      ))

    it.effect("a region in flight is not deregistered; connDelete fails the waits and releases it", () =>
      withTwoPeers((driver, server, client) =>
        Effect.gen(function*() {
          const { clientConn, ep, serverConn } = yield* rawPair(driver, server, client, 18104)
          const inbox = (yield* driver.mrReg(server, new Uint8Array(256), 0x80)).handle
          yield* postOne(driver, serverConn, { op: "recv", id: 1, dst: inbox, offset: 0, length: 256 })
          const refused = yield* Effect.flip(driver.mrDereg(inbox))
          assert.strictEqual(refused._tag, "ResourceInUseError")
          assert.include(refused.detail, "1 request in flight uses this region")
          const event = yield* Effect.fork(driver.connNextEvent(serverConn))
          const completions = yield* Effect.fork(nextCompletions(driver, serverConn))
          yield* settle
          yield* driver.connDelete(serverConn)
          assert.strictEqual((yield* Effect.flip(Fiber.join(event)))._tag, "RpmaInvalidError")
          assert.strictEqual((yield* Effect.flip(Fiber.join(completions)))._tag, "RpmaInvalidError")
          yield* driver.mrDereg(inbox)
          assert.strictEqual(yield* driver.connNextEvent(clientConn), "CLOSED")
          yield* driver.connDelete(clientConn)
          yield* driver.epShutdown(ep)
          assert.strictEqual((yield* driver.live).connections, 0)
        })
      ))

    it.effect("a connection collected while waits run on it is deleted, its watchers closed", () =>
      withTwoPeers((driver, server, client) =>
        Effect.gen(function*() {
          const binding = yield* RpmaBinding.load()
          const ep = yield* Effect.gen(function*() {
            const { clientConn, ep, serverConn } = yield* rawPair(driver, server, client, 18105)
            for (const conn of [clientConn, serverConn]) {
              binding.connNextEvent(conn, () => {})
              binding.waitCompletions(conn, () => {})
            }
            return ep
          })
          yield* collect
          assert.strictEqual((yield* driver.live).connections, 0)
          yield* driver.epShutdown(ep)
        })
      ))
  })

  describe("through core's scoped resources", () => {
    it.scoped("Peer.layer, LocalMr.allocate and CmEndpoint.registerMessages release in order", () =>
      Effect.gen(function*() {
        const driver = yield* RdmaDriver
        // Scoped inside the layer: the regions' scope closes before the layer deletes the peer
        // (the other way round, rpma_peer_delete is refused while the region is registered).
        yield* Effect.gen(function*() {
          const peer = yield* Peer.Peer
          const mr = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
          const described = yield* LocalMr.describe(mr)
          assert.strictEqual(described.length, 4096n)
          const ep = yield* CmEndpoint.make(address, 7471)
          yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
        }).pipe(
          Effect.scoped,
          Effect.provide(Layer.provideMerge(Peer.layer(address), Layer.succeed(RdmaDriver, driver)))
        )
        const live = yield* driver.live
        assert.isTrue(Object.values(live).every((n) => n === 0), JSON.stringify(live))
      }))

    // The replicated-log example in one process: the client connects and appends while the
    // server's accept waits for its ESTABLISHED. Soft-RoCE completes a loopback write inside the
    // post, so the client's loop found every completion ready and never let the event loop poll:
    // the server's ESTABLISHED, ready within milliseconds, was read only when the client stopped,
    // after the accept's timer (run before I/O) had failed it. The live clock: the timeouts must
    // fire. The endpoint keeps its request stream running across several accepts, one of
    // them late.
    it.effect(
      "a server accepts, again and again, while a client in the same process keeps the completions coming",
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const driver = yield* RdmaDriver
          const port = 18106
          const acceptTimeout = "1 second"
          const busyMillis = 1500 // longer than the accept's timeout
          const usage = Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)
          yield* Effect.scoped(Effect.gen(function*() {
            const serverPeer = yield* Peer.make(address)
            const log = yield* LocalMr.allocate(serverPeer, 4096, usage)
            const ep = yield* Listener.make(serverPeer, address, port)
            const accepted = yield* Queue.unbounded<string>()
            let requests = 0
            yield* Listener.requests(ep).pipe(
              Stream.runForEach((req) =>
                Effect.forkDaemon(
                  Effect.sleep(requests++ === 1 ? "300 millis" : "0 millis").pipe(
                    Effect.zipRight(Effect.scoped(Effect.flatMap(
                      Listener.accept(req, { timeout: acceptTimeout }),
                      (conn) => Effect.zipRight(Queue.offer(accepted, "ESTABLISHED"), Connection.awaitClosed(conn))
                    ))),
                    Effect.catchAll((error) => Queue.offer(accepted, String(error)))
                  )
                )
              ),
              Effect.forkScoped
            )
            const remote = yield* LocalMr.descriptor(log)
            for (let n = 0; n < 3; n++) {
              const ticks = yield* Effect.scoped(Effect.gen(function*() {
                const peer = yield* Peer.make(address)
                const dst = yield* RemoteMr.fromDescriptor(remote).pipe(Effect.flatMap(RemoteMr.require(usage)))
                const conn = yield* Connection.connect(peer, address, port, { timeout: "30 seconds" })
                const src = yield* LocalMr.allocate(peer, 64, Usage.WRITE_SRC)
                let ticks = 0
                const timer = yield* Effect.acquireRelease(
                  Effect.sync(() => setInterval(() => ticks++, 10)),
                  (timer) => Effect.sync(() => clearInterval(timer))
                )
                // Busy for longer than the accept's timeout, then on until a timer has run: on a
                // loaded host the guest may get too little of 1.5 s to reach the scheduler's yield
                // to timers (a loaded run once counted none). 120 s bounds a loop that starves them.
                const started = performance.now()
                const busy = () => performance.now() - started
                while (busy() < busyMillis || (ticks === 0 && busy() < 120_000)) {
                  yield* Connection.write(conn, { dst, dstOffset: 0, src, srcOffset: 0, length: 64 })
                  yield* Connection.flush(conn, { dst, dstOffset: 0, length: 64 })
                }
                clearInterval(timer)
                return ticks
              }))
              assert.strictEqual(yield* Queue.take(accepted), "ESTABLISHED", `accept ${n + 1}`)
              assert.isAbove(ticks, 0, `the event loop ran timers while connection ${n + 1} was busy`)
            }
          }))
          const live = yield* driver.live
          assert.isTrue(Object.values(live).every((n) => n === 0), JSON.stringify(live))
        })),
      { timeout: 120_000 }
    )
  })
})

// mrReg with a region where the peer goes; the region is deregistered whatever happens.
const regionAsPeer = (driver: Driver, peer: Model.PeerHandle) =>
  Effect.flatMap(
    Effect.map(driver.mrReg(peer, new Uint8Array(64), WRITE_DST), (r) => r.handle),
    (mr) =>
      Effect.ensuring(
        driver.mrReg(mr as never, new Uint8Array(64), WRITE_DST),
        Effect.orDie(driver.mrDereg(mr))
      )
  )

const detached = (): Uint8Array => {
  const memory = new Uint8Array(new ArrayBuffer(64))
  structuredClone(memory.buffer, { transfer: [memory.buffer] })
  return memory
}
