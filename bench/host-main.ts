/**
 * The host benches as a program, run from its bundle (bench/bundle.ts: bench/.build/host.mjs):
 *
 *   node bench/.build/host.mjs --timed            the timed host rows, as JSON
 *   node --single-threaded bench/.build/host.mjs [bench ...]
 *                                                 each bench warmed up, then measured 3 times, each
 *                                                 between two marks, for callgrind (bench/instructions.ts)
 */
import { Effect } from "effect"
import { loadavg } from "node:os"
import { cmSetup } from "./cmHost.js"
import { callgrindRuns, hostRows, setup } from "./host.js"

const args = process.argv.slice(2)
if (args[0] === "--timed") {
  console.log(JSON.stringify(await Effect.runPromise(hostRows)))
} else {
  // Under valgrind everything runs ~50× slower: slow the clock the driver's fairness budget reads
  // (2 ms of synchronous completions), so that it fires as often per operation as natively.
  const slowdown = Number(process.env.CLOCK_SLOWDOWN ?? "1")
  if (slowdown !== 1) {
    const now = performance.now.bind(performance)
    performance.now = () => now() / slowdown
  }
  // os.loadavg() calls uv_loadavg, which nothing else calls: callgrind dumps its counters there
  // (--dump-before=uv_loadavg), so each measured stretch is a dump of its own, startup and
  // warm-up excluded: per operation = Ir(dump) / (runs × operations per run).
  const mark = Effect.sync(() => loadavg())
  const STRETCHES = 3
  await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    // bench/cm.ts's ping-pong on the simulated driver last: its endpoints' watchdogs tick from
    // then on, so they are not counted in the NativeDriver benches.
    for (const group of [setup, cmSetup]) {
      const benches = yield* group
      for (const [name, bench] of Object.entries(benches)) {
        if (args.length > 0 && !args.includes(name)) continue
        const n = callgrindRuns[name]!
        yield* bench.run(n)
        // Three measured stretches: a major GC or a tier-up of the JIT can land in one of them.
        for (let stretch = 0; stretch < STRETCHES; stretch++) {
          yield* mark
          yield* bench.run(n)
          yield* mark
        }
        console.log(`measured ${name} ${n * bench.perRun}`)
      }
    }
  })))
}
