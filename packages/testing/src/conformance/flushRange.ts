/**
 * Conformance cases for flushes near a region's end (issue 19, item 2). librpma's flush is an RDMA
 * read of 8 bytes at the flush's offset, whatever its length: core places the read so that it fits
 * the region, and refuses a region too small for it, so that no flush fails on the device and takes
 * the connection with it.
 *
 * @internal
 */
import { Connection, LocalMr, RemoteMr, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import type { Case } from "../Conformance.js"
import { connectedPair, exposed } from "./pair.js"
import { equal, expectTag, messageOf, tagOf } from "./support.js"

/** @internal */
export const flushRangeCases: ReadonlyArray<Case> = [
  {
    name:
      "Connection.flush near a region's end: (4090, 6), (4095, 1), (4096, 0), (4088, 8) on a 4096-byte region succeed and the connection stays usable; a region under 8 bytes is refused before anything is posted",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, serverPeer } = yield* connectedPair(address, port)
        const exposedOf = (size: number) =>
          Effect.gen(function*() {
            const target = yield* LocalMr.allocate(serverPeer, size, exposed)
            const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
              Effect.flatMap(RemoteMr.require(exposed))
            )
            return { target, remote }
          })
        const { remote, target } = yield* exposedOf(4096)
        for (const [offset, length] of [[4090, 6], [4095, 1], [4096, 0], [4088, 8], [0, 4096]] as const) {
          yield* expectTag(Connection.flush(client, { dst: remote, offset, length }), "success", `flush(${offset}, ${length})`)
        }
        // Still usable: a write of the region's last 8 bytes, flushed at its very end, and read back.
        const src = yield* LocalMr.allocate(clientPeer, 8, Usage.WRITE_SRC)
        const dst = yield* LocalMr.allocate(clientPeer, 8, Usage.READ_DST)
        src.memory.set([1, 2, 3, 4, 5, 6, 7, 8])
        yield* Connection.write(client, { dst: remote, dstOffset: 4088, src, length: 8 })
        yield* expectTag(Connection.flush(client, { dst: remote, offset: 4096, length: 0 }), "success", "flush(4096, 0) after a write")
        yield* equal(target.memory[4095], 8, "the region's last byte after the write and flush")
        yield* Connection.read(client, { dst, src: remote, srcOffset: 4088, length: 8 })
        yield* equal(dst.memory.join(","), "1,2,3,4,5,6,7,8", "the bytes read back")

        // A region no 8-byte read fits: refused up front, with the reason, and nothing posted (a
        // posted read past the end would fail and take the connection with it).
        const { remote: tiny } = yield* exposedOf(4)
        for (const [offset, length] of [[0, 4], [0, 0], [4, 0]] as const) {
          const exit = yield* Effect.exit(Connection.flush(client, { dst: tiny, offset, length }))
          yield* equal(tagOf(exit), "OutOfRangeError", `flush(${offset}, ${length}) of a 4-byte region`)
          yield* equal(/8 bytes/.test(messageOf(exit)), true, `the refusal says why ("${messageOf(exit)}")`)
        }
        dst.memory.fill(0)
        yield* Connection.read(client, { dst, src: remote, srcOffset: 4088, length: 8 })
        yield* equal(dst.memory.join(","), "1,2,3,4,5,6,7,8", "a read after the refusals")
      })
  }
]
