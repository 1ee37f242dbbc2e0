// What several device test files need: the device's address, a peer for the length of a test, and
// one request posted or completions awaited through the driver's data-path calls.
import type { RdmaError } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"

const fromEnvironment = process.env.RDMA_ADDRESS
if (fromEnvironment === undefined || fromEnvironment === "") {
  throw new Error("RDMA_ADDRESS is not set: give the IP address an RDMA device is bound to (e.g. a Soft-RoCE link)")
}

/** The address an RDMA device is bound to. Without it the suite fails: a device run that skips proves nothing. */
export const address: string = fromEnvironment

/** Runs `f` with a new peer on the device, deleted afterwards. */
export const withPeer = <A, E>(f: (driver: Driver, peer: Model.PeerHandle) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const context = yield* driver.getIbvContext(address, "local")
    return yield* Effect.acquireUseRelease(
      driver.peerNew(context),
      (peer) => f(driver, peer),
      (peer) => Effect.orDie(driver.peerDelete(peer))
    )
  })

/** One request through the driver's posting call, failing with its refusal or the queue's failure. */
export const postOne = (driver: Driver, queue: Model.PostQueue, request: Model.WorkRequest) =>
  Effect.suspend(() => {
    const outcome = driver.postMany(queue, [request])
    if (outcome.error !== undefined) return Effect.fail(outcome.error)
    if (outcome.queueError !== undefined) return Effect.fail(outcome.queueError)
    return Effect.succeed(outcome.ready)
  })

/** The completions queued already, else the first answer of the queue's armed channel; interruptible (disarms). */
export const nextCompletions = (driver: Driver, queue: Model.CompletionQueue) =>
  Effect.flatMap(driver.pollCompletions(queue), (ready) =>
    ready.length > 0 ?
      Effect.succeed(ready) :
      Effect.async<ReadonlyArray<Model.Completion>, RdmaError.RpmaError>((resume) => {
        const disarm = driver.armCompletions(queue, resume)
        return Effect.sync(disarm)
      }))

/** The driver's live handles when nothing is alive: a test's expectation, with its own handles added. */
export const nothingAlive: Model.LiveHandles = {
  peers: 0,
  localRegions: 0,
  remoteRegions: 0,
  cmRegions: 0,
  cmEndpoints: 0,
  cmListeners: 0,
  endpoints: 0,
  connectionRequests: 0,
  connections: 0,
  sharedReceiveQueues: 0
}

/** The `detail` of what `call` throws; fails the test if it returns instead. */
export const refusalOf = (call: () => unknown): string => {
  try {
    call()
  } catch (e) {
    return String((e as { detail?: string }).detail)
  }
  throw new Error("expected a refusal, and the call returned")
}
