/**
 * What the processes sharing one simulated network say to each other, and how it travels: frames
 * of `v8.serialize`d messages (Uint8Array and bigint survive it as they are), each preceded by its
 * length, over a Unix socket to the process that serves the network, which routes them.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as v8 from "node:v8"

/** A connection in another process: what messages about it are addressed to. */
export interface Far {
  readonly process: number
  readonly conn: number
}

/**
 * The other side's half of a work request, as plain data: what it does to that side's
 * memory (a write, read or flush through an rkey) or to its receives (a send, a write's immediate data).
 */
export interface Reach {
  readonly op: "write" | "atomicWrite" | "read" | "flush" | "send"
  readonly id: number
  readonly rkey: number
  /** The remote region's address as its descriptor gives it, plus `offset`: the bytes reached. */
  readonly address: bigint
  readonly offset: number
  readonly length: number
  /** The bytes a write, atomic write or send carries. */
  readonly bytes: Uint8Array
  readonly imm?: number | undefined
  /** Whether its success produces a completion on the sending side. */
  readonly signalled: boolean
}

/** Between two drivers (routed by `to`), or to and from the serving process (`t` says which). */
export type Message =
  // Router → a process that has just joined: its number.
  | { readonly t: "welcome"; readonly self: number }
  // A process claims or gives back a listening address; the router answers a claim with `claimed`.
  | { readonly t: "claim"; readonly key: string; readonly ask: number }
  | { readonly t: "claimed"; readonly ask: number; readonly ok: boolean }
  | { readonly t: "unclaim"; readonly key: string }
  // A connection request to whichever process listens at `key` (REJECTED from the router if none).
  | { readonly t: "connect"; readonly key: string; readonly from: Far; readonly privateData: Uint8Array }
  // A connection event for `to`; ESTABLISHED carries the accepting side and its private data.
  | {
    readonly t: "event"
    readonly to: Far
    readonly event: Driver.Model.ConnEvent
    readonly from?: Far | undefined
    readonly privateData?: Uint8Array | undefined
  }
  // The other side ended the connection: `to` gets its CLOSED or LOST.
  | { readonly t: "notify"; readonly to: Far; readonly event: "CLOSED" | "LOST" }
  // A request reaching the other side's memory, and its answer: a status, or the bytes read.
  | { readonly t: "post"; readonly to: Far; readonly from: Far; readonly reach: Reach }
  | { readonly t: "settle"; readonly to: Far; readonly id: number; readonly result: number | Uint8Array }
  // librdmacm's endpoints (cmEndpoints.ts): a request to whichever process listens at `key`, answered
  // by the router with `unreachable` if none; then what the two endpoints say to each other.
  | {
    readonly t: "cmConnect"
    readonly key: string
    readonly from: Far
    /** The asking endpoint's own address and port (what the request's remote address is). */
    readonly address: string
    readonly port: number
    readonly privateData: Uint8Array
  }
  | { readonly t: "cm"; readonly to: Far; readonly from: Far; readonly cm: CmSays }
  // Router → every process: a process left (its socket closed), with the addresses it listened on.
  | { readonly t: "gone"; readonly process: number; readonly keys: ReadonlyArray<string> }

/** What one librdmacm endpoint says to the other, in another process. */
export type CmSays =
  | { readonly k: "unreachable" } // nobody listens at the address asked for
  | { readonly k: "accepted"; readonly privateData: Uint8Array }
  | { readonly k: "established" } // the client's answer to "accepted" (the CM's RTU)
  | { readonly k: "gone" } // the client's answer to "accepted" when it gave up or was destroyed meanwhile
  | { readonly k: "rejected"; readonly privateData: Uint8Array | undefined; readonly why: string }
  | { readonly k: "disconnected" } // rdma_disconnect, or the endpoint destroyed
  | { readonly k: "lost" } // a fault plan's lost connection (LoseConnection): both queue pairs in error
  | { readonly k: "post"; readonly reach: CmReach }
  | { readonly k: "settle"; readonly result: number | Uint8Array }

/** The other side's half of an endpoint's send-queue request (run by cmQueuePair.ts's `received`). */
export interface CmReach {
  readonly op: "send" | "write" | "read"
  readonly rkey: number
  readonly remoteAddress: bigint
  readonly length: number
  readonly bytes: Uint8Array
  readonly imm: number | undefined
}

/** One message as a frame. */
export const frame = (message: Message): Uint8Array => {
  const body = v8.serialize(message)
  const header = Buffer.allocUnsafe(4)
  header.writeUInt32BE(body.byteLength)
  return Buffer.concat([header, body])
}

/** Collects a stream's chunks and calls `onMessage` with each whole message, in order. */
export const reader = (onMessage: (message: Message) => void) => {
  let pending: Buffer = Buffer.alloc(0)
  return (chunk: Buffer): void => {
    pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk])
    while (pending.byteLength >= 4) {
      const length = pending.readUInt32BE(0)
      if (pending.byteLength < 4 + length) return
      const body = pending.subarray(4, 4 + length)
      pending = pending.subarray(4 + length)
      onMessage(v8.deserialize(body) as Message)
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
