/**
 * Conformance cases for file mappings (Memory.mapFile): a shared mapping that reaches its file,
 * is never unmapped from under a registration, and fails with the same tagged reasons on every
 * driver. Each case works in a fresh temporary directory of its own.
 */
import { LocalMr, Memory, Peer, Usage } from "@effect-rdma/core"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { constants as bufferConstants } from "node:buffer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { Case } from "../Conformance.js"
import { check, equal } from "./support.js"

/** A temporary directory for the case, removed with its scope. */
const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "effect-rdma-map-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/** The reason a mapping fails with, "success", or the tag of another failure. */
const reasonOf = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<string, never, R> =>
  Effect.map(Effect.exit(Effect.scoped(effect)), (exit) => {
    if (Exit.isSuccess(exit)) return "success"
    if (exit.cause._tag !== "Fail") return `defect: ${String(exit.cause)}`
    const error = exit.cause.error as { readonly _tag?: string; readonly reason?: string }
    return error._tag === "MapFileError" ? String(error.reason) : String(error._tag)
  })

const expectReason = <A, E, R>(effect: Effect.Effect<A, E, R>, reason: string, what: string) =>
  Effect.flatMap(reasonOf(effect), (actual) => equal(actual, reason, what))

export const mappingCases: ReadonlyArray<Case> = [
  {
    name: "Memory.mapFile: created when missing, registrable, written back to the file and unmapped with its scope",
    run: (address) =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, "region")
        const peer = yield* Peer.make(address)
        const memory = yield* Effect.scoped(Effect.gen(function*() {
          const memory = yield* Memory.mapFile({ path: file, size: 8192, create: true })
          yield* equal(memory.byteLength, 8192, "the mapping's size")
          yield* check(memory.every((b) => b === 0), "a new file maps as zeroes")
          const mr = yield* LocalMr.register(peer, memory, Usage.WRITE_DST)
          yield* equal(mr.size, 8192, "the registration covers the mapping")
          memory.fill(1, 0, 4096)
          memory.fill(2, 4096)
          return memory
        }))
        yield* equal(memory.byteLength, 0, "an unmapped mapping is detached")
        const bytes = fs.readFileSync(file)
        yield* equal(bytes.byteLength, 8192, "the created file's size")
        yield* check(
          bytes.subarray(0, 4096).every((b) => b === 1) && bytes.subarray(4096).every((b) => b === 2),
          "the file holds what was written through the mapping"
        )
        // The whole file, and its second page alone.
        yield* Effect.scoped(Effect.gen(function*() {
          const whole = yield* Memory.mapFile({ path: file })
          yield* equal(whole.byteLength, 8192, "the whole file's mapping")
          yield* equal(whole[8191], 2, "the whole file's last byte")
          const page = yield* Memory.mapFile({ path: file, offset: 4096, size: 4096 })
          yield* check(page.every((b) => b === 2), "a mapping from an offset")
        }))
      })
  },
  {
    name: "Memory.mapFile: never unmapped while a registration covers it; unmapped when the last one ends",
    run: (address) =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, "region")
        const peer = yield* Peer.make(address)
        const outer = yield* Scope.make()
        const mappingScope = yield* Scope.make()
        const memory = yield* Memory.mapFile({ path: file, size: 4096, create: true }).pipe(Scope.extend(mappingScope))
        yield* LocalMr.register(peer, memory, Usage.WRITE_DST).pipe(Scope.extend(outer))
        yield* LocalMr.register(peer, memory.subarray(0, 64), Usage.READ_SRC).pipe(Scope.extend(outer))
        memory.fill(9)
        yield* Scope.close(mappingScope, Exit.void)
        yield* equal(memory.byteLength, 4096, "the mapping, while registrations cover it")
        memory[0] = 10
        yield* Scope.close(outer, Exit.void)
        yield* equal(memory.byteLength, 0, "the mapping, once the last registration is released")
        const bytes = fs.readFileSync(file)
        yield* check(bytes[0] === 10 && bytes.subarray(1).every((b) => b === 9), "the file holds the last writes")
      })
  },
  {
    name:
      "Memory.mapFile: missing, empty, unaligned, past the end, too large, a directory, not writable: tagged reasons, no file left by a refused create",
    run: () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, "file")
        fs.writeFileSync(file, new Uint8Array(8192))
        const empty = path.join(dir, "empty")
        fs.writeFileSync(empty, new Uint8Array(0))
        const missing = path.join(dir, "missing")
        yield* expectReason(Memory.mapFile({ path: missing }), "NotFound", "a missing file")
        yield* expectReason(Memory.mapFile({ path: path.join(file, "below") }), "NotFound", "a path through a file")
        yield* expectReason(Memory.mapFile({ path: missing, create: true }), "SizeZero", "create without a size")
        yield* check(!fs.existsSync(missing), "a refused create makes no file")
        // Larger than a Uint8Array may be (v8::Uint8Array::kMaxLength): refused before the file is
        // made. From Node.js 22 the limit is 2^53 - 1, beyond which no size is a safe integer.
        const tooLarge = bufferConstants.MAX_LENGTH + 4096
        if (Number.isSafeInteger(tooLarge)) {
          yield* expectReason(
            Memory.mapFile({ path: missing, size: tooLarge, create: true }),
            "OutOfRange",
            "a file to create larger than a Uint8Array's limit"
          )
        }
        yield* check(!fs.existsSync(missing), "a create refused for its size makes no file")
        yield* expectReason(Memory.mapFile({ path: empty }), "SizeZero", "an empty file")
        yield* expectReason(Memory.mapFile({ path: file, size: 0 }), "SizeZero", "size 0")
        yield* expectReason(Memory.mapFile({ path: file, offset: 100, size: 4096 }), "Unaligned", "offset 100")
        yield* expectReason(Memory.mapFile({ path: file, offset: 4096, size: 8192 }), "OutOfRange", "past the end")
        yield* expectReason(Memory.mapFile({ path: file, offset: 8192 }), "OutOfRange", "an offset at the end")
        yield* expectReason(Memory.mapFile({ path: dir }), "NotMappable", "a directory")
        yield* expectReason(Memory.mapFile({ path: "" }), "Invalid", "an empty path")
        yield* expectReason(Memory.mapFile({ path: file, size: -1 }), "Invalid", "a negative size")
        yield* expectReason(Memory.mapFile({ path: file, size: 1.5 }), "Invalid", "a fractional size")
        // Not writable even by root: a read-only sysfs attribute.
        if (fs.existsSync("/sys/kernel/notes")) {
          yield* expectReason(Memory.mapFile({ path: "/sys/kernel/notes", size: 4096 }), "PermissionDenied", "sysfs")
        }
        const error = yield* Effect.flip(Effect.scoped(Memory.mapFile({ path: missing })))
        yield* check(
          error.message.includes(missing) && error.message.includes("create: true"),
          `the message names the file and what to do: ${error.message}`
        )
      })
  }
]
