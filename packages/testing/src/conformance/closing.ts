/**
 * Conformance cases for a connection's close after requests posted without waiting (issue 19,
 * item 5). An unsignalled request that succeeded reports nothing, ever: a close must not wait for
 * it, and takes no longer than a close after signalled requests.
 */
import { Connection, Listener, LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Scope from "effect/Scope"
import type { Case } from "../Conformance.js"
import { exposed } from "./pair.js"
import { check, slowdown, tagOf } from "./support.js"

/** The client's timeout: the bound of its close, and of the check that the close does not wait for it. */
const TIMEOUT_MS = Math.round(8_000 * slowdown)
/** Writes posted before the close. */
const WRITES = 16
const WRITE_LENGTH = 8

/** Polls `landed` until it holds, for at most `boundMs` (a bound on a hang, not a guess). */
const until = (landed: () => boolean, boundMs: number, what: string): Effect.Effect<void> =>
  Effect.suspend(() =>
    landed() ? Effect.void : Effect.zipRight(Effect.sleep(Duration.millis(1)), Effect.fail("not yet" as const))
  ).pipe(
    Effect.retry({ while: () => true }),
    Effect.timeoutFail({ duration: Duration.millis(boundMs), onTimeout: () => what }),
    Effect.orDie
  )

export const closingCases: ReadonlyArray<Case> = [
  {
    name:
      `closing a connection after ${WRITES} successful unsignalled writes (completion "onError") takes less than half its timeout (8 s times TEST_SLOWDOWN), as after signalled ones; their regions are let go once it is deleted`,
    run: (address, port) =>
      Effect.gen(function*() {
        const d = yield* Driver.RdmaDriver
        const serverPeer = yield* Peer.make(address)
        const target = yield* LocalMr.allocate(serverPeer, WRITES * WRITE_LENGTH, exposed)
        const ep = yield* Listener.make(serverPeer, address, port)
        const remote = yield* RemoteMr.fromDescriptor(yield* LocalMr.descriptor(target)).pipe(
          Effect.flatMap(RemoteMr.require(exposed))
        )
        const clientPeer = yield* Peer.make(address)

        /** One connection, `WRITES` writes posted as `completion` says and landed, then its scope closed. */
        const closeAfter = (completion: "onError" | "always", mark: number) =>
          Effect.gen(function*() {
            const accepting = yield* Effect.fork(Listener.acceptNext(ep))
            const scope = yield* Scope.make()
            const regionsBefore = (yield* d.live).localRegions
            const { client, src } = yield* Effect.all({
              client: Connection.connect(clientPeer, address, port, { timeout: Duration.millis(TIMEOUT_MS) }),
              src: LocalMr.allocate(clientPeer, WRITES * WRITE_LENGTH, Usage.WRITE_SRC)
            }).pipe(Scope.extend(scope))
            yield* Fiber.join(accepting)
            src.memory.fill(mark)
            const posted: Array<Connection.Posted> = []
            for (let i = 0; i < WRITES; i++) {
              const at = i * WRITE_LENGTH
              posted.push(
                yield* Connection.postWrite(client, {
                  dst: remote,
                  dstOffset: at,
                  src,
                  srcOffset: at,
                  length: WRITE_LENGTH,
                  completion
                })
              )
            }
            // The last write's bytes have arrived: every write ran (they run in order).
            yield* until(
              () => target.memory[WRITES * WRITE_LENGTH - 1] === mark,
              TIMEOUT_MS,
              `the ${completion} writes did not arrive within ${TIMEOUT_MS} ms`
            )
            const started = yield* Clock.currentTimeMillis
            yield* Scope.close(scope, Exit.void)
            const took = (yield* Clock.currentTimeMillis) - started
            yield* check(
              took < TIMEOUT_MS / 2,
              `the close after ${WRITES} writes posted with completion "${completion}" took ${
                Math.round(took)
              } ms (timeout ${TIMEOUT_MS} ms): it waited for completions that never come`
            )
            // The source's scope has closed and the connection is deleted: no request holds it.
            const regionsAfter = (yield* d.live).localRegions
            yield* check(
              regionsAfter === regionsBefore,
              `local regions after the close: ${regionsAfter} (expected ${regionsBefore})`
            )
            return { took, last: yield* Effect.exit(posted[WRITES - 1]!.completion) }
          })

        const unsignalled = yield* closeAfter("onError", 1)
        // An unsignalled write that reported nothing before the end: its outcome is unknown (on a
        // device it may also be flushed by the error state, if its acknowledgement was late).
        yield* check(
          tagOf(unsignalled.last) === "ConnectionClosedError",
          `the last unsignalled write after the close: ${tagOf(unsignalled.last)} (expected ConnectionClosedError)`
        )
        const signalled = yield* closeAfter("always", 2)
        yield* check(
          tagOf(signalled.last) === "success" || tagOf(signalled.last) === "ConnectionClosedError",
          `the last signalled write after the close: ${tagOf(signalled.last)}`
        )
      })
  }
]
