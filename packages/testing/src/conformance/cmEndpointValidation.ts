/**
 * The validation table's rows for librdmacm's verbs API: bad inputs to the endpoint calls, each
 * with the errno every driver must fail with. A row's tag is "RdmaCmError <errno name>" (every
 * failure of these calls is an RdmaCmError, so the errno is what tells them apart).
 */
import type * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { config } from "./cmEndpointSupport.js"
import { NOWHERE } from "./support.js"

/** The shape of validation.ts's rows (declared here too: that module imports this one). */
interface Row {
  readonly input: string
  readonly call: (ctx: {
    readonly driver: Driver.Driver
    readonly address: string
    readonly port: number
  }) => Effect.Effect<unknown, unknown, Driver.RdmaDriver | Scope.Scope>
  readonly tag: string
}

type Bad = never

const EINVAL = "RdmaCmError EINVAL"

/** The failure's tag with its errno, so that the table's comparison of tags compares errno values. */
const withErrno = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.mapError(effect, (e) =>
    (e as { _tag?: string })._tag === "RdmaCmError"
      ? { _tag: `RdmaCmError ${(e as { errnoName: string }).errnoName}` }
      : e)

const throwing = () =>
  new Proxy({}, {
    get() {
      throw new Error("hostile getter")
    }
  })

const badConfigs: ReadonlyArray<readonly [string, () => unknown]> = [
  ["null", () => null],
  ["a throwing Proxy", throwing],
  ["maxSendWr 0", () => ({ ...config, maxSendWr: 0 })],
  ["maxSendWr 1.5", () => ({ ...config, maxSendWr: 1.5 })],
  ["maxRecvWr -1", () => ({ ...config, maxRecvWr: -1 })],
  ["maxSendSge 0", () => ({ ...config, maxSendSge: 0 })],
  ["maxRecvSge NaN", () => ({ ...config, maxRecvSge: Number.NaN })],
  ["maxInlineData \"64\"", () => ({ ...config, maxInlineData: "64" })],
  ["timeoutMs -1", () => ({ ...config, timeoutMs: -1 })],
  ["maxSendWr 2^32", () => ({ ...config, maxSendWr: 2 ** 32 })]
]

/** A live endpoint (not connected), destroyed with the scope, with a region of its own. */
const anEndpoint = (driver: Driver.Driver, address: string, port: number) =>
  Effect.gen(function*() {
    const ep = yield* Effect.acquireRelease(driver.cmEpCreate(address, port, config), (ep) =>
      Effect.ignore(driver.cmEpDestroy(ep)))
    const mr = yield* Effect.acquireRelease(driver.cmReg(ep, "msgs", new Uint8Array(4096)), (mr) =>
      Effect.ignore(driver.cmDeregMr(mr)))
    return { ep, mr }
  })

/** cmPostMany of `requests` on a fresh endpoint (`make` given its region), its refusal as the Effect's failure. */
const posting = (
  make: (mr: Driver.Model.CmMrHandle, other: Driver.Model.CmMrHandle) => unknown,
  handle?: () => unknown
): Row["call"] =>
({ address, driver, port }) =>
  Effect.gen(function*() {
    const { ep, mr } = yield* anEndpoint(driver, address, port)
    const { mr: other } = yield* anEndpoint(driver, address, port)
    const outcome = driver.cmPostMany((handle === undefined ? ep : handle()) as Bad, make(mr, other) as Bad)
    return outcome.error !== undefined ? yield* Effect.fail(outcome.error) : outcome.posted
  })

const recv = (mr: Driver.Model.CmMrHandle, extra?: object) => ({
  op: "recv",
  id: 1,
  segments: [{ mr, offset: 0, length: 64 }],
  ...extra
})

const table: ReadonlyArray<Row> = [
  ...[null, 42].map((address): Row => ({
    input: `cmEpCreate address: ${String(address)}`,
    call: ({ driver, port }) => driver.cmEpCreate(address as Bad, port, config),
    tag: EINVAL
  })),
  ...[0, 65536, 1.5, "7471"].map((port): Row => ({
    input: `cmEpCreate port: ${JSON.stringify(port)}`,
    call: ({ address, driver }) => driver.cmEpCreate(address, port as Bad, config),
    tag: EINVAL
  })),
  ...badConfigs.map(([input, make]): Row => ({
    input: `cmEpCreate config: ${input}`,
    call: ({ address, driver, port }) => driver.cmEpCreate(address, port, make() as Bad),
    tag: EINVAL
  })),
  ...badConfigs.slice(0, 3).map(([input, make]): Row => ({
    input: `cmListen config: ${input}`,
    call: ({ address, driver, port }) => driver.cmListen(address, port, make() as Bad),
    tag: EINVAL
  })),
  ...[-1, 65536].map((port): Row => ({
    input: `cmListen port: ${port}`,
    call: ({ address, driver }) => driver.cmListen(address, port, config),
    tag: EINVAL
  })),
  {
    input: `cmListen on ${NOWHERE} (no device there)`,
    call: ({ driver, port }) => driver.cmListen(NOWHERE, port, config),
    tag: "RdmaCmError EADDRNOTAVAIL"
  },
  ...([["null", () => null], ["an object", () => ({})], ["a number", () => 7]] as const).flatMap((
    [what, make]
  ): ReadonlyArray<Row> => [
    {
      input: `cmConnect handle: ${what}`,
      call: ({ driver }) => driver.cmConnect(make() as Bad, undefined, 1000),
      tag: EINVAL
    },
    {
      input: `cmAccept handle: ${what}`,
      call: ({ driver }) => driver.cmAccept(make() as Bad, undefined, 1000),
      tag: EINVAL
    },
    { input: `cmReject handle: ${what}`, call: ({ driver }) => driver.cmReject(make() as Bad, undefined), tag: EINVAL },
    { input: `cmGetRequest handle: ${what}`, call: ({ driver }) => driver.cmGetRequest(make() as Bad), tag: EINVAL },
    { input: `cmNextEvent handle: ${what}`, call: ({ driver }) => driver.cmNextEvent(make() as Bad), tag: EINVAL },
    { input: `cmDisconnect handle: ${what}`, call: ({ driver }) => driver.cmDisconnect(make() as Bad), tag: EINVAL },
    { input: `cmEpDestroy handle: ${what}`, call: ({ driver }) => driver.cmEpDestroy(make() as Bad), tag: EINVAL },
    {
      input: `cmListenerDestroy handle: ${what}`,
      call: ({ driver }) => driver.cmListenerDestroy(make() as Bad),
      tag: EINVAL
    },
    { input: `cmEpInfo handle: ${what}`, call: ({ driver }) => driver.cmEpInfo(make() as Bad), tag: EINVAL },
    { input: `cmPrivateData handle: ${what}`, call: ({ driver }) => driver.cmPrivateData(make() as Bad), tag: EINVAL },
    {
      input: `cmPollCompletions handle: ${what}`,
      call: ({ driver }) => driver.cmPollCompletions(make() as Bad),
      tag: EINVAL
    },
    { input: `cmPostMany handle: ${what}`, call: posting((mr) => [recv(mr)], make), tag: EINVAL },
    {
      input: `cmArmCompletions handle: ${what}`,
      call: ({ driver }) =>
        Effect.async<unknown, unknown>((resume) => {
          const disarm = driver.cmArmCompletions(make() as Bad, (exit) => resume(exit))
          return Effect.sync(disarm)
        }),
      tag: EINVAL
    }
  ]),
  {
    input: "cmConnect on a listener's handle",
    call: ({ address, driver, port }) =>
      Effect.flatMap(
        Effect.acquireRelease(driver.cmListen(address, port, config), (l) =>
          Effect.ignore(driver.cmListenerDestroy(l.handle))),
        (l) =>
          driver.cmConnect(l.handle as Bad, undefined, 1000)
      ),
    tag: EINVAL
  },
  {
    input: "cmGetRequest on an endpoint's handle",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmGetRequest(ep as Bad)),
    tag: EINVAL
  },
  {
    input: "cmConnect private data: 57 bytes",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmConnect(ep, new Uint8Array(57), 1000)),
    tag: EINVAL
  },
  {
    input: "cmConnect private data: a string",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmConnect(ep, "hello" as Bad, 1000)),
    tag: EINVAL
  },
  {
    input: "cmConnect timeoutMs: -1",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmConnect(ep, undefined, -1)),
    tag: EINVAL
  },
  {
    input: "cmAccept of an active endpoint",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmAccept(ep, undefined, 1000)),
    tag: EINVAL
  },
  {
    input: "cmReject of an active endpoint",
    call: ({ address, driver, port }) =>
      Effect.flatMap(anEndpoint(driver, address, port), ({ ep }) => driver.cmReject(ep, undefined)),
    tag: EINVAL
  },
  {
    input: "cmConnect of a destroyed endpoint",
    call: ({ address, driver, port }) =>
      Effect.gen(function*() {
        const ep = yield* driver.cmEpCreate(address, port, config)
        yield* driver.cmEpDestroy(ep)
        return yield* driver.cmConnect(ep, undefined, 1000)
      }),
    tag: EINVAL
  },
  { input: "cmPostMany requests: not an array", call: posting((mr) => recv(mr)), tag: EINVAL },
  { input: "cmPostMany request: null", call: posting(() => [null]), tag: EINVAL },
  { input: "cmPostMany request: a throwing Proxy", call: posting(() => [throwing()]), tag: EINVAL },
  {
    input: "cmPostMany request: op \"atomicWrite\"",
    call: posting((mr) => [recv(mr, { op: "atomicWrite" })]),
    tag: EINVAL
  },
  { input: "cmPostMany request: id \"1\"", call: posting((mr) => [recv(mr, { id: "1" })]), tag: EINVAL },
  {
    input: "cmPostMany request: segments not an array",
    call: posting(() => [{ op: "recv", id: 1, segments: 3 }]),
    tag: EINVAL
  },
  // A request of one segment is read field by field where a driver does (the native driver's
  // cmPostOne): its shapes and hostile objects are refused as the general path refuses them.
  {
    input: "cmPostMany request: no op, one segment",
    call: posting((mr) => [{ id: 1, segments: [{ mr, offset: 0, length: 8 }] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: length \"8\"",
    call: posting((mr) => [{ op: "recv", id: 1, segments: [{ mr, offset: 0, length: "8" }] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: a throwing Proxy",
    call: posting(() => [{ op: "recv", id: 1, segments: [throwing()] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany request: a segments getter that throws",
    call: posting(() => [{
      op: "recv",
      id: 1,
      get segments() {
        throw new Error("hostile getter")
      }
    }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany request: an rkey getter that throws, one segment",
    call: posting((mr) => [{
      op: "recv",
      id: 1,
      segments: [{ mr, offset: 0, length: 8 }],
      get rkey() {
        throw new Error("hostile getter")
      }
    }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: mr null",
    call: posting(() => [{ op: "recv", id: 1, segments: [{ mr: null, offset: 0, length: 8 }] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: a region of another endpoint",
    call: posting((_, other) => [recv(other)]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: offset -1",
    call: posting((mr) => [{ op: "recv", id: 1, segments: [{ mr, offset: -1, length: 8 }] }]),
    tag: EINVAL
  },
  { input: "cmPostMany receive: no segment", call: posting(() => [{ op: "recv", id: 1, segments: [] }]), tag: EINVAL },
  {
    input: "cmPostMany segment: past its region's end (offset 4090, length 8 of 4096)",
    call: posting((mr) => [{ op: "recv", id: 1, segments: [{ mr, offset: 4090, length: 8 }] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany write: remoteAddress 2^64",
    call: posting((
      mr
    ) => [{ op: "write", id: 1, segments: [{ mr, offset: 0, length: 8 }], remoteAddress: 2n ** 64n, rkey: 1 }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany read: with immediate data",
    call: posting((
      mr
    ) => [{ op: "read", id: 1, imm: 1, segments: [{ mr, offset: 0, length: 8 }], remoteAddress: 0n, rkey: 1 }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany receive: 3 segments (maxRecvSge 2)",
    call: posting((mr) => [{ op: "recv", id: 1, segments: [0, 1, 2].map((i) => ({ mr, offset: i * 8, length: 8 })) }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany send before the connection",
    call: posting((mr) => [{ op: "send", id: 1, segments: [{ mr, offset: 0, length: 8 }] }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany two sends before the connection",
    call: posting((
      mr
    ) => [{ op: "send", id: 1, segments: [{ mr, offset: 0, length: 8 }] }, {
      op: "send",
      id: 2,
      segments: [{ mr, offset: 8, length: 8 }]
    }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany write before the connection",
    call: posting((
      mr
    ) => [{ op: "write", id: 1, segments: [{ mr, offset: 0, length: 8 }], remoteAddress: 4096n, rkey: 1 }]),
    tag: EINVAL
  },
  {
    input: "cmPostMany segment: a deregistered region",
    call: ({ address, driver, port }) =>
      Effect.gen(function*() {
        const ep = yield* Effect.acquireRelease(driver.cmEpCreate(address, port, config), (ep) =>
          Effect.ignore(driver.cmEpDestroy(ep)))
        const mr = yield* driver.cmReg(ep, "msgs", new Uint8Array(64))
        yield* driver.cmDeregMr(mr)
        const outcome = driver.cmPostMany(ep, [recv(mr) as Driver.Model.CmWorkRequest])
        return outcome.error !== undefined ? yield* Effect.fail(outcome.error) : outcome.posted
      }),
    tag: EINVAL
  },
  {
    input: "cmReg on a destroyed endpoint",
    call: ({ address, driver, port }) =>
      Effect.gen(function*() {
        const ep = yield* driver.cmEpCreate(address, port, config)
        yield* driver.cmEpDestroy(ep)
        return yield* driver.cmReg(ep, "msgs", new Uint8Array(64))
      }),
    tag: EINVAL
  }
]

/** The rows, their failures tagged with their errno. */
export const cmEndpointRows: ReadonlyArray<Row> = table.map((row) => ({
  ...row,
  call: (ctx) => withErrno(row.call(ctx))
}))
