// Issue 19, item 3, as found: acceptIfToken handed the raw token (its form until 0.4.0) admitted a
// client that sent no private data when the token was all zeros, and a client that sent a token
// short of its trailing zeros: rdma_cm's zero padding completed them. Whatever acceptIfToken is
// given, the padding must admit nobody (now a bare token is refused with InvalidTokenError:
// tokens are set with Admission.make, which refuses an all-zero one).
import { Connection, Listener, Peer } from "@effect-rdma/core"
import { Ledger, SimulatedDriver } from "@effect-rdma/testing"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"

const address = SimulatedDriver.DEFAULT_ADDRESS

const inWorld = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Ledger.checked(Effect.scoped(effect)).pipe(Effect.provide(SimulatedDriver.layer))

/** Whether the server admitted a client that sent `privateData`, given `token` as it is. */
const admits = (token: Uint8Array, privateData: Uint8Array | undefined) =>
  Effect.gen(function*() {
    const ep = yield* Listener.make(yield* Peer.make(address), address, 7471)
    const serving = yield* Effect.fork(Effect.exit(Effect.scoped(
      Effect.flatMap(Listener.next(ep), (req) => Listener.accept(req, { admission: token as never }))
    )))
    yield* Effect.exit(Effect.scoped(
      Connection.connect(yield* Peer.make(address), address, ep.port, privateData === undefined ? {} : { privateData })
    ))
    return Exit.isSuccess(yield* Fiber.join(serving))
  }).pipe(Effect.scoped)

describe("admission tokens and rdma_cm's padding", () => {
  it.effect("an all-zero token does not admit a client that sent no private data", () =>
    inWorld(Effect.gen(function*() {
      assert.isFalse(yield* admits(new Uint8Array(16), undefined))
    })))

  it.effect("a token's trailing zeros are not completed by the padding", () =>
    inWorld(Effect.gen(function*() {
      assert.isFalse(yield* admits(Uint8Array.of(5, 6, 7, 0, 0), Uint8Array.of(5, 6, 7)))
    })))
})
