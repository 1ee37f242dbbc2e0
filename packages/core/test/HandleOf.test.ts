/**
 * `Driver.handleOf` answers, for each resource core makes, the handle the driver gave for it: the
 * driver here records what its calls answered, and each resource's handle is that one.
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, SharedReceiveQueue, Usage } from "@effect-rdma/core"
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
}

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
        Effect.tap(driver.connReqConnect(req, privateData), (h) => given.conns.push(h))
    }))
  ).pipe(Layer.provideMerge(SimulatedDriver.layer))

describe("Driver.handleOf", () => {
  it.effect("answers the handle the driver gave for a peer, a region, a remote region, a queue and a connection", () => {
    const given: Given = { peers: [], mrs: [], remotes: [], srqs: [], conns: [] }
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
})
