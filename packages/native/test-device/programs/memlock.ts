// Registrations under a low RLIMIT_MEMLOCK, for test-device/Messages.test.ts: run bundled (see
// scripts/bundle-vm.mjs) in a child process whose limit is lowered and, as root, without
// CAP_IPC_LOCK (which ignores the limit). Prints one JSON line per case: how many registrations
// succeeded before the first failure, and that failure's tag and message.
//   node memlock.mjs <rdma address> <limit in bytes>
import { CmEndpoint, LocalMr, Peer, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as NativeDriver from "../../src/NativeDriver.js"

const [address = "", limitText = ""] = process.argv.slice(2)
const limit = Number(limitText)
const MiB = 2 ** 20

/** Registers `sizes` in order, all held until the first failure. */
const until = <E extends { readonly _tag: string; readonly message: string }, R>(
  name: string,
  sizes: ReadonlyArray<number>,
  register: (size: number) => Effect.Effect<unknown, E, R>
) =>
  Effect.gen(function*() {
    let registered = 0
    for (const size of sizes) {
      const error = yield* Effect.option(Effect.flip(register(size)))
      if (error._tag === "Some") return { case: name, registered, tag: error.value._tag, message: error.value.message }
      registered++
    }
    return { case: name, registered, tag: "none", message: "every registration succeeded" }
  }).pipe(Effect.scoped, Effect.tap((result) => Effect.sync(() => console.log(JSON.stringify(result)))))

const chunks = Array.from({ length: Math.ceil(limit / MiB) + 2 }, () => MiB)
// Over the limit, and under the 16 MiB from which the driver registers on a worker thread when
// the limit is at most 13 MiB.
const over = limit + 2 * MiB

const program = Effect.gen(function*() {
  const peer = yield* Peer.make(address)
  // Not connected: an endpoint's route to this host gives it the protection domain to register on.
  const ep = yield* CmEndpoint.make(address, 7471)
  yield* until("single", [over], (size) => LocalMr.allocate(peer, size, Usage.WRITE_DST))
  yield* until(
    "single on a worker thread",
    [Math.max(over, 16 * MiB)],
    (size) => LocalMr.allocate(peer, size, Usage.WRITE_DST)
  )
  yield* until("cumulative", chunks, (size) => LocalMr.allocate(peer, size, Usage.WRITE_DST))
  yield* until("rdma_reg_msgs single", [over], (size) => CmEndpoint.registerMessages(ep, new Uint8Array(size)))
  yield* until("rdma_reg_msgs cumulative", chunks, (size) => CmEndpoint.registerMessages(ep, new Uint8Array(size)))
})

Effect.runPromiseExit(program.pipe(Effect.scoped, Effect.provide(NativeDriver.layer))).then((exit) => {
  if (exit._tag === "Failure") {
    console.error(String(exit.cause))
    process.exitCode = 1
  }
})
