/**
 * The native driver's memory calls (memory.cc): page-aligned allocations and file mappings, the
 * memory that registrations pin.
 */
import type { Driver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { attempt, rpma } from "./addon.js"
import { mapFailure } from "./failures.js"

export const memoryCalls = (binding: Binding): Pick<Driver, "allocate" | "free" | "mapFile" | "unmapFile"> => ({
  allocate: (size) => rpma("posix_memalign", () => binding.allocate(size)),
  // Core frees only what it allocated; anything else reaching here is a bug, hence a defect.
  free: (memory) => Effect.sync(() => binding.free(memory)),
  mapFile: (request) =>
    attempt(
      () => binding.mapFile(request.path, request.offset, request.size, request.create),
      mapFailure(request.path, "mmap")
    ),
  unmapFile: (memory) => attempt(() => binding.unmapFile(memory), mapFailure("the mapping", "msync"))
})
