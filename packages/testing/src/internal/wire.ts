/**
 * What the processes sharing one simulated network say to each other, and how it travels: frames
 * of `v8.serialize`d messages (Uint8Array and bigint survive it as they are), each preceded by its
 * length, over a Unix socket to the process that serves the network, which routes them.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as v8 from "node:v8"

/** A connection in another process: what messages about it are addressed to. */
export const Far = Schema.Struct({ process: Schema.NonNegativeInt, conn: Schema.NonNegativeInt }).annotations({
  identifier: "Far"
})
export type Far = typeof Far.Type

const Bytes = Schema.Uint8ArrayFromSelf
const Length = Schema.NonNegativeInt
/** The bytes a request carries are exactly its length: a receiving process copies `bytes`, and checks `length`. */
const carriesItsLength = (r: { readonly op: string; readonly length: number; readonly bytes: Uint8Array }) =>
  r.op === "read" || r.op === "flush" || r.bytes.byteLength === r.length ||
  `carries ${r.bytes.byteLength} bytes for a ${r.op} of ${r.length}`

/**
 * The other side's half of a work request, as plain data: what it does to that side's
 * memory (a write, read or flush through an rkey) or to its receives (a send, a write's immediate data).
 */
export const Reach = Schema.Struct({
  op: Schema.Literal("write", "atomicWrite", "read", "flush", "send"),
  id: Schema.Number,
  rkey: Schema.NonNegativeInt,
  /** The remote region's address as its descriptor gives it, plus `offset`: the bytes reached. */
  address: Schema.BigIntFromSelf.pipe(Schema.nonNegativeBigInt()),
  offset: Length,
  length: Length,
  /** The bytes a write, atomic write or send carries. */
  bytes: Bytes,
  imm: Schema.optional(Schema.Number),
  /** Whether its success produces a completion on the sending side. */
  signalled: Schema.Boolean
}).annotations({ identifier: "Reach" }).pipe(Schema.filter(carriesItsLength))
export type Reach = typeof Reach.Type

/** The other side's half of an endpoint's send-queue request (run by cmQueuePair.ts's `received`). */
export const CmReach = Schema.Struct({
  op: Schema.Literal("send", "write", "read"),
  rkey: Schema.NonNegativeInt,
  remoteAddress: Schema.BigIntFromSelf.pipe(Schema.nonNegativeBigInt()),
  length: Length,
  bytes: Bytes,
  imm: Schema.UndefinedOr(Schema.Number)
}).annotations({ identifier: "CmReach" }).pipe(Schema.filter(carriesItsLength))
export type CmReach = typeof CmReach.Type

const Result = Schema.Union(Schema.Number, Bytes)

/** What one librdmacm endpoint says to the other, in another process. */
export const CmSays = Schema.Union(
  Schema.Struct({ k: Schema.Literal("unreachable") }), // nobody listens at the address asked for
  Schema.Struct({ k: Schema.Literal("accepted"), privateData: Bytes }),
  Schema.Struct({ k: Schema.Literal("established") }), // the client's answer to "accepted" (the CM's RTU)
  Schema.Struct({ k: Schema.Literal("gone") }), // the client's answer to "accepted" when it gave up or was destroyed meanwhile
  Schema.Struct({ k: Schema.Literal("rejected"), privateData: Schema.UndefinedOr(Bytes), why: Schema.String }),
  Schema.Struct({ k: Schema.Literal("disconnected") }), // rdma_disconnect, or the endpoint destroyed
  Schema.Struct({ k: Schema.Literal("lost") }), // a fault plan's lost connection (LoseConnection): both queue pairs in error
  Schema.Struct({ k: Schema.Literal("post"), reach: CmReach }),
  Schema.Struct({ k: Schema.Literal("settle"), result: Result })
).annotations({ identifier: "CmSays" })
export type CmSays = typeof CmSays.Type

const ConnEvent = Schema.Literal("ESTABLISHED", "CLOSED", "LOST", "REJECTED", "UNREACHABLE", "UNDEFINED")
// Core's list, letter for letter: a value core adds makes this fail to compile.
const sameEvents: [Driver.Model.ConnEvent, typeof ConnEvent.Type] extends
  [typeof ConnEvent.Type, Driver.Model.ConnEvent] ? true : never = true
void sameEvents

/** Between two drivers (routed by `to`), or to and from the serving process (`t` says which). */
export const Message = Schema.Union(
  // Router → a process that has just joined: its number, and the largest frame the network carries.
  Schema.Struct({ t: Schema.Literal("welcome"), self: Schema.Number, maxFrameSize: Schema.Number }),
  // A process claims or gives back a listening address; the router answers a claim with `claimed`.
  Schema.Struct({ t: Schema.Literal("claim"), key: Schema.String, ask: Schema.Number }),
  Schema.Struct({ t: Schema.Literal("claimed"), ask: Schema.Number, ok: Schema.Boolean }),
  Schema.Struct({ t: Schema.Literal("unclaim"), key: Schema.String }),
  // A connection request to whichever process listens at `key` (REJECTED from the router if none).
  Schema.Struct({ t: Schema.Literal("connect"), key: Schema.String, from: Far, privateData: Bytes }),
  // A connection event for `to`; ESTABLISHED carries the accepting side and its private data.
  Schema.Struct({
    t: Schema.Literal("event"),
    to: Far,
    event: ConnEvent,
    from: Schema.optional(Far),
    privateData: Schema.optional(Bytes)
  }),
  // The other side ended the connection: `to` gets its CLOSED or LOST.
  Schema.Struct({ t: Schema.Literal("notify"), to: Far, event: Schema.Literal("CLOSED", "LOST") }),
  // A request reaching the other side's memory, and its answer: a status, or the bytes read.
  Schema.Struct({ t: Schema.Literal("post"), to: Far, from: Far, reach: Reach }),
  Schema.Struct({ t: Schema.Literal("settle"), to: Far, id: Schema.Number, result: Result }),
  // librdmacm's endpoints (cmEndpoints.ts): a request to whichever process listens at `key`, answered
  // by the router with `unreachable` if none; then what the two endpoints say to each other.
  Schema.Struct({
    t: Schema.Literal("cmConnect"),
    key: Schema.String,
    from: Far,
    /** The asking endpoint's own address and port (what the request's remote address is). */
    address: Schema.String,
    port: Schema.Number,
    privateData: Bytes
  }),
  Schema.Struct({ t: Schema.Literal("cm"), to: Far, from: Far, cm: CmSays }),
  // Router → every process: a process left (its socket closed), with the addresses it listened on.
  Schema.Struct({ t: Schema.Literal("gone"), process: Schema.Number, keys: Schema.Array(Schema.String) })
).annotations({ identifier: "Message" })
export type Message = typeof Message.Type

const validate = Schema.validateEither(Message)
/** What is wrong with a decoded frame as a message, or undefined when it is one. */
export const malformed = (value: unknown): string | undefined =>
  Either.match(validate(value), {
    onLeft: (error) => {
      const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]!
      const t = (value as { readonly t?: unknown } | null)?.t
      return `${typeof t === "string" ? `a "${t}"` : "a"} message with ${
        issue.path.length === 0 ? "a wrong shape" : `a wrong ${issue.path.join(".")}`
      }: ${issue.message}`
    },
    onRight: () => undefined
  })

/** Bytes of a frame's header: the body's length, big-endian. */
export const HEADER_SIZE = 4

/**
 * What a frame carries besides a request's bytes (the message's other fields), at most: a
 * request carrying more than the largest frame less this is refused by its sender (IBV_WC_LOC_LEN_ERR).
 */
export const ENVELOPE_SIZE = 4096

/** One message as a frame. */
export const frame = (message: Message): Uint8Array => {
  const body = v8.serialize(message)
  const header = Buffer.allocUnsafe(HEADER_SIZE)
  header.writeUInt32BE(body.byteLength)
  return Buffer.concat([header, body])
}

/** What a reader refuses: a frame announced larger than allowed, or one that does not decode. */
export type Refusal =
  | { readonly reason: "tooLarge"; readonly size: number }
  | { readonly reason: "undecodable"; readonly detail: string }

/**
 * Collects a stream's chunks and calls `onFrame` with each whole frame's decoded body, in
 * order; `onRefused` (after which the reader takes nothing more) with a frame announcing more than
 * `maxFrameSize` bytes, as soon as its header arrives, or one that `v8.deserialize` refuses. Linear in
 * the bytes taken: a frame's chunks are kept as they come and joined once, when the frame is whole.
 */
export const reader = (options: {
  readonly maxFrameSize: number
  readonly onFrame: (body: unknown) => void
  readonly onRefused: (refusal: Refusal) => void
}) => {
  let chunks: Array<Buffer> = []
  let buffered = 0
  /** The body's length once its header is in, else -1. */
  let expected = -1
  let refused = false
  const take = (bytes: number): Buffer => {
    const whole = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, buffered)
    chunks = whole.byteLength > bytes ? [whole.subarray(bytes)] : []
    buffered -= bytes
    return whole.subarray(0, bytes)
  }
  return (chunk: Buffer): void => {
    if (refused) return
    chunks.push(chunk)
    buffered += chunk.byteLength
    while (!refused) {
      if (expected < 0) {
        if (buffered < HEADER_SIZE) return
        expected = take(HEADER_SIZE).readUInt32BE(0)
        if (expected > options.maxFrameSize) {
          refused = true
          chunks = []
          return options.onRefused({ reason: "tooLarge", size: expected })
        }
      }
      if (buffered < expected) return
      const body = take(expected)
      expected = -1
      let decoded: unknown
      try {
        decoded = v8.deserialize(body)
      } catch (error) {
        refused = true
        chunks = []
        return options.onRefused({
          reason: "undecodable",
          detail: error instanceof Error ? error.message : String(error)
        })
      }
      options.onFrame(decoded)
    }
  }
}

/** What the fabric is told about the network it shares. */
export interface Handler {
  readonly message: (message: Message) => void
  /** The serving process is gone (its socket closed): every other process with it. */
  readonly down: () => void
}

/** A process's part of a shared network, as the simulated fabric uses it. */
export interface Link {
  /** This process's number on the network. */
  readonly self: number
  readonly send: (message: Message) => void
  /** Claims a listening address: "taken" when some process already has it, "down" when the network is gone. */
  readonly claim: (key: string) => Promise<"ok" | "taken" | "down">
  /** Where messages for this process go (set once, by the fabric). */
  readonly attach: (handler: Handler) => void
  /** Where the network is, for error messages. */
  readonly path: string
  /** The most bytes one request may carry across (the network's largest frame less its envelope). */
  readonly maxMessageSize: number
}

/**
 * One link shared by several parts of a fabric (its connections, its librdmacm
 * endpoints): each attaches a handler, and every message goes to each (each ignores what is not its
 * own). `start` attaches them all to the link, once every part is made (early messages replay then).
 */
export const fanOut = (link: Link): { readonly link: Link; readonly start: () => void } => {
  const handlers: Array<Handler> = []
  return {
    link: {
      get self() {
        return link.self
      },
      path: link.path,
      get maxMessageSize() {
        return link.maxMessageSize
      },
      send: link.send,
      claim: link.claim,
      attach: (handler) => void handlers.push(handler)
    },
    start: () =>
      link.attach({
        message: (message) => {
          for (const handler of handlers) handler.message(message)
        },
        down: () => {
          for (const handler of handlers) handler.down()
        }
      })
  }
}
