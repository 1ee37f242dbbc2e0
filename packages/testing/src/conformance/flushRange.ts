/**
 * Conformance cases for flushes near a region's end (issue 19, item 2). librpma's flush is an RDMA
 * read of 8 bytes at the flush's offset, whatever its length: core places the read so that it fits
 * the region, and refuses a region too small for it, so that no flush fails on the device and takes
 * the connection with it.
 */
import { Connection, LocalMr, type Peer, RdmaError, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { Case } from "../Conformance.js"
import { connectedPair, exposed } from "./pair.js"
import { check, equal, expectTag, messageOf, tagOf } from "./support.js"

/**
 * The completion of request `id` posted on `conn` by the raw driver: from the post's own poll
 * (`ready`), else from the completion channel, within 10 s.
 */
const completionOf = (
  d: Driver.Driver,
  conn: Driver.Model.ConnHandle,
  ready: ReadonlyArray<Driver.Model.Completion>,
  id: number
) => {
  const next: Effect.Effect<ReadonlyArray<Driver.Model.Completion>, unknown> = Effect.async((resume) => {
    const disarm = d.armCompletions(conn, (exit) => resume(exit))
    return Effect.sync(disarm)
  })
  const find = (
    completions: ReadonlyArray<Driver.Model.Completion>
  ): Effect.Effect<Driver.Model.Completion, unknown> => {
    const found = completions.find((c) => c.id === id)
    return found !== undefined ? Effect.succeed(found) : Effect.flatMap(next, find)
  }
  return find(ready).pipe(
    Effect.timeoutFail({
      duration: Duration.seconds(10),
      onTimeout: () => `no completion for request ${id} within 10 s`
    })
  )
}

/** A region of `size` bytes on the server's peer, exposed, and as the client sees it. */
const exposedOf = (serverPeer: Peer.Peer, size: number) =>
  Effect.gen(function*() {
    const target = yield* LocalMr.allocate(serverPeer, size, exposed)
    const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
      Effect.flatMap(RemoteMr.require(exposed))
    )
    return { target, remote }
  })

export const flushRangeCases: ReadonlyArray<Case> = [
  {
    name:
      "Connection.flush near a region's end: (4090, 6), (4095, 1), (4096, 0), (4088, 8) on a 4096-byte region succeed and the connection stays usable; a region under 8 bytes is refused before anything is posted",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, serverPeer } = yield* connectedPair(address, port)
        const { remote, target } = yield* exposedOf(serverPeer, 4096)
        for (const [offset, length] of [[4090, 6], [4095, 1], [4096, 0], [4088, 8], [0, 4096]] as const) {
          yield* expectTag(
            Connection.flush(client, { dst: remote, dstOffset: offset, length }),
            "success",
            `flush(${offset}, ${length})`
          )
        }
        // Still usable: a write of the region's last 8 bytes, flushed at its very end, and read back.
        const src = yield* LocalMr.allocate(clientPeer, 8, Usage.WRITE_SRC)
        const dst = yield* LocalMr.allocate(clientPeer, 8, Usage.READ_DST)
        src.memory.set([1, 2, 3, 4, 5, 6, 7, 8])
        yield* Connection.write(client, { dst: remote, dstOffset: 4088, src, length: 8 })
        yield* expectTag(
          Connection.flush(client, { dst: remote, dstOffset: 4096, length: 0 }),
          "success",
          "flush(4096, 0) after a write"
        )
        yield* equal(target.memory[4095], 8, "the region's last byte after the write and flush")
        yield* Connection.read(client, { dst, src: remote, srcOffset: 4088, length: 8 })
        yield* equal(dst.memory.join(","), "1,2,3,4,5,6,7,8", "the bytes read back")

        // A region no 8-byte read fits: refused up front, with the reason, and nothing posted (a
        // posted read past the end would fail and take the connection with it).
        const { remote: tiny } = yield* exposedOf(serverPeer, 4)
        for (const [offset, length] of [[0, 4], [0, 0], [4, 0]] as const) {
          const exit = yield* Effect.exit(Connection.flush(client, { dst: tiny, dstOffset: offset, length }))
          yield* equal(tagOf(exit), "OutOfRangeError", `flush(${offset}, ${length}) of a 4-byte region`)
          yield* equal(/8 bytes/.test(messageOf(exit)), true, `the refusal says why ("${messageOf(exit)}")`)
        }
        dst.memory.fill(0)
        yield* Connection.read(client, { dst, src: remote, srcOffset: 4088, length: 8 })
        yield* equal(dst.memory.join(","), "1,2,3,4,5,6,7,8", "a read after the refusals")
      })
  },
  {
    name:
      "driver: rpma_flush reads 8 bytes at its offset whatever its length: on a 4096-byte region (4088, 8) and (4088, 1) complete, (4095, 1) fails with IBV_WC_REM_ACCESS_ERR",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        // The driver's own posts on a connection core made: core has nothing posted on it, so
        // nothing of core's reads its completions meanwhile. The failed read ends the queue pair.
        const { client, serverPeer } = yield* connectedPair(address, port)
        const handle = Driver.handleOf(client)
        const { remote } = yield* exposedOf(serverPeer, 4096)
        const flush = (id: number, dstOffset: number, length: number) =>
          Effect.suspend(() => {
            const outcome = d.postMany(handle, [{
              op: "flush",
              id,
              dst: Driver.handleOf(remote),
              dstOffset,
              length,
              type: "visibility"
            }])
            return outcome.posted === 1
              ? Effect.map(completionOf(d, handle, outcome.ready, id), (c) => c.status)
              : Effect.fail(`flush(${dstOffset}, ${length}) not posted: ${String(outcome.error)}`)
          })
        yield* equal(yield* flush(1, 4088, 8), RdmaError.WcStatus.SUCCESS, "the status of flush(4088, 8)")
        yield* equal(yield* flush(2, 4088, 1), RdmaError.WcStatus.SUCCESS, "the status of flush(4088, 1)")
        const past = yield* flush(3, 4095, 1)
        yield* check(
          past === RdmaError.WcStatus.REM_ACCESS_ERR,
          `the status of flush(4095, 1), an 8-byte read past the end: ${
            RdmaError.wcStatusName(past)
          } (expected IBV_WC_REM_ACCESS_ERR)`
        )
      })
  }
]
