/**
 * The simulated driver's file mappings: a stand-in for mmap(MAP_SHARED) that reads the range into
 * memory when mapped and writes it back when unmapped (the msync), with the native driver's checks
 * and errors. Unlike a real shared mapping, the file does not see the writes before the unmap,
 * and devices (a device DAX) are refused: only regular files can be simulated.
 *
 * As a shared mapping holds the file (its inode), not its path, the descriptor opened to map it
 * stays open for the mapping's life and the write-back goes through it: a file unlinked, renamed
 * or replaced while mapped does not fail the unmap (the bytes go to the file mapped, gone if it was
 * unlinked), and one truncated while mapped gets only the bytes still within its end (the pages
 * past it are gone), never its old length back. The descriptor is closed by the unmap, or when the
 * memory is garbage-collected without one.
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

interface Mapping {
  readonly path: string
  readonly offset: number
  /** The descriptor opened to map the file: the mapping's hold on it, whatever happens to its path. */
  readonly fd: number
}

/** Closes a descriptor that is no longer needed: Linux frees it even when close reports an error. */
const closeQuietly = (fd: number) => {
  try {
    fs.closeSync(fd)
  } catch {
    // nothing to do: the descriptor is gone either way
  }
}

export const makeFiles = () => {
  const mapped = new WeakMap<ArrayBufferLike, Mapping>()
  let live = 0
  // A mapping whose memory is collected without an unmap is gone (the native driver munmaps it).
  const collected = new FinalizationRegistry<number>((fd) => {
    live--
    closeQuietly(fd)
  })

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
      let kept = false
      try {
        if (create) {
          try {
            fd = fs.openSync(path, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600)
            created = true
          } catch {
            // As the native driver: whatever stopped the creation, the open below says (EEXIST maps
            // the file there; a missing directory is open's ENOENT, not the mapping's).
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
        let read = 0
        while (read < length) {
          const n = fs.readSync(fd, bytes, read, length - read, offset + read)
          if (n === 0) break // the file shrank meanwhile: the rest reads as zeros, as a page past its end
          read += n
        }
        mapped.set(bytes.buffer, { path, offset, fd })
        collected.register(bytes.buffer, fd, bytes.buffer)
        live++
        kept = true
        return Effect.succeed(bytes)
      } catch (cause) {
        if (created) fs.rmSync(path, { force: true })
        return failed(path, "mmap", cause)
      } finally {
        // Kept open by a mapping until its unmap; closed on every other way out.
        if (fd !== undefined && !kept) closeQuietly(fd)
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
      collected.unregister(memory.buffer)
      live--
      let result: Effect.Effect<void, RdmaError.MapFileError> = Effect.void
      try {
        // The msync: through the descriptor of the file mapped, whatever its path names now, and
        // only up to the file's end now (a shared mapping's pages past it are gone, they do not
        // extend the file). The whole mapping, as the native driver msyncs it, whatever view came.
        const bytes = new Uint8Array(memory.buffer)
        const end = Math.min(bytes.byteLength, Math.max(0, fs.fstatSync(mapping.fd).size - mapping.offset))
        let written = 0
        while (written < end) {
          const n = fs.writeSync(mapping.fd, bytes, written, end - written, mapping.offset + written)
          if (n === 0) break
          written += n
        }
        fs.fsyncSync(mapping.fd)
      } catch (cause) {
        result = failed(mapping.path, "msync", cause)
      } finally {
        closeQuietly(mapping.fd)
      }
      // Detached whatever the write-back said, as the native driver does.
      structuredClone(memory.buffer, { transfer: [memory.buffer as ArrayBuffer] })
      return result
    })

  return { mapFile, unmapFile, liveMappings: () => live }
}
