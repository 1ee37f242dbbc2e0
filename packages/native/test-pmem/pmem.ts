// The persistent-memory device test's program, run in the VM twice by scripts/test-pmem, with the
// NVDIMM's namespace as a device DAX (/dev/dax0.0, set up by guest.sh):
//   write  a server maps the device with Memory.mapFile and registers it WRITE_DST |
//          FLUSH_TYPE_PERSISTENT; a client connected with directWriteToPmem writes a block and
//          flushes it persistently (rpma_flush PERSISTENT); then the program says so in a file on
//          the work share and waits, still holding everything, for the host to kill its VM;
//   check  after the VM was booted again on the same backing file: the block is there.
// Bundled on the host (test-pair/bundle.mjs): under emulation, compiling TypeScript at start-up costs a minute.
import { Connection, Listener, LocalMr, Memory, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import type { RdmaDriver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as NativeDriver from "../src/NativeDriver.js"

const phase = process.argv[2]
const device = process.env.PMEM_DEVICE ?? "/dev/dax0.0"
const address = process.env.RDMA_ADDRESS ?? "192.168.77.1"
const token = process.env.PMEM_TOKEN ?? "no token"
const flushedFile = process.env.PMEM_FLUSHED ?? ".cache/test/pmem/flushed"
// A device DAX maps in units of its alignment: 2 MiB.
const SIZE = 2 << 20
const OFFSET = 65536
const LENGTH = 4096

/** The block the client writes: the run's token, then bytes that depend on it and their offset. */
const expected = (() => {
  const bytes = new Uint8Array(LENGTH)
  const head = new TextEncoder().encode(`effect-rdma pmem ${token}\n`)
  bytes.set(head)
  let seed = 0
  for (const b of head) seed = (seed * 31 + b) >>> 0
  for (let i = head.byteLength; i < LENGTH; i++) bytes[i] = (seed + i * 7) & 0xff
  return bytes
})()

const say = (line: string) => Effect.sync(() => console.log(`pmem ${phase}: ${line}`))
const same = (a: Uint8Array, b: Uint8Array) => a.byteLength === b.byteLength && a.every((x, i) => x === b[i])

const persistent = Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_PERSISTENT)

const write = Effect.gen(function*() {
  const serverPeer = yield* Peer.make(address)
  const memory = yield* Memory.mapFile({ path: device, size: SIZE })
  const block = memory.subarray(OFFSET, OFFSET + LENGTH)
  if (!block.every((b) => b === 0)) return yield* Effect.dieMessage("the NVDIMM is not fresh: the block is not zero")
  const target = yield* LocalMr.register(serverPeer, memory, persistent)
  const ep = yield* Listener.make(serverPeer, address, 17900)
  const accepting = yield* Effect.fork(Listener.acceptNext(ep))

  const clientPeer = yield* Peer.make(address)
  const client = yield* Connection.connect(clientPeer, address, 17900, { directWriteToPmem: true })
  yield* Fiber.join(accepting)
  const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
    Effect.flatMap(RemoteMr.require(persistent))
  )
  const src = yield* LocalMr.allocate(clientPeer, LENGTH, Usage.WRITE_SRC)
  src.memory.set(expected)
  yield* Connection.write(client, { dst: remote, dstOffset: OFFSET, src, srcOffset: 0, length: LENGTH })
  yield* Connection.flush(client, { type: "persistent", dst: remote, dstOffset: OFFSET, length: LENGTH })
  if (!same(block, expected)) return yield* Effect.dieMessage("the server's mapping does not hold the written block")
  yield* say(`${LENGTH} bytes written at ${OFFSET} of ${device} and flushed persistently; waiting to be killed`)
  yield* Effect.sync(() => fs.writeFileSync(flushedFile, `${token}\n`))
  return yield* Effect.never
})

const check = Effect.gen(function*() {
  // A device DAX refuses a mapping that is not a multiple of its alignment, with a reason.
  const unaligned = yield* Effect.flip(Effect.scoped(Memory.mapFile({ path: device, size: 4096 })))
  if (unaligned.reason !== "Unaligned") return yield* Effect.dieMessage(`a 4 KiB mapping: ${unaligned.message}`)
  const memory = yield* Memory.mapFile({ path: device, size: SIZE })
  const block = memory.subarray(OFFSET, OFFSET + LENGTH)
  if (!same(block, expected)) {
    const head = new TextDecoder().decode(block.subarray(0, 40)).replace(/[^\x20-\x7e]/g, ".")
    return yield* Effect.dieMessage(`the block did not survive: it begins "${head}"`)
  }
  yield* say(`the ${LENGTH} bytes flushed before the VM was killed are there (token ${token})`)
})

const program: Effect.Effect<void, unknown, RdmaDriver | Scope.Scope> = phase === "write"
  ? write
  : phase === "check"
  ? check
  : Effect.dieMessage("usage: pmem write|check")
Effect.runPromise(Effect.scoped(program).pipe(Effect.provide(NativeDriver.layer))).then(
  () => process.exit(0),
  (error) => {
    console.error(`pmem ${phase}: FAILED:`, error)
    process.exit(1)
  }
)
