/**
 * Carries region descriptors and peer configuration over TLS, as librpma's manual asks
 * (rpma_mr_remote_from_descriptor(3): a descriptor tampered in transit makes a peer write to the
 * wrong place, so do not send it as rdma_cm private data). The server offers named descriptors and
 * a configuration object; the client verifies the server's certificate (and the server the
 * client's, with `requestCert`), then decodes every descriptor strictly.
 *
 * The wire format is one frame each way: a 4-byte big-endian length and that many bytes of UTF-8
 * JSON. Descriptors travel as hex with their exact length, so padding cannot creep in.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import { isIP } from "node:net"
import * as tls from "node:tls"
import * as Descriptors from "./Descriptor.js"

/**
 * What a server offers: where to connect over RDMA, its regions' descriptors by name, and any
 * configuration the client needs.
 *
 * @since 0.1.0
 * @category models
 */
export interface Offer {
  readonly rdma: { readonly address: string; readonly port: number }
  readonly regions: Readonly<Record<string, Uint8Array>>
  readonly config: Readonly<Record<string, string | number | boolean>>
}

/**
 * @since 0.1.0
 * @category errors
 */
export class ExchangeError extends Data.TaggedError("ExchangeError")<{
  readonly reason: "Connect" | "Untrusted" | "Protocol" | "InvalidDescriptor" | "Listen"
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
  readonly key?: string | Buffer | undefined
  readonly cert?: string | Buffer | undefined
  /** The certificate authorities to trust for the other side. */
  readonly ca: string | Buffer | ReadonlyArray<string | Buffer>
  /** Server only: require and verify a client certificate. */
  readonly requestCert?: boolean | undefined
  /** Client only: the name the server's certificate must carry (default: the host). */
  readonly servername?: string | undefined
}

const MAX_FRAME = 1 << 20

const caList = (ca: TlsOptions["ca"]): string | Buffer | Array<string | Buffer> =>
  typeof ca === "string" || Buffer.isBuffer(ca) ? ca : [...ca]

const frame = (value: unknown): Buffer => {
  const body = Buffer.from(JSON.stringify(value), "utf8")
  const head = Buffer.alloc(4)
  head.writeUInt32BE(body.length)
  return Buffer.concat([head, body])
}

/** Reads one frame from a socket, refusing anything larger than MAX_FRAME. */
const readFrame = (socket: tls.TLSSocket): Effect.Effect<unknown, ExchangeError> =>
  Effect.async<unknown, ExchangeError>((resume) => {
    let buffered = Buffer.alloc(0)
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk])
      if (buffered.length < 4) return
      const length = buffered.readUInt32BE(0)
      if (length > MAX_FRAME) {
        return done(Effect.fail(new ExchangeError({ reason: "Protocol", detail: `a ${length}-byte frame is too large` })))
      }
      if (buffered.length < 4 + length) return
      try {
        done(Effect.succeed(JSON.parse(buffered.subarray(4, 4 + length).toString("utf8"))))
      } catch (cause) {
        done(Effect.fail(new ExchangeError({ reason: "Protocol", detail: "the frame is not JSON", cause })))
      }
    }
    const onEnd = () => done(Effect.fail(new ExchangeError({ reason: "Protocol", detail: "the other side closed early" })))
    const onError = (cause: Error) =>
      done(Effect.fail(new ExchangeError({ reason: classify(cause), detail: cause.message, cause })))
    const done = (result: Effect.Effect<unknown, ExchangeError>) => {
      socket.off("data", onData).off("end", onEnd).off("error", onError)
      resume(result)
    }
    socket.on("data", onData).on("end", onEnd).on("error", onError)
    return Effect.sync(() => socket.off("data", onData).off("end", onEnd).off("error", onError))
  })

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
  config: offer.config
})

/** Parses an offer, checking every field's type and decoding every descriptor strictly. */
const decodeOffer = (raw: unknown): Either.Either<Offer, ExchangeError> => {
  const protocol = (detail: string) => Either.left(new ExchangeError({ reason: "Protocol", detail }))
  const o = raw as Record<string, any>
  if (typeof o !== "object" || o === null || o.version !== 1) return protocol("not a version 1 offer")
  if (typeof o.rdma?.address !== "string" || !Number.isInteger(o.rdma?.port)) return protocol("no RDMA address and port")
  if (!Array.isArray(o.regions)) return protocol("no regions")
  if (typeof o.config !== "object" || o.config === null) return protocol("no config")
  const regions: Record<string, Uint8Array> = {}
  for (const r of o.regions) {
    if (typeof r?.name !== "string" || typeof r.descriptor !== "string" || !/^([0-9a-f]{2})*$/.test(r.descriptor)) {
      return protocol("a region without a name or a hex descriptor")
    }
    const bytes = new Uint8Array(Buffer.from(r.descriptor, "hex"))
    if (bytes.byteLength !== r.length) return protocol(`region ${r.name}: its length does not match its descriptor`)
    const decoded = Descriptors.validate(bytes)
    if (Either.isLeft(decoded)) {
      return Either.left(new ExchangeError({ reason: "InvalidDescriptor", detail: `region ${r.name}: ${decoded.left.message}` }))
    }
    regions[r.name] = bytes
  }
  return Either.right({ rdma: { address: o.rdma.address, port: o.rdma.port }, regions, config: o.config })
}

/**
 * Serves `offer` to every client that completes a verified TLS handshake, on `host`:`port`
 * (port 0 picks a free one), until the scope closes. Returns the port.
 *
 * @since 0.1.0
 * @category constructors
 */
export const serve = (options: {
  readonly host: string
  readonly port: number
  readonly tls: TlsOptions
  readonly offer: Offer
}): Effect.Effect<{ readonly port: number }, ExchangeError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<tls.Server & { readonly port: number }, ExchangeError>((resume) => {
      const payload = frame(encodeOffer(options.offer))
      const server = tls.createServer({
        key: options.tls.key,
        cert: options.tls.cert,
        ca: caList(options.tls.ca),
        requestCert: options.tls.requestCert ?? false,
        rejectUnauthorized: options.tls.requestCert ?? false
      }, (socket) => {
        socket.on("error", () => socket.destroy())
        socket.end(payload)
      })
      server.once("error", (cause) =>
        resume(Effect.fail(new ExchangeError({ reason: "Listen", detail: cause.message, cause }))))
      server.listen(options.port, options.host, () => {
        const address = server.address()
        resume(Effect.succeed(Object.assign(server, { port: typeof address === "object" && address ? address.port : 0 })))
      })
    }),
    (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
  ).pipe(Effect.map((server) => ({ port: server.port })))

/**
 * Connects to a server, verifies its certificate, and returns its offer with every descriptor
 * decoded strictly (exactly 21 bytes, non-zero usage and length, no overflow).
 *
 * @since 0.1.0
 * @category constructors
 */
export const fetch = (options: {
  readonly host: string
  readonly port: number
  readonly tls: TlsOptions
}): Effect.Effect<Offer, ExchangeError> =>
  Effect.acquireUseRelease(
    Effect.async<tls.TLSSocket, ExchangeError>((resume) => {
      const socket = tls.connect({
        host: options.host,
        port: options.port,
        ca: caList(options.tls.ca),
        key: options.tls.key,
        cert: options.tls.cert,
        // SNI takes names, not addresses (RFC 6066); the certificate is still checked against the host.
        servername: options.tls.servername ?? (isIP(options.host) === 0 ? options.host : undefined),
        rejectUnauthorized: true
      })
      const onError = (cause: Error) =>
        resume(Effect.fail(new ExchangeError({ reason: classify(cause), detail: cause.message, cause })))
      socket.once("error", onError)
      socket.once("secureConnect", () => {
        socket.off("error", onError)
        resume(Effect.succeed(socket))
      })
      return Effect.sync(() => socket.destroy())
    }),
    (socket) => Effect.flatMap(readFrame(socket), decodeOffer),
    (socket) => Effect.sync(() => socket.destroy())
  )
