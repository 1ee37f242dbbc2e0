/**
 * Effect primitive ops executed per operation of the host benches (bench/host.ts), by kind:
 * a Supervisor sees every op when OpSupervision is on. Where instructions come from, op by op.
 *
 *   node --import tsx bench/ops.ts write.queued write.later use ...
 */
import { Effect, RuntimeFlags, RuntimeFlagsPatch, Supervisor } from "effect"
import { setup } from "./host.js"

class Count extends Supervisor.AbstractSupervisor<void> {
  counts = new Map<string, number>()
  total = 0
  on = false
  get value() {
    return Effect.void
  }
  override onEffect(_f: unknown, effect: Effect.Effect<unknown, unknown, unknown>) {
    const e = effect as unknown as { readonly _op?: string }
    if (!this.on) return
    this.total++
    const k = e?._op ?? typeof e
    this.counts.set(k, (this.counts.get(k) ?? 0) + 1)
  }
}
const names = process.argv.slice(2)
const sup = new Count()
await Effect.runPromise(
  Effect.scoped(Effect.gen(function*() {
    const b = yield* setup
    for (const name of names) {
      const bench = b[name]!
      yield* bench.run(100)
      sup.counts.clear()
      sup.total = 0
      sup.on = true
      const N = 1000
      yield* bench.run(N)
      sup.on = false
      const per = [...sup.counts].sort((a, b) => b[1] - a[1]).map(([k, v]) =>
        `${k}:${(v / N / bench.perRun).toFixed(1)}`
      ).join(" ")
      console.log(`${name}: ${(sup.total / N / bench.perRun).toFixed(1)} ops/op  ${per}`)
    }
  })).pipe(Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision)), Effect.supervised(sup))
)
