// Issue 34, item 1, librdmacm's side: a connected client guessing rkeys for ISOLATION_GUESS_SECONDS
// (default 600: ten minutes) against the default CmListener.serve server reaches nothing of another
// client. Nothing is opted into: every request the server takes is an endpoint with a protection
// domain of its own (cm_ep.cc's MakeQueuePair), its regions registered there, so an rkey of one
// client's endpoint means nothing on another's queue pair. The guesser knows the other client's
// regions' addresses and lengths exactly and guesses only their rkeys (the exact one every 16th
// guess). A guess the device refuses (IBV_WC_REM_ACCESS_ERR) ends the guesser's connection, so it
// reconnects: one guess per connection, after reading the region it was given. Soft-RoCE in the TCG
// VM, 600 s, 2026-12-04: 3,286 guesses over 3,286 connections, all refused with REM_ACCESS_ERR, 0
// reached.
//   RDMA_ADDRESS=... ISOLATION_GUESS_SECONDS=60 vitest run --config vitest.device.config.ts test-device/CmIsolation.test.ts
import { CmEndpoint, CmListener, RemoteKey } from "@effect-rdma/core"
import { assert, describe, layer } from "@effect/vitest"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as TestServices from "effect/TestServices"
import * as NativeDriver from "../src/NativeDriver.js"
import { guessAt, guessSeconds, pattern, REGION, same, slowdown, Tally, testTimeout } from "./guessing.js"
import { address } from "./support.js"

const TIMEOUT = 5_000 * slowdown
/** A key's bytes (RemoteKey.encode). */
const KEY = 24

/**
 * The default server's handler, as a user writes it: a region the client may read and one it may
 * write, on the request (so on its endpoint's protection domain), their keys sent with the
 * acceptance; then it serves until the client leaves. The client's first private data byte picks
 * the pattern (1: the guesser, 2: the other client); the regions are kept in `given` for the test
 * to look at.
 */
const given = new Map<number, { readonly read: Uint8Array; readonly write: Uint8Array }>()
const offer = (request: CmEndpoint.CmEndpoint) =>
  Effect.gen(function*() {
    const seed = request.privateData[0] ?? 0
    const readable = pattern(seed)
    const writable = pattern(seed + 100)
    const read = yield* CmEndpoint.registerRead(request, readable)
    const write = yield* CmEndpoint.registerWrite(request, writable)
    if (seed === 2) given.set(seed, { read: readable, write: writable })
    const keys = new Uint8Array(2 * KEY)
    keys.set(RemoteKey.encode(RemoteKey.make(read)), 0)
    keys.set(RemoteKey.encode(RemoteKey.make(write)), KEY)
    const ep = yield* CmListener.accept(request, { privateData: keys })
    yield* CmEndpoint.awaitClosed(ep)
  })

/** A client of the server: its endpoint and the keys of the regions it was given. */
const client = (port: number, seed: number) =>
  Effect.gen(function*() {
    const ep = yield* CmEndpoint.make(address, port, { timeout: TIMEOUT })
    yield* CmEndpoint.establish(ep, { privateData: Uint8Array.of(seed) })
    const read = yield* Effect.flatMap(RemoteKey.decode(ep.privateData.subarray(0, KEY)), RemoteKey.require("read"))
    const write = yield* Effect.flatMap(
      RemoteKey.decode(ep.privateData.subarray(KEY, 2 * KEY)),
      RemoteKey.require("write")
    )
    return { ep, read, write }
  })

layer(NativeDriver.layer, { timeout: testTimeout })("on a device", (it) => {
  describe("curious peers, librdmacm's default server", () => {
    it.scoped(
      `a client guessing rkeys for ${guessSeconds} s against CmListener.serve reaches nothing of another client`,
      () =>
        TestServices.provideLive(Effect.gen(function*() {
          const listener = yield* CmListener.make(address, 0, { timeout: TIMEOUT })
          yield* Effect.forkScoped(CmListener.serve(listener, offer))
          // The other client, connected throughout; its regions' addresses and lengths are the guesser's to know.
          const other = yield* client(listener.port, 2)
          const target = { read: other.read, write: other.write }

          const tally = new Tally()
          const start = yield* Clock.currentTimeMillis
          let round = 0
          while ((yield* Clock.currentTimeMillis) - start < guessSeconds * 1000) {
            yield* Effect.scoped(Effect.gen(function*() {
              const guesser = yield* client(listener.port, 1)
              const dst = yield* CmEndpoint.registerMessages(guesser.ep, new Uint8Array(REGION))
              // It reaches what it was given: the guesses below could succeed if isolation failed.
              yield* CmEndpoint.read(guesser.ep, { dst, src: guesser.read, length: REGION })
              assert.isTrue(same(dst.memory, pattern(1)), "the guesser read the region it was given")
              tally.given++
              dst.memory.fill(0xee)
              const n = tally.guesses
              const rkey = guessAt(n % 2 === 0 ? target.read.rkey : target.write.rkey, n)
              const attempt = n % 2 === 0
                ? CmEndpoint.read(guesser.ep, { dst, src: { ...target.read, rkey }, length: 64 })
                : CmEndpoint.write(guesser.ep, { src: dst, dst: { ...target.write, rkey }, length: 64 })
              tally.record(rkey, yield* Effect.option(Effect.flip(attempt)))
            }))
            round++
          }
          tally.check("CmListener isolation", ((yield* Clock.currentTimeMillis) - start) / 1000, round)
          // The other client's bytes are unchanged, in the server's memory and as it reads them itself.
          const others = given.get(2)!
          assert.isTrue(same(others.read, pattern(2)), "the other client's readable region, in the server's memory")
          assert.isTrue(same(others.write, pattern(102)), "the other client's writable region, in the server's memory")
          const back = yield* CmEndpoint.registerMessages(other.ep, new Uint8Array(REGION))
          yield* CmEndpoint.read(other.ep, { dst: back, src: other.read, length: REGION })
          assert.isTrue(same(back.memory, pattern(2)), "the other client's region, read by that client")
        })),
      { timeout: testTimeout }
    )
  })
})
