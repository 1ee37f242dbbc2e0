/**
 * The long single-connection run across two hosts: one connection, at least 100,000 rpma_writes
 * from VM b into a region on VM a, with every connection event the server sees logged (with its
 * time). An event before the client says it is done (CLOSED or LOST) is unexplained, and fails.
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { type Channel, check, log, seconds } from "./harness.js"

const exposed = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
const REGION = 1 << 20
const SIZE = 64

/** VM a: accepts one connection and logs its events until the client is done and has closed. */
export const longServer = (address: string, port: number, channel: Channel) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const target = yield* LocalMr.allocate(peer, REGION, exposed)
    const ep = yield* Listener.make(peer, address, port)
    yield* channel.send({ descriptor: Array.from(yield* LocalMr.descriptor(target)) })
    const server = yield* Listener.acceptNext(ep, { timeout: "30 seconds" })
    const started = performance.now()
    const events: Array<{ event: Connection.State; at: number }> = []
    yield* log("long run: server connection Connected")
    // Its changes after the first (Connected, now).
    const watching = yield* Stream.runForEach(Stream.drop(Connection.changes(server), 1), (event) =>
      Effect.zipRight(
        Effect.sync(() => events.push({ event, at: seconds(started) })),
        log(`long run: server connection state ${event} at ${seconds(started).toFixed(3)} s`)
      )).pipe(Effect.fork)
    const done = yield* channel.receive(3600)
    const early = events.filter((e) => e.event === "Closed" || e.event === "Lost")
    yield* log(`long run: client done after ${done.writes} writes; events before that: ${JSON.stringify(events)}`)
    // The last record the client wrote, as the server's memory has it.
    const last = Buffer.from(target.memory.subarray(done.lastOffset, done.lastOffset + 8)).readBigUInt64LE()
    yield* channel.send({ events, last: String(last) })
    yield* check(
      early.length === 0,
      `the server saw ${early.map((e) => `${e.event} at ${e.at.toFixed(3)} s`).join(", ")} before the client was done`
    )
    // The client closes now (and says so: clientClosed): CLOSED is expected, within a bound.
    yield* channel.receive(60)
    yield* watching.await.pipe(Effect.timeout("30 seconds"))
    yield* log(`long run: server events after the client closed: ${JSON.stringify(events)}`)
  })

/** VM b: the writes, `window` in flight, then a flush and a check of the last record. */
export const longClient = (address: string, serverAddress: string, port: number, channel: Channel, total: number) =>
  Effect.gen(function*() {
    const { descriptor } = yield* channel.receive()
    const peer = yield* Peer.make(address)
    const conn = yield* Connection.connect(peer, serverAddress, port, { timeout: "30 seconds", sendQueueSize: 64 })
    const remote = yield* RemoteMr.fromDescriptor(Uint8Array.from(descriptor)).pipe(
      Effect.flatMap(RemoteMr.require(exposed))
    )
    const slots = REGION / SIZE
    const src = yield* LocalMr.allocate(peer, REGION, Usage.WRITE_SRC)
    const view = Buffer.from(src.memory.buffer, src.memory.byteOffset, src.memory.byteLength)
    const window = 32
    const started = performance.now()
    let completed = 0
    let lastReport = started
    const writeOne = (i: number) => {
      const offset = (i % slots) * SIZE
      view.writeBigUInt64LE(BigInt(i), offset)
      return Effect.zipRight(
        Connection.write(conn, { dst: remote, dstOffset: offset, src, srcOffset: offset, length: SIZE }),
        Effect.suspend(() => {
          completed++
          if (completed % 10_000 === 0) {
            const now = performance.now()
            const rate = 10_000 / ((now - lastReport) / 1000)
            lastReport = now
            return log(
              `long run: ${completed} writes, ${rate.toFixed(0)} writes/s, state ${
                Connection.state(conn).pipe(Effect.runSync)
              }`
            )
          }
          return Effect.void
        })
      )
    }
    // Up to `window` writes in flight, each refilled as soon as one completes.
    let next = 0
    yield* Effect.all(
      Array.from(
        { length: window },
        () => Effect.suspend(() => writeOne(next++)).pipe(Effect.repeat({ while: () => next < total }))
      ),
      { concurrency: "unbounded", discard: true }
    )
    const lastIndex = total - 1
    const lastOffset = (lastIndex % slots) * SIZE
    yield* Connection.flush(conn, { dst: remote, dstOffset: 0, length: REGION })
    const elapsed = seconds(started)
    yield* log(`long run: ${completed} writes in ${elapsed.toFixed(1)} s, ${(completed / elapsed).toFixed(0)} writes/s`)
    yield* channel.send({ done: true, writes: completed, lastOffset })
    const report = yield* channel.receive(60)
    yield* check(
      report.last === String(lastIndex),
      `the server's memory holds record ${report.last} where ${lastIndex} was written last`
    )
    yield* check(completed === total, `${completed} of ${total} writes completed`)
    return { completed, elapsed, events: report.events as Array<{ event: string; at: number }> }
  })
