/**
 * Conformance cases for the batch data path.
 */
import { Connection, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { connectedPair, exposed } from "./pair.js"
import { check, messageOf, tagOf } from "./support.js"

/** A connected pair whose send queues hold `sendQueueSize` requests, and a 64 KiB source on the client. */
const pairWithSource = (address: string, port: number, sendQueueSize: number) =>
  Effect.gen(function*() {
    const pair = yield* connectedPair(address, port, { server: { sendQueueSize }, client: { sendQueueSize } })
    const src = yield* LocalMr.allocate(pair.clientPeer, 65536, Usage.WRITE_SRC)
    return { ...pair, src }
  })

export const dataPathCases: ReadonlyArray<Case> = [
  {
    name: "a local region of another peer (another protection domain) is refused before posting (RPMA_E_INVAL) by " +
      "every operation that takes one; the connection carries a write after them",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, clientPeer, remote, target } = yield* connectedPair(address, port)
        const otherPeer = yield* Peer.make(address)
        const foreign = yield* LocalMr.allocate(otherPeer, 64, Usage.combine(Usage.WRITE_SRC, Usage.READ_DST))
        const foreignSend = yield* LocalMr.allocate(otherPeer, 64, Usage.SEND)
        const foreignRecv = yield* LocalMr.allocate(otherPeer, 64, Usage.RECV)
        const own = yield* LocalMr.allocate(clientPeer, 64, Usage.combine(Usage.SEND, Usage.RECV))
        foreign.memory.fill(0xee)
        const attempts: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
          ["write", Connection.write(client, { dst: remote, src: foreign, length: 8 })],
          ["postWrite", Connection.postWrite(client, { dst: remote, src: foreign, length: 8 })],
          ["writeMany", Connection.writeMany(client, [{ dst: remote, src: foreign, length: 8 }])],
          ["prepareWrite", Effect.flatten(Connection.prepareWrite(client, { dst: remote, src: foreign, length: 8 }))],
          ["read", Connection.read(client, { dst: foreign, src: remote, length: 8 })],
          ["postRead", Connection.postRead(client, { dst: foreign, src: remote, length: 8 })],
          ["send", Connection.send(client, { src: foreignSend, length: 8 })],
          ["postSend", Connection.postSend(client, { src: foreignSend, length: 8 })],
          ["recv", Connection.recv(client, { dst: foreignRecv, length: 8 })],
          ["postRecv", Connection.postRecv(client, { dst: foreignRecv, length: 8 })],
          ["call, its receive", Connection.call(client, { send: { src: own, length: 8 }, recv: { dst: foreignRecv } })],
          ["call, its send", Connection.call(client, { send: { src: foreignSend, length: 8 }, recv: { dst: own } })]
        ]
        for (const [name, attempt] of attempts) {
          const exit = yield* Effect.exit(Effect.timeout(attempt, "10 seconds"))
          yield* check(tagOf(exit) === "RpmaInvalidError", `${name} from a region of another peer: ${tagOf(exit)}`)
          yield* check(
            messageOf(exit).includes("registered on another peer than the connection's"),
            `${name}: the refusal says why: ${messageOf(exit)}`
          )
        }
        // Nothing was posted: the connection works on, and nothing of the foreign region arrived.
        const src = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
        src.memory.fill(7)
        yield* Connection.write(client, { dst: remote, src, length: 8 })
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 8 })
        yield* check(target.memory[0] === 7, `the write after the refusals arrived: ${target.memory[0]}`)
        yield* check((yield* Connection.state(client)) === "Connected", "the connection is still connected")
      })
  },
  {
    name:
      "Connection.writeMany: 256 writes through a 16-entry send queue all arrive; a bad span posts nothing; prepared writes",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, remote, src, target } = yield* pairWithSource(address, port, 16)
        for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
        const spans = Array.from({ length: 256 }, (_, i) => ({ dstOffset: i * 256, srcOffset: i * 256, length: 256 }))
        yield* Connection.writeMany(client, spans.map((span) => ({ dst: remote, src, ...span })))
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 65536 })
        let wrong = 0
        for (let i = 0; i < 256; i++) if (target.memory[i * 256] !== (i % 250) + 1) wrong++
        yield* check(wrong === 0, `${wrong} of 256 writes did not arrive`)
        target.memory.fill(0)
        const refused = yield* Effect.exit(
          Connection.writeMany(
            client,
            [{ dstOffset: 0, srcOffset: 0, length: 64 }, {
              dstOffset: 65530,
              srcOffset: 0,
              length: 64
            }].map((span) => ({ dst: remote, src, ...span }))
          )
        )
        yield* check(
          Exit.isFailure(refused) && refused.cause._tag === "Fail" && refused.cause.error._tag === "OutOfRangeError",
          "a span outside the destination is refused"
        )
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 64 })
        yield* check(target.memory[0] === 0, "nothing of a refused batch was posted")
        // Prepared once, posted many times: the bytes of each run arrive.
        const beat = yield* Connection.prepareWrite(client, {
          dst: remote,
          dstOffset: 512,
          src,
          srcOffset: 0,
          length: 8
        })
        for (let i = 1; i <= 32; i++) {
          src.memory[0] = i
          yield* beat
          yield* Connection.flush(client, { dst: remote, dstOffset: 512, length: 8 })
          yield* check(target.memory[512] === i, `prepared write run ${i}: ${target.memory[512]} arrived`)
        }
        const misfit = yield* Effect.exit(
          Connection.prepareWrite(client, { dst: remote, dstOffset: 65536, src, length: 1 })
        )
        yield* check(
          Exit.isFailure(misfit) && misfit.cause._tag === "Fail" && misfit.cause.error._tag === "OutOfRangeError",
          "a write that cannot fit is refused when it is prepared"
        )
      })
  },
  {
    name:
      "Connection.writeMany: four batches and single writes share an 8-entry send queue, each window sliding as entries free up; an interrupted batch leaves every entry usable",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, remote, src, target } = yield* pairWithSource(address, port, 8)
        for (let i = 0; i < 256; i++) src.memory[i * 256] = (i % 250) + 1
        // Batch b writes the spans i with i % 4 === b; single writes go beside them.
        const batches = [0, 1, 2, 3].map((b) =>
          Connection.writeMany(
            client,
            Array.from(
              { length: 64 },
              (_, k) => ({ dstOffset: (4 * k + b) * 256, srcOffset: (4 * k + b) * 256, length: 256 })
            ).map((span) => ({ dst: remote, src, ...span }))
          )
        )
        const singles = Effect.forEach(
          [0, 1, 2, 3, 4, 5, 6, 7],
          (i) =>
            Connection.write(client, { dst: remote, dstOffset: 65536 - 8 * (i + 1), src, srcOffset: 0, length: 8 }),
          { concurrency: 8, discard: true }
        )
        yield* Effect.all([...batches, singles], { concurrency: "unbounded", discard: true })
        yield* Connection.flush(client, { dst: remote, dstOffset: 0, length: 65536 })
        let wrong = 0
        for (let i = 0; i < 256; i++) if (target.memory[i * 256] !== (i % 250) + 1) wrong++
        yield* check(wrong === 0, `${wrong} of 256 writes of four concurrent batches did not arrive`)
        // Interrupted mid-way, a batch posts nothing more; what it had in flight completes and gives
        // its entries back: a batch as long as the whole queue then fits.
        const long = Array.from({ length: 256 }, (_, i) => ({ dstOffset: i * 256, srcOffset: i * 256, length: 256 }))
        const interrupted = yield* Effect.fork(
          Connection.writeMany(client, long.map((span) => ({ dst: remote, src, ...span })))
        )
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(interrupted)
        const whole = Array.from({ length: 8 }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
        const after = yield* Effect.exit(
          Effect.timeout(
            Connection.writeMany(client, whole.map((span) => ({ dst: remote, src, ...span }))),
            "5 seconds"
          )
        )
        yield* check(Exit.isSuccess(after), "a full-queue batch after an interrupted one completes")
      })
  },
  {
    name:
      "Connection.writeMany signals one request per half queue: a batch whose first, unsignalled write is refused by the remote side fails with that write's status, without waiting",
    run: (address, port) =>
      Effect.gen(function*() {
        const { client, src } = yield* pairWithSource(address, port, 16)
        // A region of another protection domain: its exact descriptor is refused at the remote end.
        const elsewhere = yield* LocalMr.allocate(yield* Peer.make(address), 65536, exposed)
        const dst = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(elsewhere)).pipe(
          Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
        )
        const spans = Array.from({ length: 40 }, (_, i) => ({ dstOffset: i * 64, srcOffset: i * 64, length: 64 }))
        const failed = yield* Effect.exit(
          Effect.timeout(Connection.writeMany(client, spans.map((span) => ({ dst, src, ...span }))), "10 seconds")
        )
        const error = Exit.isFailure(failed) && failed.cause._tag === "Fail" ? failed.cause.error : undefined
        yield* check(
          error?._tag === "CompletionError" && error.status === 10,
          `the batch: ${error === undefined ? "no failure" : `${error._tag} ${(error as { status?: number }).status}`}`
        )
      })
  }
]
