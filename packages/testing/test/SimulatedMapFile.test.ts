/**
 * Memory.mapFile on the simulated driver, when the file changes under the mapping: a real
 * mmap(MAP_SHARED) holds the file (its inode), not its path, so the simulated mapping must too.
 * Unlinked, renamed or replaced while mapped, the unmap succeeds and the bytes go to the file
 * mapped; truncated while mapped, the file keeps its new length. No descriptor outlives a mapping.
 */
import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
import { RdmaDriver } from "@effect-rdma/core/Driver"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Logger, LogLevel, Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-rdma-simulated-mapfile-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** The process's open descriptors (Linux). */
const openFds = () => fs.readdirSync("/proc/self/fd").length

/**
 * Maps `file`, writes `fill` over the mapping, runs `meanwhile` on the file, then closes the
 * mapping's scope: the close's exit, what was logged at Warning or above, and the memory after.
 */
const mapChangeAndUnmap = (file: string, meanwhile: (file: string) => void, fill = 0xab) => {
  const logged: Array<string> = []
  const logger = Logger.make(({ logLevel, message }) => {
    if (LogLevel.greaterThanEqual(logLevel, LogLevel.Warning)) logged.push(`${logLevel.label} ${String(message)}`)
  })
  return Effect.gen(function*() {
    const peer = yield* Peer.Peer
    const scope = yield* Scope.make()
    const memory = yield* Scope.extend(
      Effect.gen(function*() {
        const memory = yield* Memory.mapFile({ path: file })
        // A registration over the mapping, as the release must settle it too.
        yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
        memory.fill(fill)
        return memory
      }),
      scope
    )
    meanwhile(file)
    // Finalizers log with what the acquisition had: the logger covers it all.
    const closed = yield* Effect.exit(Scope.close(scope, Exit.void))
    return { closed, logged, memory }
  }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
}

/** Runs a test with a peer on the simulated driver; nothing may be left alive at its end. */
const inWorld = <A, E>(
  effect: Effect.Effect<A, E, RdmaDriver | Peer.Peer | SimulatedDriver.SimulationControl | Scope.Scope>
) =>
  Ledger.checked(Effect.provide(Effect.scoped(effect), Peer.layer(SimulatedDriver.DEFAULT_ADDRESS))).pipe(
    Effect.provide(SimulatedDriver.layer)
  )

const file8k = (dir: string, name: string, byte = 0) => {
  const file = path.join(dir, name)
  fs.writeFileSync(file, Buffer.alloc(8192, byte))
  return file
}

describe("Memory.mapFile on the simulated driver: the file changed while mapped", () => {
  it.effect("unlinked: the unmap succeeds, logs nothing, and leaves nothing alive", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const { closed, logged, memory } = yield* mapChangeAndUnmap(file8k(dir, "f"), (file) => fs.rmSync(file))
      assert.isTrue(Exit.isSuccess(closed))
      assert.deepStrictEqual(logged, [])
      assert.strictEqual(memory.byteLength, 0, "detached")
      assert.isFalse(fs.existsSync(path.join(dir, "f")), "nothing recreated at the path")
    })))

  it.effect("renamed: the renamed file gets the bytes", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const moved = path.join(dir, "moved")
      const { closed, logged } = yield* mapChangeAndUnmap(file8k(dir, "f"), (file) => fs.renameSync(file, moved))
      assert.isTrue(Exit.isSuccess(closed))
      assert.deepStrictEqual(logged, [])
      assert.deepStrictEqual(fs.readFileSync(moved), Buffer.alloc(8192, 0xab))
      assert.isFalse(fs.existsSync(path.join(dir, "f")))
    })))

  it.effect("truncated: the file stays truncated, its remaining bytes written", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const file = file8k(dir, "f")
      const { closed, logged } = yield* mapChangeAndUnmap(file, (file) => fs.truncateSync(file, 4096))
      assert.isTrue(Exit.isSuccess(closed))
      assert.deepStrictEqual(logged, [])
      assert.strictEqual(fs.statSync(file).size, 4096, "not extended back to the mapping's length")
      assert.deepStrictEqual(fs.readFileSync(file), Buffer.alloc(4096, 0xab))
      const empty = file8k(dir, "empty")
      const emptied = yield* mapChangeAndUnmap(empty, (file) => fs.truncateSync(file, 0))
      assert.isTrue(Exit.isSuccess(emptied.closed))
      assert.deepStrictEqual(emptied.logged, [])
      assert.strictEqual(fs.statSync(empty).size, 0)
    })))

  it.effect("replaced by a new file: the new file is untouched", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const file = file8k(dir, "f")
      const { closed, logged } = yield* mapChangeAndUnmap(file, (file) => {
        fs.rmSync(file)
        fs.writeFileSync(file, Buffer.alloc(8192, 0x11))
      })
      assert.isTrue(Exit.isSuccess(closed))
      assert.deepStrictEqual(logged, [])
      assert.deepStrictEqual(fs.readFileSync(file), Buffer.alloc(8192, 0x11))
    })))

  it.effect("replaced by a directory: the unmap succeeds", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const { closed, logged } = yield* mapChangeAndUnmap(file8k(dir, "f"), (file) => {
        fs.rmSync(file)
        fs.mkdirSync(file)
      })
      assert.isTrue(Exit.isSuccess(closed))
      assert.deepStrictEqual(logged, [])
    })))

  it.effect("untouched: the bytes reach the file at the mapping's offset, and only there", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const file = file8k(dir, "f", 0x22)
      yield* Effect.scoped(Effect.gen(function*() {
        const memory = yield* Memory.mapFile({ path: file, offset: 4096 })
        assert.strictEqual(memory.byteLength, 4096)
        memory.fill(0x33)
      }))
      const bytes = fs.readFileSync(file)
      assert.deepStrictEqual(bytes.subarray(0, 4096), Buffer.alloc(4096, 0x22))
      assert.deepStrictEqual(bytes.subarray(4096), Buffer.alloc(4096, 0x33))
    })))

  it.effect("no descriptor outlives a mapping: held while mapped, closed by the unmap and by every failure", () =>
    inWorld(Effect.gen(function*() {
      const dir = yield* tempDir
      const driver = yield* RdmaDriver
      const file = file8k(dir, "f")
      const before = openFds()
      const memory = yield* driver.mapFile({ path: file, offset: 0, size: undefined, create: false })
      assert.strictEqual(openFds(), before + 1, "the mapping holds the file")
      fs.rmSync(file)
      yield* driver.unmapFile(memory)
      assert.strictEqual(openFds(), before, "closed by the unmap")
      yield* driver.unmapFile(memory) // twice is nothing
      // Refusals after the open: an empty file, a range past the end, a FIFO.
      fs.writeFileSync(path.join(dir, "empty"), "")
      fs.writeFileSync(path.join(dir, "small"), Buffer.alloc(4096))
      const failures = [
        { path: path.join(dir, "empty"), offset: 0, size: undefined, create: false },
        { path: path.join(dir, "small"), offset: 0, size: 8192, create: false },
        { path: path.join(dir, "small"), offset: 4096, size: undefined, create: false },
        { path: path.join(dir, "missing"), offset: 0, size: undefined, create: false },
        { path: path.join(dir, "nodir", "x"), offset: 0, size: 4096, create: true },
        { path: dir, offset: 0, size: undefined, create: false }
      ]
      for (const request of failures) {
        const error = yield* Effect.flip(driver.mapFile(request))
        assert.strictEqual(error._tag, "MapFileError")
      }
      assert.strictEqual(openFds(), before, "closed by every failure")
      // Two mappings of one file (the second finds it created): a descriptor each, both closed.
      const created = yield* driver.mapFile({ path: path.join(dir, "new"), offset: 0, size: 4096, create: true })
      const again = yield* driver.mapFile({ path: path.join(dir, "new"), offset: 0, size: 4096, create: true })
      assert.strictEqual(openFds(), before + 2)
      yield* driver.unmapFile(created)
      yield* driver.unmapFile(again)
      assert.strictEqual(openFds(), before)
    })))
})
