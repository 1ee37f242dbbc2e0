/**
 * Curious peers (issue 19, item 7): an isolated endpoint's client reaches what its own peer
 * registered and nothing of another client's, even with that region's exact descriptor; its
 * endpoint takes one connection and then no longer listens. Listener.serve isolates its clients
 * so by default (issue 34), and lets them reach each other's regions only with `isolation: "shared"`.
 */
import { Admission, Connection, Descriptor, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type { Case } from "../Conformance.js"
import { check, pattern, same, tagOf } from "./support.js"

const remoteOf = (mr: LocalMr.LocalMr<"READ_SRC">) =>
  Effect.flatMap(
    LocalMr.descriptor(mr),
    (bytes) => Effect.flatMap(RemoteMr.fromDescriptor(bytes), RemoteMr.require(Usage.READ_SRC))
  )

/**
 * A handler that registers a region of its Peer (the client's) filled with the byte the client
 * sends, and answers with the region's descriptor; it holds the region until the client leaves.
 */
const giveOwnRegion = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    const peer = yield* Peer.Peer
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, Descriptor.SIZE, Usage.SEND)
    yield* Connection.recv(conn, { dst: inbox })
    const given = yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC)
    given.memory.fill(inbox.memory[0]!)
    outbox.memory.set(yield* LocalMr.descriptor(given))
    yield* Connection.send(conn, { src: outbox, length: Descriptor.SIZE })
    yield* Connection.awaitClosed(conn)
  })

/** A client of {@link giveOwnRegion}: connected, sent `fill`, and given its region's descriptor. */
const takeOwnRegion = (address: string, port: number, fill: number) =>
  Effect.gen(function*() {
    const peer = yield* Peer.make(address)
    const conn = yield* Connection.connect(peer, address, port, { timeout: "10 seconds" })
    const inbox = yield* LocalMr.allocate(peer, 64, Usage.RECV)
    const outbox = yield* LocalMr.allocate(peer, 1, Usage.SEND)
    outbox.memory[0] = fill
    yield* Connection.call(conn, { send: { src: outbox, length: 1 }, recv: { dst: inbox } })
    const region = yield* Effect.flatMap(
      RemoteMr.fromDescriptor(inbox.memory.slice(0, Descriptor.SIZE)),
      RemoteMr.require(Usage.READ_SRC)
    )
    const dst = yield* LocalMr.allocate(peer, 4096, Usage.READ_DST)
    return { conn, region, dst }
  })

/** Two clients of a served listener, A and B; A reads its own region, then B's by its exact descriptor. */
const twoClientsOf = (address: string, port: number, options: Listener.ServeOptions) =>
  Effect.gen(function*() {
    const listener = yield* Listener.make(yield* Peer.make(address), address, port)
    const server = yield* Effect.forkScoped(Listener.serve(listener, giveOwnRegion, options))
    const a = yield* takeOwnRegion(address, port, 0xa1)
    const b = yield* takeOwnRegion(address, port, 0xb2)
    yield* Connection.read(a.conn, { dst: a.dst, src: a.region, length: 4096 })
    yield* check(a.dst.memory.every((x) => x === 0xa1), "client A read its own region")
    a.dst.memory.fill(0)
    const other = yield* Effect.exit(Connection.read(a.conn, { dst: a.dst, src: b.region, length: 4096 }))
    return { other, read: a.dst.memory, server }
  })

/** Ports for the isolated listeners of `port`'s case: the cases' ports are 17000 and up. */
const isolatedPorts = (port: number) => ({ from: port + 20000, to: port + 20001 })

const serveCases = (): ReadonlyArray<Case> => [
  {
    name:
      "Listener.serve by default: each client reaches its own region and not another client's, even by its exact descriptor",
    run: (address, port) =>
      Effect.gen(function*() {
        const { other, read, server } = yield* twoClientsOf(address, port, { ports: isolatedPorts(port) })
        const status = other._tag === "Failure" ? (Cause.squash(other.cause) as { status?: number }).status : undefined
        yield* check(
          tagOf(other) === "CompletionError" && status === 10,
          `client A's read of client B's region: ${tagOf(other)} ${status}`
        )
        yield* check(read.every((x) => x === 0), "nothing of client B's region arrived")
        yield* Fiber.interrupt(server)
      })
  },
  {
    name: "Listener.serve with isolation \"shared\": a client reaches another client's region by its descriptor",
    run: (address, port) =>
      Effect.gen(function*() {
        const { other, read, server } = yield* twoClientsOf(address, port, { isolation: "shared" })
        yield* check(other._tag === "Success", `client A's read of client B's region: ${tagOf(other)}`)
        yield* check(read.every((x) => x === 0xb2), "client A read client B's region")
        yield* Fiber.interrupt(server)
      })
  }
]

export const isolationCases: ReadonlyArray<Case> = [
  {
    name:
      "isolated endpoint: its client reads its own region, not another client's by its exact descriptor; one connection, then nothing listens",
    run: (address, port) =>
      Effect.gen(function*() {
        const isolated = yield* Admission.listenIsolated(address, port)
        const otherClients = yield* Peer.make(address) // what another isolated endpoint's peer is
        const given = yield* LocalMr.allocate(isolated.peer, 4096, Usage.READ_SRC)
        const notGiven = yield* LocalMr.allocate(otherClients, 4096, Usage.READ_SRC)
        given.memory.set(pattern(4096, 1))
        notGiven.memory.set(pattern(4096, 2))
        const token = Uint8Array.of(9, 4, 7, 1, 8, 2)
        const accepting = yield* Effect.fork(Admission.acceptIsolated(isolated, yield* Admission.make(token)))
        const clientPeer = yield* Peer.make(address)
        const privateData = yield* Admission.privateData(token)
        const conn = yield* Connection.connect(clientPeer, address, port, { privateData })
        yield* Fiber.join(accepting)
        const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
        yield* Connection.read(conn, { dst, src: yield* remoteOf(given), length: 4096 })
        yield* check(same(dst.memory, pattern(4096, 1)), "the client read its own region")
        // Refused by the device at once, not left waiting at an endpoint until its own timeout.
        const [ms, second] = yield* Effect.timed(Effect.exit(Effect.scoped(
          Connection.connect(clientPeer, address, port, { privateData, timeout: "10 seconds" })
        )))
        yield* check(
          tagOf(second) === "ConnectionFailedError",
          `a second connection to the isolated port: ${tagOf(second)}`
        )
        yield* check(
          Duration.toMillis(ms) < 9000,
          `the second connection waited ${Duration.format(ms)} of its 10 s timeout`
        )
        dst.memory.fill(0)
        const blocked = yield* Effect.flip(Connection.read(conn, { dst, src: yield* remoteOf(notGiven), length: 4096 }))
        yield* check(
          blocked._tag === "CompletionError" && blocked.status === 10,
          `a read of another client's region: ${blocked._tag} ${(blocked as { status?: number }).status}`
        )
        yield* check(dst.memory.every((b) => b === 0), "nothing of another client's region arrived")
        const again = yield* Effect.flip(Admission.acceptIsolated(isolated, yield* Admission.make(token)))
        yield* check(again._tag === "RpmaInvalidError", `a second accept on the isolated endpoint: ${again._tag}`)
      })
  },
  {
    name:
      "rendezvous: a client admitted on a well-known endpoint is sent to an isolated one of its own and reads what it was given there",
    run: (address, port) =>
      Effect.gen(function*() {
        const token = Uint8Array.of(6, 2, 8, 3)
        const wellKnown = yield* Listener.make(yield* Peer.make(address), address, port)
        const gate = yield* Admission.make(token)
        // A port of its own for this case's isolated endpoint: the cases' ports are 17000 and up.
        const isolatedPort = port + 10000
        const serving = yield* Effect.fork(Effect.gen(function*() {
          const made = yield* Admission.rendezvous(wellKnown, gate, { from: isolatedPort, to: isolatedPort })
          const given = yield* LocalMr.allocate(made.peer, 4096, Usage.READ_SRC)
          given.memory.set(pattern(4096, 5))
          return yield* Admission.acceptIsolated(made, made.admission, {
            privateData: yield* LocalMr.descriptor(given)
          })
        }))
        const clientPeer = yield* Peer.make(address)
        const conn = yield* Admission.connectIsolated(clientPeer, address, port, token, { timeout: "10 seconds" })
        yield* Fiber.join(serving)
        const src = yield* Effect.flatMap(
          RemoteMr.fromDescriptor(conn.privateData.subarray(0, Descriptor.SIZE)),
          RemoteMr.require(Usage.READ_SRC)
        )
        const dst = yield* LocalMr.allocate(clientPeer, 4096, Usage.READ_DST)
        yield* Connection.read(conn, { dst, src, length: 4096 })
        yield* check(same(dst.memory, pattern(4096, 5)), "the client read the region of its isolated endpoint")
      })
  },
  ...serveCases()
]
