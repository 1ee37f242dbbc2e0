/**
 * @effect/rpc over RDMA across two hosts (vm/pair): a group served on VM a (in the agent, through
 * @effect-rdma/rpc's server protocol) and called from VM b (its client protocol). One test makes
 * calls (a typed error, a stream, payloads from inline size to 300 KB, concurrent calls) and
 * measures them; the others cut the link under a connected client and check that a call made
 * then, or one already waiting for its answer (found by the channel's keepalive), ends with a tagged
 * error (RpcClientError) within its bound. Each checks that Driver.live is zero on each side at
 * the end.
 */
import { Peer } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { RdmaRpc } from "@effect-rdma/rpc"
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcClient from "@effect/rpc/RpcClient"
import * as RpcGroup from "@effect/rpc/RpcGroup"
import * as RpcSerialization from "@effect/rpc/RpcSerialization"
import * as RpcServer from "@effect/rpc/RpcServer"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { FaultContext } from "./faults.js"
import { type Channel, check, describeCause, fail, fault, log, type Message, PairFailure, seconds } from "./harness.js"

class Refused extends Schema.TaggedError<Refused>()("Refused", { reason: Schema.String }) {}

const Group = RpcGroup.make(
  Rpc.make("Add", { payload: { a: Schema.Number, b: Schema.Number }, success: Schema.Number }),
  Rpc.make("Echo", { payload: { text: Schema.String }, success: Schema.String }),
  Rpc.make("Refuse", { payload: { reason: Schema.String }, error: Refused }),
  Rpc.make("Count", { payload: { to: Schema.Number }, success: Schema.Number, stream: true }),
  Rpc.make("Wait", { payload: { millis: Schema.Number }, success: Schema.Number })
)

const Handlers = Group.toLayer({
  Add: ({ a, b }) => Effect.succeed(a + b),
  Echo: ({ text }) => Effect.succeed(text),
  Refuse: ({ reason }) => Effect.fail(new Refused({ reason })),
  Count: ({ to }) => Stream.range(1, to),
  Wait: ({ millis }) => Effect.as(Effect.sleep(Duration.millis(millis)), millis)
})

/** The connections' timeout on both sides: bounds a send over a dead link, and each close. */
const TIMEOUT = Duration.seconds(5)
const TIMEOUT_S = Duration.toSeconds(TIMEOUT)
/**
 * The channel's keepalive period (RdmaChannel's default): a call across a cut link, waiting for its
 * answer or for its own send (sends are not timed: they wait on the other side's application),
 * learns of the cut when the next keepalive read (posted within keepAlive) goes unanswered for the
 * connection's timeout, which the watchdog sees up to two of its periods (a tenth of the timeout
 * each) late; 2 s of emulation slack for the lost connection to close the channel and reach the
 * call. Measured across the two VMs: 10.3-11.6 s.
 */
const KEEP_ALIVE_S = 5
const CUT_CALL_BOUND_S = KEEP_ALIVE_S + TIMEOUT_S * 1.2 + 2
const channelOptions = {
  inlineSize: 1024,
  landingSize: 64 * 1024,
  keepAlive: Duration.seconds(KEEP_ALIVE_S),
  connection: { timeout: TIMEOUT }
}

const liveTotal = (live: unknown) =>
  typeof live === "object" && live !== null ? Object.values(live).reduce((a: number, b) => a + Number(b), 0) : NaN

// ---------------------------------------------------------------------------------------------
// VM a: the agent serves the group while the runner asks it to.

let serving: Scope.CloseableScope | undefined

/** Answers the runner's `{ rpc: "serve", port }` and `{ rpc: "stop" }` (one answer each, always). */
export const rpcRequest = (channel: Channel, address: string, m: Message): Effect.Effect<void, never, RdmaDriver> =>
  Effect.gen(function*() {
    if (m.rpc === "serve") {
      if (serving !== undefined) return yield* channel.send({ rpcServing: false, error: "already serving" })
      const scope = yield* Scope.make()
      const ServerLive = RpcServer.layer(Group).pipe(
        Layer.provide(Handlers),
        Layer.provide(RdmaRpc.layerProtocolServer({ transport: "rpma", address, port: m.port, ...channelOptions })),
        Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
      )
      const built = yield* Effect.exit(Layer.buildWithScope(ServerLive, scope))
      if (Exit.isFailure(built)) {
        yield* Scope.close(scope, Exit.void)
        return yield* channel.send({ rpcServing: false, error: describeCause(built.cause) })
      }
      serving = scope
      yield* log(`RPC: serving on ${address}:${m.port}`)
      return yield* channel.send({ rpcServing: true })
    }
    if (m.rpc === "stop") {
      const scope = serving
      serving = undefined
      const started = performance.now()
      const closed = scope === undefined
        ? Exit.void
        : yield* Effect.exit(Scope.close(scope, Exit.void).pipe(Effect.timeout(Duration.seconds(TIMEOUT_S + 5))))
      const live = yield* Effect.flatMap(RdmaDriver, (d) => d.live)
      return yield* channel.send({
        rpcStopped: scope !== undefined,
        seconds: seconds(started),
        error: Exit.isFailure(closed) ? describeCause(closed.cause) : undefined,
        live
      })
    }
    yield* channel.send({ error: `unknown rpc request ${JSON.stringify(m.rpc)}` })
  })

// ---------------------------------------------------------------------------------------------
// VM b: the runner calls.

const ask = (ctx: FaultContext, request: Message, seconds: number) =>
  Effect.zipRight(ctx.channel.send(request), ctx.channel.receive(seconds))

/** The group served on a for `use`; then the server stopped, and both sides checked for leftovers. */
const withServer = <A>(ctx: FaultContext, port: number, use: Effect.Effect<A, unknown, RdmaDriver>) =>
  Effect.gen(function*() {
    const served = yield* ask(ctx, { rpc: "serve", port }, 60)
    if (served.rpcServing !== true) return yield* fail(`the RPC server on a did not start: ${served.error}`)
    const result = yield* Effect.exit(use)
    const stopped = yield* ask(ctx, { rpc: "stop" }, 60)
    const liveB = yield* Effect.flatMap(RdmaDriver, (d) => d.live)
    yield* ctx.note(
      `the server stopped in ${Number(stopped.seconds).toFixed(2)} s; live on a ${JSON.stringify(stopped.live)}, on b ${
        JSON.stringify(liveB)
      }`
    )
    if (Exit.isFailure(result)) return yield* Effect.failCause(result.cause)
    yield* check(stopped.error === undefined, `the RPC server's scope on a: ${stopped.error}`)
    yield* check(liveTotal(liveB) === 0, `handles alive on b after the client closed: ${JSON.stringify(liveB)}`)
    yield* check(
      liveTotal(stopped.live) === 0,
      `handles alive on a after the server stopped: ${JSON.stringify(stopped.live)}`
    )
    return result.value
  })

/** A client of the server on a, in the caller's scope. */
const client = (ctx: FaultContext, port: number) =>
  Effect.gen(function*() {
    const protocol = yield* Layer.build(
      RdmaRpc.layerProtocolClient({ transport: "rpma", address: ctx.serverAddress, port, ...channelOptions }).pipe(
        Layer.provide([Peer.layer(ctx.address), RpcSerialization.layerMsgPack])
      )
    )
    return yield* Effect.provide(RpcClient.make(Group), protocol)
  })

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(effect), ([d, a]) => [a, Duration.toMillis(d)] as const)

const calls = (ctx: FaultContext) =>
  withServer(
    ctx,
    17401,
    Effect.scoped(Effect.gen(function*() {
      const rpc = yield* client(ctx, 17401)
      const [sum, firstMs] = yield* timed(rpc.Add({ a: 2, b: 40 }))
      yield* check(sum === 42, `Add(2, 40) gave ${sum}`)
      const adds: Array<number> = []
      for (let i = 0; i < 20; i++) adds.push((yield* timed(rpc.Add({ a: i, b: i })))[1])
      adds.sort((a, b) => a - b)
      yield* ctx.note(`Add: first call ${firstMs.toFixed(1)} ms; then median ${adds[10]!.toFixed(1)} ms of 20 in a row`)
      const refused = yield* Effect.flip(rpc.Refuse({ reason: "not today" }))
      yield* check(
        refused instanceof Refused && refused.reason === "not today",
        `Refuse gave ${JSON.stringify(refused)}`
      )
      const [counted, countMs] = yield* timed(Stream.runCollect(rpc.Count({ to: 500 })))
      const numbers = Chunk.toReadonlyArray(counted)
      yield* check(
        numbers.length === 500 && numbers.every((n, i) => n === i + 1),
        `Count(500) gave ${numbers.length} numbers, not 1..500`
      )
      yield* ctx.note(`a stream of 500 numbers in ${countMs.toFixed(0)} ms`)
      for (const size of [900, 5_000, 64 * 1024, 300_000]) {
        const text = Array.from({ length: size }, (_, i) => String.fromCharCode(97 + (i % 26))).join("")
        const [echoed, ms] = yield* timed(rpc.Echo({ text }))
        yield* check(echoed === text, `Echo of ${size} characters came back different (${echoed.length} characters)`)
        yield* ctx.note(`Echo of ${size} B there and back: ${ms.toFixed(0)} ms`)
      }
      const [sums, concurrentMs] = yield* timed(
        Effect.forEach(Array.from({ length: 50 }, (_, i) => i), (i) => rpc.Add({ a: i, b: i }), {
          concurrency: "unbounded"
        })
      )
      yield* check(sums.every((s, i) => s === 2 * i), "50 concurrent Adds: a wrong sum")
      yield* ctx.note(`50 concurrent Adds in ${concurrentMs.toFixed(0)} ms`)
    }))
  )

/**
 * A call across a cut link, made after the cut (its send waits) or before it (waiting for its
 * answer): the keepalive's read goes unanswered, the connection is lost, and the call ends with
 * RpcClientError within its bound.
 */
const linkCut = (port: number, inFlight: boolean) => (ctx: FaultContext) => {
  const boundS = CUT_CALL_BOUND_S
  const what = inFlight ? "a call waiting for its answer when the link was cut" : "a call made across the cut link"
  return withServer(
    ctx,
    port,
    Effect.scoped(Effect.gen(function*() {
      const rpc = yield* client(ctx, port)
      yield* log("RPC: connected")
      yield* check((yield* rpc.Add({ a: 1, b: 1 })) === 2, "Add(1, 1) before the cut")
      yield* log("RPC: a call answered before the cut")
      // A call the server answers only after two minutes, at the server before the cut.
      const waiting = inFlight ? yield* Effect.fork(Effect.exit(rpc.Wait({ millis: 120_000 }))) : undefined
      if (inFlight) yield* Effect.sleep("1 second")
      yield* fault("link", "peer", "off")
      const cutAt = performance.now()
      // Bounded here too, so that a hang is a failure with a message rather than a stuck suite.
      const outcome = yield* (waiting === undefined ? Effect.exit(rpc.Add({ a: 1, b: 2 })) : Fiber.join(waiting)).pipe(
        Effect.timeout(Duration.seconds(boundS + 30)),
        Effect.option
      )
      const tookS = seconds(cutAt)
      yield* fault("link", "peer", "on")
      const exit = Option.getOrUndefined(outcome)
      const error = exit !== undefined && Exit.isFailure(exit) && exit.cause._tag === "Fail"
        ? exit.cause.error
        : undefined
      const tag = exit === undefined
        ? "nothing (still waiting)"
        : Exit.isSuccess(exit)
        ? "success"
        : (error as { _tag?: string } | undefined)?._tag ?? "a defect"
      yield* ctx.note(
        `${what} ended with ${tag} after ${tookS.toFixed(2)} s: ${(error as Error | undefined)?.message ?? ""}`
      )
      yield* log(`RPC: ${what} ended with ${tag} after ${tookS.toFixed(2)} s`)
      yield* check(
        tag === "RpcClientError",
        `${what} ended with ${tag} after ${tookS.toFixed(2)} s, not RpcClientError`
      )
      yield* check(tookS <= boundS, `${what} took ${tookS.toFixed(2)} s, over its bound of ${boundS} s`)
    })).pipe(
      // The client's scope closes within the connection's timeout (a dead connection's disconnect).
      Effect.timeoutFail({
        duration: Duration.seconds(boundS + 30 + TIMEOUT_S + 5),
        onTimeout: () => new PairFailure({ message: "the client's scope did not close after the link came back" })
      })
    )
  )
}

export const rpcTests: ReadonlyArray<{
  readonly name: string
  readonly run: (ctx: FaultContext) => Effect.Effect<void, unknown, RdmaDriver>
}> = [
  {
    name: "@effect/rpc: a group served on a, called from b: calls, a typed error, a stream, 900 B-300 KB payloads",
    run: calls
  },
  {
    name: "@effect/rpc: a call made across a cut link ends with RpcClientError within keepAlive + the timeout",
    run: linkCut(17402, false)
  },
  {
    name:
      "@effect/rpc: a call waiting for its answer when the link is cut ends with RpcClientError within keepAlive + the timeout",
    run: linkCut(17403, true)
  }
]
