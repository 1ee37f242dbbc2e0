/**
 * Conformance cases for the lifecycle promise: every resource is released, whatever happens, and no
 * release waits longer than the timeout the user gave. Each reproduces a way it once broke.
 */
import { Admission, Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { Case } from "../Conformance.js"
import { check, driverConfig, rawPeer, slowdown, tagOf } from "./support.js"

const live = Effect.flatMap(Driver.RdmaDriver, (d) => d.live)

/** How long `effect` took, in milliseconds. */
const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const start = yield* Clock.currentTimeMillis
    const value = yield* effect
    return [value, (yield* Clock.currentTimeMillis) - start] as const
  })

/**
 * What a close may add to the timeout: the native calls themselves, and a slow machine (the device
 * tests run under emulation, 10-30x slower than the host: scaled by TEST_SLOWDOWN).
 */
const SLACK_MS = 3000 * slowdown

const TIMEOUT = "300 millis"
const TIMEOUT_MS = 300

/** A server that accepts one request through the raw driver and then never answers anything. */
const silentServer = (address: string, port: number) =>
  Effect.gen(function*() {
    const d = yield* Driver.RdmaDriver
    const peer = yield* rawPeer(address)
    const ep = yield* Effect.acquireRelease(d.epListen(peer, address, port), (e) => Effect.ignore(d.epShutdown(e)))
    const config = driverConfig(TIMEOUT_MS)
    const accepted = yield* Effect.fork(
      Effect.flatMap(d.epNextConnReq(ep, config), (req) => d.connReqConnect(req, undefined))
    )
    // Deleted when the case ends, without ever disconnecting or reading an event.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(Fiber.await(accepted), (exit) =>
        Exit.isSuccess(exit) ? Effect.ignore(d.connDelete(exit.value)) : Effect.void)
    )
    return accepted
  })

/** A server on `port` that accepts every client, each until its connection ends, for the case's scope. */
const acceptingServer = (address: string, port: number) =>
  Effect.gen(function*() {
    const serverPeer = yield* Peer.make(address)
    const ep = yield* Listener.make(serverPeer, address, port)
    yield* Listener.requests(ep, { timeout: TIMEOUT }).pipe(
      Stream.runForEach((req) =>
        Effect.forkDaemon(
          Effect.ignore(Effect.scoped(Effect.flatMap(Listener.accept(req), (c) => Connection.awaitClosed(c))))
        )
      ),
      Effect.forkScoped
    )
  })

export const lifecycleCases: ReadonlyArray<Case> = [
  {
    name: "close: the other side never answers the disconnect → the scope still closes within the timeout",
    run: (address, port) =>
      Effect.gen(function*() {
        const accepted = yield* silentServer(address, port)
        const peer = yield* Peer.make(address)
        const scope = yield* Scope.make()
        yield* Connection.connect(peer, address, port, { timeout: TIMEOUT }).pipe(Scope.extend(scope))
        yield* Fiber.join(accepted)
        const [, ms] = yield* timed(Scope.close(scope, Exit.void))
        yield* check(ms < TIMEOUT_MS + SLACK_MS, `closing took ${ms} ms with a ${TIMEOUT_MS} ms timeout`)
        yield* check((yield* live).connections === 1, "only the silent server's connection is left")
      })
  },
  {
    name: "close: a scope with a pending receive of its own closes within the timeout",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { timeout: TIMEOUT }))
        const scope = yield* Scope.make()
        const inbox = yield* LocalMr.allocate(clientPeer, 256, Usage.RECV).pipe(Scope.extend(scope))
        const conn = yield* Connection.connect(clientPeer, address, port, { timeout: TIMEOUT }).pipe(
          Scope.extend(scope)
        )
        yield* Effect.forkIn(Connection.recv(conn, { dst: inbox, offset: 0, length: 256 }), scope)
        const server = yield* Fiber.join(accepting)
        const [, ms] = yield* timed(Scope.close(scope, Exit.void))
        yield* check(ms < TIMEOUT_MS + SLACK_MS, `closing took ${ms} ms with a ${TIMEOUT_MS} ms timeout`)
        yield* Connection.awaitClosed(server)
        const after = yield* live
        yield* check(
          after.localRegions === 0,
          `the receive's region was released with its connection: ${after.localRegions}`
        )
      })
  },
  {
    name: "connect: a failure after ESTABLISHED closes the connection at once; the server sees it end",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { timeout: TIMEOUT }))
        const failing: Driver.Driver = {
          ...d,
          connPrivateData: () => Effect.fail(new Connection.OutOfRangeError({ operation: "test", detail: "x" }) as any)
        }
        const exit = yield* Effect.exit(
          Effect.scoped(Connection.connect(clientPeer, address, port, { timeout: TIMEOUT })).pipe(
            Effect.provideService(Driver.RdmaDriver, failing)
          )
        )
        yield* check(tagOf(exit) === "OutOfRangeError", `connect ended with ${tagOf(exit)}`)
        const server = yield* Fiber.join(accepting)
        const [events, ms] = yield* timed(Stream.runCollect(Connection.changes(server)))
        yield* check([...events].at(-1) === "Closed", `the server's last state: ${[...events].at(-1)}`)
        yield* check(ms < TIMEOUT_MS + SLACK_MS, `the server saw the end after ${ms} ms`)
      })
  },
  {
    name: "connect/accept: private data the driver refuses leaves no request; the refused client is rejected at once",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const tooLong = new Uint8Array(300)
        const refused = yield* Effect.exit(
          Effect.scoped(Connection.connect(clientPeer, address, port, { privateData: tooLong }))
        )
        yield* check(tagOf(refused) === "RpmaInvalidError", `connect with 300 bytes: ${tagOf(refused)}`)
        yield* check((yield* live).connectionRequests === 0, "no request left after the refused connect")
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(
          Effect.exit(Effect.scoped(Listener.acceptNext(ep, { privateData: tooLong })))
        )
        const [client, ms] = yield* timed(
          Effect.exit(Effect.scoped(Connection.connect(clientPeer, address, port, { timeout: "10 seconds" })))
        )
        const server = yield* Fiber.join(accepting)
        yield* check(tagOf(server) === "RpmaInvalidError", `accept with 300 bytes: ${tagOf(server)}`)
        yield* check(tagOf(client) === "ConnectionFailedError", `the refused client: ${tagOf(client)}`)
        yield* check(ms < 10_000 - 1000, `the refused client waited ${ms} ms of its 10 s timeout`)
        const after = yield* live
        yield* check(after.connectionRequests + after.connections === 0, `left: ${JSON.stringify(after)}`)
      })
  },
  {
    name: "connect interrupted at any point leaves nothing alive, without garbage collection",
    run: (address, port) =>
      Effect.gen(function*() {
        yield* acceptingServer(address, port)
        for (let i = 0; i < 24; i++) {
          const fiber = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            const peer = yield* Peer.make(address)
            yield* Connection.connect(peer, address, port, { timeout: TIMEOUT })
            yield* Effect.never
          })))
          if (i % 2 === 0) { for (let y = 0; y < i; y++) yield* Effect.yieldNow() }
          else yield* Effect.sleep(`${i} millis`)
          yield* Fiber.interrupt(fiber)
        }
        // The server's side of each connection ends within its timeout of the client's end.
        yield* Effect.sleep(`${TIMEOUT_MS * 2} millis`)
        const after = yield* live
        yield* check(after.connections + after.connectionRequests === 0, `left: ${JSON.stringify(after)}`)
        yield* check(after.peers === 1, `peers left besides the server's: ${after.peers - 1}`)
      })
  },
  {
    name: "Connection.close interrupted at any point goes on to its end: the scope's close waits for it, and the " +
      "connection and its peer are released",
    run: (address, port) =>
      Effect.gen(function*() {
        yield* acceptingServer(address, port)
        const before = yield* live
        for (let k = 0; k < 12; k++) {
          const scope = yield* Scope.make()
          const conn = yield* Effect.flatMap(
            Peer.make(address),
            (peer) => Connection.connect(peer, address, port, { timeout: TIMEOUT })
          ).pipe(Scope.extend(scope))
          const closing = yield* Effect.fork(Connection.close(conn))
          for (let y = 0; y < k; y++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(closing)
          yield* Scope.close(scope, Exit.void)
          const state = yield* Connection.state(conn)
          yield* check(
            state === "Closed",
            `interrupted after ${k} yields: the scope closed with the connection ${state}`
          )
          const after = yield* live
          yield* check(
            after.connections === before.connections && after.peers === before.peers,
            `interrupted after ${k} yields: left ${JSON.stringify(after)} (before ${JSON.stringify(before)})`
          )
        }
      })
  },
  {
    name: "connect to an isolating server interrupted at any point of its rendezvous leaves nothing alive",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverScope = yield* Scope.make()
        const ep = yield* Effect.flatMap(Peer.make(address), (peer) => Listener.make(peer, address, port)).pipe(
          Scope.extend(serverScope)
        )
        yield* Effect.forkIn(
          Listener.serve(ep, (conn) => Connection.awaitClosed(conn), { timeout: TIMEOUT }),
          serverScope
        )
        const before = yield* live
        for (let k = 0; k < 40; k += 3) {
          const connecting = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
            const peer = yield* Peer.make(address)
            yield* Connection.connect(peer, address, port, { timeout: TIMEOUT })
            yield* Effect.never
          })))
          for (let y = 0; y < k; y++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(connecting)
        }
        yield* Scope.close(serverScope, Exit.void)
        // What the server's side held ends within its timeout of the client's end.
        yield* Effect.sleep(`${TIMEOUT_MS * 2} millis`)
        const after = yield* live
        yield* check(
          after.connections === before.connections && after.peers < before.peers,
          `left: ${JSON.stringify(after)} (before ${JSON.stringify(before)}, the server's peer among them)`
        )
      })
  },
  {
    name:
      "connect refuses settings under which operations would wait forever (no send queue, completions lost, no timeout)",
    run: (address, port) =>
      Effect.gen(function*() {
        const peer = yield* Peer.make(address)
        for (
          const options of [
            { sendQueueSize: 0 },
            { sendQueueSize: -1 },
            { sendQueueSize: 16, receiveQueueSize: 16, completionQueueSize: 8 },
            { timeout: "0 millis" },
            { timeout: "soon" as any }
          ]
        ) {
          const exit = yield* Effect.exit(Effect.scoped(Connection.connect(peer, address, port, options)))
          yield* check(tagOf(exit) === "RpmaInvalidError", `connect with ${JSON.stringify(options)}: ${tagOf(exit)}`)
        }
        const after = yield* live
        yield* check(after.connectionRequests + after.connections === 0, `left: ${JSON.stringify(after)}`)
      })
  },
  {
    name: "admission and isolation: a wrong token is rejected at once; a region of another peer is out of reach",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const otherClientsPeer = yield* Peer.make(address) // another protection domain
        const clientPeer = yield* Peer.make(address)
        const token = Uint8Array.of(7, 1, 9, 4, 2, 8, 6, 3)
        const admission = yield* Admission.make(token)
        const ep = yield* Listener.make(serverPeer, address, port)
        const refusing = yield* Effect.fork(Effect.exit(Effect.scoped(
          Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission }))
        )))
        const prefix = yield* Admission.privateData(token.subarray(0, 4))
        const [wrong, ms] = yield* timed(Effect.exit(Effect.scoped(
          Connection.connect(clientPeer, address, port, { timeout: "10 seconds", privateData: prefix })
        )))
        yield* check(
          tagOf(yield* Fiber.join(refusing)) === "AdmissionRefusedError",
          "the server refused the wrong token"
        )
        yield* check(tagOf(wrong) === "ConnectionFailedError", `the client with a wrong token: ${tagOf(wrong)}`)
        yield* check(ms < 9000, `the refused client waited ${ms} ms of its 10 s timeout`)
        const accepting = yield* Effect.fork(
          Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission }))
        )
        const conn = yield* Connection.connect(clientPeer, address, port, {
          privateData: yield* Admission.privateData(token)
        })
        yield* Fiber.join(accepting)
        // A region of another peer, even with its exact descriptor, is not reachable over this connection.
        const elsewhere = yield* LocalMr.allocate(
          otherClientsPeer,
          4096,
          Usage.combine(Usage.WRITE_DST, Usage.READ_SRC)
        )
        const reachable = yield* LocalMr.allocate(serverPeer, 4096, Usage.combine(Usage.WRITE_DST, Usage.READ_SRC))
        const src = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC)
        const remoteOf = (mr: LocalMr.LocalMr<"WRITE_DST">) =>
          Effect.flatMap(
            LocalMr.descriptor(mr),
            (bytes) => Effect.flatMap(RemoteMr.fromDescriptor(bytes), RemoteMr.require(Usage.WRITE_DST))
          )
        yield* Connection.write(conn, { dst: yield* remoteOf(reachable), src, length: 64 })
        const blocked = yield* Effect.flip(Connection.write(conn, { dst: yield* remoteOf(elsewhere), src, length: 64 }))
        yield* check(
          blocked._tag === "CompletionError" && blocked.status === 10,
          `a write into another protection domain: ${blocked._tag} ${(blocked as { status?: number }).status}`
        )
      })
  },
  {
    name: "a peer whose scope closes before its regions' scope is deleted after the last region",
    run: (address) =>
      Effect.gen(function*() {
        const regions = yield* Scope.make()
        const peers = yield* Scope.make()
        const peer = yield* Peer.make(address).pipe(Scope.extend(peers))
        yield* LocalMr.allocate(peer, 4096, Usage.READ_SRC).pipe(Scope.extend(regions))
        yield* LocalMr.allocate(peer, 4096, Usage.WRITE_DST).pipe(Scope.extend(regions))
        yield* Scope.close(peers, Exit.void)
        yield* check((yield* live).peers === 1, "the peer stays while its regions do")
        yield* Scope.close(regions, Exit.void)
        const after = yield* live
        yield* check(after.peers + after.localRegions === 0, `left: ${JSON.stringify(after)}`)
      })
  },
  {
    name:
      "peers whose scopes close while an endpoint, connections and regions made with them are open: all still work, and the peers go after the last of them",
    run: (address, port) =>
      Effect.gen(function*() {
        const peers = yield* Scope.make()
        const users = yield* Scope.make()
        const serverPeer = yield* Peer.make(address).pipe(Scope.extend(peers))
        const clientPeer = yield* Peer.make(address).pipe(Scope.extend(peers))
        const ep = yield* Listener.make(serverPeer, address, port).pipe(Scope.extend(users))
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.WRITE_DST).pipe(Scope.extend(users))
        const accepting = yield* Effect.fork(Listener.acceptNext(ep).pipe(Scope.extend(users)))
        const conn = yield* Connection.connect(clientPeer, address, port).pipe(Scope.extend(users))
        yield* Fiber.join(accepting)
        yield* Scope.close(peers, Exit.void)
        yield* check((yield* live).peers === 2, "both peers stay while what was made with them is open")
        // After their scopes closed: a new region on the client's peer, and a write across.
        const src = yield* LocalMr.allocate(clientPeer, 64, Usage.WRITE_SRC).pipe(Scope.extend(users))
        src.memory.fill(0x5a)
        const dst = yield* Effect.flatMap(LocalMr.descriptor(inbox), (bytes) =>
          Effect.flatMap(RemoteMr.fromDescriptor(bytes), RemoteMr.require(Usage.WRITE_DST)))
        yield* Connection.write(conn, { dst, src, length: 64 })
        yield* check(
          inbox.memory.every((b) =>
            b === 0x5a
          ),
          "the write arrived"
        )
        yield* Scope.close(users, Exit.void)
        const after = yield* live
        yield* check(
          after.peers + after.localRegions + after.endpoints + after.connections + after.connectionRequests === 0,
          `left: ${JSON.stringify(after)}`
        )
      })
  },
  {
    name:
      "a region with a receive in flight: its deregistration is refused by the driver (still alive), deferred by core",
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const accepting = yield* Effect.fork(Listener.acceptNext(ep, { timeout: TIMEOUT }))
        const clientScope = yield* Scope.make()
        yield* Connection.connect(clientPeer, address, port, { timeout: TIMEOUT }).pipe(Scope.extend(clientScope))
        const server = yield* Fiber.join(accepting)
        const regionScope = yield* Scope.make()
        const inbox = yield* LocalMr.allocate(serverPeer, 256, Usage.RECV).pipe(Scope.extend(regionScope))
        const receiving = yield* Effect.fork(
          Effect.exit(Connection.recv(server, { dst: inbox, offset: 0, length: 256 }))
        )
        yield* Effect.yieldNow()
        yield* Effect.sleep("20 millis")
        const refused = yield* Effect.exit(d.mrDereg(Driver.handleOf(inbox)))
        yield* check(
          tagOf(refused) === "ResourceInUseError",
          `rpma_mr_dereg with a receive in flight: ${tagOf(refused)}`
        )
        yield* Scope.close(regionScope, Exit.void)
        yield* check((yield* live).localRegions === 1, "core defers the region's deregistration")
        yield* Scope.close(clientScope, Exit.void)
        const received = yield* Fiber.join(receiving)
        yield* check(tagOf(received) !== "success", "the receive ended with the connection")
      })
  },
  {
    name: "a send that completed is reported as a success even when the other side closes right after",
    run: (address, port) =>
      Effect.gen(function*() {
        const serverPeer = yield* Peer.make(address)
        const clientPeer = yield* Peer.make(address)
        const ep = yield* Listener.make(serverPeer, address, port)
        const out = yield* LocalMr.allocate(clientPeer, 64, Usage.SEND)
        const inbox = yield* LocalMr.allocate(serverPeer, 64, Usage.RECV)
        for (let round = 0; round < 8; round++) {
          yield* Effect.scoped(Effect.gen(function*() {
            const accepting = yield* Effect.fork(Effect.scoped(Effect.gen(function*() {
              const server = yield* Listener.acceptNext(ep, { timeout: TIMEOUT })
              // Received, then closed at once: the client's send completion and CLOSED race.
              return yield* Connection.recv(server, { dst: inbox, offset: 0, length: 64 })
            })))
            const client = yield* Connection.connect(clientPeer, address, port, { timeout: TIMEOUT })
            const sent = yield* Effect.exit(Connection.send(client, { src: out, offset: 0, length: 8 }))
            yield* check(
              Exit.isSuccess(sent),
              `round ${round}: a delivered send reported ${
                Exit.isFailure(sent) ? String(Cause.squash(sent.cause)) : ""
              }`
            )
            yield* Fiber.join(accepting)
          }))
        }
      })
  }
]
