/**
 * The reconnecting client over librdmacm (`transport: "cm"`): client.ts's supervision, with a
 * session that dials an endpoint (the offer's token as the connect's private data, which
 * CmListener's admission reads) and takes the server's region keys from the acceptance's private
 * data ({@link acceptData} on the server's side).
 *
 * Declared and documented in RdmaClient.ts.
 */
import * as Effect from "effect/Effect"
import type * as Either from "effect/Either"
import type * as ParseResult from "effect/ParseResult"
import type * as Scope from "effect/Scope"
import * as Admission from "../Admission.js"
import * as CmEndpoint from "../CmEndpoint.js"
import type * as Connection from "../Connection.js"
import type { RdmaDriver } from "../Driver.js"
import * as DriverArguments from "../DriverArguments.js"
import type * as RdmaClient from "../RdmaClient.js"
import { InvalidOptionsError as InvalidOptionsErrorImpl, type RdmaCmError } from "../RdmaError.js"
import * as RemoteKey from "../RemoteKey.js"
import * as Usage from "../Usage.js"
import { refusalOf } from "./admission.js"
import {
  admissionRejected,
  type ClientImpl,
  fetchOffer,
  invalidOffer,
  invalidOption,
  serve,
  supervised,
  useOn
} from "./client.js"
import { describe } from "./clientErrors.js"
import * as cmRemoteKey from "./cmRemoteKey.js"

// The acceptance's private data (rdma_cm pads it with zeros): a mark, the number of keys, then each
// key's name (its UTF-8 length in one byte, its bytes) and its 24 bytes (RemoteKey.encode).
const MARK = [0x52, 0x44, 0x4b, 0x01] // "RDK", version 1
const LIMIT = DriverArguments.PRIVATE_DATA_LIMIT.accept

/** The key access a region's usage asks for: a librdmacm key allows one, reads or writes. */
const accessOf = (usage: unknown): RemoteKey.Access | undefined =>
  usage === Usage.WRITE_DST ? "write" : usage === Usage.READ_SRC ? "read" : undefined

export const acceptData = (
  keys: Readonly<Record<string, RemoteKey.RemoteKey>>
): Effect.Effect<Uint8Array, InvalidOptionsErrorImpl> =>
  Effect.suspend(() => {
    const invalid = (detail: string) =>
      Effect.fail(
        new InvalidOptionsErrorImpl({ module: "RdmaClient", operation: "acceptData", option: "keys", detail })
      )
    if (typeof keys !== "object" || keys === null) return invalid("must be an object of remote keys by name")
    const parts: Array<number> = [...MARK, 0]
    let count = 0
    try {
      for (const [name, key] of Object.entries(keys)) {
        const bytes = new TextEncoder().encode(name)
        if (bytes.byteLength === 0 || bytes.byteLength > 255) {
          return invalid(`must name each key with 1 to 255 bytes of UTF-8, not ${bytes.byteLength} ("${name}")`)
        }
        if (typeof key !== "object" || key === null || (key.access !== "read" && key.access !== "write")) {
          return invalid(`must hold RemoteKeys (RemoteKey.make(region)): "${name}" is not one`)
        }
        parts.push(bytes.byteLength)
        for (const byte of bytes) parts.push(byte)
        for (const byte of cmRemoteKey.encode(key)) parts.push(byte)
        count++
      }
    } catch (thrown) {
      return invalid(`must hold RemoteKeys (RemoteKey.make(region)): encoding one threw: ${describe(thrown)}`)
    }
    if (count > 255) return invalid(`must hold at most 255 keys, not ${count}`)
    if (parts.length > LIMIT) {
      return invalid(
        `must fit an acceptance's ${LIMIT} bytes, and these take ${parts.length}: ` +
          `give shorter names, or fewer keys (each takes 25 bytes and its name)`
      )
    }
    parts[MARK.length] = count
    return Effect.succeed(new Uint8Array(parts))
  })

/** The keys' bytes by name in an acceptance's private data, or what is wrong with it. */
const readAcceptData = (data: Uint8Array): Map<string, Uint8Array> | string => {
  if (data.byteLength <= MARK.length || !MARK.every((byte, i) => data[i] === byte)) {
    return "the server's acceptance carries no region keys (its private data is not RdmaClient.acceptData's)"
  }
  const keys = new Map<string, Uint8Array>()
  const count = data[MARK.length]!
  let at = MARK.length + 1
  for (let i = 0; i < count; i++) {
    const length = data[at] ?? 0
    const end = at + 1 + length + cmRemoteKey.SIZE
    if (length === 0 || end > data.byteLength) {
      return `the server's acceptance is cut short at its key ${i + 1} of ${count}`
    }
    const name = new TextDecoder("utf-8", { fatal: false }).decode(data.subarray(at + 1, at + 1 + length))
    if (keys.has(name)) return `the server's acceptance names "${name}" twice`
    keys.set(name, data.slice(at + 1 + length, end))
    at = end
  }
  return keys
}

/** One librdmacm session: fetch the offer, dial with its token, read the keys, serve until it ends. */
const session = <Regions extends RdmaClient.RegionUsages, Config, E, R>(
  client: ClientImpl<Regions, Config>,
  options: Pick<RdmaClient.CmMakeOptions<any, E, R, unknown, never, Config>, "offer" | "endpoint">,
  accesses: ReadonlyArray<readonly [string, RemoteKey.Access]>,
  decodeConfig: ((config: unknown) => Either.Either<Config, ParseResult.ParseError>) | undefined,
  pollMillis: number
): Effect.Effect<Connection.ConnectionClosedError, unknown, R | RdmaDriver | Scope.Scope> =>
  Effect.gen(function*() {
    // The offer names no regions on this path: the server registers them for each endpoint, and
    // their keys come with its acceptance.
    const offer = yield* fetchOffer(options.offer, [], decodeConfig)
    const token = offer.token
    const privateData = token === undefined ? undefined : yield* Admission.privateData(token)
    const endpoint = yield* CmEndpoint.make(offer.rdma.address, offer.rdma.port, options.endpoint)
    yield* CmEndpoint.establish(endpoint, { privateData }).pipe(
      Effect.catchTag("RdmaCmError", (error): Effect.Effect<never, RdmaCmError | RdmaClient.AdmissionRejectedError> => {
        // A CmListener's admission says why it refuses; a rejection that says nothing is not one
        // (a listener closing with requests pending, a port nobody listens on): a failed attempt.
        const said = error.errnoName === "ECONNREFUSED" ? refusalOf(endpoint.privateData) : undefined
        return said !== undefined && token !== undefined
          ? Effect.fail(admissionRejected(offer, token, client.admittedWith, said, error))
          : Effect.fail(error)
      })
    )
    yield* client.admitted(offer)
    const offered = readAcceptData(endpoint.privateData)
    if (typeof offered === "string") {
      return yield* invalidOffer(offered)
    }
    const keys: Record<string, RemoteKey.RemoteKey> = {}
    for (const [name, access] of accesses) {
      const bytes = offered.get(name)
      if (bytes === undefined) {
        return yield* invalidOffer(
          `the server's acceptance has no key "${name}" (it has ${
            Array.from(offered.keys(), (n) => `"${n}"`).join(", ") || "none"
          }): the server must accept with a key for every region named in the client's regions`
        )
      }
      keys[name] = yield* RemoteKey.decode(bytes).pipe(
        Effect.flatMap(RemoteKey.require(access)),
        Effect.catchTag("InvalidRemoteKeyError", (error) => invalidOffer(`its key "${name}": ${error.message}`))
      )
    }
    return yield* serve(client, offer, { transport: "cm", endpoint, keys }, pollMillis)
  })

export const make = <Regions extends RdmaClient.RegionUsages, E, R, Out, RS, Config>(
  options: RdmaClient.CmMakeOptions<Regions, E, R, Out, RS, Config>
): Effect.Effect<
  RdmaClient.RdmaClient<Regions, Config, "cm">,
  RdmaClient.InvalidOptionsError,
  R | RS | RdmaDriver | Scope.Scope
> =>
  Effect.suspend(() => {
    const accesses: Array<readonly [string, RemoteKey.Access]> = []
    if (
      typeof options === "object" && options !== null && typeof options.regions === "object" && options.regions !== null
    ) {
      for (const [name, usage] of Object.entries(options.regions)) {
        const access = accessOf(usage)
        // Not a Usage at all: the shared checks say so.
        if (access === undefined && Usage.validate(usage)._tag === "Right") {
          return Effect.fail(invalidOption(
            `regions.${name}`,
            "must be Usage.WRITE_DST or Usage.READ_SRC on the \"cm\" transport: a librdmacm key allows one " +
              "access (rdma_reg_write or rdma_reg_read), and librdmacm has no flush"
          ))
        }
        if (access !== undefined) accesses.push([name, access])
      }
      if (options.endpoint !== undefined && (typeof options.endpoint !== "object" || options.endpoint === null)) {
        return Effect.fail(invalidOption("endpoint", "must be an object of CmEndpoint.Options"))
      }
    }
    return supervised(
      options,
      "cm",
      undefined,
      (client, decodeConfig, pollMillis) => session(client, options, accesses, decodeConfig, pollMillis)
    )
  })

/** {@link useOn} for the user's code on the session's endpoint, with the driver the client was made with. */
export const withEndpoint = <Regions extends RdmaClient.RegionUsages, A, E extends { readonly _tag: string }, R>(
  client: RdmaClient.RdmaClient<Regions, any, "cm">,
  f: (endpoint: CmEndpoint.CmEndpoint, keys: RdmaClient.SessionKeys<Regions>) => Effect.Effect<A, E, R>
): Effect.Effect<
  A,
  E | RdmaClient.NotConnectedError | RdmaClient.WrongTransportError,
  Exclude<R, RdmaDriver>
> =>
  useOn("cm")(
    client,
    "RdmaClient.withEndpoint",
    (s) =>
      Effect.provide(
        f(s.endpoint, s.keys as RdmaClient.SessionKeys<Regions>),
        (client as unknown as ClientImpl<Regions, unknown>).driver
      )
  )
