/**
 * Input validation as part of the conformance suite: one table of bad inputs (memory kinds, usages,
 * sizes, ports, queue sizes, timeouts, private data, descriptors, configurations), each with the
 * tagged error every driver must give. The rows are grouped into a few cases so that each group
 * shares one peer (and, for connection inputs, one endpoint).
 */
import { Descriptor, LocalMr, RemoteMr } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { tagOf } from "./support.js"
// Issue 20: librdmacm's verbs API.
import { cmEndpointRows } from "./cmEndpointValidation.js"

type Bad = never

/** One bad input: what it is, the call that receives it, and the tag every driver must fail with. */
export interface Row {
  readonly input: string
  readonly call: (ctx: Context) => Effect.Effect<unknown, unknown, Driver.RdmaDriver | Scope.Scope>
  readonly tag: string
}

interface Context {
  readonly driver: Driver.Driver
  readonly address: string
  readonly port: number
  readonly peer: Driver.Model.PeerHandle
}

const INVAL = "RpmaInvalidError"

const throwing = () =>
  new Proxy({}, {
    get() {
      throw new Error("hostile getter")
    }
  })

const resizable = (): Uint8Array => new Uint8Array(new (ArrayBuffer as any)(4096, { maxByteLength: 8192 }))
const detached = (): Uint8Array => {
  const bytes = new Uint8Array(4096)
  structuredClone(bytes.buffer, { transfer: [bytes.buffer] })
  return bytes
}
const good: Driver.Model.ConnConfig = { timeoutMs: 1000, sqSize: 8, rqSize: 8, cqSize: 16, directWriteToPmem: false }
const descriptor = Descriptor.encode({ address: 0x7f0000001000n, length: 4096n, rkey: 0x1234, usage: 0x11 })

const memoryKinds: ReadonlyArray<readonly [string, () => unknown]> = [
  ["SharedArrayBuffer-backed", () => new Uint8Array(new SharedArrayBuffer(4096))],
  ["resizable ArrayBuffer", resizable],
  ["detached", detached],
  ["a Proxy of a Uint8Array", () => new Proxy(new Uint8Array(4096), {})],
  ["a throwing Proxy", throwing],
  ["size 0", () => new Uint8Array(0)],
  ["null", () => null],
  ["a number", () => 4096]
]

const usages: ReadonlyArray<unknown> = [0, 0x100, -1, 1.5, Number.NaN, 1n, null, "1", {}]
const sizes: ReadonlyArray<unknown> = [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, "8", 8n, null]
const ports: ReadonlyArray<unknown> = [0, -1, 65536, 70000, 1.5, Number.NaN, 1e300, "7471", null]
const configs: ReadonlyArray<readonly [string, () => unknown]> = [
  ["null", () => null],
  ["a throwing Proxy", throwing],
  ["sqSize -1", () => ({ ...good, sqSize: -1 })],
  ["sqSize NaN", () => ({ ...good, sqSize: Number.NaN })],
  ["sqSize 2^32", () => ({ ...good, sqSize: 2 ** 32 })],
  ["rqSize 1.5", () => ({ ...good, rqSize: 1.5 })],
  ["cqSize \"16\"", () => ({ ...good, cqSize: "16" })],
  ["timeoutMs -1", () => ({ ...good, timeoutMs: -1 })],
  ["timeoutMs NaN", () => ({ ...good, timeoutMs: Number.NaN })],
  ["timeoutMs 2^31", () => ({ ...good, timeoutMs: 2 ** 31 })],
  ["directWriteToPmem \"yes\"", () => ({ ...good, directWriteToPmem: "yes" })],
  [
    "a getter that throws",
    () => ({
      ...good,
      get cqSize() {
        throw new Error("hostile getter")
      }
    })
  ]
]

/**
 * The table.
 */
export const rows: ReadonlyArray<Row> = [
  ...memoryKinds.map(([input, make]): Row => ({
    input: `rpma_mr_reg memory: ${input}`,
    call: ({ driver, peer }) => driver.mrReg(peer, make() as Bad, 0x01),
    tag: INVAL
  })),
  ...memoryKinds.map(([input, make]): Row => ({
    input: `LocalMr.register memory: ${input}`,
    call: ({ address, peer }) => LocalMr.register({ handle: peer, address } as Bad, make() as Bad, 0x01 as Bad),
    tag: input === "size 0" ? INVAL : "MemoryRefusedError"
  })),
  {
    input: "LocalMr.register memory: a pooled Buffer slice",
    call: ({ address, peer }) =>
      LocalMr.register({ handle: peer, address } as Bad, Buffer.allocUnsafe(100), 0x01 as Bad),
    tag: "MemoryRefusedError"
  },
  {
    input: "LocalMr.register memory: a plain Uint8Array view of pool bytes",
    call: ({ address, peer }) => {
      const pooled = Buffer.allocUnsafe(100)
      return LocalMr.register(
        { handle: peer, address } as Bad,
        new Uint8Array(pooled.buffer, pooled.byteOffset, 100),
        0x01 as Bad
      )
    },
    tag: "MemoryRefusedError"
  },
  ...usages.map((usage): Row => ({
    input: `rpma_mr_reg usage: ${describe(usage)}`,
    call: ({ driver, peer }) => driver.mrReg(peer, new Uint8Array(4096), usage as Bad),
    tag: INVAL
  })),
  ...sizes.map((size): Row => ({
    input: `allocate size: ${describe(size)}`,
    call: ({ driver }) => driver.allocate(size as Bad),
    tag: INVAL
  })),
  ...ports.map((port): Row => ({
    input: `rpma_ep_listen port: ${describe(port)}`,
    call: ({ address, driver, peer }) => driver.epListen(peer, address, port as Bad),
    tag: INVAL
  })),
  ...ports.map((port): Row => ({
    input: `rpma_conn_req_new port: ${describe(port)}`,
    call: ({ address, driver, peer }) => driver.connReqNew(peer, address, port as Bad, good),
    tag: INVAL
  })),
  ...[null, 42, {}].map((address): Row => ({
    input: `rpma_ep_listen address: ${describe(address)}`,
    call: ({ driver, peer, port }) => driver.epListen(peer, address as Bad, port),
    tag: INVAL
  })),
  ...configs.map(([input, make]): Row => ({
    input: `rpma_conn_req_new cfg: ${input}`,
    call: ({ address, driver, peer, port }) => driver.connReqNew(peer, address, port, make() as Bad),
    tag: INVAL
  })),
  ...configs.map(([input, make]): Row => ({
    input: `rpma_ep_next_conn_req cfg: ${input}`,
    call: ({ address, driver, peer, port }) =>
      Effect.flatMap(
        Effect.acquireRelease(driver.epListen(peer, address, port), (ep) => Effect.ignore(driver.epShutdown(ep))),
        (ep) => driver.epNextConnReq(ep, make() as Bad)
      ),
    tag: INVAL
  })),
  {
    // Issue 19: with a queue made with rcqSize 0 (librpma's 08srq mode r) the same cfg is accepted.
    input: "rpma_conn_req_new cfg: a shared completion channel with a shared receive queue that has its own " +
      "receive CQ (librpma: \"connection shared completion channel cannot be used when the shared RQ has its own RCQ\")",
    call: ({ address, driver, peer, port }) =>
      Effect.gen(function*() {
        yield* Effect.acquireRelease(driver.epListen(peer, address, port), (ep) => Effect.ignore(driver.epShutdown(ep)))
        const srq = yield* Effect.acquireRelease(driver.srqNew(peer, { rqSize: 4, rcqSize: 4 }), (q) =>
          Effect.ignore(driver.srqDelete(q)))
        return yield* Effect.acquireRelease(
          driver.connReqNew(peer, address, port, { ...good, cqSize: 8, srq, sharedCompletionChannel: true }),
          (req) =>
            Effect.ignore(driver.connReqDelete(req))
        )
      }),
    tag: INVAL
  },
  ...[
    ["256 bytes", new Uint8Array(256)],
    ["57 bytes (RoCE takes 56 with a request)", new Uint8Array(57)],
    ["a string", "hello"],
    ["a Proxy", new Proxy(new Uint8Array(8), {})],
    [
      "a SharedArrayBuffer view of 300 bytes",
      new Uint8Array(new SharedArrayBuffer(300))
    ]
  ].map(([input, data]): Row => ({
    input: `rpma_conn_req_connect private data: ${String(input)}`,
    call: ({ address, driver, peer, port }) =>
      Effect.gen(function*() {
        yield* Effect.acquireRelease(driver.epListen(peer, address, port), (ep) => Effect.ignore(driver.epShutdown(ep)))
        const req = yield* Effect.acquireRelease(
          driver.connReqNew(peer, address, port, good),
          (req) => Effect.ignore(driver.connReqDelete(req))
        )
        return yield* driver.connReqConnect(req, data as Bad)
      }),
    tag: INVAL
  })),
  ...[["null", null], ["a Proxy", new Proxy(descriptor, {})], ["20 bytes", descriptor.subarray(0, 20)], [
    "a string",
    "descriptor"
  ]].map(([input, bytes]): Row => ({
    input: `rpma_mr_remote_from_descriptor: ${String(input)}`,
    call: ({ driver }) =>
      Effect.acquireRelease(
        driver.mrRemoteFromDescriptor(bytes as Bad),
        (r) => Effect.ignore(driver.mrRemoteDelete(r))
      ),
    tag: INVAL
  })),
  ...[["a Proxy", new Proxy(descriptor, {})], ["a throwing Proxy", throwing()], ["a number", 21]].map((
    [input, bytes]
  ): Row => ({
    input: `RemoteMr.fromDescriptor: ${String(input)}`,
    call: () => RemoteMr.fromDescriptor(bytes as Bad),
    tag: "InvalidDescriptorError"
  })),
  ...[["a throwing Proxy", throwing()], ["an unknown op", { op: "erase", id: 1 }], ["a throwing id", {
    op: "write",
    get id() {
      throw new Error("hostile getter")
    }
  }]].map(([input, request]): Row => ({
    input: `post work request: ${String(input)}`,
    call: ({ driver }) => posting(driver, {} as Bad, request as Bad),
    tag: INVAL
  })),
  ...(["shared receive queue", "connection request"] as const).map((queue): Row => ({
    // A real region, so that only the queue's kind refuses the send.
    input: `post on a ${queue}: a send (receives only)`,
    call: ({ address, driver, peer, port }) =>
      Effect.gen(function*() {
        const target: Driver.Model.PostQueue = queue === "shared receive queue"
          ? yield* Effect.acquireRelease(
            driver.srqNew(peer, { rqSize: 4, rcqSize: 4 }),
            (srq) => Effect.ignore(driver.srqDelete(srq))
          )
          : yield* Effect.zipRight(
            Effect.acquireRelease(driver.epListen(peer, address, port), (ep) => Effect.ignore(driver.epShutdown(ep))),
            Effect.acquireRelease(driver.connReqNew(peer, address, port, good), (req) =>
              Effect.ignore(driver.connReqDelete(req)))
          )
        const src = yield* Effect.acquireRelease(
          Effect.map(driver.mrReg(peer, new Uint8Array(64), 0x40), (r) =>
            r.handle),
          (mr) => Effect.ignore(driver.mrDereg(mr))
        )
        return yield* posting(driver, target, { op: "send", id: 1, src, offset: 0, length: 8 })
      }),
    tag: INVAL
  })),
  ...cmEndpointRows
]

/** Driver.postMany of one request, its refusal as the Effect's failure. */
const posting = (driver: Driver.Driver, queue: Driver.Model.PostQueue, request: Driver.Model.WorkRequest) =>
  Effect.suspend(() => {
    const outcome = driver.postMany(queue, [request])
    return outcome.error !== undefined ? Effect.fail(outcome.error) : Effect.void
  })

function describe(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "object" && value !== null) return "an object"
  return String(value)
}

const outcome = (effect: Effect.Effect<unknown, unknown, Driver.RdmaDriver | Scope.Scope>) =>
  Effect.map(Effect.exit(Effect.scoped(effect)), tagOf)

/**
 * Runs every row on the driver in context and lists the rows whose outcome differs from the table.
 */
export const mismatches = (address: string, port: number, table: ReadonlyArray<Row> = rows) =>
  Effect.gen(function*() {
    const driver = yield* Driver.RdmaDriver
    const peer = yield* Effect.acquireRelease(
      Effect.flatMap(driver.getIbvContext(address, "local"), driver.peerNew),
      (p) => Effect.ignore(driver.peerDelete(p))
    )
    const wrong: Array<string> = []
    for (const row of table) {
      const actual = yield* outcome(Effect.suspend(() => row.call({ driver, address, port, peer })))
      if (actual !== row.tag) wrong.push(`${row.input}: expected ${row.tag}, got ${actual}`)
    }
    return wrong
  })

/**
 * The table as one conformance case.
 */
export const cases = [
  {
    name: `input validation: ${rows.length} bad inputs (memory kinds, usages, sizes, ports, configs, timeouts, ` +
      `private data, descriptors, work requests), the same tagged error on every driver`,
    run: (address: string, port: number) =>
      Effect.flatMap(
        mismatches(address, port),
        (wrong) =>
          wrong.length === 0
            ? Effect.void
            : Effect.die(new Error(`inputs the driver handled differently:\n${wrong.join("\n")}`))
      )
  }
]
