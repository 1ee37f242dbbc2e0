/**
 * The C floors of the RPC benchmarks (issue 31), shared by bench/rpc.ts and bench/cluster.ts: C's
 * bare ping-pong over each transport, bench/c/cm_bench.c over the RDMA device (librdmacm
 * send/receive) and bench/c/tcp_bench.c over the TCP loopback, run when the programs are built
 * (bench/device.sh builds them) and, for the RDMA floor, on a device; and the rows that compare
 * what a call costs over each transport's floor. A throughput row's floor is the ping-pong's
 * one-at-a-time rate.
 */
import { execFileSync } from "node:child_process"
import { existsSync } from "node:fs"
import type { Row } from "./table.js"

/** C's ping-pong µs per round trip for each size, over RDMA and over TCP, where it could be run. */
export interface Floors {
  readonly rdma?: ReadonlyMap<number, number>
  readonly tcp?: ReadonlyMap<number, number>
}

/**
 * Runs C's ping-pong of each `[bytes, round trips]` over the RDMA device at `device` (when set)
 * and over the TCP loopback; `tag` names the benchmark in the log lines on stderr.
 */
export const cFloors = (
  tag: string,
  device: string | undefined,
  sizes: ReadonlyArray<readonly [bytes: number, roundTrips: number]>
): Floors => {
  const run = (program: string, host: string, port: number) => {
    if (!existsSync(program)) return undefined
    const args = sizes.map(([bytes, roundTrips]) => `pingpong:${bytes}:${roundTrips}`)
    const lines = execFileSync(program, [host, String(port), ...args], { encoding: "utf8" }).trim().split("\n")
    process.stderr.write(`${tag} floor ${program}: ${lines.join("; ")}\n`)
    return new Map(lines.map((line) => {
      const words = line.split(" ")
      return [Number(words[1]), Number(words[3])] as const
    }))
  }
  const rdma = device === undefined ? undefined : run("bench/.build/cm_bench", device, 7497)
  const tcp = run("bench/.build/tcp_bench", "127.0.0.1", 7498)
  return { ...(rdma === undefined ? {} : { rdma }), ...(tcp === undefined ? {} : { tcp }) }
}

/** One side's figures: µs per call one at a time, calls per second with several in flight. */
export interface Figures {
  readonly latencyUs: number
  readonly callsPerSecond: number
}

/**
 * The floor rows of one size, when both floors are known: the two floors against each other, then
 * the round trip and the in-flight rate of `what` ("RPC", "entity call") over each transport's
 * floor. Where RDMA's floor is the slower one, a call over RDMA cannot beat one over TCP in wall
 * time, and these rows are the target.
 */
export const floorRows = (options: {
  readonly what: string
  readonly label: string
  readonly concurrency: number
  readonly floors: Floors
  readonly bytes: number
  readonly rdma: Figures
  readonly tcp: Figures
}): Array<Row> => {
  const rdmaFloor = options.floors.rdma?.get(options.bytes)
  const tcpFloor = options.floors.tcp?.get(options.bytes)
  if (rdmaFloor === undefined || tcpFloor === undefined) return []
  const rows: Array<Row> = [{
    what: `  floors, ${options.label}: C ping-pong over RDMA against over TCP (µs per round trip)`,
    ours: `${rdmaFloor.toFixed(1)} µs`,
    baseline: `${tcpFloor.toFixed(1)} µs (C over TCP)`,
    ratio: rdmaFloor / tcpFloor,
    target: "informative",
    met: undefined
  }]
  for (
    const [what, rdmaUs, tcpUs] of [
      ["round trip", options.rdma.latencyUs, options.tcp.latencyUs],
      [
        `${options.concurrency} in flight`,
        1e6 / options.rdma.callsPerSecond,
        1e6 / options.tcp.callsPerSecond
      ]
    ] as const
  ) {
    const overRdma = rdmaUs / rdmaFloor
    const overTcp = tcpUs / tcpFloor
    rows.push({
      what: `  ${options.what} ${what}, ${options.label}, over its transport's C floor`,
      ours: `${overRdma.toFixed(2)}× (RDMA)`,
      baseline: `${overTcp.toFixed(2)}× (TCP)`,
      ratio: overRdma / overTcp,
      target: rdmaFloor > tcpFloor ? "≤ 1×" : "informative (RDMA's floor is not slower)",
      met: rdmaFloor > tcpFloor ? overRdma <= overTcp : undefined
    })
  }
  return rows
}
