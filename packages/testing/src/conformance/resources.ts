/**
 * Conformance cases for the resources below connections: device contexts, peers, local and remote
 * regions, descriptors, handles used wrongly, rdma_cm ids and their regions, release order, and
 * Memory.allocate.
 */
import { CmEndpoint, Descriptor, LocalMr, Memory, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { check, equal, expectTag, NOWHERE, outcome, rawPeer } from "./support.js"

const driver = Driver.RdmaDriver

const rwUsage = Usage.combine(Usage.READ_SRC, Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)
/** The port an rdma_cm endpoint that only registers resolves its route to: nobody needs to listen there. */
const CM_PORT = 7471

export const resourceCases: ReadonlyArray<Case> = [
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
        yield* check(Driver.handleOf(a[0]) !== Driver.handleOf(a[1]), "two peers are distinct")
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
          yield* equal(yield* d.mrGetSize(Driver.handleOf(mr)), size, "rpma_mr_get_size")
          yield* equal(
            yield* d.mrGetDescriptorSize(Driver.handleOf(mr)),
            Descriptor.SIZE,
            "rpma_mr_get_descriptor_size"
          )
          yield* equal(mr.address % 4096n, 0n, "Memory.allocate is page-aligned")
          const desc = yield* LocalMr.describe(mr)
          yield* equal(desc.address, mr.address, "descriptor address = rpma_mr_get_ptr")
          yield* equal(desc.length, BigInt(size), "descriptor length")
          yield* equal(desc.usage, rwUsage, "descriptor usage")
        }
        // A caller's memory, at an offset into its buffer.
        const slice = new Uint8Array(8192).subarray(100, 300)
        const mr = yield* LocalMr.register(peer, slice, Usage.SEND)
        yield* equal(yield* d.mrGetSize(Driver.handleOf(mr)), 200, "size of a sub-array registration")
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
        for (let i = 0; i < 8; i++) {
          rkeys.add((yield* LocalMr.describe(yield* LocalMr.allocate(server, 64, rwUsage))).rkey)
        }
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
        const remote = yield* Effect.acquireRelease(d.mrRemoteFromDescriptor(padded), (r) =>
          Effect.ignore(d.mrRemoteDelete(r)))
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
        const bad: ReadonlyArray<readonly [string, Driver.Model.PeerHandle, Uint8Array, number]> = [
          ["peer NULL", null as any, memory, Usage.READ_SRC],
          ["size 0", peer, new Uint8Array(0), Usage.READ_SRC],
          ["usage 0", peer, memory, 0],
          ["usage 0x100", peer, memory, 0x100]
        ]
        for (const [what, p, m, u] of bad) {
          yield* equal(yield* outcome(Effect.suspend(() => regNow(p, m, u)!)), yield* outcome(d.mrReg(p, m, u)), what)
        }
        const registered = regNow(peer, memory, Usage.READ_SRC)
        yield* check(
          registered !== undefined && registered._tag === "Success",
          "a 4 KiB region registered synchronously"
        )
        const { address: at, handle } = (registered as Exit.Success<Driver.Model.MrRegistration, never>).value
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
    name: "rdma_cm: rdma_reg_msgs / reg_read / reg_write regions on an endpoint's protection domain; rdma_dereg_mr",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        // Made, not connected: its route to this host gives it its protection domain.
        const ep = yield* CmEndpoint.make(address, CM_PORT)
        const msgs = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
        const read = yield* CmEndpoint.registerRead(ep, new Uint8Array(8192))
        const write = yield* CmEndpoint.registerWrite(ep, Buffer.alloc(16384))
        yield* equal(msgs.length, 4096, "rdma_reg_msgs length")
        yield* equal(read.length, 8192, "rdma_reg_read length")
        yield* equal(write.length, 16384, "rdma_reg_write length")
        yield* check(read.rkey !== write.rkey, "distinct rkeys")
        yield* equal((yield* d.live).cmRegions, 3, "rdma_cm regions alive")
        yield* expectTag(
          d.cmEpDestroy(Driver.handleOf(ep)),
          "ResourceInUseError",
          "destroy an endpoint with live regions"
        )
        yield* expectTag(
          d.cmReg(Driver.handleOf(msgs) as any, "msgs", new Uint8Array(64)),
          "RdmaCmError",
          "region as endpoint"
        )
        yield* expectTag(d.cmReg(Driver.handleOf(ep), "msgs", null as any), "RdmaCmError", "NULL addr")
        const raw = yield* d.cmReg(Driver.handleOf(ep), "msgs", new Uint8Array(64))
        yield* d.cmDeregMr(raw)
        yield* expectTag(d.cmDeregMr(raw), "RdmaCmError", "double rdma_dereg_mr")
      })
  },
  {
    name: "release order: regions before their peer and endpoint, on success",
    run: (address) =>
      Effect.gen(function*() {
        const d = yield* driver
        const order: Array<string> = []
        const recorded: Driver.Driver = {
          ...d,
          mrDereg: (mr) => Effect.ensuring(d.mrDereg(mr), Effect.sync(() => order.push("mr"))),
          peerDelete: (p) => Effect.ensuring(d.peerDelete(p), Effect.sync(() => order.push("peer"))),
          cmDeregMr: (m) => Effect.ensuring(d.cmDeregMr(m), Effect.sync(() => order.push("cm-mr"))),
          cmEpDestroy: (e) => Effect.ensuring(d.cmEpDestroy(e), Effect.sync(() => order.push("cm-ep")))
        }
        yield* Effect.scoped(Effect.gen(function*() {
          const peer = yield* Peer.make(address)
          const ep = yield* CmEndpoint.make(address, CM_PORT)
          yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
          yield* CmEndpoint.registerMessages(ep, new Uint8Array(256))
          yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
        })).pipe(Effect.provideService(driver, recorded))
        yield* equal(order.join(","), "mr,cm-mr,mr,cm-ep,peer", "release order")
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
  }
]
