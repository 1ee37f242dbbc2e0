// Connection features against a C program written on librpma (feat_peer.c), in both directions:
// a receive posted before accepting, unsignalled writes waited on through one persistent flush,
// the peer configuration descriptor, sends and writes with immediate data, and the bytes that
// arrive on each side.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Features.test.ts
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, pattern, runC, same } from "./cPeer.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

const runPeer = (role: "server" | "client", port: number) => runC("feat_peer", [role, address, String(port)])

const all = Usage.combine(
  Usage.WRITE_DST,
  Usage.READ_SRC,
  Usage.FLUSH_TYPE_VISIBILITY,
  Usage.FLUSH_TYPE_PERSISTENT,
  Usage.WRITE_SRC,
  Usage.SEND,
  Usage.RECV
)

// The C program's layout of its region, mirrored here.
const TARGET = 0
const RECV1 = 1024
const RECV2 = 1088
const SOURCE = 2048

describe("connection features against a librpma C program", () => {
  it.live(
    "TypeScript client, C server: early receive, unsignalled writes + persistent flush, peer cfg, immediate data",
    () => {
      const port = 17900
      const peerRun = runPeer("server", port)
      return Effect.gen(function*() {
        yield* Effect.promise(() => peerRun.ready)
        const peer = yield* Peer.make(address)
        const mem = yield* LocalMr.allocate(peer, 4096, all)
        const conn = yield* Connection.connect(peer, address, port)
        const offer = conn.privateData
        assert.strictEqual(offer.byteLength, 196, "the accept's private data arrives padded to 196 bytes")
        const theirs = yield* RemoteMr.fromDescriptor(offer.slice(1, 1 + offer[0]!)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)))
        )
        yield* Connection.applyRemotePeerConfig(conn, offer.slice(1 + offer[0]!, 2 + offer[0]!))
        const first = yield* Connection.postRecv(conn, { dst: mem, offset: RECV1, length: 64 })
        const second = yield* Connection.postRecv(conn, { dst: mem, offset: RECV2, length: 64 })
        mem.memory.set(pattern(256, 1), SOURCE)
        for (let i = 0; i < 4; i++) {
          yield* Connection.postWrite(conn, {
            dst: theirs,
            dstOffset: TARGET + i * 64,
            src: mem,
            srcOffset: SOURCE + i * 64,
            length: 64,
            completion: "onError"
          })
        }
        yield* Connection.flush(conn, { type: "persistent", dst: theirs, dstOffset: TARGET, length: 256 })
        const descriptor = yield* LocalMr.descriptor(mem)
        mem.memory[SOURCE + 512] = descriptor.byteLength
        mem.memory.set(descriptor, SOURCE + 513)
        yield* Connection.send(conn, { src: mem, offset: SOURCE + 512, length: 22, imm: 0x11223344 })
        const written = yield* first.completion
        assert.strictEqual(written.operation, "RECV_RDMA_WITH_IMM")
        assert.strictEqual(written.imm, 0x55667788)
        assert.strictEqual(written.byteLength, 256)
        assert.isTrue(same(mem.memory.subarray(TARGET, TARGET + 256), pattern(256, 5)), "the bytes written with imm")
        const sent = yield* second.completion
        assert.strictEqual(sent.operation, "RECV")
        assert.strictEqual(sent.imm, 0x99aabbcc)
        assert.strictEqual(sent.byteLength, 16)
        assert.isTrue(same(mem.memory.subarray(RECV2, RECV2 + 16), pattern(16, 3)), "the bytes sent with imm")
        mem.memory.set(new TextEncoder().encode("done"), SOURCE + 1024)
        yield* Connection.send(conn, { src: mem, offset: SOURCE + 1024, length: 4 })
      }).pipe(
        Effect.scoped,
        Effect.zipRight(awaitExit(peerRun)),
        Effect.tap((code) => Effect.sync(() => assert.strictEqual(code, 0, `the C server:\n${peerRun.output()}`))),
        Effect.ensuring(Effect.sync(() => peerRun.child.kill())),
        Effect.provide(NativeDriver.layer)
      )
    },
    60_000
  )

  it.live(
    "TypeScript server, C client: receive before accept, peer cfg descriptor in the accept, immediate data both ways",
    () => {
      const port = 17901
      return Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        const mem = yield* LocalMr.allocate(peer, 4096, all)
        const ep = yield* Listener.make(peer, address, port)
        const peerRun = runPeer("client", port)
        yield* Effect.addFinalizer(() => Effect.sync(() => peerRun.child.kill()))
        const req = yield* Listener.next(ep)
        const early = yield* Listener.postRecv(req, { dst: mem, offset: RECV1, length: 64 })
        const descriptor = yield* LocalMr.descriptor(mem)
        const pcfg = yield* Connection.peerConfigDescriptor({ directWriteToPmem: true })
        const offer = new Uint8Array([descriptor.byteLength, ...descriptor, ...pcfg])
        const conn = yield* Listener.accept(req, { privateData: offer })
        const arrived = yield* early.completion
        assert.strictEqual(arrived.operation, "RECV")
        assert.strictEqual(arrived.imm, 0x11223344)
        assert.strictEqual(arrived.byteLength, 22)
        assert.isTrue(
          same(mem.memory.subarray(TARGET, TARGET + 256), pattern(256, 1)),
          "the client's unsignalled writes"
        )
        const theirs = yield* RemoteMr.fromDescriptor(mem.memory.slice(RECV1 + 1, RECV1 + 1 + mem.memory[RECV1]!)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
        )
        const last = yield* Connection.postRecv(conn, { dst: mem, offset: RECV2, length: 64 })
        mem.memory.set(pattern(256, 5), SOURCE)
        mem.memory.set(pattern(16, 3), SOURCE + 512)
        yield* Connection.postWrite(conn, {
          dst: theirs,
          dstOffset: TARGET,
          src: mem,
          srcOffset: SOURCE,
          length: 256,
          imm: 0x55667788,
          completion: "onError"
        })
        yield* Connection.send(conn, { src: mem, offset: SOURCE + 512, length: 16, imm: 0x99aabbcc })
        const done = yield* last.completion
        assert.strictEqual(done.byteLength, 4)
        assert.strictEqual(new TextDecoder().decode(mem.memory.subarray(RECV2, RECV2 + 4)), "done")
        const code = yield* awaitExit(peerRun)
        assert.strictEqual(code, 0, `the C client:\n${peerRun.output()}`)
        // Nothing was sent with the request; rdma_cm still delivers its 56 bytes.
        assert.strictEqual(conn.privateData.byteLength, 56, "the request's private data arrives padded to 56 bytes")
      }).pipe(Effect.scoped, Effect.provide(NativeDriver.layer))
    },
    60_000
  )
})
