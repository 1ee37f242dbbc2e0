/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 */
import { type Admission, CmEndpoint, CmListener, type RdmaError, RemoteKey } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { describe, expect, it } from "@effect/vitest"
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

declare const ep: CmEndpoint.CmEndpoint
declare const msgs: CmEndpoint.MessageRegion
declare const readable: CmEndpoint.Region<"read">
declare const writable: CmEndpoint.Region<"write">
declare const listener: CmListener.CmListener
declare const request: CmEndpoint.CmEndpoint
declare const memory: Uint8Array
declare const handle: (request: CmEndpoint.CmEndpoint) => Effect.Effect<void>
declare const admission: Admission.Admission
type Registered<K extends "msgs" | "read" | "write"> = Effect.Effect<
  CmEndpoint.Region<K>,
  RdmaError.RdmaCmError | RdmaError.MemoryRefusedError,
  Driver.RdmaDriver | Scope.Scope
>
declare const readKey: RemoteKey.RemoteKey<"read">
declare const writeKey: RemoteKey.RemoteKey<"write">
declare const anyKey: RemoteKey.RemoteKey

export const typeTests = () => [
  CmEndpoint.send(ep, { src: msgs, length: 8 }),
  CmEndpoint.recv(ep, { dst: msgs }),
  CmEndpoint.write(ep, { src: msgs, dst: writeKey, length: 8 }),
  CmEndpoint.read(ep, { dst: msgs, src: readKey, length: 8 }),
  RemoteKey.make(readable) satisfies RemoteKey.RemoteKey<"read">,
  RemoteKey.make(writable) satisfies RemoteKey.RemoteKey<"write">,
  // @ts-expect-error a region of rdma_reg_read is only a remote read's target: it cannot be sent
  CmEndpoint.send(ep, { src: readable, length: 8 }),
  // @ts-expect-error nor can one of rdma_reg_write be received into
  CmEndpoint.recv(ep, { dst: writable }),
  // @ts-expect-error nor be the local side of a write
  CmEndpoint.write(ep, { src: writable, dst: writeKey, length: 8 }),
  // @ts-expect-error a read key is not a write's destination
  CmEndpoint.write(ep, { src: msgs, dst: readKey, length: 8 }),
  // @ts-expect-error a key of unknown access must be narrowed (RemoteKey.require) first
  CmEndpoint.read(ep, { dst: msgs, src: anyKey, length: 8 }),
  // @ts-expect-error a message region has no remote key (only read / write regions are exported)
  RemoteKey.make(msgs),

  // Dual: the endpoint (listener, request) first, or piped in; both forms have one type.
  CmEndpoint.send(ep, { src: msgs, length: 8 }) satisfies Effect.Effect<void, CmEndpoint.TransferError>,
  ep.pipe(CmEndpoint.send({ src: msgs, length: 8 })) satisfies Effect.Effect<void, CmEndpoint.TransferError>,
  CmEndpoint.call(ep, { send: { src: msgs, length: 8 }, recv: { dst: msgs } }),
  ep.pipe(CmEndpoint.call({ send: { src: msgs, length: 8 }, recv: { dst: msgs } })),
  CmEndpoint.writeMany(ep, [{ src: msgs, dst: writeKey, length: 8 }]),
  ep.pipe(CmEndpoint.writeMany([{ src: msgs, dst: writeKey, length: 8 }])),
  CmEndpoint.registerRead(ep, memory) satisfies Registered<"read">,
  ep.pipe(CmEndpoint.registerRead(memory)) satisfies Registered<"read">,
  CmEndpoint.establish(ep, { privateData: memory }),
  ep.pipe(CmEndpoint.establish({ privateData: memory })),
  ep.pipe(CmEndpoint.establish()),
  CmListener.accept(request) satisfies Effect.Effect<CmEndpoint.CmEndpoint, unknown, Driver.RdmaDriver>,
  request.pipe(CmListener.accept({ privateData: memory })) satisfies Effect.Effect<
    CmEndpoint.CmEndpoint,
    unknown,
    Driver.RdmaDriver
  >,
  CmListener.reject(request, { privateData: memory }),
  request.pipe(CmListener.reject()),
  CmListener.serve(listener, handle, { concurrency: 2, admission }) satisfies Effect.Effect<
    never,
    RdmaError.RdmaCmError | Admission.InvalidTokenError,
    Driver.RdmaDriver
  >,
  listener.pipe(CmListener.serve(handle)) satisfies Effect.Effect<
    never,
    RdmaError.RdmaCmError | Admission.InvalidTokenError,
    Driver.RdmaDriver
  >,
  // Without an admission an accept cannot be refused by one; with one it can.
  CmListener.accept(request) satisfies Effect.Effect<CmEndpoint.CmEndpoint, CmListener.AcceptErrorOf<{}>, unknown>,
  // @ts-expect-error with an admission, AdmissionRefusedError is among its errors
  CmListener.accept(request, { admission }) satisfies Effect.Effect<
    CmEndpoint.CmEndpoint,
    CmListener.AcceptErrorOf<{}>,
    unknown
  >,
  request.pipe(CmListener.accept({ admission })) satisfies Effect.Effect<
    CmEndpoint.CmEndpoint,
    RdmaError.RdmaCmError | CmListener.ClientGoneError | Admission.AdmissionRefusedError | Admission.InvalidTokenError,
    unknown
  >,
  // @ts-expect-error the data-last form checks its arguments as the data-first one does
  ep.pipe(CmEndpoint.send({ src: readable, length: 8 })),
  // @ts-expect-error an endpoint is not a listener
  ep.pipe(CmListener.serve(handle)),

  // Opaque: state is read through an Effect or a Stream, facts are read-only.
  CmEndpoint.state(ep) satisfies Effect.Effect<CmEndpoint.State>,
  CmEndpoint.awaitClosed(ep) satisfies Effect.Effect<CmEndpoint.State>,
  // @ts-expect-error no state field
  ep.state,
  // @ts-expect-error no list of a listener's unanswered requests
  listener.unanswered,
  () => {
    // @ts-expect-error a fact cannot be written
    ep.privateData = memory
  }
]

describe("CmEndpoint types", () => {
  it("are checked by the compiler (pnpm check)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
