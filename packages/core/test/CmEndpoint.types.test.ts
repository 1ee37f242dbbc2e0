/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 */
import type { CmId } from "@effect-rdma/core"
import { CmEndpoint } from "@effect-rdma/core"
import { describe, expect, it } from "@effect/vitest"

declare const ep: CmEndpoint.CmEndpoint
declare const msgs: CmEndpoint.MessageRegion
declare const readable: CmEndpoint.Region<"read">
declare const writable: CmEndpoint.Region<"write">
declare const onId: CmId.CmMr<"msgs">
declare const readKey: CmEndpoint.RemoteKey<"read">
declare const writeKey: CmEndpoint.RemoteKey<"write">
declare const anyKey: CmEndpoint.RemoteKey

export const typeTests = () => [
  CmEndpoint.send(ep, { src: msgs, length: 8 }),
  CmEndpoint.recv(ep, { dst: msgs }),
  CmEndpoint.write(ep, { src: msgs, dst: writeKey, length: 8 }),
  CmEndpoint.read(ep, { dst: msgs, src: readKey, length: 8 }),
  CmEndpoint.remoteKey(readable) satisfies CmEndpoint.RemoteKey<"read">,
  CmEndpoint.remoteKey(writable) satisfies CmEndpoint.RemoteKey<"write">,
  // @ts-expect-error a region of rdma_reg_read is only a remote read's target: it cannot be sent
  CmEndpoint.send(ep, { src: readable, length: 8 }),
  // @ts-expect-error nor can one of rdma_reg_write be received into
  CmEndpoint.recv(ep, { dst: writable }),
  // @ts-expect-error nor be the local side of a write
  CmEndpoint.write(ep, { src: writable, dst: writeKey, length: 8 }),
  // @ts-expect-error a region of a bound identifier (CmId) has no queue pair to post on
  CmEndpoint.send(ep, { src: onId, length: 8 }),
  // @ts-expect-error a read key is not a write's destination
  CmEndpoint.write(ep, { src: msgs, dst: readKey, length: 8 }),
  // @ts-expect-error a key of unknown access must be narrowed (CmEndpoint.requireAccess) first
  CmEndpoint.read(ep, { dst: msgs, src: anyKey, length: 8 }),
  // @ts-expect-error a message region has no remote key (only read / write regions are exported)
  CmEndpoint.remoteKey(msgs)
]

describe("CmEndpoint types", () => {
  it("are checked by the compiler (pnpm check)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
