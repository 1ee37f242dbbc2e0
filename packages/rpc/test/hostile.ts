/**
 * Hostile clients of an RPC server, run on any driver: the simulated one (test/Hostile.test.ts) and
 * the native one in the Soft-RoCE VM (test-device/Hostile.test.ts). A raw connection speaks the
 * channel's frames (an 8-byte header: kind u8, flags u8, sequence u16, length u32 LE; then the
 * payload) and breaks its rules: it posts no receive, sends a frame that is malformed, truncated or
 * of the wrong type, or sends pieces of a large message that never ends. Each must be dropped
 * with a logged reason, release what it held, and leave the other clients served; closing the
 * server's scope ends within its bound with them attached.
 *
 * On the `"cm"` transport the raw client is a CmEndpoint speaking that channel's frames (the same
 * header; HELLO carries the receive buffer size and count, LARGE pieces carry their bytes): it sends its HELLO
 * before the frames of a case (the server's handshake waits for it), except where the case is
 * about HELLO.
 */
import { CmEndpoint, Connection, LocalMr, Peer, Usage } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { RdmaRpc } from "@effect-rdma/rpc"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "@effect/rpc"
import { assert, describe, it } from "@effect/vitest"
import { type Duration, Effect, ExecutionStrategy, Exit, Fiber, Layer, Logger, Schema, Scope, TestClock } from "effect"

const Group = RpcGroup.make(
  Rpc.make("Add", { payload: { a: Schema.Number, b: Schema.Number }, success: Schema.Number })
)
const Handlers = Group.toLayer({ Add: ({ a, b }) => Effect.succeed(a + b) })

const HELLO = 1
const INLINE = 2
const LARGE = 3
const header = (kind: number, flags: number, length: number): Array<number> => [
  kind,
  flags,
  0,
  0,
  length & 0xff,
  (length >> 8) & 0xff,
  (length >> 16) & 0xff,
  length >>> 24
]

type ProtocolNeeds = Driver.RdmaDriver | RpcSerialization.RpcSerialization

export type World = <A, E>(
  effect: Effect.Effect<A, E, Driver.RdmaDriver | Scope.Scope>
) => Effect.Effect<void, unknown>

export const hostileCases = (
  address: string,
  firstPort: number,
  world: World,
  timeout?: number,
  transport: "rpma" | "cm" = "rpma"
) => {
  const cm = transport === "cm"
  let nextPort = firstPort
  /** Runs `f` with the log lines written meanwhile (the server's warnings: each drop's reason). */
  const withLogs = <A, E, R>(f: (logged: (reason: RegExp) => void) => Effect.Effect<A, E, R>) =>
    Effect.suspend(() => {
      const lines: Array<string> = []
      const logger = Logger.make(({ cause, message }) => {
        lines.push([...(Array.isArray(message) ? message : [message]), cause].map(String).join(" "))
      })
      const logged = (reason: RegExp) =>
        assert.isTrue(
          lines.some((line) => reason.test(line)),
          `a logged reason matching ${reason} in:\n${lines.join("\n")}`
        )
      return f(logged).pipe(Effect.provide(Logger.add(logger)))
    })

  /** A server in a scope of its own, and a well-behaved client of it. */
  const served = (
    port: number,
    options: {
      readonly handshakeTimeout?: Duration.DurationInput
      readonly maxHandshakes?: number
      readonly maxMessageSize?: number
      readonly landingSize?: number
      readonly ackTimeout?: Duration.DurationInput
    }
  ) =>
    Effect.gen(function*() {
      const { landingSize, ...common } = options
      const serverProtocol: Layer.Layer<RpcServer.Protocol, unknown, ProtocolNeeds> = cm
        ? RdmaRpc.layerProtocolServer({ transport, address, port, ...common })
        : RdmaRpc.layerProtocolServer({ transport: "rpma", address, port, ...common, landingSize }).pipe(
          Layer.provide(Peer.layer(address))
        )
      const clientProtocol: Layer.Layer<RpcClient.Protocol, unknown, ProtocolNeeds> = cm
        ? RdmaRpc.layerProtocolClient({ transport, address, port })
        : RdmaRpc.layerProtocolClient({ transport: "rpma", address, port }).pipe(Layer.provide(Peer.layer(address)))
      // A child of the test's scope: closed by the test, or with it if the test fails first.
      const serverScope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
      yield* Layer.buildWithScope(
        RpcServer.layer(Group).pipe(
          Layer.provide(Handlers),
          Layer.provide(serverProtocol),
          Layer.provide(RpcSerialization.layerMsgPack)
        ),
        serverScope
      )
      const call = Effect.gen(function*() {
        const protocol = yield* Layer.build(clientProtocol.pipe(Layer.provide(RpcSerialization.layerMsgPack)))
        const client = yield* Effect.provide(RpcClient.make(Group), protocol)
        return yield* client.Add({ a: 40, b: 2 })
      }).pipe(Effect.scoped)
      return { serverScope, call }
    })

  /** A raw client of the server, as {@link rawRpma} or {@link rawCm}. */
  interface Raw {
    /** A well-formed HELLO, as the channel's first frame. */
    readonly hello: ReadonlyArray<number>
    /** The frames a case sends first: cm's HELLO (the server's handshake waits for it), nothing on rpma. */
    readonly opening: ReadonlyArray<ReadonlyArray<number>>
    readonly recv: Effect.Effect<unknown, unknown>
    readonly send: (bytes: ReadonlyArray<number>) => Effect.Effect<void, unknown>
    /** One piece of 512 bytes of a large message that never ends, and what the sender waits for after it. */
    readonly piece: Effect.Effect<unknown, unknown>
    readonly ended: Effect.Effect<unknown>
  }

  /** A raw connection to the server: `ended` completes when the connection does. */
  const rawRpma = (port: number, options?: Connection.Options) =>
    Effect.gen(function*() {
      const peer = yield* Peer.make(address)
      const conn = yield* Connection.connect(peer, address, port, options)
      const inbox = yield* LocalMr.allocate(peer, 4096, Usage.RECV)
      const outbox = yield* LocalMr.allocate(peer, 4096, Usage.SEND)
      const landing = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.READ_SRC))
      const descriptor = yield* LocalMr.descriptor(landing)
      const recv = Connection.recv(conn, { dst: inbox })
      const send = (bytes: ReadonlyArray<number>) =>
        Effect.suspend(() => {
          outbox.memory.set(bytes)
          return Connection.send(conn, { src: outbox, length: bytes.length })
        })
      return {
        hello: [...header(HELLO, 0, descriptor.length), ...descriptor],
        opening: [],
        recv,
        send,
        // Announced, never written: each piece waits for the last one's RELEASE.
        piece: Effect.zipRight(send(header(LARGE, 0, 512)), recv),
        ended: Connection.awaitClosed(conn)
      } satisfies Raw
    })

  /** A raw endpoint connected to the server; it posts a receive only in `recv`. */
  const rawCm = (port: number, options?: CmEndpoint.Options) =>
    Effect.gen(function*() {
      const ep = yield* CmEndpoint.make(address, port, options)
      const inbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
      const outbox = yield* CmEndpoint.registerMessages(ep, new Uint8Array(4096))
      yield* CmEndpoint.establish(ep)
      const send = (bytes: ReadonlyArray<number>) =>
        Effect.suspend(() => {
          outbox.memory.set(bytes)
          return CmEndpoint.send(ep, { src: outbox, length: bytes.length })
        })
      const hello = [...header(HELLO, 0, 8), 0, 16, 0, 0, 16, 0, 0, 0] // 16 receive buffers of 4096 bytes
      return {
        hello,
        opening: [hello],
        recv: CmEndpoint.recv(ep, { dst: inbox }),
        send,
        piece: send([...header(LARGE, 0, 512), ...new Uint8Array(512)]),
        ended: CmEndpoint.awaitClosed(ep)
      } satisfies Raw
    })

  const raw = (
    port: number,
    options?: { readonly timeout?: Duration.DurationInput }
  ): Effect.Effect<Raw, unknown, any> => cm ? rawCm(port, options) : rawRpma(port, options)

  describe(`@effect/rpc over RDMA (${transport}): hostile clients`, () => {
    it.effect(
      "a client that posts no receive keeps nobody waiting, and is dropped after handshakeTimeout",
      () =>
        world(withLogs((logged) =>
          Effect.gen(function*() {
            const port = nextPort++
            const { call, serverScope } = yield* served(port, { handshakeTimeout: "2 seconds" })
            const silent = yield* raw(port)
            assert.strictEqual(yield* call, 42)
            const dropped = yield* Effect.fork(silent.ended)
            yield* TestClock.adjust("2 seconds")
            yield* Fiber.join(dropped)
            logged(/handshake/)
            yield* Scope.close(serverScope, Exit.void)
          })
        )),
      timeout
    )

    // Live: what is shown is a request left untaken while the only handshake permit is held. Under
    // emulation (DEVICE_TEST_SLOWDOWN) the bounds grow, up to 4 times.
    const slow = Math.min(4, Math.max(1, Number(process.env.DEVICE_TEST_SLOWDOWN ?? "1")))
    it.live(
      "handshakes are capped (maxHandshakes): a silent client holding the only one leaves the next request untaken until it is dropped",
      () =>
        world(withLogs((logged) =>
          Effect.gen(function*() {
            const port = nextPort++
            const { call, serverScope } = yield* served(port, {
              maxHandshakes: 1,
              handshakeTimeout: `${3 * slow} seconds`
            })
            yield* raw(port) // connected, and silent: it holds the permit until handshakeTimeout
            // Nobody takes the next request: its connect runs out of time, where uncapped it would
            // be accepted at once.
            const refused = yield* Effect.flip(raw(port, { timeout: `${slow} seconds` }))
            assert.strictEqual(
              (refused as { _tag?: string })._tag,
              cm ? "RdmaCmError" : "ConnectionFailedError",
              String(refused)
            )
            // Once the silent one is dropped, requests are taken again: first the stale request of the
            // client that gave up (on the device its accept holds the permit until its own bound, so a
            // call in that time may run out of time too), then the call's.
            assert.strictEqual(yield* Effect.retry(call, { times: 3 }), 42)
            logged(/handshake/)
            yield* Scope.close(serverScope, Exit.void)
          })
        )),
      timeout
    )

    /** Each case's frames, given a well-formed HELLO, and the reason its drop is logged with. */
    const frames: ReadonlyArray<
      readonly [string, (hello: ReadonlyArray<number>) => ReadonlyArray<ReadonlyArray<number>>, RegExp, "own HELLO"?]
    > = [
      ["an inline message of msgpack nil", () => [[...header(INLINE, 0, 1), 0xc0]], /not an RPC message/],
      ["an inline message of a number", () => [[...header(INLINE, 0, 1), 0x2a]], /not an RPC message/],
      // An array of two items that holds one: the parser would keep it, waiting for the rest, and
      // append every later message to it.
      ["a truncated message", () => [[...header(INLINE, 0, 2), 0x92, 0x01]], /does not decode/],
      ["an inline frame whose length is wrong", () => [[...header(INLINE, 0, 100), 0xc0]], /inline frame says/],
      ["a frame shorter than its header", () => [[INLINE, 0, 0]], /shorter than its header/],
      ["a frame of unknown kind", () => [header(99, 0, 0)], /unknown kind/],
      ["a large piece beyond the landing region", () => [header(LARGE, 0, 1 << 30)], /beyond the/],
      ["a HELLO that holds no descriptor", () => [[...header(HELLO, 0, 3), 1, 2, 3]], /HELLO/, "own HELLO"],
      ["a second HELLO", (hello) => [hello, hello], /a second HELLO/, "own HELLO"],
      // cm only: a frame's sequence field returns credits, at most as many as were spent.
      ...(cm ?
        [
          [
            "a frame that returns more credits than it was given",
            () => [[5, 0, 0xff, 0xff, 0, 0, 0, 0]],
            /credits returned/
          ] as const
        ] :
        [])
    ]
    for (const [name, bytes, reason, own] of frames) {
      it.effect(
        `${name} drops that client with a logged reason; the others are served`,
        () =>
          world(withLogs((logged) =>
            Effect.gen(function*() {
              const port = nextPort++
              const { call, serverScope } = yield* served(port, {})
              const hostile = yield* raw(port)
              yield* hostile.recv // the server's HELLO
              const sent = own === undefined ? [...hostile.opening, ...bytes(hostile.hello)] : bytes(hostile.hello)
              yield* Effect.forEach(sent, hostile.send, { discard: true })
              yield* hostile.ended
              logged(reason)
              assert.strictEqual(yield* call, 42)
              yield* Scope.close(serverScope, Exit.void)
            })
          )),
        timeout
      )
    }

    it.effect(
      "pieces of a message beyond maxMessageSize drop that client",
      () =>
        world(withLogs((logged) =>
          Effect.gen(function*() {
            const port = nextPort++
            const { call, serverScope } = yield* served(port, { maxMessageSize: 4096, landingSize: 1024 })
            const hostile = yield* raw(port)
            yield* hostile.recv // the server's HELLO
            yield* Effect.forEach(hostile.opening, hostile.send, { discard: true })
            // Pieces of 512 bytes that never end (on rpma each sent after the last one's RELEASE): the ninth is beyond 4096 bytes.
            const sent = yield* Effect.fork(Effect.forever(hostile.piece))
            yield* hostile.ended
            yield* Fiber.interrupt(sent)
            logged(/maxMessageSize/)
            assert.strictEqual(yield* call, 42)
            yield* Scope.close(serverScope, Exit.void)
          })
        )),
      timeout
    )

    it.live(
      "closing the server's scope ends within its bound with hostile clients attached",
      () =>
        world(Effect.gen(function*() {
          const port = nextPort++
          // Bounds far beyond the test's: the close must not wait for them.
          const { call, serverScope } = yield* served(port, { ackTimeout: "1 hour", handshakeTimeout: "1 hour" })
          yield* raw(port) // posts no receive
          const midway = yield* raw(port)
          yield* midway.recv
          yield* Effect.forEach(midway.opening, midway.send, { discard: true })
          yield* Effect.fork(midway.piece)
          const nil = yield* raw(port)
          yield* nil.recv
          yield* Effect.forEach([...nil.opening, [...header(INLINE, 0, 1), 0xc0]], nil.send, { discard: true })
          assert.strictEqual(yield* call, 42)
          yield* Scope.close(serverScope, Exit.void).pipe(
            Effect.timeoutFail({
              duration: "10 seconds",
              onTimeout: () => new Error("the server's scope did not close")
            })
          )
        })),
      timeout
    )
  })
}
