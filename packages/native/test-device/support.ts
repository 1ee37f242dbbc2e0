// What several device test files need: the device's address, and a peer for the length of a test.
import { type Driver, type PeerHandle, RdmaDriver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"

const fromEnvironment = process.env.RDMA_ADDRESS
if (fromEnvironment === undefined || fromEnvironment === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

/** The address an RDMA device is bound to. Without it the suite fails: a device run that skips proves nothing. */
export const address: string = fromEnvironment

/** Runs `f` with a new peer on the device, deleted afterwards. */
export const withPeer = <A, E>(f: (driver: Driver, peer: PeerHandle) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const context = yield* driver.getIbvContext(address, "local")
    return yield* Effect.acquireUseRelease(
      driver.peerNew(context),
      (peer) => f(driver, peer),
      (peer) => Effect.orDie(driver.peerDelete(peer))
    )
  })
