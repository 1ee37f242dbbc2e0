/**
 * The driver conformance suite: one list of cases that every `RdmaDriver` must pass, run on the
 * simulated driver on any host and on the native driver where a device is. It is the single source
 * of truth for driver behaviour. Where hardware legitimately differs (addresses, keys), a case
 * compares properties, not values.
 *
 * @since 0.1.0
 */
import {
  CmId,
  Connection,
  Descriptor,
  Driver,
  Endpoint,
  LocalMr,
  Memory,
  Peer,
  RemoteMr,
  Usage
} from "@effect-rdma/core"
import * as Clock from "effect/Clock"
import * as validation from "./conformance/validation.js"

export {
  /**
   * Random and hostile values fed to every Driver method and to core's public functions: no
   * defect, no hang, nothing left alive.
   *
   * @since 0.1.0
   * @category running
   */
  fuzz
} from "./conformance/fuzz.js"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Stream from "effect/Stream"
import * as Fiber from "effect/Fiber"
import type * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { connectionFeatureCases } from "./conformance/connectionFeatures.js"
import { dataPathCases } from "./conformance/dataPath.js"
import { sharedReceiveCases } from "./conformance/sharedReceive.js"
import { lifecycleCases } from "./conformance/lifecycle.js"
import { check, equal, expectTag, outcome } from "./conformance/support.js"
import { mappingCases } from "./conformance/mapping.js"

/**
 * @since 0.1.0
 * @category models
 */
export interface Case {
  readonly name: string
  /** `port` is free for this case alone, for an endpoint to listen on. */
  readonly run: (address: string, port: number) => Effect.Effect<void, unknown, Driver.RdmaDriver | Scope.Scope>
}

/** A port for each case, so that cases never share one (rdma_cm keeps a port busy for a while). */
const portOf = (testCase: Case): number => 17000 + cases.indexOf(testCase)

/** An address in TEST-NET-1 (RFC 5737): never assigned, so no device answers there. */
const NOWHERE = "192.0.2.99"

const driver = Driver.RdmaDriver

const rawPeer = (address: string) =>
  Effect.flatMap(driver, (d) =>
    Effect.acquireRelease(
      Effect.flatMap(d.getIbvContext(address, "local"), d.peerNew),
      (peer) => Effect.ignore(d.peerDelete(peer))
    ))

const rwUsage = Usage.combine(Usage.READ_SRC, Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)

/**
 * Every case.
 *
 * @since 0.1.0
 * @category cases
 */
export const cases: ReadonlyArray<Case> = [
  {
    name: "rpma_utils_get_ibv_context: no device at the address → RPMA_E_PROVIDER; NULL → RPMA_E_INVAL",
    run: () =>
      Effect.gen(function*() {
        const d = yield* driver
        yield* expectTag(d.getIbvContext(NOWHERE, "local"), "RpmaProviderError", "unknown address")
        yield* expectTag(d.getIbvContext(null as any, "local"), "RpmaInvalidError", "NULL address")
        // rdma_cm binds loopback without a device; librpma then returns no context.
        yield* expectTag(d.getIbvContext("127.0.0.1", "local"), "RpmaProviderError", "loopback address")
      })
  },
  {
    name: "peer: created and deleted; two peers on one device",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const a = yield* Effect.scoped(Effect.zip(Peer.make(address), Peer.make(address)))
        yield* check(a[0].handle !== a[1].handle, "two peers are distinct")
        yield* equal((yield* d.live).peers, 0, "peers alive after the scope")
      })
  },
  {
    name: "rpma_mr_reg: peer NULL, ptr NULL, size 0, usage 0 or unknown bits → RPMA_E_INVAL",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const peer = yield* rawPeer(address)
        const memory = new Uint8Array(4096)
        yield* expectTag(d.mrReg(null as any, memory, Usage.READ_SRC), "RpmaInvalidError", "peer NULL")
        yield* expectTag(d.mrReg(peer, null as any, Usage.READ_SRC), "RpmaInvalidError", "ptr NULL")
        yield* expectTag(d.mrReg(peer, new Uint8Array(0), Usage.READ_SRC), "RpmaInvalidError", "size 0")
        yield* expectTag(d.mrReg(peer, memory, 0), "RpmaInvalidError", "usage 0")
        yield* expectTag(d.mrReg(peer, memory, 0x100), "RpmaInvalidError", "usage 0x100")
        yield* equal((yield* d.live).localRegions, 0, "regions alive after refusals")
      })
  },
  {
    name: "rpma_mr_reg: a region's pointer, size and descriptor describe it",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const peer = yield* Peer.make(address)
        for (const size of [1, 4096, 65536 + 17, 1 << 20]) {
          const mr = yield* LocalMr.allocate(peer, size, rwUsage)
          yield* equal(yield* d.mrGetSize(mr.handle), size, "rpma_mr_get_size")
          yield* equal(yield* d.mrGetDescriptorSize(mr.handle), Descriptor.SIZE, "rpma_mr_get_descriptor_size")
          yield* equal(mr.address % 4096n, 0n, "Memory.allocate is page-aligned")
          const desc = yield* LocalMr.describe(mr)
          yield* equal(desc.address, mr.address, "descriptor address = rpma_mr_get_ptr")
          yield* equal(desc.length, BigInt(size), "descriptor length")
          yield* equal(desc.usage, rwUsage, "descriptor usage")
        }
        // A caller's memory, at an offset into its buffer.
        const slice = new Uint8Array(8192).subarray(100, 300)
        const mr = yield* LocalMr.register(peer, slice, Usage.SEND)
        yield* equal(yield* d.mrGetSize(mr.handle), 200, "size of a sub-array registration")
        const desc = yield* LocalMr.describe(mr)
        yield* equal(desc.usage, Usage.SEND, "usage of a sub-array registration")
      })
  },
  {
    name: "descriptors made by one peer are rebuilt by another: address, length, rkey and usage equal",
    run: (address) =>
      Effect.gen(function*() {
        const server = yield* Peer.make(address)
        yield* Peer.make(address) // the client side, on the same device
        const mr = yield* LocalMr.allocate(server, 12288, rwUsage)
        const bytes = yield* LocalMr.descriptor(mr)
        yield* equal(bytes.length, 21, "descriptor size")
        const local = yield* LocalMr.describe(mr)
        const remote = yield* RemoteMr.fromDescriptor(bytes)
        yield* equal(remote.descriptor.address, local.address, "remote address")
        yield* equal(remote.descriptor.rkey, local.rkey, "remote rkey")
        yield* equal(remote.size, 12288n, "rpma_mr_remote_get_size")
        yield* equal(remote.usage, rwUsage, "remote usage")
        yield* equal(remote.flushType, Usage.FLUSH_TYPE_VISIBILITY, "rpma_mr_remote_get_flush_type")
        const rkeys = new Set<number>()
        for (let i = 0; i < 8; i++) rkeys.add((yield* LocalMr.describe(yield* LocalMr.allocate(server, 64, rwUsage))).rkey)
        yield* equal(rkeys.size, 8, "distinct rkeys for distinct regions")
      })
  },
  {
    name: "rpma_mr_remote_from_descriptor: NULL, short, usage 0 → RPMA_E_INVAL; padded accepted as librpma does",
    run: () =>
      Effect.gen(function*() {
        const d = yield* driver
        const good = Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: 0x11 })
        yield* expectTag(d.mrRemoteFromDescriptor(null as any), "RpmaInvalidError", "NULL descriptor")
        yield* expectTag(d.mrRemoteFromDescriptor(good.subarray(0, 20)), "RpmaInvalidError", "20 bytes")
        yield* expectTag(d.mrRemoteFromDescriptor(new Uint8Array(0)), "RpmaInvalidError", "0 bytes")
        const noUsage = Uint8Array.from(good)
        noUsage[20] = 0
        yield* expectTag(d.mrRemoteFromDescriptor(noUsage), "RpmaInvalidError", "usage 0")
        const padded = new Uint8Array(196)
        padded.set(good)
        const remote = yield* Effect.acquireRelease(d.mrRemoteFromDescriptor(padded), (r) => Effect.ignore(d.mrRemoteDelete(r)))
        yield* equal(yield* d.mrRemoteGetSize(remote), 4096n, "size from a padded descriptor")
        yield* equal(yield* d.mrRemoteGetFlushType(remote), 0x10, "flush type from a padded descriptor")
      })
  },
  {
    name: "handles: double release, use after release and a handle of the wrong kind → RPMA_E_INVAL",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const peer = yield* rawPeer(address)
        const registered = yield* d.mrReg(peer, new Uint8Array(4096), Usage.READ_SRC)
        const mr = registered.handle
        yield* equal(registered.address, yield* d.mrGetPtr(mr), "rpma_mr_reg's address against rpma_mr_get_ptr")
        yield* d.mrDereg(mr)
        yield* expectTag(d.mrDereg(mr), "RpmaInvalidError", "double rpma_mr_dereg")
        yield* expectTag(d.mrGetDescriptor(mr), "RpmaInvalidError", "rpma_mr_get_descriptor after dereg")
        yield* expectTag(d.mrGetPtr(mr), "RpmaInvalidError", "rpma_mr_get_ptr after dereg")
        yield* expectTag(d.peerDelete(mr as any), "RpmaInvalidError", "a region passed as a peer")
        yield* expectTag(d.mrReg(mr as any, new Uint8Array(64), Usage.READ_SRC), "RpmaInvalidError", "a region as peer")
        yield* expectTag(d.mrDereg(peer as any), "RpmaInvalidError", "a peer passed as a region")
        yield* expectTag(d.mrDereg({} as any), "RpmaInvalidError", "a plain object as a region")
        const remote = yield* d.mrRemoteFromDescriptor(
          Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 1, usage: 1 })
        )
        yield* d.mrRemoteDelete(remote)
        yield* expectTag(d.mrRemoteDelete(remote), "RpmaInvalidError", "double rpma_mr_remote_delete")
        yield* expectTag(d.mrRemoteGetSize(remote), "RpmaInvalidError", "rpma_mr_remote_get_size after delete")
      })
  },
  {
    name: "mrReg.now / mrDereg.now, where a driver has them: the Effect's outcomes, synchronously",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const regNow = d.mrReg.now
        const deregNow = d.mrDereg.now
        if (regNow === undefined || deregNow === undefined) return
        const peer = yield* rawPeer(address)
        const memory = new Uint8Array(4096)
        // The same refusals as the Effects, named the same.
        const bad: ReadonlyArray<readonly [string, Driver.PeerHandle, Uint8Array, number]> = [
          ["peer NULL", null as any, memory, Usage.READ_SRC],
          ["size 0", peer, new Uint8Array(0), Usage.READ_SRC],
          ["usage 0", peer, memory, 0],
          ["usage 0x100", peer, memory, 0x100]
        ]
        for (const [what, p, m, u] of bad) {
          yield* equal(yield* outcome(Effect.suspend(() => regNow(p, m, u)!)), yield* outcome(d.mrReg(p, m, u)), what)
        }
        const registered = regNow(peer, memory, Usage.READ_SRC)
        yield* check(registered !== undefined && registered._tag === "Success", "a 4 KiB region registered synchronously")
        const { address: at, handle } = (registered as Exit.Success<Driver.MrRegistration, never>).value
        yield* equal(at, yield* d.mrGetPtr(handle), "the address against rpma_mr_get_ptr")
        yield* equal((yield* d.live).localRegions, 1, "regions alive after mrReg.now")
        yield* equal(yield* outcome(Effect.suspend(() => deregNow(handle)!)), "success", "mrDereg.now")
        yield* equal((yield* d.live).localRegions, 0, "regions alive after mrDereg.now")
        yield* expectTag(Effect.suspend(() => deregNow(handle)!), "RpmaInvalidError", "double mrDereg.now")
        yield* expectTag(d.mrDereg(handle), "RpmaInvalidError", "mrDereg after mrDereg.now")
      })
  },
  {
    name: "rpma_peer_delete: refused (ResourceInUseError, still alive) while regions are registered, then succeeds",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const peer = yield* Effect.flatMap(d.getIbvContext(address, "local"), d.peerNew)
        const mr = (yield* d.mrReg(peer, new Uint8Array(4096), Usage.READ_SRC)).handle
        yield* expectTag(d.peerDelete(peer), "ResourceInUseError", "delete with a live region")
        yield* equal((yield* d.live).peers, 1, "the refused peer is still alive")
        yield* d.mrDereg(mr)
        yield* d.peerDelete(peer)
        yield* expectTag(d.peerDelete(peer), "RpmaInvalidError", "double rpma_peer_delete")
      })
  },
  {
    name: "rdma_cm: an id bound to the device; rdma_reg_msgs / reg_read / reg_write regions; rdma_dereg_mr",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const id = yield* CmId.make(address)
        const msgs = yield* CmId.registerMessages(id, new Uint8Array(4096))
        const read = yield* CmId.registerRead(id, new Uint8Array(8192))
        const write = yield* CmId.registerWrite(id, Buffer.alloc(16384))
        yield* equal(msgs.length, 4096, "rdma_reg_msgs length")
        yield* equal(read.length, 8192, "rdma_reg_read length")
        yield* equal(write.length, 16384, "rdma_reg_write length")
        yield* check(read.rkey !== write.rkey, "distinct rkeys")
        yield* equal((yield* d.live).cmRegions, 3, "rdma_cm regions alive")
        yield* expectTag(d.cmDestroyId(id.handle), "ResourceInUseError", "destroy an id with live regions")
        yield* expectTag(d.cmReg(msgs.handle as any, "msgs", new Uint8Array(64)), "RdmaCmError", "region as id")
        yield* expectTag(d.cmReg(id.handle, "msgs", null as any), "RdmaCmError", "NULL addr")
        const raw = yield* d.cmReg(id.handle, "msgs", new Uint8Array(64))
        yield* d.cmDeregMr(raw)
        yield* expectTag(d.cmDeregMr(raw), "RdmaCmError", "double rdma_dereg_mr")
      })
  },
  {
    name: "rdma_cm: no device at the address → RdmaCmError",
    run: () => Effect.gen(function*() {
      yield* expectTag(Effect.scoped(CmId.make(NOWHERE)), "RdmaCmError", "unknown address")
    })
  },
  {
    name: "release order: regions before their peer and id, on success",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const order: Array<string> = []
        const recorded: Driver.Driver = {
          ...d,
          mrDereg: (mr) => Effect.ensuring(d.mrDereg(mr), Effect.sync(() => order.push("mr"))),
          peerDelete: (p) => Effect.ensuring(d.peerDelete(p), Effect.sync(() => order.push("peer"))),
          cmDeregMr: (m) => Effect.ensuring(d.cmDeregMr(m), Effect.sync(() => order.push("cm-mr"))),
          cmDestroyId: (i) => Effect.ensuring(d.cmDestroyId(i), Effect.sync(() => order.push("cm-id")))
        }
        yield* Effect.scoped(Effect.gen(function*() {
          const peer = yield* Peer.make(address)
          const id = yield* CmId.make(address)
          yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
          yield* CmId.registerMessages(id, new Uint8Array(256))
          yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
        })).pipe(Effect.provideService(driver, recorded))
        yield* equal(order.join(","), "mr,cm-mr,mr,cm-id,peer", "release order")
      })
  },
  {
    name: "release on failure, defect and interruption",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const hold = Effect.gen(function*() {
          const peer = yield* Peer.make(address)
          for (let i = 0; i < 16; i++) {
            yield* LocalMr.allocate(peer, 4096, rwUsage)
            yield* Effect.yieldNow()
          }
        })
        yield* Effect.exit(Effect.scoped(Effect.zipRight(hold, Effect.fail("boom"))))
        yield* Effect.exit(Effect.scoped(Effect.zipRight(hold, Effect.dieMessage("bug"))))
        for (const yields of [0, 3, 9, 17]) {
          const fiber = yield* Effect.fork(Effect.scoped(Effect.zipRight(hold, Effect.never)))
          for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(fiber)
        }
        const live = yield* d.live
        yield* equal(live.peers + live.localRegions, 0, "handles alive after failure, defect and interruptions")
      })
  },
  {
    name: "Memory.allocate: zeroed, page-aligned, detached when released; a pooled Buffer is refused",
    run: (address) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const memory = yield* Effect.scoped(Effect.gen(function*() {
          const memory = yield* Memory.allocate(65536)
          yield* check(memory.every((b) => b === 0), "allocated memory is zeroed")
          memory.fill(7)
          const mr = yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
          yield* equal(mr.address % 4096n, 0n, "page-aligned")
          return memory
        }))
        yield* equal(memory.byteLength, 0, "released memory is detached")
        yield* expectTag(LocalMr.register(peer, Buffer.allocUnsafe(100), Usage.SEND), "MemoryRefusedError", "pool")
      })
  },
  ...connectionCases(),
  ...lifecycleCases(),
  ...mappingCases(),
  ...dataPathCases(),
  ...connectionFeatureCases(),
  ...sharedReceiveCases(),
  ...validation.cases
]

/** A server peer with an exposed region, and a client connected to it. */
const connectedPair = (address: string, port: number, options?: Connection.Options) =>
  Effect.gen(function*() {
    const serverPeer = yield* Peer.make(address)
    const clientPeer = yield* Peer.make(address)
    const target = yield* LocalMr.allocate(serverPeer, 65536, exposed)
    const ep = yield* Endpoint.listen(serverPeer, address, port)
    const accepting = yield* Effect.fork(
      Endpoint.acceptNext(ep, { ...options, privateData: new TextEncoder().encode("welcome") })
    )
    const client = yield* Connection.connect(clientPeer, address, port, {
      ...options,
      privateData: new TextEncoder().encode("hello")
    })
    const server = yield* Fiber.join(accepting)
    const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
      Effect.flatMap(RemoteMr.require(exposed))
    )
    return { serverPeer, clientPeer, target, client, server, remote }
  })

const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

function connectionCases(): ReadonlyArray<Case> {
  return [
    {
      name: "connection: connect, accept, private data both ways; a close is seen by the other side",
      run: (address, port) =>
        Effect.gen(function*() {
          const serverPeer = yield* Peer.make(address)
          const clientPeer = yield* Peer.make(address)
          const ep = yield* Endpoint.listen(serverPeer, address, port)
          const accepting = yield* Effect.fork(
            Endpoint.acceptNext(ep, { privateData: new TextEncoder().encode("welcome") })
          )
          const server = yield* Effect.scoped(Effect.gen(function*() {
            const client = yield* Connection.connect(clientPeer, address, port, {
              privateData: new TextEncoder().encode("hello")
            })
            const server = yield* Fiber.join(accepting)
            // rdma_cm pads private data: compare the prefix.
            yield* equal(text(server.privateData.subarray(0, 5)), "hello", "the client's private data")
            yield* equal(text(client.privateData.subarray(0, 7)), "welcome", "the server's private data")
            yield* equal(yield* client.state, "ESTABLISHED", "client state")
            return server
          }))
          const events = yield* Stream.runCollect(server.events)
          yield* equal([...events].at(-1), "CLOSED", "the server's last event after the client closed")
        })
    },
    {
      name: "connection: nobody listening → ConnectionFailedError; no device → RPMA_E_PROVIDER",
      run: (address, port) =>
        Effect.gen(function*() {
          const peer = yield* Peer.make(address)
          yield* expectTag(Effect.scoped(Connection.connect(peer, address, port)), "ConnectionFailedError", "no listener")
          yield* expectTag(Effect.scoped(Connection.connect(peer, NOWHERE, port)), "RpmaProviderError", "no device")
          yield* expectTag(Effect.scoped(Endpoint.listen(peer, address, 0)), "RpmaInvalidError", "listen on port 0")
        })
    },
    {
      name: "rpma_write + rpma_flush + rpma_read: the bytes arrive and come back",
      run: (address, port) =>
        Effect.gen(function*() {
          const { client, clientPeer, remote, target } = yield* connectedPair(address, port)
          const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
          const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
          src.memory.set(new TextEncoder().encode("record #1"), 10)
          yield* Connection.write(client, { dst: remote, dstOffset: 1000, src, srcOffset: 10, length: 9 })
          yield* Connection.flush(client, { dst: remote, offset: 1000, length: 9 })
          yield* equal(text(target.memory.subarray(1000, 1009)), "record #1", "the server's memory after write+flush")
          yield* Connection.read(client, { dst, dstOffset: 100, src: remote, srcOffset: 1000, length: 9 })
          yield* equal(text(dst.memory.subarray(100, 109)), "record #1", "read back")
          yield* Connection.atomicWrite(client, { dst: remote, offset: 2048, value: Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8) })
          yield* Connection.flush(client, { dst: remote, offset: 2048, length: 8 })
          yield* equal(target.memory.subarray(2048, 2056).join(","), "1,2,3,4,5,6,7,8", "atomic write")
          yield* expectTag(Connection.atomicWrite(client, { dst: remote, offset: 2047, value: new Uint8Array(8) }), "OutOfRangeError", "misaligned")
        })
    },
    {
      name: "rpma_send + rpma_recv: a message arrives with its length",
      run: (address, port) =>
        Effect.gen(function*() {
          const { client, clientPeer, server, serverPeer } = yield* connectedPair(address, port)
          const out = yield* LocalMr.allocate(clientPeer, 256, Usage.SEND)
          const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
          out.memory.set(new TextEncoder().encode("ping"), 0)
          const received = yield* Effect.fork(Connection.recv(server, { dst: inbox, offset: 0, length: 128 }))
          yield* Effect.yieldNow()
          yield* Connection.send(client, { src: out, offset: 0, length: 4 })
          yield* equal(yield* Fiber.join(received), 4, "bytes received")
          yield* equal(text(inbox.memory.subarray(0, 4)), "ping", "message")
        })
    },
    {
      name: "the device enforces rkeys and bounds: a forged descriptor → IBV_WC_REM_ACCESS_ERR",
      run: (address, port) =>
        Effect.gen(function*() {
          const { client, clientPeer, target } = yield* connectedPair(address, port)
          const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
          const d = yield* LocalMr.describe(target)
          const forged = yield* RemoteMr.fromDescriptor(
            Descriptor.encode({ ...d, address: d.address + 65536n, length: 4096n })
          ).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
          const error = yield* Effect.flip(Connection.write(client, { dst: forged, dstOffset: 0, src, srcOffset: 0, length: 16 }))
          yield* equal(error._tag, "CompletionError", "outcome of a write outside the region")
          yield* equal((error as { status?: number }).status, 10, "work completion status")
        })
    },
    {
      name: "offsets and lengths are checked before posting; a persistent flush needs pmem → RPMA_E_NOSUPP",
      run: (address, port) =>
        Effect.gen(function*() {
          const { client, clientPeer, remote, serverPeer } = yield* connectedPair(address, port)
          const src = yield* LocalMr.allocate(clientPeer, 4096, Usage.WRITE_SRC)
          yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 4000, length: 200 }), "OutOfRangeError", "source range")
          yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 65530, src, srcOffset: 0, length: 16 }), "OutOfRangeError", "destination range")
          yield* expectTag(Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 2 ** 32 }), "OutOfRangeError", "length ≥ 2^32")
          const pmem = yield* LocalMr.allocate(serverPeer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT))
          const persistent = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(pmem)).pipe(
            Effect.flatMap(RemoteMr.require(Usage.FLUSH_TYPE_PERSISTENT))
          )
          yield* expectTag(Connection.flushPersistent(client, { dst: persistent, offset: 0, length: 64 }), "RpmaNoSupportError", "no pmem")
          // The connection is still usable.
          yield* Connection.write(client, { dst: remote, dstOffset: 0, src, srcOffset: 0, length: 64 })
        })
    },
    {
      name: "many requests in flight: more than the send queue holds, all complete",
      run: (address, port) =>
        Effect.gen(function*() {
          const { client, clientPeer, remote, target } = yield* connectedPair(address, port, { sendQueueSize: 16 })
          const src = yield* LocalMr.allocate(clientPeer, 65536, Usage.WRITE_SRC)
          for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
          yield* Effect.forEach(
            Array.from({ length: 256 }, (_, i) => i),
            (i) => Connection.write(client, { dst: remote, dstOffset: i * 256, src, srcOffset: i * 256, length: 256 }),
            { concurrency: "unbounded", discard: true }
          )
          yield* Connection.flush(client, { dst: remote, offset: 0, length: 65536 })
          let wrong = 0
          for (let i = 0; i < 256; i++) if (target.memory[i * 256] !== (i % 250) + 1) wrong++
          yield* equal(wrong, 0, "chunks that did not arrive")
        })
    },
    {
      name: "a pending receive fails, not hangs, when the other side closes",
      run: (address, port) =>
        Effect.gen(function*() {
          const serverPeer = yield* Peer.make(address)
          const clientPeer = yield* Peer.make(address)
          const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV)
          const ep = yield* Endpoint.listen(serverPeer, address, port)
          const accepting = yield* Effect.fork(Endpoint.acceptNext(ep))
          const waiting = yield* Effect.scoped(Effect.gen(function*() {
            yield* Connection.connect(clientPeer, address, port)
            const server = yield* Fiber.join(accepting)
            const waiting = yield* Effect.fork(Effect.flip(Connection.recv(server, { dst: inbox, offset: 0, length: 256 })))
            yield* Effect.yieldNow()
            return waiting
          }))
          const error = yield* Fiber.join(waiting)
          yield* check(
            error._tag === "ConnectionClosedError" || error._tag === "CompletionError",
            `a pending receive after the close failed with ${error._tag}`
          )
        })
    }
  ]
}

/**
 * Runs one case against a driver Layer, then checks that the driver holds nothing.
 *
 * @since 0.1.0
 * @category running
 */
export const runCase = <E>(
  testCase: Case,
  layer: Layer.Layer<Driver.RdmaDriver, E>,
  address: string
): Effect.Effect<void, unknown> =>
  Effect.gen(function*() {
    yield* Effect.scoped(testCase.run(address, portOf(testCase)))
    const live = yield* Effect.flatMap(driver, (d) => d.live)
    const total = Object.values(live).reduce((a, b) => a + b, 0)
    yield* check(total === 0, `handles alive at the end: ${JSON.stringify(live)}`)
  }).pipe(
    Effect.provide(layer),
    // Connection timeouts are real: a case run under a test clock (@effect/vitest's it.effect) would wait forever.
    Effect.withClock(Clock.make())
  )
