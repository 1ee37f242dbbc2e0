/**
 * Conformance cases for a CmEndpoint's batches of writes: a batch through a send queue smaller than
 * it lands every write in its place, from several regions to several keys, and every batch that a
 * check refuses posts nothing and fails with the error the same write alone fails with.
 */
import { CmEndpoint, CmListener, RemoteKey } from "@effect-rdma/core"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { check, equal, messageOf, pattern, same, slowdown, tagOf } from "./support.js"

const WAIT = Duration.millis(Math.round(20_000 * slowdown))

/** A connected pair whose server lends two write targets of `size` bytes; the client's two sources. */
const writePair = (address: string, port: number, size: number) =>
  Effect.gen(function*() {
    const options = { maxSendWr: 8, timeout: WAIT }
    const listener = yield* CmListener.make(address, port, options)
    const serving = yield* Effect.fork(Effect.gen(function*() {
      const request = yield* CmListener.next(listener)
      const targets = [
        yield* CmEndpoint.registerWrite(request, new Uint8Array(size)),
        yield* CmEndpoint.registerWrite(request, new Uint8Array(size))
      ]
      const readable = yield* CmEndpoint.registerRead(request, new Uint8Array(size))
      yield* CmListener.accept(request)
      return { request, targets, readable }
    }))
    const client = yield* CmEndpoint.make(address, listener.port, options)
    const sources = [
      yield* CmEndpoint.registerMessages(client, pattern(size, 1)),
      yield* CmEndpoint.registerMessages(client, pattern(size, 2))
    ]
    yield* CmEndpoint.establish(client)
    const server = yield* Fiber.join(serving)
    const keys = server.targets.map((target) => RemoteKey.make(target))
    return { client, sources, server, keys, readKey: RemoteKey.make(server.readable) }
  })

export const cmBatchCases: ReadonlyArray<Case> = [
  {
    name: "CmEndpoint.writeMany: 64 writes through an 8-entry send queue, from two regions to two keys, each lands " +
      "in its place; plain bytes and immediate data in a batch go too",
    run: (address, port) =>
      Effect.gen(function*() {
        const size = 64 * 16
        const { client, keys, server, sources } = yield* writePair(address, port, size)
        // Write i: 16 bytes of source i % 2 to slot i % 32 of target i >> 5: every source region and key
        // changes within the batch, and each target's first 512 bytes are written once.
        const writes = Array.from({ length: 64 }, (_, i) => ({
          src: sources[i % 2]!,
          srcOffset: 16 * (i >> 1),
          dst: keys[i >> 5]!,
          dstOffset: 16 * (i % 32),
          length: 16
        }))
        yield* CmEndpoint.writeMany(client, writes).pipe(Effect.timeout(WAIT))
        const expected = server.targets.map(() => new Uint8Array(size))
        for (const w of writes) {
          expected[w.dst === keys[0] ? 0 : 1]!.set(w.src.memory.subarray(w.srcOffset, w.srcOffset + 16), w.dstOffset)
        }
        yield* check(same(server.targets[0]!.memory, expected[0]!), "the first target's bytes after the batch")
        yield* check(same(server.targets[1]!.memory, expected[1]!), "the second target's bytes after the batch")
        // Plain bytes (inline, no region) in a batch.
        const plain = new TextEncoder().encode("plain bytes")
        yield* CmEndpoint.writeMany(client, [
          { src: plain, dst: keys[0]!, dstOffset: 0, length: plain.length },
          { src: sources[0]!, dst: keys[0]!, dstOffset: 32, length: 8 }
        ]).pipe(Effect.timeout(WAIT))
        yield* equal(
          new TextDecoder().decode(server.targets[0]!.memory.subarray(0, plain.length)),
          "plain bytes",
          "a plain write"
        )
        yield* check(
          same(server.targets[0]!.memory.subarray(32, 40), sources[0]!.memory.subarray(0, 8)),
          "the write after it"
        )
        // Immediate data: each write consumes a receive on the other side.
        const inbox = yield* CmEndpoint.registerMessages(server.request, new Uint8Array(16))
        const received = yield* Effect.fork(
          CmEndpoint.recvMany(server.request, [{ dst: inbox, length: 8 }, { dst: inbox, offset: 8, length: 8 }])
        )
        yield* Effect.yieldNow()
        yield* CmEndpoint.writeMany(client, [
          { src: sources[1]!, dst: keys[1]!, length: 4, imm: 1 },
          { src: sources[1]!, dst: keys[1]!, dstOffset: 4, length: 4, imm: 2 }
        ]).pipe(Effect.timeout(WAIT))
        yield* Fiber.join(received).pipe(Effect.timeout(WAIT))
      })
  },
  {
    name: "CmEndpoint.writeMany: a refused write posts none of its batch and fails as it alone does (a range, a " +
      "read key, inline too long, another endpoint's region, a mixed batch); a forged key → RemoteKeyRefusedError",
    run: (address, port) =>
      Effect.gen(function*() {
        const size = 256
        const { client, keys, readKey, server, sources } = yield* writePair(address, port, size)
        const ok = { src: sources[0]!, dst: keys[0]!, dstOffset: 0, length: 8 }
        const max = client.info.maxInlineData
        const big = yield* CmEndpoint.registerMessages(client, new Uint8Array(max + 64))
        const refusals: ReadonlyArray<readonly [string, CmEndpoint.WriteArgs]> = [
          ["past the key's end", { ...ok, dstOffset: size - 4 }],
          ["past the source's end", { ...ok, srcOffset: size - 4 }],
          ["a negative offset", { ...ok, srcOffset: -1 }],
          ["a length that is not an integer", { ...ok, length: 1.5 }],
          ["a read key", { ...ok, dst: readKey as unknown as RemoteKey.RemoteKey<"write"> }],
          ["inline, longer than granted", { src: big, dst: keys[0]!, length: max + 1, inline: true }],
          ["another endpoint's region", { ...ok, src: server.targets[0] as unknown as CmEndpoint.MessageRegion }],
          ["immediate data in a batch without", { ...ok, imm: 5 }]
        ]
        for (const [what, bad] of refusals) {
          // Alone, a write with immediate data is a good one (it would wait for a receive): a batch
          // holds one kind of request.
          const alone = bad.imm === undefined ? yield* Effect.exit(CmEndpoint.write(client, bad)) : undefined
          const expected = alone === undefined ? "OutOfRangeError" : tagOf(alone)
          yield* check(expected !== "success", `${what}: the write alone was posted`)
          const batched = yield* Effect.exit(CmEndpoint.writeMany(client, [ok, ok, bad, ok]))
          yield* equal(tagOf(batched), expected, `a batch with ${what}`)
          if (alone !== undefined) {
            yield* equal(messageOf(batched), messageOf(alone), `the message of a batch with ${what}`)
          }
        }
        // Nothing of those batches was posted: the target is still zeros.
        yield* check(
          server.targets[0]!.memory.every((b) => b === 0),
          "a refused batch wrote nothing"
        )
        const forged: RemoteKey.RemoteKey<"write"> = { ...keys[1]!, rkey: (keys[1]!.rkey + 1) >>> 0 }
        const refused = yield* Effect.exit(
          CmEndpoint.writeMany(client, [ok, { ...ok, dst: forged }]).pipe(
            Effect.timeout(WAIT)
          )
        )
        yield* equal(tagOf(refused), "RemoteKeyRefusedError", "a batch with a forged key")
      })
  }
]
