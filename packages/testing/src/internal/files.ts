/**
 * The simulated driver's file mappings: a stand-in for mmap(MAP_SHARED) that reads the range into
 * memory when mapped and writes it back when unmapped (the msync), with the native driver's checks
 * and errors. Unlike a real shared mapping, the file does not see the writes before the unmap,
 * and devices (a device DAX) are refused: only regular files can be simulated.
 */
import { RdmaError } from "@effect-rdma/core"
import type { Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import { constants as bufferConstants } from "node:buffer"
import * as fs from "node:fs"
import { constants } from "node:os"

const pageSize = 4096
/** What the native driver refuses too: a Uint8Array's limit on this Node.js (v8::TypedArray::kMaxLength). */
const maxLength = bufferConstants.MAX_LENGTH

export const makeFiles = () => {
  const mapped = new WeakMap<ArrayBufferLike, { readonly path: string; readonly offset: number }>()
  let live = 0

  const fail = (path: string, operation: string, reason: string | undefined, errno: number, detail?: string) =>
    Effect.fail(RdmaError.mapFileError({ path, operation, reason, errno, detail }))
  const failed = (
    path: string,
    operation: string,
    cause: unknown,
    reason?: string
  ): Effect.Effect<never, RdmaError.MapFileError> => {
    const code = (cause as { readonly code?: unknown })?.code
    const errno = typeof code === "string" ? (constants.errno as Record<string, number>)[code] : undefined
    if (errno === undefined) return Effect.die(cause)
    return Effect.fail(RdmaError.mapFileError({ path, operation, reason, errno, cause }))
  }

  const mapFile = (request: Model.MapFileRequest): Effect.Effect<Uint8Array, RdmaError.MapFileError> =>
    Effect.suspend(() => {
      const { create, offset, path, size } = request
      if (typeof path !== "string" || path === "" || path.includes("\0")) {
        return fail(String(path), "open", undefined, constants.errno.EINVAL, "path must be a non-empty string")
      }
      if (!Number.isSafeInteger(offset) || offset < 0) return fail(path, "mmap", undefined, constants.errno.EINVAL)
      if (offset % pageSize !== 0) return fail(path, "mmap", "Unaligned", constants.errno.EINVAL)
      if (size !== undefined && (!Number.isSafeInteger(size) || size < 0)) {
        return fail(path, "mmap", undefined, constants.errno.EINVAL)
      }
      if (size === 0) return fail(path, "mmap", "SizeZero", constants.errno.EINVAL, "size is 0")
      if (create && size === undefined) return fail(path, "open", "SizeZero", constants.errno.EINVAL)
      // Before anything is opened or created: a refusal leaves no file behind.
      if (size !== undefined && size > maxLength) return fail(path, "mmap", "OutOfRange", constants.errno.EINVAL)
      let fd: number | undefined
      let created = false
      try {
        if (create) {
          try {
            fd = fs.openSync(path, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600)
            created = true
          } catch (cause) {
            if ((cause as { readonly code?: unknown })?.code !== "EEXIST") throw cause
          }
        }
        try {
          fd ??= fs.openSync(path, fs.constants.O_RDWR)
        } catch (cause) {
          return failed(
            path,
            "open",
            cause,
            (cause as { code?: unknown })?.code === "EISDIR" ? "NotMappable" : undefined
          )
        }
        const stat = fs.fstatSync(fd)
        if (!stat.isFile()) {
          return fail(
            path,
            "mmap",
            "NotMappable",
            constants.errno.ENODEV,
            "the simulated driver maps regular files only"
          )
        }
        let length = size ?? 0
        if (created) {
          fs.ftruncateSync(fd, offset + length)
        } else if (size === undefined) {
          if (stat.size === 0) return fail(path, "mmap", "SizeZero", constants.errno.EINVAL, `${path} is empty`)
          if (offset >= stat.size) return fail(path, "mmap", "OutOfRange", constants.errno.EINVAL)
          length = stat.size - offset
        } else if (offset + size > stat.size) {
          return fail(path, "mmap", "OutOfRange", constants.errno.EINVAL)
        }
        if (length > maxLength) return fail(path, "mmap", "OutOfRange", constants.errno.EINVAL)
        const bytes = new Uint8Array(length)
        fs.readSync(fd, bytes, 0, length, offset)
        mapped.set(bytes.buffer, { path, offset })
        live++
        return Effect.succeed(bytes)
      } catch (cause) {
        if (created) fs.rmSync(path, { force: true })
        return failed(path, "mmap", cause)
      } finally {
        if (fd !== undefined) fs.closeSync(fd)
      }
    })

  const unmapFile = (memory: Uint8Array): Effect.Effect<void, RdmaError.MapFileError> =>
    Effect.suspend(() => {
      const refuse = (detail: string) =>
        fail("the mapping", "munmap", undefined, constants.errno.EINVAL, `memory ${detail} by mapFile()`)
      if (!(memory instanceof Uint8Array)) return refuse("must be a Uint8Array from")
      if (memory.buffer.byteLength === 0 && memory.byteLength === 0) return Effect.void // unmapped already
      const mapping = mapped.get(memory.buffer)
      if (mapping === undefined) return refuse("was not mapped")
      mapped.delete(memory.buffer)
      live--
      let result: Effect.Effect<void, RdmaError.MapFileError> = Effect.void
      try {
        const fd = fs.openSync(mapping.path, fs.constants.O_RDWR)
        try {
          fs.writeSync(fd, memory, 0, memory.byteLength, mapping.offset)
          fs.fsyncSync(fd)
        } finally {
          fs.closeSync(fd)
        }
      } catch (cause) {
        result = failed(mapping.path, "msync", cause)
      }
      // Detached whatever the write-back said, as the native driver does.
      structuredClone(memory.buffer, { transfer: [memory.buffer as ArrayBuffer] })
      return result
    })

  return { mapFile, unmapFile, liveMappings: () => live }
}
