// CmEndpoint against rping, librdmacm's own example (rdmacm-utils), in both directions, at the
// depths rping asks for: one RDMA read in flight each way (initiatorDepth and responderResources
// 1). rping's loop, per ping: the client sends its source buffer's address, rkey and size (16
// bytes, big endian); the server reads that buffer, sends a go-ahead, receives the client's sink
// buffer the same way, writes what it read there, and sends a go-ahead; the client (with -V)
// checks that the sink holds what the source did.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Rping.test.ts
import { CmEndpoint, CmListener, type RemoteKey } from "@effect-rdma/core"
import { assert, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schedule from "effect/Schedule"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, type Run, runBinary } from "./cPeer.js"
import { address } from "./support.js"

const PINGS = 3
/** rping's default size: the bytes read and written each ping. */
const SIZE = 64
const INFO = 16
const depthOne: CmEndpoint.Options = {
  timeout: "20 seconds",
  maxSendWr: 16,
  maxRecvWr: 16,
  initiatorDepth: 1,
  responderResources: 1
}

/** rping's `struct rping_rdma_info`: buf (be64), rkey (be32), size (be32). */
const encodeInfo = (into: Uint8Array, at: number, region: { readonly address: bigint; readonly rkey: number }) => {
  const view = new DataView(into.buffer, into.byteOffset + at, INFO)
  view.setBigUint64(0, region.address)
  view.setUint32(8, region.rkey)
  view.setUint32(12, SIZE)
}
const decodeInfo = <A extends RemoteKey.Access>(from: Uint8Array, at: number, access: A): RemoteKey.RemoteKey<A> => {
  const view = new DataView(from.buffer, from.byteOffset + at, INFO)
  return { address: view.getBigUint64(0), rkey: view.getUint32(8), length: BigInt(view.getUint32(12)), access }
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes.subarray(0, bytes.indexOf(0)))

const killed = (run: Run) => Effect.sync(() => run.child.kill("SIGKILL"))

layer(NativeDriver.layer, { excludeTestServices: true })("CmEndpoint against rping (depth 1/1)", (it) => {
  it.scoped("TypeScript server, `rping -c -V`: each ping read from the client and written back, validated there", () =>
    Effect.gen(function*() {
      const listener = yield* CmListener.make(address, 0, depthOne)
      const client = runBinary("rping", [
        "-c",
        "-a",
        address,
        "-p",
        String(listener.port),
        "-C",
        String(PINGS),
        "-S",
        String(SIZE),
        "-V",
        "-v"
      ])
      yield* Effect.addFinalizer((exit) => Exit.isFailure(exit) ? killed(client) : Effect.void)
      const request = yield* CmListener.next(listener)
      // Receive at 0, go-ahead sent from INFO, the buffer read and written back at 64.
      const memory = new Uint8Array(64 + SIZE)
      const messages = yield* CmEndpoint.registerMessages(request, memory)
      let next = yield* CmEndpoint.postRecv(request, { segments: [{ mr: messages, offset: 0, length: INFO }] })
      const ep = yield* CmListener.accept(request)
      const goAhead = Effect.suspend(() =>
        CmEndpoint.reply(ep, {
          recv: { dst: messages, offset: 0, length: INFO },
          send: { src: messages, offset: INFO, length: INFO }
        })
      )
      for (let ping = 0; ping < PINGS; ping++) {
        assert.strictEqual((yield* next.completion).byteLength, INFO, "the client's source buffer")
        const source = decodeInfo(memory, 0, "read")
        assert.strictEqual(source.length, BigInt(SIZE))
        yield* CmEndpoint.read(ep, { dst: messages, dstOffset: 64, src: source, length: SIZE })
        assert.match(text(memory.subarray(64)), new RegExp(`^rdma-ping-${ping}: [A-Za-z]+`), "the bytes read")
        next = yield* goAhead
        assert.strictEqual((yield* next.completion).byteLength, INFO, "the client's sink buffer")
        const sink = decodeInfo(memory, 0, "write")
        yield* CmEndpoint.write(ep, { src: messages, srcOffset: 64, dst: sink, length: SIZE })
        next = yield* goAhead
      }
      const code = yield* awaitExit(client)
      assert.strictEqual(code, 0, client.output())
      assert.notInclude(client.output(), "mismatch", client.output())
      assert.strictEqual(client.output().match(/ping data: rdma-ping-\d+/g)?.length, PINGS, client.output())
    }))

  it.scoped("`rping -s`, TypeScript client: each ping read by rping from our source, written back to our sink", () =>
    Effect.gen(function*() {
      const port = 19390
      const server = runBinary("rping", ["-s", "-a", address, "-p", String(port), "-S", String(SIZE), "-v"])
      yield* Effect.addFinalizer(() => killed(server))
      const source = new Uint8Array(SIZE)
      const sink = new Uint8Array(SIZE)
      const memory = new Uint8Array(2 * INFO)
      // rping -s prints nothing when it listens: connect until it answers (a refusal till then).
      const { ep, messages, readable, writable } = yield* Effect.gen(function*() {
        const ep = yield* CmEndpoint.make(address, port, depthOne)
        const messages = yield* CmEndpoint.registerMessages(ep, memory)
        const readable = yield* CmEndpoint.registerRead(ep, source)
        const writable = yield* CmEndpoint.registerWrite(ep, sink)
        yield* CmEndpoint.establish(ep)
        return { ep, messages, readable, writable }
      }).pipe(Effect.retry({ schedule: Schedule.spaced("250 millis"), times: 80 }))
      // Sent from 0, the go-ahead received at INFO: one 16-byte exchange with CmEndpoint.call.
      const exchange = Effect.suspend(() =>
        CmEndpoint.call(ep, {
          send: { src: messages, offset: 0, length: INFO },
          recv: { dst: messages, offset: INFO, length: INFO }
        })
      )
      for (let ping = 0; ping < PINGS; ping++) {
        const line = new TextEncoder().encode(`rdma-ping-${ping}: `)
        source.fill(0)
        source.set(line)
        for (let i = line.byteLength; i < SIZE - 1; i++) source[i] = 65 + ((i + ping) % 26)
        sink.fill(0xee)
        encodeInfo(memory, 0, readable)
        yield* exchange
        encodeInfo(memory, 0, writable)
        yield* exchange
        assert.deepStrictEqual(sink, source, `ping ${ping}: what rping wrote back`)
      }
      yield* CmEndpoint.close(ep)
      const code = yield* awaitExit(server)
      assert.strictEqual(code, 0, server.output())
      assert.strictEqual(server.output().match(/server ping data: rdma-ping-\d+/g)?.length, PINGS, server.output())
    }))
})
