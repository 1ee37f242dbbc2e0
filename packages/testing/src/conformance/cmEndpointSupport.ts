/**
 * What the conformance cases of librdmacm's verbs API share, over the raw Driver: endpoints,
 * listeners, requests and regions as scoped resources (released in the page's order: regions,
 * then the endpoint, then the listener), posting that fails with its refusal, and a bounded wait
 * for completions.
 */
import type { RdmaError } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Scope from "effect/Scope"
import type { HalfContext } from "./halves.js"
import { check, equal, text } from "./support.js"

/** A queue pair every case can use: small queues, two segments, some inline room. */
export const config: Driver.Model.CmEpConfig = {
  timeoutMs: 10_000,
  // 2^n - 1: what Soft-RoCE and mlx5 grant exactly (they round queues up to a power of two, less one).
  maxSendWr: 15,
  maxRecvWr: 15,
  maxSendSge: 2,
  maxRecvSge: 2,
  maxInlineData: 64
}

/** The bound on a case's waits for a completion or an event. */
export const WAIT = Duration.seconds(20)

export const bytes = (s: string) => new TextEncoder().encode(s)

/** The errno an effect failed with (an RdmaCmError), its tag otherwise, or "success". */
export const errnoOf = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<string, never, R> =>
  Effect.map(Effect.exit(effect), (exit) =>
    Exit.isSuccess(exit)
      ? "success"
      : exit.cause._tag === "Fail"
      ? (exit.cause.error as { _tag?: string })._tag === "RdmaCmError"
        ? (exit.cause.error as RdmaError.RdmaCmError).errnoName
        : String((exit.cause.error as { _tag?: string })._tag)
      : `defect or interruption: ${String(exit.cause)}`)

/** Fails the case unless `effect` fails with errno `name` (e.g. "EINVAL"). */
export const expectErrno = <A, E, R>(effect: Effect.Effect<A, E, R>, name: string, what: string) =>
  Effect.flatMap(errnoOf(effect), (actual) => equal(actual, name, what))

/** A listener, destroyed with the scope. */
export const listen = (address: string, port: number, cfg: Driver.Model.CmEpConfig = config) =>
  Effect.flatMap(
    Driver.RdmaDriver,
    (d) => Effect.acquireRelease(d.cmListen(address, port, cfg), (l) => Effect.ignore(d.cmListenerDestroy(l.handle)))
  )

/** An active endpoint to `address:port`, destroyed with the scope. */
export const endpoint = (address: string, port: number, cfg: Driver.Model.CmEpConfig = config) =>
  Effect.flatMap(
    Driver.RdmaDriver,
    (d) => Effect.acquireRelease(d.cmEpCreate(address, port, cfg), (ep) => Effect.ignore(d.cmEpDestroy(ep)))
  )

/**
 * The next request of a listener (within {@link WAIT}), destroyed with the scope. The
 * wait is interruptible (an acquireRelease's acquire is not); the release is registered, without
 * a gap, once a request came.
 */
export const nextRequest = (listener: Driver.Model.CmListenerHandle) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.tap(
        restore(
          d.cmGetRequest(listener).pipe(
            Effect.timeoutFail({ duration: WAIT, onTimeout: () => new Error("no connection request came") })
          )
        ),
        (ep) => Effect.addFinalizer(() => Effect.ignore(d.cmEpDestroy(ep)))
      )
    ))

/** A region of `size` bytes registered on an endpoint, deregistered with the scope (before the endpoint). */
export const region = (ep: Driver.Model.CmEpHandle, kind: Driver.Model.CmRegistrationKind, size: number) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    Effect.gen(function*() {
      const memory = new Uint8Array(size)
      const mr = yield* Effect.acquireRelease(d.cmReg(ep, kind, memory), (mr) => Effect.ignore(d.cmDeregMr(mr)))
      const info = yield* d.cmMrInfo(mr)
      return { mr, memory, info }
    }))

/** A region's whole range as one segment. */
export const whole = (
  r: { readonly mr: Driver.Model.CmMrHandle; readonly memory: Uint8Array },
  offset = 0,
  length?: number
) => ({
  mr: r.mr,
  offset,
  length: length ?? r.memory.byteLength - offset
})

/** Completions taken by earlier posts or polls, kept per endpoint until a case waits for them. */
const taken = new WeakMap<object, Array<Driver.Model.Completion>>()
const stash = (ep: Driver.Model.CmEpHandle, completions: ReadonlyArray<Driver.Model.Completion>) => {
  const list = taken.get(ep) ?? []
  for (const c of completions) list.push(c)
  taken.set(ep, list)
}

/** cmPostMany of every request, failing with the refusal; the completions it returned are kept for {@link completions}. */
export const post = (ep: Driver.Model.CmEpHandle, requests: ReadonlyArray<Driver.Model.CmWorkRequest>) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    Effect.suspend(() => {
      const outcome = d.cmPostMany(ep, requests)
      stash(ep, outcome.ready)
      return outcome.error !== undefined ? Effect.fail(outcome.error) : Effect.succeed(outcome.posted)
    }))

/** The outcome of cmPostMany (its completions kept for {@link completions}). */
export const postOutcome = (ep: Driver.Model.CmEpHandle, requests: ReadonlyArray<unknown>) =>
  Effect.map(Driver.RdmaDriver, (d) => {
    const outcome = d.cmPostMany(ep, requests as ReadonlyArray<Driver.Model.CmWorkRequest>)
    stash(ep, outcome.ready)
    return outcome
  })

/** One armed wait on the endpoint's completion channels. */
const armed = (d: Driver.Driver, ep: Driver.Model.CmEpHandle) =>
  Effect.async<ReadonlyArray<Driver.Model.Completion>, RdmaError.RdmaCmError>((resume) => {
    const disarm = d.cmArmCompletions(ep, (exit) => resume(exit))
    return Effect.sync(disarm)
  })

/**
 * The next `n` completions of an endpoint (those its posts already returned first), in
 * the order they came, waiting on its channels within {@link WAIT}.
 */
export const completions = (ep: Driver.Model.CmEpHandle, n: number) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    Effect.gen(function*() {
      for (;;) {
        stash(ep, yield* d.cmPollCompletions(ep))
        const list = taken.get(ep) ?? []
        if (list.length >= n) return list.splice(0, n)
        stash(ep, yield* armed(d, ep))
      }
    }).pipe(Effect.timeoutFail({
      duration: WAIT,
      onTimeout: () => new Error(`${n} completion(s) did not come within ${Duration.format(WAIT)}`)
    })))

/** Fails the case unless the completion has this status (and, on success, opcode and length). */
export const expectCompletion = (
  wc: Driver.Model.Completion | undefined,
  expected: { readonly id: number; readonly status: number; readonly opcode?: number; readonly byteLength?: number },
  what: string
) =>
  Effect.gen(function*() {
    yield* check(wc !== undefined, `${what}: no completion`)
    yield* equal(wc!.id, expected.id, `${what}: wr_id`)
    yield* equal(wc!.status, expected.status, `${what}: status`)
    if (expected.opcode !== undefined) yield* equal(wc!.opcode, expected.opcode, `${what}: opcode`)
    if (expected.byteLength !== undefined) yield* equal(wc!.byteLength, expected.byteLength, `${what}: byte_len`)
  })

/** The next event of an endpoint, within {@link WAIT}. */
export const nextEvent = (ep: Driver.Model.CmEpHandle) =>
  Effect.flatMap(
    Driver.RdmaDriver,
    (d) =>
      d.cmNextEvent(ep).pipe(
        Effect.timeoutFail({ duration: WAIT, onTimeout: () => new Error("no rdma_cm event came") })
      )
  )

/** The leading bytes of a private data as text (what was sent, before rdma_cm's padding). */
export const leading = (data: Uint8Array, length: number) => text(data.subarray(0, length))

/**
 * The server half's start: a listener, "listening" told to the client half, the next
 * request (private data checked); `beforeAccept` runs on the request before it is accepted with
 * "welcome". `cfg`: the listener's settings.
 */
export const serve = <A, E, R>(
  ctx: HalfContext,
  beforeAccept: (ep: Driver.Model.CmEpHandle) => Effect.Effect<A, E, R>,
  cfg: Driver.Model.CmEpConfig = config
): Effect.Effect<
  { readonly ep: Driver.Model.CmEpHandle; readonly before: A },
  unknown,
  R | Driver.RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const listener = yield* listen(ctx.address, ctx.port, cfg)
    yield* ctx.channel.send({ listening: true })
    const ep = yield* nextRequest(listener.handle)
    const before = yield* beforeAccept(ep)
    yield* d.cmAccept(ep, bytes("welcome"), config.timeoutMs)
    return { ep, before }
  })

/**
 * The client half's start: waits for "listening", makes an endpoint to the server half;
 * `beforeConnect` runs on it before it connects with "hello". `cfg`: the endpoint's settings.
 */
export const join = <A, E, R>(
  ctx: HalfContext,
  beforeConnect: (ep: Driver.Model.CmEpHandle) => Effect.Effect<A, E, R>,
  cfg: Driver.Model.CmEpConfig = config
): Effect.Effect<
  { readonly ep: Driver.Model.CmEpHandle; readonly before: A },
  unknown,
  R | Driver.RdmaDriver | Scope.Scope
> =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    yield* ctx.channel.receive()
    const ep = yield* endpoint(ctx.serverAddress, ctx.port, cfg)
    const before = yield* beforeConnect(ep)
    yield* d.cmConnect(ep, bytes("hello"), config.timeoutMs)
    return { ep, before }
  })

/** A region's key as a message between the halves (bigints do not travel in JSON). */
export const keyOf = (info: Driver.Model.CmMrInfo) => ({
  address: String(info.address),
  rkey: info.rkey,
  length: info.length
})

export const keyFrom = (m: { readonly address: string; readonly rkey: number; readonly length: number }) => ({
  address: BigInt(m.address),
  rkey: m.rkey,
  length: m.length
})
