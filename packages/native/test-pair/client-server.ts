/**
 * The server of the RdmaClient tests across two hosts (client.ts): a process of its own on VM a,
 * so that it can be killed (SIGKILL) and started again, as a service's server is. It registers a
 * region, accepts every connection on the RDMA port (each served until it ends), and offers the
 * region's descriptor over DescriptorExchange (TLS, the repository's test certificates) on the
 * offer port. Prints `ready` when both listen; on `stop` (a line on stdin, or stdin's end) closes
 * everything, prints `live <Driver.live as JSON>`, and exits 0.
 *
 *   node client-server.mjs <address> <rdma port> <offer port>    (the agent starts it)
 */
import { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { createInterface } from "node:readline"
import * as NativeDriver from "../src/NativeDriver.js"
import { serveClients } from "./client.js"

const [address, rdmaPort, offerPort] = process.argv.slice(2)

const stopRequested = Effect.async<void>((resume) => {
  const lines = createInterface({ input: process.stdin })
  lines.on("line", (line) => line.trim() === "stop" && resume(Effect.void))
  lines.on("close", () => resume(Effect.void))
})

const program = Effect.gen(function*() {
  const scope = yield* Scope.make()
  const started = yield* Effect.exit(
    serveClients(address!, { rdmaPort: Number(rdmaPort), offerPort: Number(offerPort) }).pipe(Scope.extend(scope))
  )
  if (Exit.isSuccess(started)) {
    console.log("ready")
    yield* stopRequested
  }
  // Bounded: each connection's close waits at most its timeout (a client that never answers a disconnect).
  const closed = yield* Effect.exit(Scope.close(scope, Exit.void).pipe(Effect.timeout("60 seconds")))
  const live = yield* Effect.flatMap(RdmaDriver, (d) => d.live)
  console.log(`live ${JSON.stringify(live)}`)
  if (Exit.isFailure(started)) console.log(`failed to start: ${String(started.cause)}`)
  if (Exit.isFailure(closed)) console.log(`failed to close: ${String(closed.cause)}`)
  return Exit.isSuccess(started) && Exit.isSuccess(closed)
})

Effect.runPromise(program.pipe(Effect.provide(NativeDriver.layer))).then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.log(`failed: ${String(error)}`)
    process.exit(1)
  }
)
