/**
 * The RPC client across a server process that is killed (SIGKILL) and started again, on a
 * simulated network shared by the processes (SimulatedNetwork): 16 callers' calls in flight fail
 * with RpcClientError, the client re-dials, and the calls are served by the new process; nothing
 * is left alive in either process.
 */
import { Peer } from "@effect-rdma/core"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Ledger, SimulatedDriver, SimulatedNetwork } from "@effect-rdma/testing"
import { RpcClient, RpcSerialization } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Schedule } from "effect"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { Group } from "./fixtures/group.js"

const fixture = fileURLToPath(new URL("./fixtures/rpc-server.ts", import.meta.url))
const root = fileURLToPath(new URL("../../../", import.meta.url))
const address = SimulatedDriver.DEFAULT_ADDRESS
const port = 7510
const callers = Array.from({ length: 16 }, (_, i) => i)

/** A server process, killed with the scope if still running; `next(pattern)` is its next output line that matches. */
const startServer = (path: string) =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, ["--import", "tsx", fixture, path, String(port)], {
          cwd: root,
          stdio: ["ignore", "pipe", "inherit"]
        })
      ),
      (child) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL"))
    )
    const pending: Array<string> = []
    let wake = () => {}
    createInterface({ input: child.stdout! }).on("line", (line) => {
      pending.push(line)
      wake()
    })
    child.on("exit", () => wake())
    const exited = Effect.async<number | string>((resume) => {
      if (child.exitCode !== null || child.signalCode !== null) {
        return resume(Effect.succeed(child.exitCode ?? child.signalCode!))
      }
      child.once("exit", (code, signal) => resume(Effect.succeed(code ?? signal ?? "unknown")))
    })
    const next = (pattern: RegExp) =>
      Effect.async<RegExpExecArray, Error>((resume) => {
        const look = () => {
          for (let line = pending.shift(); line !== undefined; line = pending.shift()) {
            const found = pattern.exec(line)
            if (found !== null) return resume(Effect.succeed(found))
          }
          if (child.exitCode !== null || child.signalCode !== null) {
            resume(Effect.fail(new Error(`the server ended before ${pattern}`)))
          }
        }
        wake = look
        look()
        return Effect.sync(() => (wake = () => {}))
      }).pipe(
        Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => new Error(`no ${pattern} from the server`) })
      )
    yield* next(/^serving$/)
    return { next, exited, kill: (signal: NodeJS.Signals) => Effect.sync(() => child.kill(signal)) }
  })

describe("@effect/rpc over RDMA: a server process restarted", () => {
  it.live(
    "calls in flight fail with RpcClientError when the server is killed; the client re-dials and is served by the new one",
    () =>
      Effect.gen(function*() {
        const path = yield* SimulatedNetwork.serve()
        yield* restarted(path).pipe(Effect.scoped, Ledger.checked, Effect.provide(SimulatedNetwork.layer({ path })))
      }).pipe(Effect.scoped),
    120_000
  )
})

/** The test's client, joined to the network at `path`, and its two server processes. */
const restarted = (path: string) =>
  Effect.gen(function*() {
    const first = yield* startServer(path)
    const client = yield* Effect.gen(function*() {
      const protocol = yield* Layer.build(
        RdmaRpc.layerProtocolClient({ transport: "rpma", address, port, retrySchedule: Schedule.spaced("50 millis") })
          .pipe(
            Layer.provide([Peer.layer(address), RpcSerialization.layerMsgPack])
          )
      )
      return yield* Effect.provide(RpcClient.make(Group), protocol)
    })
    const retried = <A, E extends { readonly _tag: string }>(call: Effect.Effect<A, E>) =>
      call.pipe(
        Effect.retry({ schedule: Schedule.spaced("50 millis"), while: (e) => e._tag === "RpcClientError" }),
        Effect.timeoutFail({
          duration: "60 seconds",
          onTimeout: () => new Error("no answer from the restarted server")
        })
      )
    assert.deepStrictEqual(
      yield* Effect.forEach(callers, (i) => client.Add({ a: i, b: i }), { concurrency: "unbounded" }),
      callers.map((i) => 2 * i)
    )
    const inFlight = yield* Effect.fork(
      Effect.forEach(callers, () => Effect.flip(client.Hang()), { concurrency: "unbounded" })
    )
    yield* first.next(new RegExp(`^hanging ${callers.length}$`))
    yield* first.kill("SIGKILL")
    const failures = yield* Fiber.join(inFlight)
    assert.deepStrictEqual(failures.map((e) => e._tag), callers.map(() => "RpcClientError"))
    assert.strictEqual(yield* first.exited, "SIGKILL")

    const second = yield* startServer(path)
    assert.deepStrictEqual(
      yield* Effect.forEach(callers, (i) => retried(client.Add({ a: i, b: 1 })), { concurrency: "unbounded" }),
      callers.map((i) => i + 1)
    )
    yield* second.kill("SIGTERM")
    const [, live] = yield* second.next(/^live (\d+)$/)
    assert.strictEqual(live, "0", "nothing left alive in the server process")
    assert.strictEqual(yield* second.exited, 0)
  })
