/**
 * What the conformance modules share: the checks that fail a case with a message, and a few values.
 */
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"

/**
 * How many times slower than usual this machine runs (TEST_SLOWDOWN, which the test
 * configurations set for their processes: vitest.shared.ts from the load, the device one from
 * DEVICE_TEST_SLOWDOWN; 1 when unset). The few bounds a case measures on the wall clock, because
 * they are its point (a close that must not wait for its timeout), scale with it.
 */
export const slowdown: number = Math.max(1, Number(globalThis.process?.env?.TEST_SLOWDOWN) || 1)

/** An address in TEST-NET-1 (RFC 5737): never assigned, so no device answers there. */
export const NOWHERE = "192.0.2.99"

/** A peer of the raw driver on `address`, deleted with the scope. */
export const rawPeer = (address: string) =>
  Effect.flatMap(Driver.RdmaDriver, (d) =>
    Effect.acquireRelease(
      Effect.flatMap(d.getIbvContext(address, "local"), d.peerNew),
      (peer) => Effect.ignore(d.peerDelete(peer))
    ))

/** `length` bytes that differ from one seed to another. */
export const pattern = (length: number, seed: number): Uint8Array =>
  Uint8Array.from({ length }, (_, i) => (i * 7 + seed) % 251)

export const same = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i])

export const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes)

class ConformanceFailure extends Error {}

export const check = (condition: boolean, message: string): Effect.Effect<void> =>
  condition ? Effect.void : Effect.die(new ConformanceFailure(message))

export const equal = <A>(actual: A, expected: A, what: string): Effect.Effect<void> =>
  check(actual === expected, `${what}: expected ${String(expected)}, got ${String(actual)}`)

/** The tag of the error an exit failed with, "success", or "interrupted". */
export const tagOf = (exit: Exit.Exit<unknown, unknown>): string =>
  Exit.isSuccess(exit)
    ? "success"
    : exit.cause._tag === "Fail"
    ? String((exit.cause.error as { _tag?: string })._tag)
    : Exit.isInterrupted(exit)
    ? "interrupted"
    : `defect: ${String(exit.cause)}`

/** The message of the error an exit failed with, or "". */
export const messageOf = (exit: Exit.Exit<unknown, unknown>): string =>
  Exit.isFailure(exit) && exit.cause._tag === "Fail" ? String((exit.cause.error as { message?: unknown }).message) : ""

/** The tag of the error an effect fails with, or "success". */
export const outcome = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<string, never, R> =>
  Effect.map(Effect.exit(effect), tagOf)

export const expectTag = <A, E, R>(effect: Effect.Effect<A, E, R>, tag: string, what: string) =>
  Effect.flatMap(outcome(effect), (actual) => equal(actual, tag, what))

/**
 * A connection's driver configuration with the defaults `Connection.connect` uses (64
 * entries each way, the CQ holding both), for cases that call the driver themselves.
 */
export const driverConfig = (timeoutMs: number): Driver.Model.ConnConfig => ({
  timeoutMs,
  sqSize: 64,
  rqSize: 64,
  cqSize: 128,
  rcqSize: 0,
  sharedCompletionChannel: false,
  directWriteToPmem: false
})

/** Bytes whose getters claim 1 GiB at offset 4096 of a 1 GiB buffer (never allocated): only their real length may count. */
export class Lying extends Uint8Array {
  override get byteLength(): number {
    return 2 ** 30
  }
  override get byteOffset(): number {
    return 4096
  }
  override get length(): number {
    return 2 ** 30
  }
  override get buffer(): ArrayBuffer {
    return { byteLength: 2 ** 30 + 4096 } as ArrayBuffer
  }
}
