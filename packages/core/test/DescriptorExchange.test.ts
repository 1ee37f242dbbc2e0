import { Descriptor, DescriptorExchange } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Either, Fiber, Option, Schedule, TestClock } from "effect"
import { readFileSync } from "node:fs"
import * as net from "node:net"
import * as tls from "node:tls"

const pem = (name: string) => readFileSync(new URL(`../../../fixtures/tls/${name}.pem`, import.meta.url), "utf8")
const server = { key: pem("server-key"), cert: pem("server"), ca: pem("ca") }
const client = { key: pem("client-key"), cert: pem("client"), ca: pem("ca") }
/** A client whose certificate an unrelated CA signed: it trusts the server, the server not it. */
const stranger = { key: pem("stranger-key"), cert: pem("stranger"), ca: pem("ca") }

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
  served: DescriptorExchange.Offer = offer,
  clients?: DescriptorExchange.Clients
) =>
  Effect.scoped(Effect.gen(function*() {
    const { port } = yield* DescriptorExchange.serve({
      host: "127.0.0.1",
      port: 0,
      tls: serverTls,
      offer: served,
      clients
    })
    return yield* DescriptorExchange.fetch({ host: "127.0.0.1", port, tls: clientTls })
  }))

/** What `fetch` answers a server that sends `body` as its one frame, as no `serve` would. */
const fetchFrom = (body: string) =>
  Effect.acquireRelease(
    Effect.async<tls.Server & { port: number }>((resume) => {
      const raw = tls.createServer({ key: server.key, cert: server.cert }, (socket) => {
        const bytes = Buffer.from(body)
        const head = Buffer.alloc(4)
        head.writeUInt32BE(bytes.length)
        socket.end(Buffer.concat([head, bytes]))
      })
      raw.listen(
        0,
        "127.0.0.1",
        () => resume(Effect.succeed(Object.assign(raw, { port: (raw.address() as any).port })))
      )
    }),
    (raw) => Effect.sync(() => raw.close())
  ).pipe(
    Effect.flatMap((raw) =>
      Effect.flip(DescriptorExchange.fetch({ host: "127.0.0.1", port: raw.port, tls: { ca: pem("ca") } }))
    ),
    Effect.scoped
  )

describe("DescriptorExchange", () => {
  it.live("carries descriptors, byte for byte, and configuration to a client that trusts the server", () =>
    Effect.gen(function*() {
      const received = yield* exchange(server, client)
      assert.deepStrictEqual(received.rdma, offer.rdma)
      assert.deepStrictEqual(received.config, offer.config)
      assert.deepStrictEqual(Object.keys(received.regions).sort(), ["index", "log"])
      assert.deepStrictEqual(received.regions.log, log)
      assert.deepStrictEqual(received.regions.index, index)
    }))

  it.live("carries a token for `Listener.accept` with `{ admission }`; refuses to serve one no connection request can carry", () =>
    Effect.gen(function*() {
      const token = Uint8Array.from({ length: DescriptorExchange.MAX_TOKEN }, (_, i) => i * 7)
      const received = yield* exchange(server, client, { ...offer, token })
      assert.deepStrictEqual(received.token, token)
      assert.isUndefined((yield* exchange(server, client)).token)
      for (const bad of [new Uint8Array(0), new Uint8Array(DescriptorExchange.MAX_TOKEN + 1), "secret" as never]) {
        const error = yield* Effect.flip(exchange(server, client, { ...offer, token: bad }))
        assert.strictEqual(error.reason, "Protocol")
        assert.include(error.message, `not 1 to ${DescriptorExchange.MAX_TOKEN} bytes`)
      }
    }))

  it.live("refuses a server whose certificate it does not trust", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(exchange(server, { ...client, ca: pem("other-ca") }))
      assert.strictEqual(error.reason, "Untrusted")
    }))

  it.live("by default the server serves only clients whose certificate its CA signed", () =>
    Effect.gen(function*() {
      const token = Uint8Array.from([1, 2, 3])
      const ok = yield* exchange(server, client, { ...offer, token })
      assert.deepStrictEqual(ok.regions.log, log)
      assert.deepStrictEqual(ok.token, token)
      // What OpenSSL's verification said, as the refused client reads it.
      const strangers = [["UNABLE_TO_GET_ISSUER_CERT", { ca: pem("ca") }], [
        "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
        stranger
      ]] as const
      for (const [why, tls] of strangers) {
        const refused = yield* Effect.flip(exchange(server, tls, { ...offer, token }))
        assert.strictEqual(refused.reason, "Untrusted", refused.message)
        assert.include(refused.message, `the server refused this client's certificate (${why})`)
      }
    }))

  it.live("clients: \"any\" serves whoever completes the handshake; any other value is refused", () =>
    Effect.gen(function*() {
      for (const tls of [{ ca: pem("ca") }, stranger, client]) {
        const received = yield* exchange(server, tls, offer, "any")
        assert.deepStrictEqual(received.regions.log, log)
      }
      const error = yield* Effect.flip(exchange(server, client, offer, "all" as never))
      assert.strictEqual(error.reason, "Listen")
      assert.include(error.message, `clients is all, not "verified" or "any"`)
    }))

  it.live("a fetch timeout that is no duration is refused as its connect, never thrown", () =>
    Effect.gen(function*() {
      for (const timeout of ["soon", {}]) {
        const error = yield* Effect.flip(
          DescriptorExchange.fetch({ host: "127.0.0.1", port: 1, tls: client, timeout: timeout as never })
        )
        assert.strictEqual(error.reason, "Connect")
        assert.include(error.message, "timeout is not a duration")
      }
    }))

  it.live("a client refuses an offer whose descriptors do not decode strictly; serve refuses to send one", () =>
    Effect.gen(function*() {
      const padded = new Uint8Array(32)
      padded.set(log)
      const regions = [{ name: "log", length: 32, descriptor: Buffer.from(padded).toString("hex") }]
      const fetched = yield* fetchFrom(JSON.stringify({ version: 1, rdma: offer.rdma, regions, config: {} }))
      assert.strictEqual(fetched.reason, "InvalidDescriptor")
      assert.match(fetched.message, /region log: descriptor has 32 bytes, not exactly 21/)
      const served = yield* Effect.flip(exchange(server, client, { ...offer, regions: { log: padded } }))
      assert.strictEqual(served.reason, "InvalidDescriptor")
      assert.match(served.message, /no client would take this offer: region log: descriptor has 32 bytes/)
    }))

  it.live("refuses a frame that is not an offer", () =>
    Effect.map(fetchFrom("hello"), (error) => assert.strictEqual(error.reason, "Protocol")))

  it.live("options that are no options fail, serve's as its listen and fetch's as its connect; an offer no client would take is not served", () =>
    Effect.gen(function*() {
      const serveWith = (options: Record<string, unknown> | null) =>
        Effect.flip(Effect.scoped(DescriptorExchange.serve(options as never)))
      const listening = { host: "127.0.0.1", port: 0, tls: server, offer }
      const refusedOptions: Array<[Record<string, unknown> | null, string]> = [
        [null, "serve takes { host, port, tls, offer }, not null"],
        [{ ...listening, host: undefined }, "host is undefined"],
        [{ ...listening, port: -1 }, "port is -1: give an integer from 0 to 65535"],
        [{ ...listening, port: "7000" }, "port is string"],
        [{ ...listening, tls: { key: server.key, cert: server.cert } }, "tls.ca is undefined"],
        [{ ...listening, tls: { ...server, cert: 5 } }, "tls.cert is 5: give the server's certificate"],
        [{ ...listening, tls: { ...server, key: "not a key" } }, "node:tls cannot use tls.key and tls.cert"],
        [{ ...listening, offer: null }, "offer is null"],
        [
          new Proxy({}, {
            get: () => {
              throw new Error("a trap")
            }
          }),
          "the options cannot be read (a trap)"
        ]
      ]
      for (const [options, words] of refusedOptions) {
        const error = yield* serveWith(options)
        assert.strictEqual(error.reason, "Listen", words)
        assert.include(error.message, words)
      }
      const cyclic: Record<string, unknown> = {}
      cyclic.self = cyclic
      const refusedOffers: Array<[Record<string, unknown>, string]> = [
        [{ ...offer, regions: { log: 5 } }, "the offer cannot be written"],
        [{ ...offer, config: cyclic }, "the offer cannot be written"],
        [{ ...offer, config: { records: Number.NaN } }, "no client would take this offer: config records"],
        [{ ...offer, rdma: { address: "192.168.77.1", port: 0 } }, "no client would take this offer"]
      ]
      for (const [refused, words] of refusedOffers) {
        const error = yield* serveWith({ ...listening, offer: refused })
        assert.strictEqual(error.reason, "Protocol", words)
        assert.include(error.message, words)
      }
      const fetching = { host: "127.0.0.1", port: 7000, tls: client }
      const refusedFetches: Array<[Record<string, unknown> | null, string]> = [
        [null, "fetch takes { host, port, tls, timeout? }, not null"],
        [{ ...fetching, port: 0 }, "port is 0: give an integer from 1 to 65535"],
        [{ ...fetching, tls: {} }, "tls.ca is undefined"],
        [{ ...fetching, tls: { ca: client.ca, servername: 5 } }, "tls.servername is 5"]
      ]
      for (const [options, words] of refusedFetches) {
        const error = yield* Effect.flip(DescriptorExchange.fetch(options as never))
        assert.strictEqual(error.reason, "Connect", words)
        assert.include(error.message, words)
      }
    }))

  it.live("a corrupted TLS record right after the offer: no uncaught error, the offer or an ExchangeError", () =>
    Effect.scoped(Effect.gen(function*() {
      const uncaught = yield* uncaughtErrors
      const proxy = yield* tamperingProxy("follow")
      for (let i = 0; i < 5; i++) {
        const result = yield* Effect.either(
          DescriptorExchange.fetch({ host: "127.0.0.1", port: proxy.port, tls: { ca: pem("ca") } })
        )
        // Either the offer came first (and the later record is ignored) or the record broke it.
        if (Either.isRight(result)) assert.deepStrictEqual(result.right.regions.log, log)
        else assert.strictEqual(result.left._tag, "ExchangeError")
      }
      // Late 'error' events of the client's sockets would have surfaced by now.
      yield* closedByClients(proxy)
      assert.isAbove(proxy.tampered(), 0, "the proxy tampered with application data")
      assert.deepStrictEqual(uncaught.map(String), [])
    })))

  it.live("a corrupted TLS record carrying the offer: fetch fails with an ExchangeError", () =>
    Effect.scoped(Effect.gen(function*() {
      const uncaught = yield* uncaughtErrors
      const proxy = yield* tamperingProxy("replace")
      const error = yield* Effect.flip(
        DescriptorExchange.fetch({ host: "127.0.0.1", port: proxy.port, tls: { ca: pem("ca") }, timeout: "5 seconds" })
      )
      assert.strictEqual(error._tag, "ExchangeError")
      assert.notStrictEqual(error.reason, "Timeout", error.message)
      assert.isAbove(proxy.tampered(), 0, "the proxy tampered with application data")
      yield* closedByClients(proxy)
      assert.deepStrictEqual(uncaught.map(String), [])
    })))

  it.live("a server that never answers the handshake: Effect.timeout ends fetch, and so does its own timeout", () =>
    Effect.scoped(Effect.gen(function*() {
      const silent = yield* listenRaw(() => {})
      const outer = yield* DescriptorExchange.fetch({ host: "127.0.0.1", port: silent, tls: { ca: pem("ca") } }).pipe(
        Effect.timeout("300 millis"),
        Effect.flip
      )
      assert.strictEqual(outer._tag, "TimeoutException")
      const own = yield* Effect.flip(
        DescriptorExchange.fetch({ host: "127.0.0.1", port: silent, tls: { ca: pem("ca") }, timeout: "200 millis" })
      )
      assert.strictEqual(own._tag === "ExchangeError" && own.reason, "Timeout")
    })))

  it.effect("the timeout is on Effect's Clock: a TestClock ends an unanswered fetch at the default timeout, not before", () =>
    Effect.scoped(Effect.gen(function*() {
      const silent = yield* listenRaw(() => {})
      const fiber = yield* Effect.fork(
        Effect.flip(DescriptorExchange.fetch({ host: "127.0.0.1", port: silent, tls: { ca: pem("ca") } }))
      )
      const timeoutMs = Duration.toMillis(DescriptorExchange.DEFAULT_TIMEOUT)
      yield* TestClock.adjust(timeoutMs - 1)
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "ended before its timeout")
      yield* TestClock.adjust(1)
      assert.isNotNull(fiber.unsafePoll(), "not ended when the TestClock reached its timeout")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason, "Timeout")
      assert.include(error.message, `within ${timeoutMs} ms`)
    })))

  const hostileOffers: ReadonlyArray<readonly [string, unknown]> = [
    ["port 70000", { ...wire(), rdma: { address: "192.168.77.1", port: 70000 } }],
    ["port -1", { ...wire(), rdma: { address: "192.168.77.1", port: -1 } }],
    ["port 0", { ...wire(), rdma: { address: "192.168.77.1", port: 0 } }],
    ["port 1e300", { ...wire(), rdma: { address: "192.168.77.1", port: 1e300 } }],
    ["port 1.5", { ...wire(), rdma: { address: "192.168.77.1", port: 1.5 } }],
    ["a region named __proto__", { ...wire(), regions: [{ ...wire().regions[0], name: "__proto__" }] }],
    ["a region named constructor", { ...wire(), regions: [{ ...wire().regions[0], name: "constructor" }] }],
    ["a region offered twice", { ...wire(), regions: [wire().regions[0], wire().regions[0]] }],
    ["a config value that is an object", { ...wire(), config: { nested: { a: 1 } } }],
    ["a config value that is null", { ...wire(), config: { n: null } }],
    [
      "a config key __proto__",
      JSON.parse(`{"version":1,"rdma":{"address":"a","port":1},"regions":[],"config":{"__proto__":1}}`)
    ],
    ["a config that is an array", { ...wire(), config: [1, 2] }],
    ["no version", { ...wire(), version: 2 }],
    ["regions not an array", { ...wire(), regions: {} }],
    ["an empty token", { ...wire(), token: "" }],
    ["a token too long for a connection request", { ...wire(), token: "ab".repeat(57) }],
    ["a token that is not hex", { ...wire(), token: "zz" }],
    ["a token that is a number", { ...wire(), token: 7 }]
  ]
  for (const [name, raw] of hostileOffers) {
    it.live(`refuses an offer with ${name}`, () =>
      Effect.scoped(Effect.gen(function*() {
        const port = yield* serveRaw(raw)
        const error = yield* Effect.flip(DescriptorExchange.fetch({ host: "127.0.0.1", port, tls: { ca: pem("ca") } }))
        assert.strictEqual(error.reason, "Protocol", error.message)
      })))
  }

  it.live("the records it returns have no prototype", () =>
    Effect.gen(function*() {
      const received = yield* exchange(server, client)
      assert.strictEqual(Object.getPrototypeOf(received.regions), null)
      assert.strictEqual(Object.getPrototypeOf(received.config), null)
    }))
})

/** The offer as the server encodes it, to tamper with. */
function wire() {
  return {
    version: 1,
    rdma: { address: "192.168.77.1", port: 7471 },
    regions: [{ name: "log", length: 21, descriptor: Buffer.from(log).toString("hex") }],
    config: { records: 1000 }
  }
}

/** A TCP server for the scope; returns its port. */
function listenRaw(onSocket: (socket: net.Socket) => void) {
  return Effect.acquireRelease(
    Effect.async<net.Server>((resume) => {
      const sockets = new Set<net.Socket>()
      const raw = net.createServer((socket) => {
        sockets.add(socket)
        socket.on("error", () => {})
        socket.on("close", () => sockets.delete(socket))
        onSocket(socket)
      })
      raw.on("close", () => sockets.forEach((s) => s.destroy()))
      Object.assign(raw, { sockets })
      raw.listen(0, "127.0.0.1", () => resume(Effect.succeed(raw)))
    }),
    (raw) =>
      Effect.sync(() => {
        ;(raw as net.Server & { sockets: Set<net.Socket> }).sockets.forEach((s) => s.destroy())
        raw.close()
      })
  ).pipe(Effect.map((raw) => (raw.address() as net.AddressInfo).port))
}

/** A TLS server sending `raw` as the offer frame; returns its port. */
function serveRaw(raw: unknown, options: tls.TlsOptions = {}) {
  return Effect.acquireRelease(
    Effect.async<tls.Server>((resume) => {
      const body = Buffer.from(JSON.stringify(raw))
      const head = Buffer.alloc(4)
      head.writeUInt32BE(body.length)
      const s = tls.createServer({ ...options, key: server.key, cert: server.cert }, (socket) => {
        socket.on("error", () => {})
        socket.end(Buffer.concat([head, body]))
      })
      s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
    }),
    (s) => Effect.sync(() => s.close())
  ).pipe(Effect.map((s) => (s.address() as net.AddressInfo).port))
}

/**
 * A proxy to a TLS 1.2 server of the offer (TLS 1.2, so that application data shows as records of
 * type 23) that flips the last byte of each such record: of a copy sent right after it ("follow",
 * before whatever the chunk holds next, such as a close_notify alert after which a client would
 * read nothing) or of the record itself ("replace").
 */
function tamperingProxy(mode: "follow" | "replace") {
  return Effect.gen(function*() {
    const upstream = yield* serveRaw(wire(), { maxVersion: "TLSv1.2" })
    let tampered = 0
    let open = 0
    const port = yield* listenRaw((client) => {
      open++
      client.on("close", () => open--)
      const up = net.connect(upstream, "127.0.0.1")
      up.on("error", () => client.destroy())
      client.on("error", () => up.destroy())
      // Not pipe(): unpiped when the server's side ends, the client's socket would stop reading and
      // never see its end.
      client.on("data", (chunk: Buffer) => up.write(chunk))
      up.on("data", (chunk: Buffer) => {
        const parts: Array<Buffer> = []
        let at = 0
        while (at + 5 <= chunk.length) {
          const end = at + 5 + chunk.readUInt16BE(at + 3)
          if (end > chunk.length) break
          const record = Buffer.from(chunk.subarray(at, end))
          if (record[0] === 23) {
            if (mode === "follow") parts.push(Buffer.from(record))
            record[record.length - 1] ^= 0x01
            tampered++
          }
          parts.push(record)
          at = end
        }
        parts.push(chunk.subarray(at))
        client.write(Buffer.concat(parts))
      })
    })
    return { port, tampered: () => tampered, open: () => open }
  })
}

/**
 * Waits (the test's timeout bounds it) until the proxy has seen every client's socket close: the
 * client closes first (the proxy never ends a connection), and a socket emits nothing after 'close'.
 */
const closedByClients = (proxy: { readonly open: () => number }) =>
  Effect.repeat(Effect.sync(proxy.open), { until: (open) => open === 0, schedule: Schedule.spaced("1 millis") })

/** The uncaught exceptions of this process while the scope is open. */
const uncaughtErrors = Effect.acquireRelease(
  Effect.sync(() => {
    const seen: Array<unknown> = []
    const listener = (error: unknown) => void seen.push(error)
    process.on("uncaughtException", listener)
    return { seen, listener }
  }),
  ({ listener }) => Effect.sync(() => void process.off("uncaughtException", listener))
).pipe(Effect.map(({ seen }) => seen))
