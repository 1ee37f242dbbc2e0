/**
 * Carries region descriptors and peer configuration over TLS, as librpma's manual asks
 * (rpma_mr_remote_from_descriptor(3): a descriptor tampered in transit makes a peer write to the
 * wrong place, so do not send it as rdma_cm private data). The server offers named descriptors and
 * a configuration object. Each side verifies the other's certificate: the client the server's (and
 * its name), the server the client's (unless told that its clients are authenticated otherwise,
 * `clients: "any"`). The client then decodes every descriptor strictly.
 *
 * The wire format is one frame each way: a 4-byte big-endian length and that many bytes of UTF-8
 * JSON. Descriptors travel as hex with their exact length, so padding cannot creep in.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { isIP } from "node:net"
import * as tls from "node:tls"
import * as Admission from "./Admission.js"
import * as Descriptors from "./Descriptor.js"
import { fetchProblem, serveProblem } from "./internal/exchangeOptions.js"

/**
 * What a server offers: where to connect over RDMA, its regions' descriptors by name, any
 * configuration the client needs, and optionally a token: a secret the client sends back as its
 * connection's private data (`Admission.privateData`), so that the server admits it with
 * `Listener.accept` with `{ admission }` (1 to {@link MAX_TOKEN} bytes, what a connection request carries).
 *
 * @since 0.1.0
 * @category models
 */
export interface Offer {
  readonly rdma: { readonly address: string; readonly port: number }
  readonly regions: Readonly<Record<string, Uint8Array>>
  readonly config: Readonly<Record<string, string | number | boolean>>
  /** @since 1.0.0 */
  readonly token?: Uint8Array | undefined
}

/**
 * The longest token an offer carries: what a connection request's private data carries with the
 * token's length (`Admission.MAX_TOKEN`).
 *
 * @since 1.0.0
 * @category constants
 */
export const MAX_TOKEN: number = Admission.MAX_TOKEN

/**
 * @since 0.1.0
 * @category errors
 */
export class ExchangeError extends Data.TaggedError("ExchangeError")<{
  readonly reason: "Connect" | "Untrusted" | "Protocol" | "InvalidDescriptor" | "Listen" | "Timeout"
  readonly detail: string
  readonly cause?: unknown
}> {
  override get message(): string {
    return `descriptor exchange failed (${this.reason}): ${this.detail}`
  }
}

/**
 * TLS material, as node:tls takes it (PEM strings or Buffers).
 *
 * @since 0.1.0
 * @category models
 */
export interface TlsOptions {
  /** This side's private key and certificate: the server's, or the client's that a server verifies. */
  readonly key?: string | Buffer | undefined
  readonly cert?: string | Buffer | undefined
  /** The certificate authorities to trust for the other side. */
  readonly ca: string | Buffer | ReadonlyArray<string | Buffer>
  /** Client only: the name the server's certificate must carry (default: the host). */
  readonly servername?: string | undefined
}

const MAX_FRAME = 1 << 20

const caList = (ca: TlsOptions["ca"]): string | Buffer | Array<string | Buffer> =>
  typeof ca === "string" || Buffer.isBuffer(ca) ? ca : [...ca]

const frame = (value: unknown): Buffer => frameOf(JSON.stringify(value))

const frameOf = (json: string): Buffer => {
  const body = Buffer.from(json, "utf8")
  const head = Buffer.alloc(4)
  head.writeUInt32BE(body.length)
  return Buffer.concat([head, body])
}

/** A data listener that collects one frame, refusing anything larger than MAX_FRAME, and finishes once. */
const frameReader = (finish: (result: Effect.Effect<unknown, ExchangeError>) => void) => {
  let buffered = Buffer.alloc(0)
  let done = false
  return (chunk: Buffer) => {
    if (done) return
    buffered = Buffer.concat([buffered, chunk])
    if (buffered.length < 4) return
    const length = buffered.readUInt32BE(0)
    if (length > MAX_FRAME) {
      done = true
      return finish(
        Effect.fail(new ExchangeError({ reason: "Protocol", detail: `a ${length}-byte frame is too large` }))
      )
    }
    if (buffered.length < 4 + length) return
    done = true
    try {
      finish(Effect.succeed(JSON.parse(buffered.subarray(4, 4 + length).toString("utf8"))))
    } catch (cause) {
      finish(Effect.fail(new ExchangeError({ reason: "Protocol", detail: "the frame is not JSON", cause })))
    }
  }
}

const classify = (cause: unknown): "Untrusted" | "Connect" => {
  const code = (cause as { code?: string }).code ?? ""
  return /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|ERR_TLS_CERT_ALTNAME|ALERT_UNKNOWN_CA|CERTIFICATE/i.test(code) ||
      /certificate/i.test(String((cause as Error).message))
    ? "Untrusted"
    : "Connect"
}

const encodeOffer = (offer: Offer) => ({
  version: 1,
  rdma: offer.rdma,
  regions: Object.entries(offer.regions).map(([name, bytes]) => ({
    name,
    length: bytes.byteLength,
    descriptor: Buffer.from(bytes).toString("hex")
  })),
  config: offer.config,
  ...(offer.token === undefined ? {} : { token: Buffer.from(offer.token).toString("hex") })
})

/**
 * The frame that carries `offer`, or what a client would answer it with: serve refuses an offer
 * that every client's fetch would refuse, in fetch's words, and one that cannot be written at all
 * (a region that is no bytes, a config value JSON cannot carry). The frame is made once, from what
 * was checked.
 */
const sendable = (offer: Offer): Either.Either<Buffer, ExchangeError> => {
  let wire: string
  try {
    const token = offer.token
    if (
      token !== undefined && !(token instanceof Uint8Array && token.byteLength >= 1 && token.byteLength <= MAX_TOKEN)
    ) {
      const size = token instanceof Uint8Array ? `${token.byteLength} bytes` : typeof token
      return Either.left(
        new ExchangeError({
          reason: "Protocol",
          detail: `the offer's token is ${size}, not 1 to ${MAX_TOKEN} bytes (a connection request's private data)`
        })
      )
    }
    wire = JSON.stringify(encodeOffer(offer))
  } catch (cause) {
    return Either.left(
      new ExchangeError({
        reason: "Protocol",
        detail: `the offer cannot be written (${messageOf(cause)}): give { rdma: { address, port }, regions: ` +
          `{ [name]: descriptor bytes }, config: { [name]: string, number or boolean }, token? }`,
        cause
      })
    )
  }
  const decoded = decodeOffer(JSON.parse(wire))
  return Either.isLeft(decoded)
    ? Either.left(
      new ExchangeError({
        reason: decoded.left.reason,
        detail: `no client would take this offer: ${decoded.left.detail}`
      })
    )
    : Either.right(frameOf(wire))
}

const messageOf = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

/** Names that would reach an object's prototype machinery if used as keys. */
const RESERVED_NAMES = new Set(["__proto__", "constructor", "prototype", "hasOwnProperty", "toString", "valueOf"])

const Name = Schema.String.pipe(
  Schema.minLength(1),
  Schema.maxLength(256),
  Schema.filter((name) => !RESERVED_NAMES.has(name) || `the name ${JSON.stringify(name)} is reserved`)
)

/** An offer as it travels: every field typed and bounded before anything is built from it. */
const WireOffer = Schema.Struct({
  version: Schema.Literal(1),
  rdma: Schema.Struct({
    address: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(255)),
    port: Schema.Int.pipe(Schema.between(1, 65535))
  }),
  regions: Schema.Array(Schema.Struct({
    name: Name,
    length: Schema.Int.pipe(Schema.between(0, MAX_FRAME)),
    descriptor: Schema.String.pipe(Schema.pattern(/^(?:[0-9a-f]{2})*$/))
  })).pipe(Schema.maxItems(4096)),
  // Decoded as entries, so that no key is ever assigned to an ordinary object.
  config: Schema.Unknown,
  token: Schema.optional(Schema.String.pipe(Schema.pattern(new RegExp(`^(?:[0-9a-f]{2}){1,${MAX_TOKEN}}$`))))
})

/**
 * What a verifying server sends a client it cannot verify instead of the offer, so that the client
 * can say why. (Refused by TLS itself, a TLS 1.3 client would only see the connection end: the
 * server checks the client's certificate after the client has finished its handshake.)
 */
const WireRefusal = Schema.Struct({ version: Schema.Literal(1), refused: Schema.String })
const decodeRefusal = Schema.decodeUnknownEither(WireRefusal)

const ConfigValue = Schema.Union(Schema.String, Schema.Number.pipe(Schema.finite()), Schema.Boolean)
const decodeWire = Schema.decodeUnknownEither(WireOffer, { onExcessProperty: "ignore" })
const isConfigValue = Schema.is(ConfigValue)
const isName = Schema.is(Name)

/** A record with no prototype: `__proto__` and friends are plain keys in it, and none is allowed anyway. */
const nullRecord = <A>(): Record<string, A> => Object.create(null) as Record<string, A>

/**
 * Parses an offer with Schema, checking every field's type and range and decoding every
 * descriptor strictly. Never throws. The records it returns have no prototype.
 */
const decodeOffer = (raw: unknown): Either.Either<Offer, ExchangeError> => {
  const protocol = (detail: string) => Either.left(new ExchangeError({ reason: "Protocol", detail }))
  const refusal = decodeRefusal(raw)
  if (Either.isRight(refusal)) {
    const detail = `the server refused this client's certificate (${refusal.right.refused.slice(0, 200)})`
    return Either.left(new ExchangeError({ reason: "Untrusted", detail }))
  }
  const wire = decodeWire(raw)
  if (Either.isLeft(wire)) {
    return protocol(`not a valid version 1 offer: ${ParseResult.TreeFormatter.formatErrorSync(wire.left)}`)
  }
  const o = wire.right
  const config = o.config
  if (typeof config !== "object" || config === null || Array.isArray(config)) return protocol("no config object")
  const decodedConfig = nullRecord<string | number | boolean>()
  for (const [key, value] of Object.entries(config)) {
    if (!isName(key)) return protocol(`config key ${JSON.stringify(key).slice(0, 80)} is empty, too long or reserved`)
    if (!isConfigValue(value)) return protocol(`config ${key}: a value must be a string, a finite number or a boolean`)
    decodedConfig[key] = value
  }
  const regions = nullRecord<Uint8Array>()
  for (const r of o.regions) {
    if (Object.prototype.hasOwnProperty.call(regions, r.name)) return protocol(`region ${r.name} is offered twice`)
    const bytes = new Uint8Array(Buffer.from(r.descriptor, "hex"))
    if (bytes.byteLength !== r.length) return protocol(`region ${r.name}: its length does not match its descriptor`)
    const decoded = Descriptors.validate(bytes)
    if (Either.isLeft(decoded)) {
      return Either.left(
        new ExchangeError({ reason: "InvalidDescriptor", detail: `region ${r.name}: ${decoded.left.message}` })
      )
    }
    regions[r.name] = bytes
  }
  const rdma = { address: o.rdma.address, port: o.rdma.port }
  return Either.right(
    o.token === undefined
      ? { rdma, regions, config: decodedConfig }
      : { rdma, regions, config: decodedConfig, token: new Uint8Array(Buffer.from(o.token, "hex")) }
  )
}

/**
 * Which clients {@link serve} gives its offer to (and with it the token that admits an RDMA
 * connection). `"verified"` (the default): only a client that presents a certificate that chains to
 * the server's `tls.ca`, within its validity dates; any other handshake is refused. Its name is not
 * checked, so give clients a CA of their own. `"any"`: whoever completes a TLS handshake, the
 * client unverified; only for a server whose clients are authenticated some other way.
 *
 * @since 1.0.0
 * @category models
 */
export type Clients = "verified" | "any"

/**
 * Serves `offer` on `host`:`port` (port 0 picks a free one) until the scope closes, to clients
 * that present a certificate signed by `tls.ca`, unless `clients: "any"` says otherwise
 * ({@link Clients}). A client presents one with `fetch`'s `tls.key` and `tls.cert`. Returns the
 * port. An offer whose token is empty or longer than {@link MAX_TOKEN} bytes is refused
 * (`Protocol`): no client could send it; so is any offer that every client's `fetch` would refuse,
 * with fetch's reason and words (`Protocol`, `InvalidDescriptor`: a region that holds no valid
 * descriptor, a config value that is no string, finite number or boolean). Options that are not
 * what they say (no host, a port out of range, `tls` without its `ca`, `key` and `cert`, a key
 * node:tls cannot read) fail with `Listen`, as `fetch`'s fail with `Connect`.
 *
 * @example
 * ```ts
 * import { DescriptorExchange } from "@effect-rdma/core"
 *
 * declare const server: { key: string; cert: string; ca: string } // ca: what signs client certificates
 * declare const client: { key: string; cert: string; ca: string } // ca: what signed the server's
 * declare const offer: DescriptorExchange.Offer
 *
 * export const serving = DescriptorExchange.serve({ host: "0.0.0.0", port: 7000, tls: server, offer })
 * export const fetched = DescriptorExchange.fetch({ host: "log.internal", port: 7000, tls: client })
 * ```
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (options: {
  readonly host: string
  readonly port: number
  readonly tls: TlsOptions
  readonly offer: Offer
  /** @since 1.0.0 */
  readonly clients?: Clients | undefined
}): Effect.Effect<{ readonly port: number }, ExchangeError, Scope.Scope> =>
  Effect.suspend(() => {
    const problem = serveProblem(options)
    if (problem !== undefined) return Effect.fail(new ExchangeError({ reason: "Listen", detail: problem }))
    return served(options)
  })

/** {@link serve} once its options are read as what they say they are. */
const served = (
  options: Parameters<typeof serve>[0]
): Effect.Effect<{ readonly port: number }, ExchangeError, Scope.Scope> => {
  const clients = options.clients ?? "verified"
  if (clients !== "verified" && clients !== "any") {
    return Effect.fail(
      new ExchangeError({ reason: "Listen", detail: `clients is ${String(clients)}, not "verified" or "any"` })
    )
  }
  const verified = clients === "verified"
  const payload = sendable(options.offer)
  if (Either.isLeft(payload)) return Effect.fail(payload.left)
  return Effect.acquireRelease(
    Effect.async<tls.Server & { readonly port: number }, ExchangeError>((resume) => {
      const serveOne = (socket: tls.TLSSocket) => {
        socket.on("error", () => socket.destroy())
        if (verified && !socket.authorized) {
          socket.end(frame({ version: 1, refused: String(socket.authorizationError ?? "no certificate") }))
        } else {
          socket.end(payload.right)
        }
      }
      let server: tls.Server
      try {
        server = tls.createServer({
          key: options.tls.key,
          cert: options.tls.cert,
          ca: caList(options.tls.ca),
          // The handshake completes either way; the handler below decides (see WireRefusal).
          requestCert: verified,
          rejectUnauthorized: false
        }, serveOne)
      } catch (cause) {
        // node:tls refuses a key or certificate it cannot read here (not PEM, not a pair).
        const detail = `node:tls cannot use tls.key and tls.cert (${messageOf(cause)}): give the server's private ` +
          `key and its certificate, both PEM`
        return resume(Effect.fail(new ExchangeError({ reason: "Listen", detail, cause })))
      }
      server.once(
        "error",
        (cause) => resume(Effect.fail(new ExchangeError({ reason: "Listen", detail: cause.message, cause })))
      )
      server.listen(options.port, options.host, () => {
        const address = server.address()
        resume(
          Effect.succeed(Object.assign(server, { port: typeof address === "object" && address ? address.port : 0 }))
        )
      })
    }),
    (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  ).pipe(Effect.map((server) => ({ port: server.port })))
}

/**
 * How long {@link fetch} waits for the connection, the TLS handshake and the offer together, unless
 * told otherwise.
 *
 * @since 0.1.0
 * @category constants
 */
export const DEFAULT_TIMEOUT: Duration.Duration = Duration.seconds(10)

/**
 * Connects to a server, verifies its certificate, and returns its offer with every descriptor
 * decoded strictly (exactly 21 bytes, non-zero usage and length, no overflow).
 *
 * The whole exchange (connect, handshake, offer) ends within `timeout` (default
 * {@link DEFAULT_TIMEOUT}) with a `Timeout` error, timed by Effect's `Clock` (a `TestClock` drives
 * it), and is interruptible throughout: interrupting it destroys the socket. Whatever the network sends after the offer (a corrupted record, a reset)
 * is ignored: the socket keeps an error listener until it is gone.
 *
 * @since 0.1.0
 * @category constructors
 */
export const fetch = (options: {
  readonly host: string
  readonly port: number
  readonly tls: TlsOptions
  readonly timeout?: Duration.DurationInput | undefined
}): Effect.Effect<Offer, ExchangeError> =>
  Effect.suspend(() => {
    // A bad option of the fetch is refused as the connect it would have bounded, as serve's are as its listen.
    const problem = fetchProblem(options)
    if (problem !== undefined) return Effect.fail(new ExchangeError({ reason: "Connect", detail: problem }))
    const decoded = Duration.decodeUnknown(options.timeout ?? DEFAULT_TIMEOUT)
    if (Option.isNone(decoded)) {
      return Effect.fail(
        new ExchangeError({
          reason: "Connect",
          detail: `timeout is not a duration (${String(options.timeout)}): give e.g. "10 seconds" or milliseconds`
        })
      )
    }
    const timeout = decoded.value
    // On Effect's Clock, so that a TestClock drives it; timed out, the socket goes with the interruption.
    return received(options).pipe(
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () =>
          new ExchangeError({
            reason: "Timeout",
            detail: `no offer from ${options.host}:${options.port} within ${Duration.toMillis(timeout)} ms`
          })
      }),
      Effect.flatMap(decodeOffer)
    )
  })

/** Connects, verifies the server and reads its frame; interrupted, destroys the socket. */
const received = (options: { readonly host: string; readonly port: number; readonly tls: TlsOptions }) =>
  Effect.async<unknown, ExchangeError>((resume) => {
    let finished = false
    let socket: tls.TLSSocket | undefined
    const finish = (result: Effect.Effect<unknown, ExchangeError>) => {
      if (finished) return
      finished = true
      socket?.destroy()
      resume(result)
    }
    const fail = (reason: ExchangeError["reason"], detail: string, cause?: unknown) =>
      finish(Effect.fail(new ExchangeError({ reason, detail, cause })))
    try {
      socket = tls.connect({
        host: options.host,
        port: options.port,
        ca: caList(options.tls.ca),
        key: options.tls.key,
        cert: options.tls.cert,
        // SNI takes names, not addresses (RFC 6066); the certificate is still checked against the host.
        servername: options.tls.servername ?? (isIP(options.host) === 0 ? options.host : undefined),
        rejectUnauthorized: true
      })
    } catch (cause) {
      fail("Connect", String((cause as Error)?.message ?? cause), cause)
      return
    }
    // Never removed: an error after the offer (or after destroy) must find a listener.
    socket.on("error", (cause: Error) => fail(classify(cause), cause.message, cause))
    socket.once("secureConnect", () => {
      const reader = frameReader(finish)
      socket!.on("data", reader)
      socket!.once("end", () => fail("Protocol", "the other side closed early"))
    })
    return Effect.sync(() => {
      finished = true
      socket?.destroy()
    })
  })
