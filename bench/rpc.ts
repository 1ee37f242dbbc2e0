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
 * Floors, in the same run (issue 31; bench/floors.ts, shared with bench/cluster.ts): C's bare
 * ping-pong of the same sizes over each transport, bench/c/cm_bench.c over the RDMA device
 * (librdmacm send/receive) and bench/c/tcp_bench.c over the TCP loopback. Where the emulated device's floor is slower than TCP's, an RPC over RDMA cannot
 * beat one over TCP; the floor rows compare what each RPC costs over its own transport's floor.
 * Run when the programs are built (bench/device.sh builds them; RPC_FLOORS=0 skips them) and, for
 * the RDMA floor, on a device. A throughput row's floor is the ping-pong's one-at-a-time rate.
 *
 *   RPC_SCALE=0.1 scales every call count
 *   RPC_TRANSPORT=cm (default rpma) measures @effect-rdma/rpc's librdmacm transport instead
 *   RPC_ONLY=rdma (or tcp) measures one side only, RPC_SIZES=64 one size only: for a profile
 *   (node --cpu-prof) or an instruction count of one path
 *   RPC_CM_INLINE=4096, RPC_CM_RECEIVES=16 set the cm channel's inlineSize / receives on both
 *   sides (default: the channel's defaults; host only: bench/device.sh does not pass them)
 */
import { Peer } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { NativeDriver } from "@effect-rdma/native"
import { RdmaRpc } from "@effect-rdma/rpc"
import { SimulatedDriver } from "@effect-rdma/testing"
import { NodeSocket, NodeSocketServer } from "@effect/platform-node"
import { Rpc, RpcClient, type RpcClientError, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { Effect, Layer, Schema } from "effect"
import { cFloors, floorRows } from "./floors.js"
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
].filter(([bytes]) => process.env.RPC_SIZES === undefined || process.env.RPC_SIZES.split(",").includes(String(bytes)))
  .map(([bytes, label, n]) =>
    [bytes as number, label as string, Math.max(20, Math.round((n as number) * scale))] as const
  )
const only = process.env.RPC_ONLY
const transportName = process.env.RPC_TRANSPORT ?? "rpma"
if (transportName !== "rpma" && transportName !== "cm") {
  console.error(`RPC_TRANSPORT must be rpma or cm, got ${transportName}`)
  process.exit(2)
}
const transport: "rpma" | "cm" = transportName
/** RPC_CM_INLINE / RPC_CM_RECEIVES: the cm channel's inlineSize / receives (default: the channel's defaults). */
const cmOptions = {
  ...(process.env.RPC_CM_INLINE === undefined ? {} : { inlineSize: Number(process.env.RPC_CM_INLINE) }),
  ...(process.env.RPC_CM_RECEIVES === undefined ? {} : { receives: Number(process.env.RPC_CM_RECEIVES) })
}

type Client = RpcClient.FromGroup<typeof Group, RpcClientError.RpcClientError>

const rdmaProtocolServer: Layer.Layer<
  RpcServer.Protocol,
  unknown,
  Driver.RdmaDriver | RpcSerialization.RpcSerialization
> = transport === "cm"
  ? RdmaRpc.layerProtocolServer({ transport, address, port: rdmaPort, ...cmOptions })
  : RdmaRpc.layerProtocolServer({ transport, address, port: rdmaPort }).pipe(Layer.provide(Peer.layer(address)))
const rdmaServer = RpcServer.layer(Group).pipe(
  Layer.provide(Handlers),
  Layer.provide(rdmaProtocolServer)
)
const rdmaClient: Layer.Layer<RpcClient.Protocol, unknown, Driver.RdmaDriver | RpcSerialization.RpcSerialization> =
  transport === "cm"
    ? RdmaRpc.layerProtocolClient({ transport, address, port: rdmaPort, ...cmOptions })
    : RdmaRpc.layerProtocolClient({ transport, address, port: rdmaPort }).pipe(Layer.provide(Peer.layer(address)))
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
  const clients: Array<readonly ["rdma" | "tcp", Client]> = []
  if (only !== "tcp") {
    yield* Layer.build(rdmaServer)
    clients.push(["rdma", yield* Effect.provide(RpcClient.make(Group), yield* Layer.build(rdmaClient))])
  }
  if (only !== "rdma") {
    yield* Layer.build(tcpServer)
    clients.push(["tcp", yield* Effect.provide(RpcClient.make(Group), yield* Layer.build(tcpClient))])
  }
  const floors = process.env.RPC_FLOORS === "0"
    ? {}
    : cFloors("rpc", device, sizes.map(([bytes, , calls]) => [bytes, calls] as const))
  const rows: Array<Row> = []
  for (const [bytes, label, calls] of sizes) {
    const data = new Uint8Array(bytes).fill(7)
    // Warm-up: the JIT (slow under TCG) and both connections' buffers.
    for (const [, client] of clients) yield* measure(client, data, calls)
    const best = { rdma: { latencyUs: Infinity, callsPerSecond: 0 }, tcp: { latencyUs: Infinity, callsPerSecond: 0 } }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, client] of clients) {
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
    for (
      const row of floorRows({
        what: "RPC",
        label,
        concurrency: CONCURRENCY,
        floors,
        bytes,
        rdma: best.rdma,
        tcp: best.tcp
      })
    ) rows.push(row)
  }
  console.log(
    `\n@effect/rpc over RDMA (${transport} transport) against the TCP socket protocol (${
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
