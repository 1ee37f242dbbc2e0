/**
 * One @effect/rpc call over RDMA (@effect-rdma/rpc) against the same call over @effect/platform's
 * socket protocol (RpcServer.layerProtocolSocketServer / RpcClient.layerProtocolSocket over TCP
 * on the loopback), in the same process and the same rounds: round-trip latency (one call at a
 * time) and throughput (CONCURRENCY calls in flight), with a small payload (inline: a send each
 * way) and a 64 KiB one (written into the landing region, then announced and acknowledged).
 * Both use msgpack. Rounds alternate between the two (best of ROUNDS), after a warm-up of each.
 *
 * In the Soft-RoCE VM (bench/device.sh) with RDMA_ADDRESS set: the native driver on rxe0. Without
 * it: the simulated driver, for a quick look on the host (not a device figure).
 *
 *   RPC_SCALE=0.1 scales every call count
 */
import { Peer } from "@effect-rdma/core"
import { NativeDriver } from "@effect-rdma/native"
import { RdmaRpcClient, RdmaRpcServer } from "@effect-rdma/rpc"
import { SimulatedDriver } from "@effect-rdma/testing"
import { NodeSocket, NodeSocketServer } from "@effect/platform-node"
import { Rpc, RpcClient, type RpcClientError, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { Effect, Layer, Schema } from "effect"
import { printTable, type Row } from "./table.js"

const device = process.env.RDMA_ADDRESS
const address = device ?? SimulatedDriver.DEFAULT_ADDRESS
const scale = Number(process.env.RPC_SCALE ?? "1")
const ROUNDS = 5
const CONCURRENCY = 16
const [rdmaPort, tcpPort] = [7483, 7490]

const Group = RpcGroup.make(
  Rpc.make("Echo", { payload: { data: Schema.Uint8ArrayFromSelf }, success: Schema.Uint8ArrayFromSelf })
)
const Handlers = Group.toLayer({ Echo: ({ data }) => Effect.succeed(data) })

const sizes: ReadonlyArray<readonly [bytes: number, label: string, calls: number]> = [
  [64, "64 B", 2000],
  [65536, "64 KiB", 300]
].map(([bytes, label, n]) =>
  [bytes as number, label as string, Math.max(20, Math.round((n as number) * scale))] as const
)

type Client = RpcClient.FromGroup<typeof Group, RpcClientError.RpcClientError>

const rdmaServer = RpcServer.layer(Group).pipe(
  Layer.provide(Handlers),
  Layer.provide(RdmaRpcServer.layerProtocol({ address, port: rdmaPort })),
  Layer.provide(Peer.layer(address))
)
const rdmaClient = RdmaRpcClient.layerProtocol({ address, port: rdmaPort }).pipe(Layer.provide(Peer.layer(address)))
const tcpServer = RpcServer.layer(Group).pipe(
  Layer.provide(Handlers),
  Layer.provide(RpcServer.layerProtocolSocketServer),
  Layer.provide(NodeSocketServer.layer({ host: "127.0.0.1", port: tcpPort }))
)
const tcpClient = RpcClient.layerProtocolSocket().pipe(
  Layer.provide(NodeSocket.layerNet({ host: "127.0.0.1", port: tcpPort }))
)

/** µs per call, one at a time; calls per second, CONCURRENCY at a time. */
const measure = (client: Client, data: Uint8Array, calls: number) =>
  Effect.gen(function*() {
    let t0 = performance.now()
    for (let i = 0; i < calls; i++) yield* client.Echo({ data })
    const latencyUs = ((performance.now() - t0) * 1000) / calls
    t0 = performance.now()
    yield* Effect.forEach(Array.from({ length: calls }), () => client.Echo({ data }), {
      concurrency: CONCURRENCY,
      discard: true
    })
    const callsPerSecond = calls / ((performance.now() - t0) / 1000)
    return { latencyUs, callsPerSecond }
  })

const program = Effect.gen(function*() {
  yield* Layer.build(rdmaServer)
  yield* Layer.build(tcpServer)
  const rdma: Client = yield* Effect.provide(RpcClient.make(Group), yield* Layer.build(rdmaClient))
  const tcp: Client = yield* Effect.provide(RpcClient.make(Group), yield* Layer.build(tcpClient))
  const rows: Array<Row> = []
  for (const [bytes, label, calls] of sizes) {
    const data = new Uint8Array(bytes).fill(7)
    // Warm-up: the JIT (slow under TCG) and both connections' buffers.
    yield* measure(rdma, data, calls)
    yield* measure(tcp, data, calls)
    const best = { rdma: { latencyUs: Infinity, callsPerSecond: 0 }, tcp: { latencyUs: Infinity, callsPerSecond: 0 } }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, client] of [["rdma", rdma], ["tcp", tcp]] as const) {
        const m = yield* measure(client, data, calls)
        best[name] = {
          latencyUs: Math.min(best[name].latencyUs, m.latencyUs),
          callsPerSecond: Math.max(best[name].callsPerSecond, m.callsPerSecond)
        }
      }
      process.stderr.write(`rpc ${label}: round ${round + 1}/${ROUNDS}\n`)
    }
    rows.push({
      what: `RPC round trip, ${label} each way (µs per call, one at a time)`,
      ours: `${best.rdma.latencyUs.toFixed(1)} µs`,
      baseline: `${best.tcp.latencyUs.toFixed(1)} µs (TCP socket)`,
      ratio: best.rdma.latencyUs / best.tcp.latencyUs,
      target: "≤ 1× (report)",
      met: best.rdma.latencyUs <= best.tcp.latencyUs
    })
    rows.push({
      what: `RPC throughput, ${label} each way (${CONCURRENCY} in flight)`,
      ours: `${Math.round(best.rdma.callsPerSecond)} calls/s`,
      baseline: `${Math.round(best.tcp.callsPerSecond)} calls/s (TCP socket)`,
      ratio: best.tcp.callsPerSecond / best.rdma.callsPerSecond,
      target: "≤ 1× (report)",
      met: best.rdma.callsPerSecond >= best.tcp.callsPerSecond
    })
  }
  console.log(
    `\n@effect/rpc over RDMA against the TCP socket protocol (${
      device === undefined ? "simulated driver" : `native driver, ${device}`
    }, msgpack, best of ${ROUNDS} rounds)\n`
  )
  printTable(rows)
})

const DriverLive = device === undefined ? SimulatedDriver.layer : NativeDriver.layer
Effect.runPromise(
  Effect.scoped(program).pipe(
    Effect.provide(Layer.merge(DriverLive, RpcSerialization.layerMsgPack))
  )
).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
