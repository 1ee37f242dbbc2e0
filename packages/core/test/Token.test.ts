// Issue 19, item 3: admission tokens. On c0b290a acceptIfToken compared the token with the padded
// private data (rdma_cm pads it with zeros to 56 bytes), so an all-zero token admitted a client
// that sent nothing, and a token's trailing zeros matched the padding.
import { Admission, Connection, Listener, Peer } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option, TestClock } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E | undefined =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

/** A server that admits with `admission`, and clients that connect with the private data given. */
const listening = (admission: Admission.Admission) =>
  Effect.gen(function*() {
    const ep = yield* Listener.make(yield* Peer.make(address), address, 7471)
    const clientPeer = yield* Peer.make(address)
    /** One request: what the server and the client each saw (both connections closed after). */
    const attempt = (privateData: Uint8Array | undefined) =>
      Effect.gen(function*() {
        const serving = yield* Effect.fork(Effect.exit(Effect.scoped(
          Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission }))
        )))
        const client = yield* Effect.exit(Effect.scoped(
          Connection.connect(clientPeer, address, ep.port, privateData === undefined ? {} : { privateData })
        ))
        const server = yield* Fiber.join(serving)
        return { server, client }
      })
    /** Asserts that `privateData` was refused for `reason`, on both sides. */
    const refused = (
      privateData: Uint8Array | undefined,
      reason: Admission.AdmissionRefusedError["reason"],
      what: string
    ) =>
      Effect.gen(function*() {
        const { client, server } = yield* attempt(privateData)
        const error = failureOf(server)
        assert.strictEqual(
          error?._tag,
          "AdmissionRefusedError",
          `${what}: the server ${Exit.isSuccess(server) ? "admitted it" : error?._tag}`
        )
        assert.strictEqual((error as Admission.AdmissionRefusedError).reason, reason, what)
        assert.strictEqual(failureOf(client)?._tag, "ConnectionFailedError", `${what}: the client`)
      })
    const admitted = (privateData: Uint8Array, what: string) =>
      Effect.gen(function*() {
        const { client, server } = yield* attempt(privateData)
        assert.isTrue(Exit.isSuccess(server), `${what}: the server ${failureOf(server)}`)
        assert.isTrue(Exit.isSuccess(client), `${what}: the client ${failureOf(client)}`)
      })
    return { refused, admitted }
  })

describe("admission tokens", () => {
  it.effect("a token is checked when it is set: empty, all zeros, too long or not bytes is an InvalidTokenError", () =>
    Effect.gen(function*() {
      const bad: ReadonlyArray<[unknown, string]> = [
        [new Uint8Array(0), "empty"],
        [new Uint8Array(16), "all zero"],
        [new Uint8Array(Admission.MAX_TOKEN + 1).fill(1), `at most ${Admission.MAX_TOKEN}`],
        ["secret", "Uint8Array"],
        [undefined, "Uint8Array"]
      ]
      for (const [token, says] of bad) {
        const setting: ReadonlyArray<Effect.Effect<unknown, Admission.InvalidTokenError>> = [
          Admission.make(token as Uint8Array),
          Admission.privateData(token as Uint8Array)
        ]
        for (const set of setting) {
          const error = yield* Effect.flip(set)
          assert.strictEqual(error._tag, "InvalidTokenError")
          assert.include(error.message, says)
        }
      }
      const longest = new Uint8Array(Admission.MAX_TOKEN).fill(9)
      assert.strictEqual((yield* Admission.privateData(longest)).byteLength, 56, "what a connection request carries")
      assert.deepStrictEqual(yield* Admission.privateData(Uint8Array.of(0, 4, 0)), Uint8Array.of(3, 0, 4, 0))
    }))

  // Issue 31, item 15: a Proxy passed instanceof and then died with a TypeError from its getters.
  it.effect("a token that is not a genuine, attached Uint8Array is an InvalidTokenError that says what it is, never a defect", () =>
    Effect.gen(function*() {
      const revocable = Proxy.revocable(Uint8Array.of(1, 2), {})
      revocable.revoke()
      const detached = Uint8Array.of(1, 2, 3)
      structuredClone(detached.buffer, { transfer: [detached.buffer] })
      const throwing = Object.defineProperty(Uint8Array.of(1, 2), "byteLength", {
        get() {
          throw new Error("a getter that throws")
        }
      })
      const bad: ReadonlyArray<[unknown, string, string]> = [
        [new Proxy(Uint8Array.of(1, 2), {}), "a Proxy", "a Proxy of a Uint8Array"],
        [revocable.proxy, "a Proxy", "a revoked Proxy"],
        [detached, "detached", "a Uint8Array over a transferred buffer"],
        [Object.create(Uint8Array.prototype), "not object", "an object whose prototype is Uint8Array's"]
      ]
      for (const [token, says, what] of bad) {
        const setting: ReadonlyArray<Effect.Effect<unknown, Admission.InvalidTokenError>> = [
          Admission.make(token as Uint8Array),
          Admission.privateData(token as Uint8Array)
        ]
        for (const set of setting) {
          const exit = yield* Effect.exit(set)
          const error = failureOf(exit)
          assert.strictEqual(
            error?._tag,
            "InvalidTokenError",
            `${what}: ${Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "set"}`
          )
          assert.include(error!.message, says, what)
        }
      }
      // A real Uint8Array whose getters or methods lie or throw: its real bytes are the token.
      class Liar extends Uint8Array {
        override get byteLength() {
          return 0
        }
        override every(): boolean {
          throw new Error("a method that throws")
        }
      }
      const liar = new Liar(2)
      liar.set([7, 8])
      assert.deepStrictEqual(yield* Admission.privateData(throwing), Uint8Array.of(2, 1, 2), "a throwing byteLength")
      assert.deepStrictEqual(yield* Admission.privateData(liar), Uint8Array.of(2, 7, 8), "a lying byteLength")
      // Options that throw as they are read are refused too.
      const options = new Proxy({}, {
        get() {
          throw new Error("a trap that throws")
        }
      })
      const error = yield* Effect.flip(Admission.make(Uint8Array.of(1), options))
      assert.include(error.message, "its options could not be read (singleUse threw: a trap that throws)")
    }))

  it.effect("the padding completes no token: nothing, the token short of its trailing zeros, or with one more zero is refused", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(5, 6, 7, 0, 0)
      const { admitted, refused } = yield* listening(yield* Admission.make(token, { uses: 2 }))
      yield* refused(undefined, "WrongToken", "no private data")
      yield* refused(Uint8Array.of(5, 6, 7), "WrongToken", "the token's bytes short of its zeros, unencoded")
      yield* refused(token, "WrongToken", "the token unencoded (no length byte)")
      yield* refused(yield* Admission.privateData(Uint8Array.of(5, 6, 7)), "WrongToken", "the token short of its zeros")
      yield* refused(yield* Admission.privateData(Uint8Array.of(5, 6, 7, 0, 0, 0)), "WrongToken", "one zero more")
      yield* refused(yield* Admission.privateData(Uint8Array.of(5, 6, 8, 0, 0)), "WrongToken", "one byte off")
      yield* admitted(yield* Admission.privateData(token), "the token")
      // Bytes after the token are the application's: not looked at.
      yield* admitted(Uint8Array.of(...(yield* Admission.privateData(token)), 42), "the token, then more")
    })))

  it.effect("an all-zero token cannot be set, so a client that sends nothing is never admitted by one", () =>
    inWorld(Effect.gen(function*() {
      const error = yield* Effect.flip(Admission.make(new Uint8Array(16)))
      assert.strictEqual(error._tag, "InvalidTokenError")
      // The same client against a real token.
      const { refused } = yield* listening(yield* Admission.make(Uint8Array.of(1)))
      yield* refused(undefined, "WrongToken", "no private data")
    })))

  it.effect("a token admits one connection by default: the same token again is refused (TokenUsed); singleUse says the same", () =>
    Effect.gen(function*() {
      for (const options of [undefined, { singleUse: true }]) {
        yield* inWorld(Effect.gen(function*() {
          const token = Uint8Array.of(3, 1, 4, 1, 5, 9, 2, 6)
          const once = yield* Admission.make(token, options)
          assert.isTrue(once.singleUse)
          assert.strictEqual(once.uses, 1)
          const single = yield* listening(once)
          const sent = yield* Admission.privateData(token)
          yield* single.refused(
            yield* Admission.privateData(Uint8Array.of(3, 1, 4)),
            "WrongToken",
            "a wrong token first"
          )
          yield* single.admitted(sent, "the first use")
          yield* single.refused(sent, "TokenUsed", "the second use")
        }))
      }
    }))

  it.effect("uses: n admits n connections in all, then TokenUsed", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(2, 7, 1, 8)
      const three = yield* Admission.make(token, { uses: 3 })
      assert.isFalse(three.singleUse)
      const { admitted, refused } = yield* listening(three)
      const sent = yield* Admission.privateData(token)
      for (let use = 1; use <= 3; use++) yield* admitted(sent, `use ${use} of 3`)
      yield* refused(sent, "TokenUsed", "a fourth use")
    })))

  it.effect("uses in a window: n connections per window; one more is TooSoon until the window has moved past the first", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(6, 6, 2, 1)
      const { admitted, refused } = yield* listening(yield* Admission.make(token, { uses: 2, window: "1 minute" }))
      const sent = yield* Admission.privateData(token)
      yield* admitted(sent, "use 1 at 0 s")
      yield* TestClock.adjust("30 seconds")
      yield* admitted(sent, "use 2 at 30 s")
      yield* refused(sent, "TooSoon", "use 3 at 30 s")
      yield* TestClock.adjust("29 seconds")
      yield* refused(sent, "TooSoon", "use 3 at 59 s: both uses still in the window")
      yield* TestClock.adjust("1 second")
      yield* admitted(sent, "use 3 at 60 s: the first has left the window")
      yield* refused(sent, "TooSoon", "use 4 at 60 s")
    })))

  it.effect("a budget that is not bounded or not a positive count is an InvalidTokenError that says what to give", () =>
    Effect.gen(function*() {
      const token = Uint8Array.of(1, 2, 3)
      const bad: ReadonlyArray<[Admission.Options, string]> = [
        [{ singleUse: false }, "give uses"],
        [{ uses: 0 }, "positive integer"],
        [{ uses: 1.5 }, "positive integer"],
        [{ uses: Infinity }, "positive integer"],
        [{ uses: Number.NaN }, "positive integer"],
        [{ uses: Admission.MAX_TOKEN_USES + 1 }, `at most ${Admission.MAX_TOKEN_USES}`],
        [{ uses: Number.MAX_SAFE_INTEGER, window: "1 minute" }, "there is no unlimited token"],
        [{ uses: 2, singleUse: true }, "singleUse admits 1"],
        [{ uses: 2, window: "0 seconds" }, "positive, finite duration"],
        [{ uses: 2, window: Infinity }, "positive, finite duration"],
        [{ uses: 2, window: "soon" as never }, "positive, finite duration"]
      ]
      for (const [options, says] of bad) {
        const error = yield* Effect.flip(Admission.make(token, options))
        assert.strictEqual(error._tag, "InvalidTokenError", JSON.stringify(options))
        assert.include(error.message, says, JSON.stringify(options))
      }
      const most = yield* Admission.make(token, { uses: Admission.MAX_TOKEN_USES })
      assert.strictEqual(most.uses, Admission.MAX_TOKEN_USES)
    }))

  it.effect("the token is copied when set: changing the array afterwards changes nothing", () =>
    inWorld(Effect.gen(function*() {
      const token = Uint8Array.of(8, 8, 8, 8)
      const admission = yield* Admission.make(token)
      const sent = yield* Admission.privateData(token)
      token.fill(0)
      const { admitted } = yield* listening(admission)
      yield* admitted(sent, "the token as it was set")
    })))

  it.effect("acceptIfToken given a bare token instead of an Admission: InvalidTokenError, and the request is rejected", () =>
    inWorld(Effect.gen(function*() {
      const ep = yield* Listener.make(yield* Peer.make(address), address, 7471)
      const serving = yield* Effect.fork(Effect.exit(Effect.scoped(
        Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission: Uint8Array.of(1, 2) as never }))
      )))
      const client = yield* Effect.exit(Effect.scoped(
        Connection.connect(yield* Peer.make(address), address, ep.port, { privateData: Uint8Array.of(2, 1, 2) })
      ))
      const server = yield* Fiber.join(serving)
      assert.strictEqual(failureOf(server)?._tag, "InvalidTokenError")
      assert.include(String(failureOf(server)), "Admission.make")
      assert.strictEqual(failureOf(client)?._tag, "ConnectionFailedError")
    })))
})
