import { Descriptor, DescriptorExchange } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import * as tls from "node:tls"

const pem = (name: string) => readFileSync(new URL(`../../../fixtures/tls/${name}.pem`, import.meta.url), "utf8")
const server = { key: pem("server-key"), cert: pem("server"), ca: pem("ca") }
const client = { key: pem("client-key"), cert: pem("client"), ca: pem("ca") }

const log = Descriptor.encode({ address: 0x7f0000001000n, length: 1n << 20n, rkey: 0xabcd, usage: 0x19 })
const index = Descriptor.encode({ address: 0x7f0000200000n, length: 4096n, rkey: 0x1234, usage: 0x01 })
const offer: DescriptorExchange.Offer = {
  rdma: { address: "192.168.77.1", port: 7471 },
  regions: { log, index },
  config: { records: 1000, recordSize: 64 }
}

const exchange = (
  serverTls: DescriptorExchange.TlsOptions,
  clientTls: DescriptorExchange.TlsOptions,
  served: DescriptorExchange.Offer = offer
) =>
  Effect.scoped(Effect.gen(function*() {
    const { port } = yield* DescriptorExchange.serve({ host: "127.0.0.1", port: 0, tls: serverTls, offer: served })
    return yield* DescriptorExchange.fetch({ host: "127.0.0.1", port, tls: clientTls })
  }))

describe("DescriptorExchange", () => {
  it.live("carries descriptors, byte for byte, and configuration to a client that trusts the server", () =>
    Effect.gen(function*() {
      const received = yield* exchange(server, { ca: pem("ca") })
      assert.deepStrictEqual(received.rdma, offer.rdma)
      assert.deepStrictEqual(received.config, offer.config)
      assert.deepStrictEqual(Object.keys(received.regions).sort(), ["index", "log"])
      assert.deepStrictEqual(received.regions.log, log)
      assert.deepStrictEqual(received.regions.index, index)
    }))

  it.live("refuses a server whose certificate it does not trust", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(exchange(server, { ca: pem("other-ca") }))
      assert.strictEqual(error.reason, "Untrusted")
    }))

  it.live("with requestCert, the server serves only clients it can verify", () =>
    Effect.gen(function*() {
      const mutual = { ...server, requestCert: true }
      const ok = yield* exchange(mutual, client)
      assert.deepStrictEqual(ok.regions.log, log)
      const anonymous = yield* Effect.flip(exchange(mutual, { ca: pem("ca") }))
      assert.include(["Untrusted", "Connect", "Protocol"], anonymous.reason)
    }))

  it.live("refuses an offer whose descriptors do not decode strictly", () =>
    Effect.gen(function*() {
      const padded = new Uint8Array(32)
      padded.set(log)
      const error = yield* Effect.flip(exchange(server, { ca: pem("ca") }, { ...offer, regions: { log: padded } }))
      assert.strictEqual(error.reason, "InvalidDescriptor")
      assert.match(error.message, /region log: descriptor has 32 bytes, not exactly 21/)
    }))

  it.live("refuses a frame that is not an offer", () =>
    Effect.acquireRelease(
      Effect.async<tls.Server & { port: number }>((resume) => {
        const raw = tls.createServer({ key: server.key, cert: server.cert }, (socket) => {
          socket.end(Buffer.concat([Buffer.from([0, 0, 0, 5]), Buffer.from("hello")]))
        })
        raw.listen(0, "127.0.0.1", () => resume(Effect.succeed(Object.assign(raw, { port: (raw.address() as any).port }))))
      }),
      (raw) => Effect.sync(() => raw.close())
    ).pipe(
      Effect.flatMap((raw) => Effect.flip(DescriptorExchange.fetch({ host: "127.0.0.1", port: raw.port, tls: { ca: pem("ca") } }))),
      Effect.map((error) => assert.strictEqual(error.reason, "Protocol")),
      Effect.scoped
    ))
})
