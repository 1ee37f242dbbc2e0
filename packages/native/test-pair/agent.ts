/**
 * VM a of the two-host suite (vm/pair): the server side. Waits for the runner on VM b, then does
 * what it asks, one request at a time: the server half of a conformance case, the C peer of a
 * fault test (started, killed), the server of the long run, the CmListener of
 * cmClient.ts, PostgreSQL and the cluster runner on a
 * (cluster.ts). Exits when the runner says so.
 *
 *   node --import tsx packages/native/test-pair/agent.ts     (RDMA_ADDRESS set by vm/pair)
 */
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { Conformance } from "@effect-rdma/testing"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Scope from "effect/Scope"
import { type ChildProcess, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import * as NativeDriver from "../src/NativeDriver.js"
import { clientServerRequest } from "./client.js"
import { clusterCleanup, clusterRequest } from "./cluster.js"
import { cmClientRequest } from "./cmClient.js"
import { type Channel, describeCause, fail, listen, log, type Message } from "./harness.js"
import { longServer } from "./long.js"
import { rpcRequest } from "./rpc.js"

const address = process.env.RDMA_ADDRESS!
const peerAddress = process.env.PEER_ADDRESS!
const peerBinary = process.env.PAIR_PEER_BINARY!
/** cm_peer.c, the C peer of cmFaults.ts: a client one connects to the runner's address. */
const cmPeerBinary = process.env.PAIR_CM_PEER_BINARY!

const liveTotal = Effect.flatMap(RdmaDriver, (d) => d.live).pipe(
  Effect.map((live) => ({ live, total: Object.values(live).reduce((a, b) => a + b, 0) }))
)

/** Runs a server half, then reports it (and what the driver still holds) to the runner. */
const runHalf = (
  channel: Channel,
  name: string,
  half: Effect.Effect<void, unknown, RdmaDriver | Scope.Scope>,
  seconds: number
) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(
      Effect.scoped(half).pipe(
        Effect.disconnect,
        Effect.timeoutFail({
          duration: `${seconds} seconds`,
          onTimeout: () => `the server half took over ${seconds} s`
        })
      )
    )
    const { live, total } = yield* liveTotal
    const error = Exit.isFailure(exit)
      ? describeCause(exit.cause)
      : total !== 0
      ? `handles alive at the end of the server half: ${JSON.stringify(live)}`
      : undefined
    yield* log(`server half of "${name}": ${error === undefined ? "ok" : "FAILED: " + error}`)
    yield* channel.send({ end: name, ok: error === undefined, error })
  })

const children = new Map<number, ChildProcess>()

/** Starts the C peer and answers once it listens; its output goes to the log. */
const spawnPeer = (channel: Channel, m: Message) =>
  Effect.async<void>((resume) => {
    const started = performance.now()
    const [binary, host] = m.program === "cm"
      ? [cmPeerBinary, m.mode === "client" ? peerAddress : address]
      : [peerBinary, address]
    const c = spawn(binary, [host, String(m.port), m.mode], { stdio: ["ignore", "pipe", "inherit"] })
    children.set(c.pid!, c)
    let ready = false
    createInterface({ input: c.stdout! }).on("line", (line) => {
      console.log(`peer ${c.pid}: ${line}`)
      if (line === "ready" && !ready) {
        ready = true
        Effect.runSync(
          channel.send({ spawned: c.pid, seconds: (performance.now() - started) / 1000 })
        )
        resume(Effect.void)
      }
    })
    c.on("exit", (code, signal) => {
      console.log(`peer ${c.pid}: exited (${signal ?? code})`)
      children.delete(c.pid!)
      if (!ready) {
        ready = true
        Effect.runSync(channel.send({ spawned: null, error: `the C peer exited with ${signal ?? code}` }))
        resume(Effect.void)
      }
    })
  })

const killPeer = (channel: Channel, m: Message) =>
  Effect.async<void>((resume) => {
    const c = children.get(m.pid)
    if (c === undefined) {
      Effect.runSync(channel.send({ killed: false }))
      return resume(Effect.void)
    }
    c.once("exit", () => {
      Effect.runSync(channel.send({ killed: true }))
      resume(Effect.void)
    })
    c.kill(m.signal ?? "SIGKILL")
  })

const main = Effect.gen(function*() {
  yield* log(`agent on ${address}, waiting for the runner on ${peerAddress}`)
  const channel = yield* listen(address)
  yield* log("runner connected")
  for (;;) {
    const m = yield* channel.next
    if (m.closed || m.quit) break
    if (m.start !== undefined) {
      const testCase = Conformance.pairCases.find((c) => c.name === m.start)
      const half = testCase === undefined
        ? fail(`no case named "${m.start}" on the agent`)
        : testCase.server({ address, serverAddress: address, port: m.port, channel })
      yield* runHalf(channel, m.start, half, m.seconds ?? 120)
    } else if (m.spawnPeer !== undefined) {
      yield* spawnPeer(channel, m)
    } else if (m.killPeer !== undefined) {
      yield* killPeer(channel, m)
    } else if (m.long !== undefined) {
      yield* runHalf(channel, "long run", longServer(address, m.port, channel), m.seconds ?? 3600)
    } else if (m.clientServer !== undefined) {
      yield* clientServerRequest(channel, address, m)
    } else if (m.cmClient !== undefined) {
      yield* cmClientRequest(channel, address, m)
    } else if (m.rpc !== undefined) {
      yield* rpcRequest(channel, address, m)
    } else if (m.cluster !== undefined) {
      yield* clusterRequest(channel, address, m)
    } else {
      yield* log(`unexpected message: ${JSON.stringify(m)}`)
    }
  }
  for (const c of children.values()) c.kill("SIGKILL")
  yield* clusterCleanup
  yield* log("agent done")
})

Effect.runPromiseExit(main.pipe(Effect.provide(NativeDriver.layer))).then((exit) => {
  if (Exit.isFailure(exit)) console.error(`agent FAILED: ${describeCause(exit.cause)}`)
  process.exit(Exit.isSuccess(exit) ? 0 : 1)
})
