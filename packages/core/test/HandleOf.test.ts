/**
 * `Driver.handleOf` answers, for each resource core makes, the handle the driver gave for it: the
 * driver here records what its calls answered, and each resource's handle is that one. On both
 * paths: librpma's resources and librdmacm's endpoints, regions and listeners.
 */
import {
  CmEndpoint,
  CmListener,
  Connection,
  Listener,
  LocalMr,
  Peer,
  RemoteMr,
  SharedReceiveQueue,
  Usage
} from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

interface Given {
  readonly peers: Array<Driver.Model.PeerHandle>
  readonly mrs: Array<Driver.Model.MrHandle>
  readonly remotes: Array<Driver.Model.RemoteMrHandle>
  readonly srqs: Array<Driver.Model.SrqHandle>
  readonly conns: Array<Driver.Model.ConnHandle>
  readonly endpoints: Array<Driver.Model.CmEpHandle>
  readonly requests: Array<Driver.Model.CmEpHandle>
  readonly cmRegions: Array<Driver.Model.CmMrHandle>
  readonly listeners: Array<Driver.Model.CmListenerHandle>
}

const nothingGiven = (): Given => ({
  peers: [],
  mrs: [],
  remotes: [],
  srqs: [],
  conns: [],
  endpoints: [],
  requests: [],
  cmRegions: [],
  listeners: []
})

/** The simulated driver, recording each handle its calls answer. */
const recording = (given: Given) =>
  Layer.effect(
    Driver.RdmaDriver,
    Effect.map(Driver.RdmaDriver, (driver): Driver.Driver => ({
      ...driver,
      peerNew: (context) => Effect.tap(driver.peerNew(context), (h) => given.peers.push(h)),
      // The Effect form only (no `now`): every registration goes through it.
      mrReg: (peer, memory, usage) => Effect.tap(driver.mrReg(peer, memory, usage), (r) => given.mrs.push(r.handle)),
      mrRemoteFromDescriptor: (bytes) => Effect.tap(driver.mrRemoteFromDescriptor(bytes), (h) => given.remotes.push(h)),
      srqNew: (peer, config) => Effect.tap(driver.srqNew(peer, config), (h) => given.srqs.push(h)),
      connReqConnect: (req, privateData) =>
        Effect.tap(driver.connReqConnect(req, privateData), (h) => given.conns.push(h)),
      cmEpCreate: (address, port, config) =>
        Effect.tap(driver.cmEpCreate(address, port, config), (h) => given.endpoints.push(h)),
      cmGetRequest: (listener) => Effect.tap(driver.cmGetRequest(listener), (h) => given.requests.push(h)),
      cmReg: (ep, kind, memory) => Effect.tap(driver.cmReg(ep, kind, memory), (h) => given.cmRegions.push(h)),
      cmListen: (address, port, config) =>
        Effect.tap(driver.cmListen(address, port, config), (l) => given.listeners.push(l.handle))
    }))
  ).pipe(Layer.provideMerge(SimulatedDriver.layer))

describe("Driver.handleOf", () => {
  it.effect("answers the handle the driver gave for a peer, a region, a remote region, a queue and a connection", () => {
    const given = nothingGiven()
    return Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const serverPeer = yield* Peer.make(address)
      const clientPeer = yield* Peer.make(address)
      assert.deepStrictEqual([Driver.handleOf(serverPeer), Driver.handleOf(clientPeer)], given.peers)
      assert.notStrictEqual(Driver.handleOf(serverPeer), Driver.handleOf(clientPeer))

      const target = yield* LocalMr.allocate(serverPeer, 64, Usage.WRITE_DST)
      assert.deepStrictEqual([Driver.handleOf(target)], given.mrs)
      // The region's handle is the driver's: the driver answers for it.
      assert.strictEqual(yield* Effect.flatMap(Driver.RdmaDriver, (d) => d.mrGetSize(Driver.handleOf(target))), 64)

      const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target))
      assert.deepStrictEqual([Driver.handleOf(remote)], given.remotes)

      const srq = yield* SharedReceiveQueue.make(serverPeer, { receiveQueueSize: 4 })
      assert.deepStrictEqual([Driver.handleOf(srq)], given.srqs)

      const ep = yield* Listener.make(serverPeer, address, 7481)
      const accepting = yield* Effect.fork(Listener.acceptNext(ep))
      const client = yield* Connection.connect(clientPeer, address, ep.port)
      const server = yield* Fiber.join(accepting)
      assert.sameMembers([Driver.handleOf(client), Driver.handleOf(server)], given.conns)
      assert.strictEqual(given.conns.length, 2)
    }))).pipe(Effect.provide(recording(given)))
  })

  it.effect("answers the handle the driver gave for an endpoint, a request, their regions and a listener", () => {
    const given = nothingGiven()
    return Ledger.checked(Effect.scoped(Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0)
      assert.deepStrictEqual([Driver.handleOf(listener)], given.listeners)

      const client = yield* CmEndpoint.make(address, listener.port)
      assert.deepStrictEqual([Driver.handleOf(client)], given.endpoints)
      const connecting = yield* Effect.fork(CmEndpoint.establish(client))
      const request = yield* CmListener.next(listener)
      assert.deepStrictEqual([Driver.handleOf(request)], given.requests)
      assert.notStrictEqual(Driver.handleOf(request), Driver.handleOf(client))

      const msgs = yield* CmEndpoint.registerMessages(client, new Uint8Array(64))
      const read = yield* CmEndpoint.registerRead(request, new Uint8Array(128))
      const write = yield* CmEndpoint.registerWrite(request, new Uint8Array(256))
      assert.deepStrictEqual([Driver.handleOf(msgs), Driver.handleOf(read), Driver.handleOf(write)], given.cmRegions)
      // The region's handle is the driver's: the driver answers for it.
      const info = yield* Effect.flatMap(Driver.RdmaDriver, (d) => d.cmMrInfo(Driver.handleOf(write)))
      assert.strictEqual(info.length, 256)
      assert.strictEqual(info.rkey, write.rkey)

      yield* CmListener.accept(request)
      yield* Fiber.join(connecting)
      // Connected, each endpoint keeps the handle it was made with.
      assert.deepStrictEqual([Driver.handleOf(client), Driver.handleOf(request)], [
        ...given.endpoints,
        ...given.requests
      ])
    }))).pipe(Effect.provide(recording(given)))
  })
})
