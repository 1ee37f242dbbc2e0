/**
 * A small registration service: a "server" peer exposes a pool of registered regions by their
 * descriptors, a "client" side rebuilds them as remote regions, checks what they allow, and every
 * cycle's registrations are released with its scope. Runs on the simulated driver by default;
 * `--native --address <ip>` runs it on a real RDMA device.
 *
 *   pnpm tsx examples/registrations.ts                # simulated driver
 *   pnpm tsx examples/registrations.ts --cycles 500   # more traffic
 *   pnpm tsx examples/registrations.ts --native --address 192.168.77.1
 */
import { CmEndpoint, Descriptor, LocalMr, Memory, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { Console, Effect, Layer } from "effect"
import { parseArgs } from "node:util"

const { values: args } = parseArgs({
  // `pnpm example -- --flag` passes its "--" along: drop it.
  args: process.argv.slice(2).filter((arg, i) => !(i === 0 && arg === "--")),
  options: {
    native: { type: "boolean", default: false },
    address: { type: "string", default: SimulatedDriver.DEFAULT_ADDRESS },
    cycles: { type: "string", default: "200" },
    regions: { type: "string", default: "8" }
  }
})
const cycles = Number(args.cycles)
const regionsPerCycle = Number(args.regions)

/** The native driver is imported only when asked for, so the example runs where it was never built. */
const nativeLayer: Layer.Layer<Driver.RdmaDriver, unknown> = Layer.unwrapEffect(
  Effect.promise(() => import("@effect-rdma/native" as string)).pipe(
    Effect.map((native: { NativeDriver: { layer: Layer.Layer<Driver.RdmaDriver, unknown> } }) =>
      native.NativeDriver.layer
    )
  )
)

/** One cycle: register a pool, publish its descriptors, rebuild and check them on the other side. */
const cycle = Effect.fn("cycle")(function*(n: number) {
  const peer = yield* Peer.Peer
  const usage = Usage.combine(Usage.WRITE_DST, Usage.READ_SRC, Usage.FLUSH_TYPE_VISIBILITY)
  const pool = yield* Effect.forEach(
    Array.from({ length: regionsPerCycle }, (_, i) => 4096 << (i % 5)),
    (size) => LocalMr.allocate(peer, size, usage)
  )
  // What the server would send over TLS.
  const published = yield* Effect.forEach(pool, LocalMr.descriptor)
  // The client side: never trust the bytes; rebuild, then check the usage it needs.
  const remotes = yield* Effect.forEach(
    published,
    (bytes) => RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
  )
  let bytes = 0n
  for (const [i, remote] of remotes.entries()) {
    if (remote.descriptor.address !== pool[i]!.address) return yield* Effect.dieMessage("descriptor mismatch")
    bytes += remote.size
  }
  // Message buffers on an rdma_cm endpoint (made, not connected), as a send/recv path would use.
  const ep = yield* CmEndpoint.make(peer.address, 7471)
  yield* CmEndpoint.registerMessages(ep, Buffer.alloc(4096))
  if (n % 50 === 0) yield* Console.log(`cycle ${n}: ${pool.length} regions, ${bytes} bytes exposed`)
  return bytes
})

const main = Effect.gen(function*() {
  const driver = yield* Driver.RdmaDriver
  yield* Console.log(`effect-rdma example on the ${driver.name} driver, device at ${args.address}`)
  const started = performance.now()
  let exposed = 0n
  for (let n = 1; n <= cycles; n++) exposed += yield* Effect.scoped(cycle(n))
  const seconds = (performance.now() - started) / 1000
  const registrations = cycles * (regionsPerCycle + 1)
  yield* Console.log(
    `done: ${cycles} cycles, ${registrations} registrations (${Math.round(registrations / seconds)}/s), ` +
      `${exposed} bytes exposed in all, in ${seconds.toFixed(2)} s`
  )
  const sample = yield* Effect.scoped(
    Effect.flatMap(
      Memory.allocate(4096),
      (m) =>
        Effect.flatMap(Peer.Peer, (peer) => LocalMr.register(peer, m, Usage.READ_SRC)).pipe(
          Effect.flatMap(LocalMr.describe)
        )
    )
  )
  yield* Console.log(`a descriptor: ${Descriptor.format(sample)}`)
})

const program: Effect.Effect<void, unknown> = args.native
  ? main.pipe(Effect.provide(Peer.layer(args.address)), Effect.provide(nativeLayer))
  : main.pipe(
    Effect.provide(Peer.layer(args.address)),
    // On the simulated driver, prove that nothing outlived its scope.
    Effect.zipLeft(Effect.flatMap(Ledger.live, (live) => Console.log(`live resources at exit: ${live.length}`))),
    Effect.zipLeft(Ledger.assertEmpty),
    Effect.provide(SimulatedDriver.layerWith({ devices: [args.address] }))
  )

Effect.runPromise(program).catch((error) => {
  console.error(String(error))
  process.exitCode = 1
})
