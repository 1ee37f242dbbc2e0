/**
 * VM b of the two-host suite (vm/pair): the client side, which drives the run. Connects to the
 * agent on VM a, then runs the connection cases of the conformance suite across the wire (server
 * half on a, client half here), the fault tests (faults.ts: a C peer on a, this side survives),
 * RdmaClient under the same faults (client.ts), RdmaClient over librdmacm with RdmaStream
 * on its endpoint, its server restarted (cmClient.ts), @effect/rpc across the wire (rpc.ts), two
 * @effect/cluster runners across the wire (cluster.ts), and the long single-connection run. Writes the results to PAIR_REPORT (JSON) for
 * scripts/test-summary.mjs; exits 0 only if everything passed.
 *
 *   PAIR_ONLY=<substring>   run only the tests whose name contains it (`a|b`: either)
 *   PAIR_LONG_WRITES=<n>    writes in the long run (default 100000; 0 skips it)
 */
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { Conformance } from "@effect-rdma/testing"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fs from "node:fs"
import * as NativeDriver from "../src/NativeDriver.js"
import { clientTests } from "./client.js"
import { clusterTests } from "./cluster.js"
import { cmClientTests } from "./cmClient.js"
import { cmFaultTests } from "./cmFaults.js"
import { faultTests } from "./faults.js"
import { type Channel, describeCause, dial, log, type Result } from "./harness.js"
import { longClient } from "./long.js"
import { rpcTests } from "./rpc.js"

const address = process.env.RDMA_ADDRESS!
const serverAddress = process.env.PEER_ADDRESS!
const report = process.env.PAIR_REPORT
const only = process.env.PAIR_ONLY ?? ""
/** PAIR_ONLY: a test runs if its name contains the substring, or one of several separated by `|`. */
const selected = (name: string) => only.split("|").some((part) => name.includes(part))
const longWrites = Number(process.env.PAIR_LONG_WRITES ?? "100000")

const liveCheck = Effect.flatMap(RdmaDriver, (d) => d.live).pipe(
  Effect.flatMap((live) =>
    Object.values(live).some((n) => n !== 0)
      ? Effect.fail(`handles alive at the end of the client half: ${JSON.stringify(live)}`)
      : Effect.void
  )
)

/** Waits for the server half's end, skipping whatever the client half left unread. */
const serverEnd = (channel: Channel, seconds: number) =>
  Effect.gen(function*() {
    for (;;) {
      const m = yield* channel.next
      if (m.closed) return { ok: false, error: "the agent closed the channel" }
      if (m.end !== undefined) return { ok: m.ok as boolean, error: m.error as string | undefined }
    }
  }).pipe(
    Effect.timeout(`${seconds} seconds`),
    Effect.catchAll(() => Effect.succeed({ ok: false, error: `the server half did not end within ${seconds} s` }))
  )

const results: Array<Result> = []
const record = (result: Result) =>
  Effect.zipRight(
    Effect.sync(() => results.push(result)),
    log(
      `${result.status === "passed" ? "PASS" : "FAIL"} [${result.group}] ${result.name} (${
        result.seconds.toFixed(1)
      } s)${result.error ? "\n    " + result.error.replaceAll("\n", "\n    ") : ""}`
    )
  )

const main = Effect.gen(function*() {
  yield* log(`runner on ${address}; the agent is on ${serverAddress}`)
  const channel = yield* dial(serverAddress)
  yield* log("connected to the agent")

  // The connection cases of the conformance suite, server on a, client here.
  for (const [i, testCase] of Conformance.pairCases.entries()) {
    if (!selected(testCase.name)) continue
    const port = 17100 + i
    const started = performance.now()
    yield* channel.send({ start: testCase.name, port, seconds: 120 })
    const client = yield* Effect.exit(
      Effect.scoped(testCase.client({ address, serverAddress, port, channel })).pipe(
        // disconnect: a half stuck in a finalizer is left behind, not waited for.
        Effect.disconnect,
        Effect.timeout("120 seconds"),
        Effect.zipRight(liveCheck)
      )
    )
    if (Exit.isFailure(client)) yield* channel.send({ abort: testCase.name, error: describeCause(client.cause) })
    const server = yield* serverEnd(channel, 150)
    const errors = [
      Exit.isFailure(client) ? `client half (b): ${describeCause(client.cause)}` : undefined,
      server.ok ? undefined : `server half (a): ${server.error}`
    ].filter((e) => e !== undefined)
    yield* record({
      group: "conformance across two hosts",
      name: testCase.name,
      status: errors.length === 0 ? "passed" : "failed",
      seconds: (performance.now() - started) / 1000,
      error: errors.length === 0 ? undefined : errors.join("\n")
    })
  }

  const groups = [
    ["faults across the wire", faultTests],
    ["faults on librdmacm's endpoints across the wire", cmFaultTests],
    ["RdmaClient across the wire", clientTests],
    ["RdmaClient over librdmacm across the wire", cmClientTests],
    ["@effect/rpc across the wire", rpcTests],
    ["@effect/cluster across the wire", clusterTests]
  ] as const
  for (const [group, test] of groups.flatMap(([group, tests]) => tests.map((test) => [group, test] as const))) {
    if (!selected(test.name)) continue
    const started = performance.now()
    const notes: Array<string> = []
    const exit = yield* Effect.exit(
      test.run({ address, serverAddress, channel, note: (line) => Effect.sync(() => void notes.push(line)) }).pipe(
        Effect.disconnect,
        Effect.timeout(`${"seconds" in test ? test.seconds : 300} seconds`)
      )
    )
    yield* record({
      group,
      name: test.name,
      status: Exit.isSuccess(exit) ? "passed" : "failed",
      seconds: (performance.now() - started) / 1000,
      error: Exit.isFailure(exit) ? describeCause(exit.cause) : undefined,
      notes
    })
  }

  const longName =
    `one connection, ${longWrites} rpma_writes across the wire; the server's events logged, no unexplained CLOSED`
  if (longWrites > 0 && selected(longName)) {
    const started = performance.now()
    yield* channel.send({ long: true, port: 17300, seconds: 3600 })
    const client = yield* Effect.exit(
      Effect.scoped(longClient(address, serverAddress, 17300, channel, longWrites)).pipe(
        Effect.tap(() => channel.send({ clientClosed: true })),
        Effect.zipLeft(liveCheck)
      )
    )
    if (Exit.isFailure(client)) yield* channel.send({ abort: "long", error: describeCause(client.cause) })
    const server = yield* serverEnd(channel, 120)
    const errors = [
      Exit.isFailure(client) ? `client (b): ${describeCause(client.cause)}` : undefined,
      server.ok ? undefined : `server (a): ${server.error}`
    ].filter((e) => e !== undefined)
    const notes = Exit.isSuccess(client)
      ? [
        `${client.value.completed} writes in ${client.value.elapsed.toFixed(1)} s (${
          (client.value.completed / client.value.elapsed).toFixed(0)
        } writes/s)`,
        `server events before the client was done: ${JSON.stringify(client.value.events)}`
      ]
      : []
    yield* record({
      group: "long run",
      name: longName,
      status: errors.length === 0 ? "passed" : "failed",
      seconds: (performance.now() - started) / 1000,
      error: errors.length === 0 ? undefined : errors.join("\n"),
      notes
    })
  }

  yield* channel.send({ quit: true })
  const failed = results.filter((r) => r.status === "failed").length
  yield* log(`two hosts: ${results.length - failed} passed, ${failed} failed`)
  return failed
})

Effect.runPromiseExit(main.pipe(Effect.provide(NativeDriver.layer))).then((exit) => {
  if (Exit.isFailure(exit)) console.error(`runner FAILED: ${describeCause(exit.cause)}`)
  if (report !== undefined) {
    fs.writeFileSync(report, JSON.stringify({ results, runner: Exit.isSuccess(exit) ? "ok" : "failed" }, null, 2))
  }
  process.exit(Exit.isSuccess(exit) && exit.value === 0 ? 0 : 1)
})
