// A client written in C on librpma (examples/c/rendezvous_client.c) against README's first server,
// `Listener.serve` with its defaults: the server isolates every client, so the C client's first
// connection carries a rendezvous answer, which it follows to a listener of its own as README's
// "Security" section tells a C client to; then it talks to the handler, README's echo. The same client against
// a shared server is not redirected, and a wrong admission token is refused before any rendezvous.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Rendezvous.test.ts
import { Admission, Connection, Listener, LocalMr, Peer, Usage } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { randomBytes } from "node:crypto"
import { join } from "node:path"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, runC } from "./cPeer.js"
import { address } from "./support.js"

const source = join(import.meta.dirname, "..", "..", "..", "examples", "c", "rendezvous_client.c")
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

/** README's first `Listener.serve` example: each message is echoed back to its client. */
const echo = (conn: Connection.Connection) =>
  Effect.gen(function*() {
    const own = yield* Peer.Peer
    const buffer = yield* LocalMr.allocate(own, 4096, Usage.combine(Usage.RECV, Usage.SEND))
    for (;;) {
      const { byteLength } = yield* Connection.recv(conn, { dst: buffer })
      yield* Connection.send(conn, { src: buffer, length: byteLength })
    }
  }).pipe(Effect.catchTag("ConnectionClosedError", () => Effect.void))

/** Serves `port` with `options` while the C client runs; its exit code and output lines. */
const clientOf = (port: number, options: Listener.ServeOptions, token?: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const listener = yield* Listener.make(yield* Peer.make(address), address, port)
    yield* Effect.forkScoped(Listener.serve(listener, echo, options))
    const client = runC("rendezvous_client", [address, String(port), ...(token ? [hex(token)] : [])], source)
    const code = yield* awaitExit(client)
    return { code, lines: client.output().trim().split("\n") }
  }))

const answered = ["echo 5", "echo 64", "echo 300", "done"]

describe("a librpma C client following the rendezvous (examples/c/rendezvous_client.c)", () => {
  it.live("the default server: redirected to a port of its own, then answered", () =>
    Effect.gen(function*() {
      const port = 17960
      const { code, lines } = yield* clientOf(port, {})
      assert.strictEqual(code, 0, lines.join("\n"))
      const redirected = /^redirected (\d+)$/.exec(lines[0]!)
      assert.isNotNull(redirected, lines.join("\n"))
      // The clients' listeners take the 64 ports after the server's by default.
      const own = Number(redirected![1])
      assert.isTrue(own > port && own <= port + 64, `redirected to ${own}`)
      assert.deepStrictEqual(lines.slice(1), answered)
    }).pipe(Effect.provide(NativeDriver.layer)))

  it.live("with an admission token: the right one is redirected and answered; a wrong one is refused", () =>
    Effect.gen(function*() {
      const token = new Uint8Array(randomBytes(16))
      const admission = yield* Admission.make(token, { uses: 2 })
      const good = yield* clientOf(17970, { admission }, token)
      assert.strictEqual(good.code, 0, good.lines.join("\n"))
      assert.match(good.lines[0]!, /^redirected \d+$/)
      assert.deepStrictEqual(good.lines.slice(1), answered)
      const wrong = token.slice()
      wrong[0]! ^= 1
      const bad = yield* clientOf(17980, { admission }, wrong)
      assert.strictEqual(bad.code, 1, bad.lines.join("\n"))
      assert.match(bad.lines.join("\n"), /^FAIL connect to port 17980: /)
    }).pipe(Effect.provide(NativeDriver.layer)))

  it.live("a shared server: no rendezvous, the first connection is the session", () =>
    Effect.gen(function*() {
      const { code, lines } = yield* clientOf(17990, { isolation: "shared" })
      assert.strictEqual(code, 0, lines.join("\n"))
      assert.deepStrictEqual(lines, answered)
    }).pipe(Effect.provide(NativeDriver.layer)))
})
