/**
 * The state of a simulated RDMA world: devices by address, live handles, call counters and the
 * faults planned for them. Kept apart from the Driver methods so that the rules read in one place.
 */
import type * as Driver from "@effect-rdma/core/Driver"
import type * as SimulatedDriver from "../SimulatedDriver.js"

/** Every native call the simulated driver answers, by its C name. */
export type Operation = SimulatedDriver.Operation

/** The posting calls of librdmacm's verbs API, one per work request's `op`. */
export type CmPostOperation = "rdma_post_send" | "rdma_post_recv" | "rdma_post_read" | "rdma_post_write"

export type Kind =
  | "IbvContext"
  | "Peer"
  | "MrLocal"
  | "MrRemote"
  | "CmMr"
  | "Endpoint"
  | "ConnReq"
  | "Conn"
  | "Srq"
  | "CmEp"
  | "CmListener"

/** A simulated native object. `alive` turns false when its C counterpart would be freed. */
export interface SimHandle<K extends Kind = Kind> {
  readonly kind: K
  readonly id: number
  alive: boolean
}

export interface IbvContext extends SimHandle<"IbvContext"> {
  readonly address: string
}
export interface Peer extends SimHandle<"Peer"> {
  readonly context: IbvContext
  readonly regions: Set<MrLocal>
}
export interface MrLocal extends SimHandle<"MrLocal"> {
  readonly peer: Peer
  readonly memory: Uint8Array
  readonly address: bigint
  readonly rkey: number
  readonly usage: number
  /** Posted requests naming it whose completion has not been returned (nor their connection deleted). */
  inFlight: number
}
export interface MrRemote extends SimHandle<"MrRemote"> {
  readonly address: bigint
  readonly length: bigint
  readonly rkey: number
  readonly usage: number
}
export interface CmMr extends SimHandle<"CmMr"> {
  /** The endpoint (an rdma_cm id with a queue pair) whose protection domain it is registered on. */
  readonly cmId: CmEp
  /** Which rdma_reg_* call made it: what a remote read or write may do with it. */
  readonly access: Driver.Model.CmRegistrationKind
  readonly memory: Uint8Array
  readonly address: bigint
  readonly lkey: number
  readonly rkey: number
}

/**
 * An endpoint of librdmacm's verbs API (an rdma_cm id with a queue pair and a protection
 * domain of its own); its connection state and queue pair live in cmEndpoints.ts.
 */
export interface CmEp extends SimHandle<"CmEp"> {
  readonly regions: Set<CmMr>
  readonly localAddress: string
  readonly localPort: number
  readonly remoteAddress: string
  readonly remotePort: number
  /** The listener that handed it out (the passive side), or nothing (the active side). */
  readonly listener: CmListener | undefined
}
/** A listening rdma_cm id (rdma_listen). */
export interface CmListener extends SimHandle<"CmListener"> {
  readonly address: string
  readonly port: number
  readonly config: Driver.Model.CmEpConfig
  /** The endpoints it handed out that are still alive: it is destroyed after them. */
  readonly requests: Set<CmEp>
}

export interface Endpoint extends SimHandle<"Endpoint"> {
  readonly peer: Peer
  readonly address: string
  readonly port: number
}
export interface ConnReq extends SimHandle<"ConnReq"> {
  readonly peer: Peer
  readonly config: Driver.Model.ConnConfig
  readonly address: string
  readonly port: number
  /** For an incoming request: the client's connection, waiting for the answer, and its private data. */
  readonly client: Conn | undefined
  readonly privateData: Uint8Array
}
export interface Conn extends SimHandle<"Conn"> {
  readonly peer: Peer
  readonly config: Driver.Model.ConnConfig
  other: Conn | undefined
  /** "connecting" until ESTABLISHED; "error" after a failed request (every later one is flushed). */
  state: "connecting" | "established" | "error" | "closed"
  /** Whether this side has had its CLOSED or LOST event: each side gets exactly one. */
  notified: boolean
  /** Whether this side has called rdma_disconnect: it notifies the other side once, a second call nothing. */
  disconnected: boolean
  privateData: Uint8Array
  /**
   * Set on a stand-in for a connection of another process sharing the network (never in the
   * ledger): what reaches it becomes a message to that process.
   */
  readonly far?: { readonly process: number; readonly conn: number } | undefined
}

/** A shared receive queue, with its own receive CQ. */
export interface Srq extends SimHandle<"Srq"> {
  readonly peer: Peer
  readonly config: Driver.Model.SrqConfig
}

export type AnyHandle =
  | IbvContext
  | Peer
  | MrLocal
  | MrRemote
  | CmMr
  | Endpoint
  | ConnReq
  | Conn
  | Srq
  | CmEp
  | CmListener

/** What is still alive, and where it was acquired. */
export interface LedgerEntry {
  readonly kind: Exclude<Kind, "IbvContext">
  readonly id: number
  readonly description: string
  /** The spans the handle was acquired in, outermost first (computed when read). */
  readonly acquiredIn: string
}

/** The operations that post work requests. */
export type DataOperation = SimulatedDriver.DataOperation

/** A planned failure (documented in SimulatedDriver). */
export type Fault = SimulatedDriver.Fault

export interface Fabric {
  readonly devices: ReadonlySet<string>
  readonly ledger: Map<SimHandle, LedgerEntry>
  readonly calls: Map<Operation, number>
  readonly faults: Array<{ readonly at: number; readonly fault: Fault }>
  nextId: number
  nextKey: number
}

/** The address the simulated device answers on unless told otherwise (SimulatedDriver.DEFAULT_ADDRESS). */
export const DEFAULT_ADDRESS = "192.168.77.1"

export const makeFabric = (devices: Iterable<string>): Fabric => ({
  devices: new Set(devices),
  ledger: new Map(),
  calls: new Map(),
  faults: [],
  nextId: 1,
  // Keys look like hardware's: 32-bit, not small sequential numbers.
  nextKey: 0x1a2b3
})

/** Counts a call and returns the failure planned for it, if any. */
export const countCall = (fabric: Fabric, operation: Operation): Fault | undefined => {
  const n = (fabric.calls.get(operation) ?? 0) + 1
  fabric.calls.set(operation, n)
  const index = fabric.faults.findIndex((f) => f.fault.operation === operation && f.at === n)
  if (index === -1) return undefined
  return fabric.faults.splice(index, 1)[0]!.fault
}

export const planFault = (fabric: Fabric, fault: Fault): void => {
  fabric.faults.push({ at: (fabric.calls.get(fault.operation) ?? 0) + fault.nth, fault })
}

/** A fresh rkey / lkey: distinct, non-zero, spread over 32 bits. */
export const nextKey = (fabric: Fabric): number => {
  fabric.nextKey = (Math.imul(fabric.nextKey, 0x9e3779b1) + 0x7f4a7c15) >>> 0
  return fabric.nextKey === 0 ? 1 : fabric.nextKey
}

// Plausible user-space addresses: every ArrayBuffer gets its own page-aligned range, stable for its life.
const bases = new WeakMap<ArrayBufferLike, bigint>()
let nextBase = 0x7f3a_0000_0000n

/** The simulated virtual address of a view's first byte. */
export const addressOf = (memory: Uint8Array): bigint => {
  let base = bases.get(memory.buffer)
  if (base === undefined) {
    base = nextBase
    const pages = BigInt(Math.ceil(Math.max(memory.buffer.byteLength, 1) / 4096)) + 1n
    nextBase += pages * 4096n
    bases.set(memory.buffer, base)
  }
  return base + BigInt(memory.byteOffset)
}

/** Drivers receive handles as opaque values; this recovers ours, or nothing. */
export const asHandle = <K extends Kind>(
  value: unknown,
  kind: K
): Extract<AnyHandle, SimHandle<K>> | undefined =>
  typeof value === "object" && value !== null && handles.has(value) && (value as SimHandle).kind === kind
    ? value as any
    : undefined

const handles = new WeakSet<object>()

export const track = <H extends SimHandle>(handle: H): H & Driver.Model.Handle<H["kind"]> => {
  handles.add(handle)
  return handle as H & Driver.Model.Handle<H["kind"]>
}
