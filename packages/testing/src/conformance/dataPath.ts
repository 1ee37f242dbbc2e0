/**
 * Conformance cases for the batch data path.
 *
 * @internal
 */
import { Connection, Endpoint, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import { type CaseOf, check } from "./support.js"


const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)

/** @internal */
export const dataPathCases = (): ReadonlyArray<CaseOf> => [
  {
    name: "Connection.writeMany: 256 writes through a 16-entry send queue all arrive; a bad span posts nothing; prepared writes",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const target = yield* LocalMr.allocate(serverPeer, 65536, exposed)
        const ep = yield* Endpoint.listen(serverPeer, address, port)
        const accepting = yield* Effect.fork(Endpoint.acceptNext(ep, { sendQueueSize: 16 }))
        const client = yield* Connection.connect(clientPeer, address, port, { sendQueueSize: 16 })
        yield* Fiber.join(accepting)
        const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY)))
        )
        const src = yield* LocalMr.allocate(clientPeer, 65536, Usage.WRITE_SRC)
        for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
        const spans = Array.from({ length: 256 }, (_, i) => ({ dstOffset: i * 256, srcOffset: i * 256, length: 256 }))
        yield* Connection.writeMany(client, { dst: remote, src, spans })
        yield* Connection.flush(client, { dst: remote, offset: 0, length: 65536 })
        let wrong = 0
        for (let i = 0; i < 256; i++) if (target.memory[i * 256] !== (i % 250) + 1) wrong++
        yield* check(wrong === 0, `${wrong} of 256 writes did not arrive`)
        target.memory.fill(0)
        const refused = yield* Effect.exit(
          Connection.writeMany(client, { dst: remote, src, spans: [{ dstOffset: 0, srcOffset: 0, length: 64 }, {
            dstOffset: 65530,
            srcOffset: 0,
            length: 64
          }] })
        )
        yield* check(
          Exit.isFailure(refused) && refused.cause._tag === "Fail" && refused.cause.error._tag === "OutOfRangeError",
          "a span outside the destination is refused"
        )
        yield* Connection.flush(client, { dst: remote, offset: 0, length: 64 })
        yield* check(target.memory[0] === 0, "nothing of a refused batch was posted")
        // Prepared once, posted many times: the bytes of each run arrive.
        const beat = yield* Connection.prepareWrite(client, { dst: remote, dstOffset: 512, src, srcOffset: 0, length: 8 })
        for (let i = 1; i <= 32; i++) {
          src.memory[0] = i
          yield* beat
          yield* Connection.flush(client, { dst: remote, offset: 512, length: 8 })
          yield* check(target.memory[512] === i, `prepared write run ${i}: ${target.memory[512]} arrived`)
        }
        const misfit = yield* Effect.exit(Connection.prepareWrite(client, { dst: remote, dstOffset: 65536, src, length: 1 }))
        yield* check(
          Exit.isFailure(misfit) && misfit.cause._tag === "Fail" && misfit.cause.error._tag === "OutOfRangeError",
          "a write that cannot fit is refused when it is prepared"
        )
      })
  }
]
