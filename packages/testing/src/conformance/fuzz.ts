/**
 * Random and hostile values fed to every Driver method and to core's public functions that take
 * values from outside (fast-check, through effect/FastCheck). A run fails on a defect, on a call
 * that does not end (a wait on a real handle may legitimately wait: those are bounded and
 * interrupted), on a throw from a function documented never to throw, and on a native object left
 * alive when the run's scope has closed.
 */
import { CmEndpoint, Descriptor, LocalMr, Memory, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { constants as bufferConstants } from "node:buffer"

type Bad = never

const throwingProxy = () =>
  new Proxy({}, {
    get() {
      throw new Error("hostile getter")
    },
    getPrototypeOf() {
      throw new Error("hostile getPrototypeOf")
    }
  })

/** Values no caller should pass, and some every caller passes. */
const hostile: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(
    null,
    undefined,
    0,
    -0,
    -1,
    1,
    21,
    4096,
    65535,
    65536,
    2 ** 31,
    2 ** 32,
    2 ** 53,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    1.5,
    1e300,
    0n,
    1n,
    -1n,
    "",
    "127.0.0.1",
    "192.0.2.99",
    "__proto__",
    true,
    false,
    () => {},
    [],
    {},
    "write",
    "msgs",
    "local",
    "remote"
  ),
  fc.integer(),
  fc.double(),
  fc.bigInt(),
  fc.string(),
  fc.uint8Array({ maxLength: 64 }),
  // Exotic values are made at call time: fast-check could not print them in a report.
  fc.constantFrom("throwing proxy", "uint8 proxy", "shared", "resizable", "pooled", "detached", "symbol").map((
    exotic
  ) => ({
    exotic
  })),
  fc.record({
    timeoutMs: fc.oneof(fc.integer(), fc.double()),
    sqSize: fc.oneof(fc.integer(), fc.double()),
    rqSize: fc.integer(),
    cqSize: fc.integer(),
    directWriteToPmem: fc.oneof(fc.boolean(), fc.constant("yes"))
  }),
  fc.record({
    op: fc.constantFrom("write", "read", "flush", "atomicWrite", "send", "recv", "erase"),
    id: fc.oneof(fc.integer(), fc.constant("x")),
    dstOffset: fc.integer(),
    srcOffset: fc.integer(),
    offset: fc.integer(),
    length: fc.integer(),
    type: fc.constantFrom("visibility", "persistent", "other")
  })
)

/**
 * A size the driver would really allocate and zero, above 64 MiB: skipped. Such memory goes back
 * only when its ArrayBuffer is collected, so a few of them (fc.integer() reaches 2 GiB) fill a
 * small VM and the kernel kills the test process (seen: 2.8 GiB resident in a 3 GiB VM). Sizes the
 * driver refuses (negative, fractional, beyond a Uint8Array's limit) are still tried.
 */
const costly = (size: unknown): boolean =>
  typeof size === "number" && Number.isInteger(size) && size > 64 * 1024 * 1024 && size <= bufferConstants.MAX_LENGTH

/** The Driver's methods, each with how many arguments it takes. */
const METHODS: ReadonlyArray<readonly [keyof Driver.Driver, number]> = [
  ["getIbvContext", 2],
  ["peerNew", 1],
  ["peerDelete", 1],
  ["mrReg", 3],
  ["mrDereg", 1],
  ["mrGetDescriptorSize", 1],
  ["mrGetDescriptor", 1],
  ["mrGetPtr", 1],
  ["mrGetSize", 1],
  ["mrRemoteFromDescriptor", 1],
  ["mrRemoteDelete", 1],
  ["mrRemoteGetSize", 1],
  ["mrRemoteGetFlushType", 1],
  ["cmEpCreate", 3],
  ["cmEpDestroy", 1],
  ["cmReg", 3],
  ["cmDeregMr", 1],
  ["cmMrInfo", 1],
  ["allocate", 1],
  ["epListen", 3],
  ["epShutdown", 1],
  ["epNextConnReq", 2],
  ["connReqNew", 4],
  ["connReqPrivateData", 1],
  ["connReqConnect", 2],
  ["connReqDelete", 1],
  ["connNextEvent", 1],
  ["connPrivateData", 1],
  ["connDisconnect", 1],
  ["connDelete", 1],
  ["postMany", 2],
  ["pollCompletions", 1]
]

/** An rdma_cm endpoint's settings, for the one the run makes. */
const CM_CONFIG: Driver.Model.CmEpConfig = {
  timeoutMs: 2000,
  maxSendWr: 4,
  maxRecvWr: 4,
  maxSendSge: 1,
  maxRecvSge: 1,
  maxInlineData: 0
}

/** Methods that wait for the other side: on a real handle they may legitimately not end. */
const WAITS = new Set<string>(["epNextConnReq", "connNextEvent", "getIbvContext", "cmEpCreate", "connReqNew"])

/** How to release what a method returned, so that a run leaves nothing alive. */
const RELEASE: Partial<Record<keyof Driver.Driver, keyof Driver.Driver>> = {
  peerNew: "peerDelete",
  mrReg: "mrDereg",
  mrRemoteFromDescriptor: "mrRemoteDelete",
  cmEpCreate: "cmEpDestroy",
  cmReg: "cmDeregMr",
  epListen: "epShutdown",
  epNextConnReq: "connReqDelete",
  connReqNew: "connReqDelete",
  connReqConnect: "connDelete"
}

/** A step: call a method with arguments, each a hostile value or one of the run's real handles. */
const step = fc.record({
  method: fc.constantFrom(...METHODS),
  args: fc.array(
    fc.oneof({ weight: 3, arbitrary: hostile }, { weight: 2, arbitrary: fc.nat(7).map((i) => ({ handle: i })) }),
    {
      minLength: 4,
      maxLength: 4
    }
  )
})

const materialize = (value: unknown): unknown => {
  if (typeof value !== "object" || value === null || !("exotic" in value)) return value
  switch ((value as { exotic: string }).exotic) {
    case "throwing proxy":
      return throwingProxy()
    case "uint8 proxy":
      return new Proxy(new Uint8Array(21), {})
    case "shared":
      return new Uint8Array(new SharedArrayBuffer(64))
    case "resizable":
      return new Uint8Array(new (ArrayBuffer as any)(64, { maxByteLength: 128 }))
    case "pooled":
      return Buffer.allocUnsafe(32)
    case "detached": {
      const bytes = new Uint8Array(64)
      structuredClone(bytes.buffer, { transfer: [bytes.buffer] })
      return bytes
    }
    default:
      return Symbol("hostile")
  }
}

const isHandleRef = (value: unknown): value is { handle: number } =>
  typeof value === "object" && value !== null && !Array.isArray(value) && Object.keys(value).length === 1 &&
  typeof (value as { handle?: unknown }).handle === "number"

/** Core's functions that promise never to throw, given anything. */
const total = (value: unknown): void => {
  Descriptor.validate(value as Bad)
  Descriptor.validate(value as Bad, { lenient: true })
  Usage.validate(value)
  Usage.format(value as Bad)
  Usage.flags(value as Bad)
  Memory.validate(value)
  Memory.isDetached(value as Bad)
  Memory.isPoolSlice(value as Bad)
  Arguments.memory(value)
  Arguments.usage(value)
  Arguments.port(value)
  Arguments.address(value)
  Arguments.connConfig(value)
  Arguments.privateData(value, "accept")
  Arguments.privateData(value, "connect")
  Arguments.allocationSize(value)
  Arguments.workRequest(value)
}

const problem = (what: string, exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause) && Cause.isDie(exit.cause)
    ? `${what}: defect ${Cause.pretty(exit.cause).split("\n").slice(0, 3).join(" | ")}`
    : undefined

/**
 * One run: real handles made where the driver can (a peer, a region, a remote region, an rdma_cm
 * endpoint and region, a librpma endpoint), then `steps` random calls, each bounded in time, then the scope
 * closes and the driver must hold nothing.
 */
const run = (
  address: string,
  port: number,
  device: boolean,
  steps: ReadonlyArray<fc.RecordValue<{ method: readonly [keyof Driver.Driver, number]; args: Array<unknown> }>>,
  callMillis: number
) =>
  Effect.gen(function*() {
    const driver = yield* Driver.RdmaDriver
    const made: Array<readonly [keyof Driver.Driver, unknown]> = []
    yield* Effect.addFinalizer(() =>
      Effect.forEach(made.slice().reverse(), ([method, handle]) =>
        Effect.ignore((driver[RELEASE[method]!] as (h: unknown) => Effect.Effect<unknown, unknown>)(handle)), {
        discard: true
      })
    )
    // What a call made, kept for its release: mrReg answers with the handle and the region's address.
    const keep = (method: keyof Driver.Driver) => (result: unknown) => {
      if (RELEASE[method] !== undefined) {
        made.push([method, method === "mrReg" ? (result as Driver.Model.MrRegistration).handle : result])
      }
      return result
    }
    const attempt = <A>(method: keyof Driver.Driver, effect: Effect.Effect<A, unknown>) =>
      Effect.option(Effect.map(effect, keep(method)))
    const context = device ? yield* Effect.option(driver.getIbvContext(address, "local")) : Option.none()
    const peer = Option.isSome(context) ? yield* attempt("peerNew", driver.peerNew(context.value)) : Option.none()
    const handles: Array<unknown> = [Option.getOrUndefined(context), Option.getOrUndefined(peer)]
    if (Option.isSome(peer)) {
      const region = yield* attempt("mrReg", driver.mrReg(peer.value as Bad, new Uint8Array(4096), 0xff))
      handles.push(Option.getOrUndefined(Option.map(region, (r) =>
        (r as Driver.Model.MrRegistration).handle)))
      handles.push(Option.getOrUndefined(yield* attempt("epListen", driver.epListen(peer.value as Bad, address, port))))
    }
    handles.push(Option.getOrUndefined(
      yield* attempt(
        "mrRemoteFromDescriptor",
        driver.mrRemoteFromDescriptor(
          Descriptor.encode({ address: 0x10000n, length: 4096n, rkey: 1, usage: 0x11 })
        )
      )
    ))
    const cmEp = device ? yield* attempt("cmEpCreate", driver.cmEpCreate(address, port, CM_CONFIG)) : Option.none()
    handles.push(Option.getOrUndefined(cmEp))
    if (Option.isSome(cmEp)) {
      handles.push(
        Option.getOrUndefined(yield* attempt("cmReg", driver.cmReg(cmEp.value as Bad, "msgs", new Uint8Array(256))))
      )
    }
    const endpoint = device ? yield* Effect.option(CmEndpoint.make(address, port)) : Option.none()
    const problems: Array<string> = []
    for (const { args, method: [method, arity] } of steps) {
      const values = args.slice(0, arity).map((a) =>
        isHandleRef(a) ? handles[a.handle % handles.length] : materialize(a)
      )
      if (method === "allocate" && costly(values[0])) continue
      try {
        total(values[0])
      } catch (error) {
        problems.push(`a total function threw on ${String(typeof values[0])}: ${String(error)}`)
      }
      // postMany answers synchronously; the others are Effects.
      const call = Effect.suspend(() => {
        const result = (driver[method] as (...a: Array<unknown>) => unknown)(...values)
        return Effect.isEffect(result) ? result as Effect.Effect<unknown, unknown> : Effect.succeed(result)
      })
      const exit = yield* Effect.exit(
        Effect.map(call, keep(method)).pipe(
          Effect.timeoutFail({ duration: callMillis, onTimeout: () => "timeout" as const })
        )
      )
      const defect = problem(method, exit)
      if (defect !== undefined) problems.push(defect)
      if (
        Exit.isFailure(exit) && Cause.failureOption(exit.cause).pipe(Option.contains<unknown>("timeout")) &&
        !WAITS.has(method)
      ) {
        problems.push(`${method} did not end within ${callMillis} ms`)
      }
    }
    // Core's effects over the same values.
    const value = materialize(steps[0]?.args[0])
    for (
      const [what, effect] of [
        [
          "LocalMr.register",
          Option.isSome(peer)
            ? LocalMr.register({ handle: peer.value, address } as Bad, value as Bad, 0x01 as Bad)
            : Effect.void
        ],
        [
          "LocalMr.register usage",
          Option.isSome(peer)
            ? LocalMr.register({ handle: peer.value, address } as Bad, new Uint8Array(64), value as Bad)
            : Effect.void
        ],
        ["RemoteMr.fromDescriptor", RemoteMr.fromDescriptor(value as Bad)],
        ["Memory.allocate", costly(value) ? Effect.void : Memory.allocate(value as Bad)],
        [
          "CmEndpoint.registerMessages",
          Option.isSome(endpoint) ? CmEndpoint.registerMessages(endpoint.value, value as Bad) : Effect.void
        ]
      ] as const
    ) {
      const exit = yield* Effect.exit(
        Effect.scoped(effect as Effect.Effect<unknown, unknown, Driver.RdmaDriver | Scope.Scope>)
      )
      const defect = problem(what, exit)
      if (defect !== undefined) problems.push(defect)
    }
    return problems
  })

export interface FuzzOptions {
  readonly address: string
  readonly port: number
  readonly runs: number
  /** The most calls in one run (default 8). */
  readonly steps?: number
  /** How long a call that does not wait for the other side may take (default 200 ms). */
  readonly callMillis?: number
  readonly seed?: number
  /** Whether to make real handles first (a peer, regions, an id, an endpoint); false where no device is. */
  readonly device?: boolean
}

/**
 * Runs the fuzzer against a driver Layer: `runs` runs of up to `steps` calls each. Fails with every
 * problem found (shrunk by fast-check).
 */
export const fuzz = <E>(layer: Layer.Layer<Driver.RdmaDriver, E>, options: FuzzOptions): Promise<void> =>
  fc.assert(
    fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: options.steps ?? 8 }), async (steps) => {
      const problems = await Effect.runPromise(
        Effect.gen(function*() {
          const found = yield* Effect.scoped(
            run(options.address, options.port, options.device ?? true, steps, options.callMillis ?? 200)
          )
          const live = yield* Effect.flatMap(Driver.RdmaDriver, (d) => d.live)
          const alive = Object.entries(live).filter(([, n]) => n !== 0)
          if (alive.length > 0) found.push(`left alive after the run: ${JSON.stringify(Object.fromEntries(alive))}`)
          return found
        }).pipe(Effect.provide(layer))
      )
      if (problems.length > 0) throw new Error(problems.join("\n"))
    }),
    { numRuns: options.runs, ...(options.seed !== undefined ? { seed: options.seed } : {}) }
  )
