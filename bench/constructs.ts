/**
 * What single constructs of the hot path cost, each in the same `yield*` loop, for callgrind:
 *
 *   valgrind --tool=callgrind --dump-before=uv_loadavg node --single-threaded --import tsx bench/constructs.ts
 *
 * Each construct runs N times to warm up, then N times between two marks (os.loadavg, where
 * callgrind dumps): the dump after a construct's "measured" line, over N, is its cost plus the
 * loop's (the "void" row). Startup is excluded; tsx is fine here (closures are built once).
 */
import { RdmaMetrics } from "@effect-rdma/core"
import { Effect, FiberRef, Metric } from "effect"
import { loadavg } from "node:os"
import { Slots } from "../packages/core/src/internal/dataPath.js"
import * as instrument from "../packages/core/src/internal/instrument.js"
import * as Owner from "../packages/core/src/internal/owner.js"
import { release } from "../packages/core/src/internal/release.js"
import * as Memory from "../packages/core/src/Memory.js"
import * as Tracing from "../packages/core/src/Tracing.js"
import { setup } from "./host.js"

const slowdown = Number(process.env.CLOCK_SLOWDOWN ?? "1")
if (slowdown !== 1) {
  const now = performance.now.bind(performance)
  performance.now = () => now() / slowdown
}
const N = Number(process.env.N ?? "2000")
const loop = <E, R>(body: Effect.Effect<unknown, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < N; i++) yield* body
  })
const mark = Effect.sync(() => loadavg())

await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
  yield* setup
  const slots = new Slots(64)
  const effectVariants: Record<string, Effect.Effect<unknown, unknown>> = {
    "void": Effect.void,
    "suspend+void": Effect.suspend(() => Effect.void),
    "sync": Effect.sync(() => 1),
    "mask(restore(void))": Effect.uninterruptibleMask((restore) => restore(Effect.void)),
    "mask(void)": Effect.uninterruptibleMask(() => Effect.void),
    "slots.take+give": Effect.zipRight(slots.take, Effect.sync(() => slots.give())),
    "matchEffect(void)": Effect.matchEffect(Effect.void, {
      onFailure: () => Effect.void,
      onSuccess: () => Effect.void
    }),
    "orElseSucceed+flatMap": Effect.flatMap(
      Effect.orElseSucceed(Effect.succeed([] as Array<number>), () => []),
      () => Effect.void
    ),
    "asVoid(succeed)": Effect.asVoid(Effect.succeed(1)),
    "FiberRef.getWith(perOperation)": FiberRef.getWith(Tracing.perOperation, () => Effect.void),
    "either(void)": Effect.either(Effect.void),
    "performance.now x1": Effect.sync(() => performance.now()),
    "zipRight(void,void)": Effect.zipRight(Effect.void, Effect.void),
    "async resumed sync": Effect.async<void>((resume) => resume(Effect.void)),
    // The floor of any operation completed on a later loop turn: one suspension, resumed from a
    // setImmediate callback (what the fake binding's "later" mode delivers through).
    "async resumed on a later turn": Effect.async<void>((resume) => {
      setImmediate(resume, Effect.void)
    }),
    // The same in the shape of an operation (one withFiberRuntime, then the wait).
    "withFiberRuntime(async resumed on a later turn)": Effect.withFiberRuntime(() =>
      Effect.async<void>((resume) => {
        setImmediate(resume, Effect.void)
      })
    )
  }
  const taggedOnce = Metric.counter("bench_a", { incremental: true }).pipe(Metric.tagged("operation", "x"))
  const untagged = Metric.counter("bench_b", { incremental: true })
  const regs = Metric.tagged(RdmaMetrics.registrations, "operation", "rpma_mr_reg")
  const owner = Owner.of({}, () => "x")
  const mem = new Uint8Array(4096)
  const registrationVariants: Record<string, Effect.Effect<unknown, unknown>> = {
    "void": Effect.void,
    "Metric.increment(untagged counter)": Metric.increment(untagged),
    "Metric.increment(counter tagged once)": Metric.increment(taggedOnce),
    "Metric.increment(RdmaMetrics.registrations tagged operation)": Metric.increment(regs),
    "instrument.registered (4 gauges)": instrument.registered("192.168.77.1", 4096),
    "instrument.released": instrument.released("rpma_mr_dereg"),
    "instrument.registration(void)": instrument.registration("rpma_mr_reg", Effect.void),
    "release(void)": release("rpma_mr_dereg", "x", Effect.void),
    "Owner.releaseWhenUnused(void)": Owner.releaseWhenUnused(owner, Effect.void),
    "Owner.drop": Effect.suspend(() => {
      Owner.retain(owner)
      return Owner.drop(owner)
    }),
    "Memory.validate+flatMap": Effect.flatMap(Memory.validate(mem), () => Effect.void),
    "sync(Memory.validate)": Effect.sync(() => Memory.validate(mem)),
    "sync(Memory.admit)": Effect.sync(() => Memory.admit(mem)),
    "sync(regionUnsafe)": Effect.sync(() => instrument.regionUnsafe("rpma_mr_reg", "192.168.77.1", 4096, [])),
    "sync(Owner.of a new object)": Effect.sync(() => Owner.of({ size: 1 }, () => `a ${1}-byte region`)),
    "withFiberRuntime(labelsOf)": Effect.withFiberRuntime((fiber) => (instrument.labelsOf(fiber), Effect.void)),
    "sync(pin+unpin)": Effect.sync(() => (Owner.retain(owner), Owner.dropUnsafe(owner)))
  }
  const only = process.env.ONLY?.split(",")
  for (const [name, v] of Object.entries({ ...effectVariants, ...registrationVariants })) {
    if (only !== undefined && !only.includes(name)) continue
    yield* loop(v)
    yield* mark
    yield* loop(v)
    yield* mark
    console.log(`measured ${name} ${N}`)
  }
})))
