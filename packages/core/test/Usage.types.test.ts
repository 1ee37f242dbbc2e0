/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 */
import type { LocalMr, RemoteMr } from "@effect-rdma/core"
import { SharedReceiveQueue, Usage } from "@effect-rdma/core"
import { describe, expect, it } from "@effect/vitest"

declare const writeSource: (mr: LocalMr.WriteSource) => void
declare const readDestination: (mr: LocalMr.ReadDestination) => void
declare const writeDestination: (mr: RemoteMr.WriteDestination) => void

declare const readOnly: LocalMr.LocalMr<"READ_SRC">
declare const readWrite: LocalMr.LocalMr<"READ_DST" | "WRITE_SRC">
declare const unknownUsage: LocalMr.LocalMr<never>
declare const remoteTarget: RemoteMr.RemoteMr<"WRITE_DST" | "FLUSH_TYPE_VISIBILITY">
declare const remoteUnchecked: RemoteMr.RemoteMr
declare const srq: SharedReceiveQueue.SharedReceiveQueue
declare const inbox: LocalMr.LocalMr<"RECV">
declare const outbox: LocalMr.LocalMr<"SEND">

export const typeTests = () => {
  writeSource(readWrite)
  readDestination(readWrite)
  writeDestination(remoteTarget)

  SharedReceiveQueue.postRecv(srq, { dst: inbox })
  // @ts-expect-error a shared receive queue's receives need a RECV region, as a connection's do
  SharedReceiveQueue.postRecv(srq, { dst: outbox })
  // @ts-expect-error a region registered for READ_SRC cannot be a write source
  writeSource(readOnly)
  // @ts-expect-error nor a read destination
  readDestination(readOnly)
  // @ts-expect-error a region whose usage came from outside must be narrowed first
  writeSource(unknownUsage)
  // @ts-expect-error a remote region must be checked with RemoteMr.require before a write
  writeDestination(remoteUnchecked)

  const u: Usage.Usage<"READ_SRC" | "SEND"> = Usage.combine(Usage.READ_SRC, Usage.SEND)
  // @ts-expect-error the combined type does not claim flags it lacks
  const w: Usage.Usage<"WRITE_DST"> = u
  // @ts-expect-error a plain number is not a usage
  const n: Usage.Usage = 0x11
  const narrowed = Usage.validate(0x04)
  if (narrowed._tag === "Right" && Usage.has(narrowed.right, "WRITE_SRC")) {
    const ok: Usage.Usage<"WRITE_SRC"> = narrowed.right
    return [w, n, ok]
  }
  return [w, n]
}

describe("Usage types", () => {
  it("are checked by the compiler (pnpm check)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
