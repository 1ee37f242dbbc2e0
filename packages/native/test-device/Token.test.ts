// Admission tokens from a client written in C on librpma (token_client.c), which encodes the token
// as README's "Security" says a C client does: one byte with its length, then its bytes. The
// TypeScript server admits exactly the token it set, once.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Token.test.ts
import { Admission, Listener, Peer } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import { randomBytes } from "node:crypto"
import * as NativeDriver from "../src/NativeDriver.js"
import { awaitExit, runC } from "./cPeer.js"

const address = process.env.RDMA_ADDRESS
if (address === undefined || address === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

describe("admission tokens sent by a librpma C client", () => {
  it.live("the exact token is admitted once; a changed byte, a prefix or a spent token is refused, and the C client sees the rejection", () =>
    Effect.gen(function*() {
      const port = 17950
      const token = new Uint8Array(randomBytes(16))
      const admission = yield* Admission.make(token)
      const ep = yield* Listener.make(yield* Peer.make(address), address, port)
      /** One C client's request: the server's verdict and the client's output. */
      const attempt = (sent: Uint8Array) =>
        Effect.gen(function*() {
          const serving = yield* Effect.fork(Effect.exit(Effect.scoped(
            Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission }))
          )))
          const client = runC("token_client", [address, String(port), hex(sent)])
          const code = yield* awaitExit(client)
          const served = yield* Fiber.join(serving)
          assert.strictEqual(code, 0, client.output())
          const failure = Exit.isFailure(served) ? Option.getOrUndefined(Cause.failureOption(served.cause)) : undefined
          const verdict = Exit.isSuccess(served)
            ? "admitted"
            : failure?._tag === "AdmissionRefusedError"
            ? failure.reason
            : Cause.pretty((served as Exit.Failure<unknown, unknown>).cause)
          return [verdict, client.output().trim().split(" ")[0]]
        })
      const changed = token.slice()
      changed[15]! ^= 1
      assert.deepStrictEqual(yield* attempt(changed), ["WrongToken", "refused"], "a changed last byte")
      assert.deepStrictEqual(yield* attempt(token.subarray(0, 15)), ["WrongToken", "refused"], "a prefix")
      assert.deepStrictEqual(yield* attempt(token), ["admitted", "established"], "the token")
      assert.deepStrictEqual(yield* attempt(token), ["TokenUsed", "refused"], "the token again: its one use is spent")
    }).pipe(Effect.scoped, Effect.provide(NativeDriver.layer)))
})
