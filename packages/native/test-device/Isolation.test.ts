// Issue 19, item 7, curious peers: a connected client guesses rkeys for ISOLATION_GUESS_SECONDS
// (default 600: ten minutes) and reaches nothing it was not given. Each of its connections is
// served by an isolated endpoint (Admission.listenIsolated: a peer, so a protection domain, of its
// own) with a fresh single-use token, as a server gives each client; another client's region lives
// on its own isolated endpoint, and the guesser knows that region's address and length exactly.
// A guess that the device refuses (IBV_WC_REM_ACCESS_ERR) ends the guesser's connection, so it
// reconnects: one guess per connection, about as fast as rdma_cm connects. Soft-RoCE in the TCG
// VM, host load average ~20, 2026-12-02: 458 guesses in 602 s (29 with the exact rkey), 458
// refused with REM_ACCESS_ERR, 0 reached.
// Issue 34: the same guesser against the default server (Listener.serve with no options), which
// isolates every client by itself; the guesser's client code is Connection.connect as usual.
// Soft-RoCE in the TCG VM, ISOLATION_GUESS_SECONDS=60, 2026-12-04: 52 guesses in 60 s over 52
// connections, 52 refused with REM_ACCESS_ERR, 0 reached; ISOLATION_GUESS_SECONDS=600 (the
// default), 2026-12-04: 536 guesses in 601 s over 536 connections, 536 refused, 0 reached.
//   RDMA_ADDRESS=... ISOLATION_GUESS_SECONDS=60 vitest run --config vitest.device.config.ts test-device/Isolation.test.ts
import { Admission, Connection, Descriptor, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestServices from "effect/TestServices"
import { randomBytes } from "node:crypto"
import * as NativeDriver from "../src/NativeDriver.js"
import { guessAt, guessSeconds, pattern, REGION, same, Tally, testTimeout } from "./guessing.js"
import { address } from "./support.js"

const OTHER_PORT = 18999
// The guesser's endpoints cycle through these ports: each round's is gone before the port comes round again.
const FIRST_GUESS_PORT = 19000
const GUESS_PORTS = 500

const remoteOf = (bytes: Uint8Array) =>
  Effect.flatMap(RemoteMr.fromDescriptor(bytes), RemoteMr.require(Usage.combine(Usage.READ_SRC, Usage.WRITE_DST)))

/** The default server's port: its clients' own listeners take the 64 after it. */
const SERVER_PORT = 21000

/** One guess at `target` with `rkey` on `conn`, tallied: a guess the device refuses ends the connection. */
const guessOnce = (
  conn: Connection.Connection,
  dst: LocalMr.LocalMr<"READ_DST" | "WRITE_SRC">,
  target: Descriptor.Descriptor,
  tally: Tally
) =>
  Effect.gen(function*() {
    const rkey = guessAt(target.rkey, tally.guesses)
    const guessed = yield* remoteOf(Descriptor.encode({ ...target, rkey, usage: target.usage }))
    const attempt = tally.guesses % 2 === 0
      ? Connection.read(conn, { dst, src: guessed, length: 64 })
      : Connection.write(conn, { dst: guessed, src: dst, length: 64 })
    tally.record(rkey, yield* Effect.option(Effect.flip(attempt)))
  })

/**
 * The default server's handler: a region of the client's own Peer filled with the pattern whose
 * seed the client sends, its descriptor sent back; held until the client leaves.
 */
const giveRegion = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    const peer = yield* Peer.Peer
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, Descriptor.SIZE, Usage.SEND)
    yield* Connection.recv(conn, { dst: inbox })
    const given = yield* LocalMr.allocate(peer, REGION, Usage.combine(Usage.READ_SRC, Usage.WRITE_DST))
    given.memory.set(pattern(inbox.memory[0]!))
    outbox.memory.set(yield* LocalMr.descriptor(given))
    yield* Connection.send(conn, { src: outbox, length: Descriptor.SIZE })
    yield* Connection.awaitClosed(conn)
  }).pipe(Effect.catchAll(() => Effect.void)) // a guesser's connection ends in an error: the server goes on

/** A client of the default server: connected as any client is, given its region (pattern `seed`). */
const clientOf = (peer: Peer.Peer, seed: number) =>
  Effect.gen(function*() {
    const conn = yield* Connection.connect(peer, address, SERVER_PORT, { timeout: "20 seconds" })
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 1, Usage.SEND)
    outbox.memory[0] = seed
    yield* Connection.call(conn, { send: { src: outbox, length: 1 }, recv: { dst: inbox } })
    const descriptor = inbox.memory.slice(0, Descriptor.SIZE)
    return { conn, descriptor }
  })

layer(NativeDriver.layer, { timeout: testTimeout })("on a device", (it) => {
  describe("curious peers", () => {
    // Live: the guessing runs for real seconds, and connections time out on the real clock.
    it.scoped(
      `a client guessing rkeys for ${guessSeconds} s on isolated endpoints reaches nothing it was not given`,
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const access = Usage.combine(Usage.READ_SRC, Usage.WRITE_DST)
          // The other client: its own isolated endpoint, its region, its connection.
          const other = yield* Admission.listenIsolated(address, OTHER_PORT)
          const othersRegion = yield* LocalMr.allocate(other.peer, REGION, access)
          othersRegion.memory.set(pattern(2))
          const otherToken = new Uint8Array(randomBytes(16))
          const serving = yield* Effect.fork(Admission.acceptIsolated(other, yield* Admission.make(otherToken)))
          const otherClient = yield* Peer.make(address)
          const otherConn = yield* Connection.connect(otherClient, address, OTHER_PORT, {
            privateData: yield* Admission.privateData(otherToken)
          })
          yield* Fiber.join(serving)
          const othersDescriptor = yield* LocalMr.descriptor(othersRegion)
          const target = yield* Descriptor.decode(othersDescriptor)

          const guesserPeer = yield* Peer.make(address)
          const dst = yield* LocalMr.allocate(guesserPeer, REGION, Usage.combine(Usage.READ_DST, Usage.WRITE_SRC))
          dst.memory.fill(0xee)
          const tally = new Tally()
          const start = yield* Clock.currentTimeMillis
          let round = 0
          while ((yield* Clock.currentTimeMillis) - start < guessSeconds * 1000) {
            const port = FIRST_GUESS_PORT + (round % GUESS_PORTS)
            yield* Effect.scoped(Effect.gen(function*() {
              // What the server gives this connection: its own isolated endpoint and one region.
              const isolated = yield* Admission.listenIsolated(address, port)
              const given = yield* LocalMr.allocate(isolated.peer, REGION, access)
              given.memory.set(pattern(1))
              const token = new Uint8Array(randomBytes(16))
              const accepting = yield* Effect.fork(Admission.acceptIsolated(isolated, yield* Admission.make(token)))
              const conn = yield* Connection.connect(guesserPeer, address, port, {
                privateData: yield* Admission.privateData(token)
              })
              yield* Fiber.join(accepting)
              // It reaches what it was given: the guesses below could succeed if isolation failed.
              yield* Connection.read(conn, {
                dst,
                src: yield* remoteOf(yield* LocalMr.descriptor(given)),
                length: REGION
              })
              assert.isTrue(same(dst.memory, pattern(1)), "the guesser read the region it was given")
              tally.given++
              dst.memory.fill(0xee)
              // One guess per connection: the device ends the connection on the first it refuses.
              yield* guessOnce(conn, dst, target, tally)
            }))
            round++
          }
          tally.check("isolation", ((yield* Clock.currentTimeMillis) - start) / 1000, round)
          // The other client's bytes are unchanged, in memory and as it reads them over its connection.
          assert.isTrue(same(othersRegion.memory, pattern(2)), "the other client's region, in the server's memory")
          const back = yield* LocalMr.allocate(otherClient, REGION, Usage.READ_DST)
          yield* Connection.read(otherConn, { dst: back, src: yield* remoteOf(othersDescriptor), length: REGION })
          assert.isTrue(same(back.memory, pattern(2)), "the other client's region, read by that client")
        })),
      { timeout: testTimeout }
    )

    it.scoped(
      `the default server: a client guessing rkeys for ${guessSeconds} s reaches nothing it was not given`,
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const listener = yield* Listener.make(yield* Peer.make(address), address, SERVER_PORT)
          yield* Effect.forkScoped(Listener.serve(listener, giveRegion))
          const otherClient = yield* Peer.make(address)
          const other = yield* clientOf(otherClient, 2)
          const target = yield* Descriptor.decode(other.descriptor)

          const guesserPeer = yield* Peer.make(address)
          const dst = yield* LocalMr.allocate(guesserPeer, REGION, Usage.combine(Usage.READ_DST, Usage.WRITE_SRC))
          const tally = new Tally()
          const start = yield* Clock.currentTimeMillis
          while ((yield* Clock.currentTimeMillis) - start < guessSeconds * 1000) {
            yield* Effect.scoped(Effect.gen(function*() {
              const { conn, descriptor } = yield* clientOf(guesserPeer, 1)
              // It reaches what it was given: the guess below could succeed if isolation failed.
              dst.memory.fill(0xee)
              yield* Connection.read(conn, { dst, src: yield* remoteOf(descriptor), length: REGION })
              assert.isTrue(same(dst.memory, pattern(1)), "the guesser read the region it was given")
              tally.given++
              yield* guessOnce(conn, dst, target, tally)
            }))
          }
          tally.check("isolation (the default server)", ((yield* Clock.currentTimeMillis) - start) / 1000, tally.given)
          // The other client reads its own region unchanged.
          const back = yield* LocalMr.allocate(otherClient, REGION, Usage.READ_DST)
          yield* Connection.read(other.conn, { dst: back, src: yield* remoteOf(other.descriptor), length: REGION })
          assert.isTrue(same(back.memory, pattern(2)), "the other client's region, read by that client")
        })),
      { timeout: testTimeout }
    )
  })
})
