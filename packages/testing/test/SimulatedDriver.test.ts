/**
 * The error conditions of the three manual pages, at the Driver level and through core, on the
 * simulated driver. The conformance suite (run on every driver) repeats the ones a device can show.
 */
import { CmEndpoint, Descriptor, LocalMr, Memory, Peer, RdmaError, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, type Scope } from "effect"

const World = Layer.provideMerge(Peer.layer(SimulatedDriver.DEFAULT_ADDRESS), SimulatedDriver.layer)

/** Runs a test in a fresh world with a peer, and checks that nothing is left alive afterwards. */
const inWorld = <A, E>(
  effect: Effect.Effect<A, E, Driver.RdmaDriver | Peer.Peer | SimulatedDriver.SimulationControl | Scope.Scope>
) =>
  Ledger.checked(Effect.provide(Effect.scoped(effect), Peer.layer(SimulatedDriver.DEFAULT_ADDRESS))).pipe(
    Effect.provide(SimulatedDriver.layer)
  )

const tagOf = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.flip(effect), (e) => e._tag)

const driver = Driver.RdmaDriver

describe("rpma_mr_reg", () => {
  it.effect("peer NULL, ptr NULL, size 0 → RPMA_E_INVAL", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      assert.strictEqual(yield* tagOf(d.mrReg(null as any, new Uint8Array(8), Usage.READ_SRC)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.mrReg(Driver.handleOf(peer), null as any, Usage.READ_SRC)), "RpmaInvalidError")
      const empty = yield* Effect.flip(LocalMr.register(peer, new Uint8Array(0), Usage.READ_SRC))
      assert.strictEqual(empty._tag, "RpmaInvalidError")
      assert.match(empty.message, /rpma_mr_reg failed with RPMA_E_INVAL \(-100004\).*size is 0/)
    })))

  it.effect("usage 0 or with unknown bits → RPMA_E_INVAL", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      for (const usage of [0, 0x100, -1, 1.5]) {
        assert.strictEqual(yield* tagOf(d.mrReg(Driver.handleOf(peer), new Uint8Array(8), usage)), "RpmaInvalidError")
      }
    })))

  it.effect("out of memory → RPMA_E_NOMEM; provider refusal → RPMA_E_PROVIDER", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.Peer
      yield* SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 1, code: RdmaError.RpmaCode.RPMA_E_NOMEM })
      yield* SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 3, code: RdmaError.RpmaCode.RPMA_E_PROVIDER })
      const memory = new Uint8Array(64)
      const results = yield* Effect.forEach([1, 2, 3], () =>
        Effect.scoped(LocalMr.register(peer, memory, Usage.WRITE_DST)).pipe(
          Effect.match({
            onFailure: (e) =>
              e._tag,
            onSuccess: () => "ok"
          })
        ))
      assert.deepStrictEqual(results, ["RpmaNoMemoryError", "ok", "RpmaProviderError"])
    })))

  it.effect("a Buffer from the shared pool is refused before the driver sees it", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.Peer
      const error = yield* Effect.flip(LocalMr.register(peer, Buffer.allocUnsafe(64), Usage.SEND))
      assert.strictEqual(error._tag, "MemoryRefusedError")
      assert.strictEqual(
        yield* SimulatedDriver.SimulationControl.pipe(Effect.flatMap((s) => s.calls("rpma_mr_reg"))),
        0
      )
    })))

  it.effect("an unknown address → RPMA_E_PROVIDER from rpma_utils_get_ibv_context", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(Peer.make("192.0.2.99")))
      assert.strictEqual(error._tag, "RpmaProviderError")
      assert.match(error.message, /no RDMA device answers at 192\.0\.2\.99/)
      assert.strictEqual(yield* tagOf(Effect.scoped(Peer.make(null as any))), "RpmaInvalidError")
    }).pipe(Effect.provide(SimulatedDriver.layer)))
})

describe("handles", () => {
  it.effect("double dereg, use after dereg and a handle of the wrong kind → RPMA_E_INVAL", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      const mr = (yield* d.mrReg(Driver.handleOf(peer), new Uint8Array(64), Usage.READ_SRC)).handle
      yield* d.mrDereg(mr)
      const again = yield* Effect.flip(d.mrDereg(mr))
      assert.strictEqual(again._tag, "RpmaInvalidError")
      assert.match(again.message, /already released/)
      assert.strictEqual(yield* tagOf(d.mrGetDescriptor(mr)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.mrGetPtr(mr)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.mrReg(mr as any, new Uint8Array(8), Usage.READ_SRC)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.peerDelete(mr as any)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.mrDereg({} as any)), "RpmaInvalidError")
    })))

  it.effect("a peer with live regions is not deleted", () =>
    Effect.gen(function*() {
      const d = yield* driver
      const context = yield* d.getIbvContext(SimulatedDriver.DEFAULT_ADDRESS, "local")
      const peer = yield* d.peerNew(context)
      const mr = (yield* d.mrReg(peer, new Uint8Array(64), Usage.READ_SRC)).handle
      const refused = yield* Effect.flip(d.peerDelete(peer))
      assert.strictEqual(refused._tag, "ResourceInUseError")
      assert.match(refused.message, /1 region still registered/)
      yield* d.mrDereg(mr)
      yield* d.peerDelete(peer)
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))
})

describe("descriptors", () => {
  it.effect("a region's descriptor describes it, and rebuilds into a remote region", () =>
    inWorld(Effect.gen(function*() {
      const peer = yield* Peer.Peer
      const usage = Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT, Usage.READ_SRC)
      const mr = yield* LocalMr.allocate(peer, 8192, usage)
      const bytes = yield* LocalMr.descriptor(mr)
      assert.strictEqual(bytes.length, 21)
      const d = yield* LocalMr.describe(mr)
      assert.strictEqual(d.address, mr.address)
      assert.strictEqual(d.length, 8192n)
      assert.strictEqual(d.usage, usage)
      assert.strictEqual(d.address % 4096n, 0n)
      const remote = yield* RemoteMr.fromDescriptor(bytes)
      assert.strictEqual(remote.size, 8192n)
      assert.strictEqual(remote.flushType, Usage.FLUSH_TYPE_PERSISTENT)
      const target = yield* RemoteMr.require(Usage.WRITE_DST)(remote)
      assert.strictEqual(target.descriptor.rkey, d.rkey)
      const missing = yield* Effect.flip(RemoteMr.require(Usage.SEND)(remote))
      assert.strictEqual(missing._tag, "MissingUsageError")
      assert.match(missing.message, /lacks SEND/)
    })))

  it.effect("desc NULL, short or with usage 0 → RPMA_E_INVAL; NOSUPP and NOMEM when the library says so", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      assert.strictEqual(yield* tagOf(d.mrRemoteFromDescriptor(null as any)), "RpmaInvalidError")
      assert.strictEqual(yield* tagOf(d.mrRemoteFromDescriptor(new Uint8Array(20))), "RpmaInvalidError")
      const noUsage = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 0 })
      assert.strictEqual(yield* tagOf(d.mrRemoteFromDescriptor(noUsage)), "RpmaInvalidError")
      const good = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 1 })
      yield* SimulatedDriver.fail({ operation: "rpma_mr_remote_from_descriptor", nth: 1, code: -100001 })
      yield* SimulatedDriver.fail({ operation: "rpma_mr_remote_from_descriptor", nth: 2, code: -100003 })
      assert.strictEqual(yield* tagOf(Effect.scoped(RemoteMr.fromDescriptor(good))), "RpmaNoSupportError")
      assert.strictEqual(yield* tagOf(Effect.scoped(RemoteMr.fromDescriptor(good))), "RpmaNoMemoryError")
      // Strict decoding refuses what librpma would accept.
      const padded = new Uint8Array(32)
      padded.set(good)
      const strict = yield* Effect.flip(Effect.scoped(RemoteMr.fromDescriptor(padded)))
      assert.strictEqual(strict._tag, "InvalidDescriptorError")
      const lenient = yield* Effect.scoped(RemoteMr.fromDescriptor(padded, { lenient: true }))
      assert.strictEqual(lenient.size, 64n)
    })))
})

describe("rdma_reg_msgs", () => {
  it.effect("registers on an endpoint and reports errno failures", () =>
    inWorld(Effect.gen(function*() {
      const ep = yield* CmEndpoint.make(SimulatedDriver.DEFAULT_ADDRESS, 7471)
      const msgs = yield* CmEndpoint.registerMessages(ep, new Uint8Array(256))
      const read = yield* CmEndpoint.registerRead(ep, new Uint8Array(256))
      const write = yield* CmEndpoint.registerWrite(ep, new Uint8Array(256))
      assert.deepStrictEqual([msgs.kind, read.kind, write.kind], ["msgs", "read", "write"])
      assert.strictEqual(msgs.length, 256)
      assert.notStrictEqual(read.rkey, write.rkey)

      const empty = yield* Effect.flip(Effect.scoped(CmEndpoint.registerMessages(ep, new Uint8Array(0))))
      assert.strictEqual(empty._tag, "RdmaCmError")
      assert.strictEqual(empty._tag === "RdmaCmError" && empty.errnoName, "EINVAL")
      yield* SimulatedDriver.fail({ operation: "rdma_reg_msgs", nth: 1, code: 12 })
      const nomem = yield* Effect.flip(Effect.scoped(CmEndpoint.registerMessages(ep, new Uint8Array(8))))
      assert.strictEqual(nomem.message, "rdma_reg_msgs failed with ENOMEM (errno 12): planned fault")
      const d = yield* driver
      assert.strictEqual(yield* tagOf(d.cmReg(Driver.handleOf(msgs) as any, "msgs", new Uint8Array(8))), "RdmaCmError")
    })))

  it.effect("an endpoint with live regions is not destroyed", () =>
    Effect.gen(function*() {
      const d = yield* driver
      const ep = yield* d.cmEpCreate(SimulatedDriver.DEFAULT_ADDRESS, 7471, {
        timeoutMs: 1000,
        maxSendWr: 4,
        maxRecvWr: 4,
        maxSendSge: 1,
        maxRecvSge: 1,
        maxInlineData: 0
      })
      const mr = yield* d.cmReg(ep, "msgs", new Uint8Array(8))
      assert.strictEqual((yield* Effect.flip(d.cmEpDestroy(ep)))._tag, "ResourceInUseError")
      yield* d.cmDeregMr(mr)
      assert.strictEqual((yield* Effect.flip(d.cmDeregMr(mr))).errnoName, "EINVAL")
      yield* d.cmEpDestroy(ep)
      yield* Ledger.assertEmpty
    }).pipe(Effect.provide(SimulatedDriver.layer)))
})

describe("Memory.allocate", () => {
  it.effect("gives zeroed memory and detaches it when the scope closes", () =>
    inWorld(Effect.gen(function*() {
      const memory = yield* Effect.scoped(Memory.allocate(4096).pipe(Effect.tap((m) => assert.strictEqual(m[100], 0))))
      assert.strictEqual(memory.byteLength, 0)
      assert.isTrue(Memory.isDetached(memory))
      const refused = yield* Effect.flip(Effect.scoped(Memory.allocate(0)))
      assert.strictEqual(refused._tag, "RpmaInvalidError")
      const peer = yield* Peer.Peer
      const released = yield* Effect.flip(LocalMr.register(peer, memory, Usage.READ_SRC))
      assert.strictEqual(released._tag, "MemoryRefusedError")
    })))
})

it.effect("World layer example compiles and runs", () =>
  Effect.gen(function*() {
    const peer = yield* Peer.Peer
    assert.strictEqual(peer.address, SimulatedDriver.DEFAULT_ADDRESS)
  }).pipe(Effect.provide(World), Effect.exit, Effect.map((exit) => assert.isTrue(Exit.isSuccess(exit)))))

describe("the completion queue and its channel, as librpma has them", () => {
  const address = SimulatedDriver.DEFAULT_ADDRESS
  const config = { timeoutMs: 1000, sqSize: 4, rqSize: 4, cqSize: 8, directWriteToPmem: false }

  /** Two connected handles of the driver, torn down by deleting them; `early` posts on the incoming request. */
  const connected = (
    d: Driver.Driver,
    peer: Peer.Peer,
    options?: {
      readonly srq?: Driver.Model.SrqHandle
      readonly early?: (req: Driver.Model.ConnReqHandle) => void
    }
  ) =>
    Effect.gen(function*() {
      const serverConfig = options?.srq === undefined ? config : { ...config, srq: options.srq }
      const ep = yield* Effect.acquireRelease(d.epListen(Driver.handleOf(peer), address, 7601), (ep) =>
        Effect.orDie(d.epShutdown(ep)))
      const server = yield* Effect.fork(Effect.flatMap(d.epNextConnReq(ep, serverConfig), (req) => {
        options?.early?.(req)
        return d.connReqConnect(req, undefined)
      }))
      const client = yield* Effect.flatMap(d.connReqNew(Driver.handleOf(peer), address, 7601, config), (req) =>
        d.connReqConnect(req, undefined))
      const other = yield* Fiber.join(server)
      yield* Effect.addFinalizer(() =>
        Effect.orDie(Effect.zipRight(d.connDelete(client), d.connDelete(other)))
      )
      assert.strictEqual(yield* d.connNextEvent(client), "ESTABLISHED")
      return { client, server: other }
    })

  const sharedReceiveQueue = (d: Driver.Driver, peer: Peer.Peer) =>
    Effect.acquireRelease(
      d.srqNew(Driver.handleOf(peer), { rqSize: 4, rcqSize: 4 }),
      (srq) => Effect.orDie(d.srqDelete(srq))
    )

  const turn = Effect.async<void>((resume) => void setImmediate(() => setImmediate(() => resume(Effect.void))))

  it.effect("a completion already queued stays for the poll; an armed channel answers a later one on a later turn", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      const { client, server } = yield* connected(d, peer)
      const target = yield* LocalMr.allocate(peer, 64, Usage.of("WRITE_DST", "RECV"))
      const src = yield* LocalMr.allocate(peer, 64, Usage.of("WRITE_SRC", "SEND"))
      const dst = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target))
      const write = (id: number) => ({
        op: "write" as const,
        id,
        dst: Driver.handleOf(dst),
        dstOffset: 0,
        src: Driver.handleOf(src),
        srcOffset: 0,
        length: 8
      })
      const send = (id: number) => ({ op: "send" as const, id, src: Driver.handleOf(src), offset: 0, length: 8 })
      const recv = (id: number) => ({ op: "recv" as const, id, dst: Driver.handleOf(target), offset: 0, length: 8 })
      const heard: Array<ReadonlyArray<Driver.Model.Completion>> = []
      const arm = (conn: Driver.Model.ConnHandle) =>
        d.armCompletions(conn, (ready) => Exit.isSuccess(ready) && heard.push(ready.value))
      arm(client)
      // Posted with the channel armed: the poll right after the post still finds it.
      const first = d.postMany(client, [write(1)])
      assert.deepStrictEqual(first.ready.map((c) => c.id), [1])
      yield* turn
      assert.strictEqual(heard.length, 0, "a completion taken by the poll is not reported again")
      // The server's receive completes when the client's send arrives: not polled on the server, the
      // armed wait answers it, on a later turn, not during the post.
      assert.strictEqual(d.postMany(server, [recv(2)]).posted, 1)
      const disarmClient = arm(client)
      disarmClient()
      arm(server)
      assert.deepStrictEqual(d.postMany(client, [send(3)]).ready.map((c) => c.id), [3])
      assert.strictEqual(heard.length, 0)
      yield* turn
      assert.deepStrictEqual(heard.map((r) => r.map((c) => c.id)), [[2]])
      // Disarmed: nothing is answered; the poll returns what is queued.
      d.postMany(server, [recv(4)])
      const disarm = arm(server)
      disarm()
      d.postMany(client, [send(5)])
      yield* turn
      assert.strictEqual(heard.length, 1)
      assert.deepStrictEqual((yield* d.pollCompletions(server)).map((c) => c.id), [4])
    })))

  it.effect("a receive posted on an incoming request completes on its connection's queue", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      const target = yield* LocalMr.allocate(peer, 64, Usage.RECV)
      const src = yield* LocalMr.allocate(peer, 64, Usage.SEND)
      const early: Array<Driver.Model.PostOutcome> = []
      const { client, server } = yield* connected(d, peer, {
        early: (req) =>
          early.push(d.postMany(req, [{ op: "recv", id: 7, dst: Driver.handleOf(target), offset: 0, length: 8 }]))
      })
      assert.deepStrictEqual(early.map((o) => [o.posted, o.error, o.ready.length]), [[1, undefined, 0]])
      d.postMany(client, [{ op: "send", id: 1, src: Driver.handleOf(src), offset: 0, length: 8 }])
      assert.deepStrictEqual((yield* d.pollCompletions(server)).map((c) => [c.id, c.status]), [[7, 0]])
    })))

  it.effect("a shared receive queue's completions carry the connection's queue pair number, polled or armed", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      const srq = yield* sharedReceiveQueue(d, peer)
      const target = yield* LocalMr.allocate(peer, 64, Usage.RECV)
      const src = yield* LocalMr.allocate(peer, 64, Usage.SEND)
      const { client, server } = yield* connected(d, peer, { srq })
      const qpNum = yield* d.connQpNum(server)
      const recv = (id: number) => ({ op: "recv" as const, id, dst: Driver.handleOf(target), offset: 0, length: 8 })
      const send = (id: number) => ({ op: "send" as const, id, src: Driver.handleOf(src), offset: 0, length: 8 })
      // The receive is consumed at once when a message waits for it: the post's own poll finds it.
      d.postMany(client, [send(1)])
      assert.deepStrictEqual(d.postMany(srq, [recv(11)]).ready.map((c) => [c.id, c.qpNum]), [[11, qpNum]])
      // Armed, then the message arrives.
      const heard: Array<ReadonlyArray<Driver.Model.Completion>> = []
      d.armCompletions(srq, (ready) => Exit.isSuccess(ready) && heard.push(ready.value))
      assert.deepStrictEqual(d.postMany(srq, [recv(12)]).ready, [])
      d.postMany(client, [send(2)])
      assert.strictEqual(heard.length, 0)
      yield* turn
      assert.deepStrictEqual(heard.map((r) => r.map((c) => [c.id, c.qpNum])), [[[12, qpNum]]])
    })))

  it.effect("a non-receive on a shared receive queue or a request, or an unknown queue, is refused with RPMA_E_INVAL", () =>
    inWorld(Effect.gen(function*() {
      const d = yield* driver
      const peer = yield* Peer.Peer
      const srq = yield* sharedReceiveQueue(d, peer)
      const req = yield* Effect.acquireRelease(
        d.connReqNew(Driver.handleOf(peer), address, 7602, config),
        (req) => Effect.orDie(d.connReqDelete(req))
      )
      const src = yield* LocalMr.allocate(peer, 64, Usage.SEND)
      const send = { op: "send" as const, id: 1, src: Driver.handleOf(src), offset: 0, length: 8 }
      for (const queue of [srq, req, {} as Driver.Model.ConnHandle]) {
        const outcome = d.postMany(queue, [send])
        assert.strictEqual(outcome.posted, 0)
        assert.strictEqual(outcome.error?._tag, "RpmaInvalidError")
      }
      assert.match(d.postMany(srq, [send]).error!.message, /rpma_srq_recv.*takes receives only/)
      assert.match(d.postMany(req, [send]).error!.message, /rpma_conn_req_recv.*takes receives only/)
      assert.strictEqual(yield* tagOf(d.pollCompletions(req as never)), "RpmaInvalidError")
    })))
})

describe("planned faults", () => {
  it.effect("a fault that could never fire is the test's mistake: planning it dies saying what to write", () =>
    Effect.gen(function*() {
      const never: ReadonlyArray<readonly [unknown, string]> = [
        [null, "takes a fault { operation, nth, and one of code, completionStatus, loseConnection, freezePeer }"],
        [
          { operation: "rpma_wirte", nth: 1, code: -100002 },
          `operation "rpma_wirte" is no call the simulated driver counts`
        ],
        [
          { operation: "rpma_write", nth: 0, code: -100002 },
          "nth must be a positive integer (1: the next call of rpma_write), not 0"
        ],
        [{ operation: "rpma_write", nth: 1 }, "this one has none"],
        [
          { operation: "rpma_write", nth: 1, code: -100002, loseConnection: true },
          "this one has code and loseConnection"
        ],
        [{ operation: "rpma_write", nth: 1, code: "EINVAL" }, "code must be a librpma code"],
        [
          { operation: "rpma_mr_reg", nth: 1, completionStatus: 10 },
          "completionStatus is a fault of a request's operation"
        ],
        [{ operation: "rpma_write", nth: 1, completionStatus: 0 }, "completionStatus must be a failed ibv_wc_status"],
        [{ operation: "rpma_write", nth: 1, loseConnection: "yes" }, "loseConnection must be true"],
        [{ operation: "rdma_post_send", nth: 1, freezePeer: true }, "freezePeer is a fault of librpma's operations"]
      ]
      for (const [fault, said] of never) {
        const planned = yield* Effect.exit(SimulatedDriver.fail(fault as never))
        assert.isTrue(Exit.isFailure(planned) && Cause.isDie(planned.cause), said)
        const defect = String(Exit.isFailure(planned) && Cause.squash(planned.cause))
        assert.include(defect, "IllegalArgumentException: SimulatedDriver.fail: ")
        assert.include(defect, said)
      }
      // The same in the options, as the driver is made; a fault that can fire is planned as before.
      const made = yield* Effect.exit(Layer.build(SimulatedDriver.layerWith({ faults: [never[1]![0] as never] })))
      assert.isTrue(Exit.isFailure(made) && Cause.isDie(made.cause))
      yield* SimulatedDriver.fail({ operation: "rpma_mr_reg", nth: 1, code: -100002 })
      const d = yield* driver
      const peer = yield* d.peerNew(yield* d.getIbvContext(SimulatedDriver.DEFAULT_ADDRESS, "local"))
      const refused = yield* Effect.flip(d.mrReg(peer, new Uint8Array(64), Usage.WRITE_SRC))
      assert.strictEqual(refused._tag, "RpmaProviderError")
      yield* d.peerDelete(peer)
    }).pipe(Effect.scoped, Effect.provide(SimulatedDriver.layer)))
})
