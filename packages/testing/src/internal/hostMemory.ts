/**
 * The simulated driver's host memory: aligned allocations (bounded by the largest region), their
 * release (the memory detached, as the native driver leaves nothing to read), and mapped files.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import { makeFiles } from "./files.js"
import type { Tools } from "./tools.js"

export const makeMemoryCalls = (tools: Tools, maxRegionSize: number) => {
  const { call, invalid, rpma } = tools
  const files = makeFiles()
  return {
    allocate: (size) =>
      call(
        "posix_memalign",
        () =>
          Arguments.allocationSize(size) === undefined
            ? undefined
            : invalid("posix_memalign", Arguments.allocationSize(size)!),
        (code) => rpma("posix_memalign", code, "planned fault"),
        () =>
          size > maxRegionSize
            ? Effect.fail(rpma("posix_memalign", RdmaError.RpmaCode.RPMA_E_NOMEM, `cannot allocate ${size} bytes`))
            : Effect.sync(() => new Uint8Array(size))
      ),
    free: (memory) =>
      Effect.sync(() => {
        // Detach, so that nothing can read or write it any more, as the native driver does.
        if (memory.buffer.byteLength > 0) structuredClone(memory.buffer, { transfer: [memory.buffer as ArrayBuffer] })
      }),

    mapFile: files.mapFile,
    unmapFile: files.unmapFile
  } satisfies Partial<Driver.Driver>
}
