/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 * The operations taking a resource first are dual: data-first and data-last have one type.
 */
import { type Admission, Connection, Listener, type LocalMr, type RemoteMr } from "@effect-rdma/core"
import { describe, expect, it } from "@effect/vitest"
import type { Effect } from "effect"

declare const conn: Connection.Connection
declare const listener: Listener.Listener
declare const request: Listener.ConnectionRequest
declare const admission: Admission.Admission
declare const src: LocalMr.LocalMr<"WRITE_SRC">
declare const outbox: LocalMr.LocalMr<"SEND">
declare const inbox: LocalMr.LocalMr<"RECV">
declare const dst: RemoteMr.RemoteMr<"WRITE_DST">
declare const visible: RemoteMr.RemoteMr<"FLUSH_TYPE_VISIBILITY">
declare const persistent: RemoteMr.RemoteMr<"FLUSH_TYPE_PERSISTENT">

declare const write: Connection.WriteArgs

export const typeTests = () => [
  // A write's arguments as a program writes them: its regions' usages are what the verb needs.
  Connection.write(conn, { src, dst, length: 8 }) satisfies Effect.Effect<void, Connection.TransferError>,
  // Both forms of a dual operation have the same type.
  Connection.write(conn, write) satisfies Effect.Effect<void, Connection.TransferError>,
  conn.pipe(Connection.write(write)) satisfies Effect.Effect<void, Connection.TransferError>,
  Connection.writeMany(conn, [write, write]) satisfies Effect.Effect<void, Connection.TransferError>,
  conn.pipe(Connection.writeMany([write])) satisfies Effect.Effect<void, Connection.TransferError>,
  Connection.recv(conn, { dst: inbox }) satisfies Effect.Effect<Connection.Completion, Connection.TransferError>,
  conn.pipe(Connection.recv({ dst: inbox })) satisfies Effect.Effect<Connection.Completion, Connection.TransferError>,
  conn.pipe(Connection.call({ send: { src: outbox, length: 8 }, recv: { dst: inbox } })) satisfies Effect.Effect<
    Connection.Completion,
    Connection.TransferError
  >,
  Connection.reply(conn, { send: { src: outbox, length: 8 }, recv: { dst: inbox } }) satisfies Effect.Effect<
    Connection.Posted,
    Connection.TransferError
  >,
  Connection.send(conn, { src: outbox, length: 8, imm: 1 }),
  Connection.flush(conn, { dst: visible, length: 8 }),
  conn.pipe(Connection.flush({ dst: persistent, length: 8, type: "persistent" })),
  Listener.accept(request),
  request.pipe(Listener.accept({ admission })),
  listener.pipe(Listener.next()),
  Listener.next(listener),
  // @ts-expect-error a persistent flush needs a region that allows it
  Connection.flush(conn, { dst: visible, length: 8, type: "persistent" }),
  // @ts-expect-error a visibility flush (the default type) needs a region that allows it
  Connection.flush(conn, { dst: persistent, length: 8 }),
  // @ts-expect-error recv answers a Completion, not a number
  Connection.recv(conn, { dst: inbox }) satisfies Effect.Effect<number, Connection.TransferError>,
  // @ts-expect-error a send region is not received into
  Connection.recv(conn, { dst: outbox })
]

// Without an admission an accept cannot be refused by one; with one it can.
export const acceptErrors = () => [
  Listener.accept(request) satisfies Effect.Effect<
    Connection.Connection,
    Listener.AcceptErrorOf<{}>,
    unknown
  >,
  // @ts-expect-error with an admission, AdmissionRefusedError is among its errors
  Listener.accept(request, { admission }) satisfies Effect.Effect<
    Connection.Connection,
    Listener.AcceptErrorOf<{}>,
    unknown
  >
]

describe("Connection types", () => {
  it("compiles (the checks are the @ts-expect-error lines)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
