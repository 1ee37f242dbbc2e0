// What the curious-peer tests (Isolation.test.ts, CmIsolation.test.ts) share: how long the client
// guesses rkeys, the test's bound, the regions' bytes, the guesses and their tally.
import { assert } from "@effect/vitest"
import * as Option from "effect/Option"

const setting = process.env.ISOLATION_GUESS_SECONDS ?? "600"
/** How long the client guesses rkeys: ISOLATION_GUESS_SECONDS, default 600 (ten minutes). */
export const guessSeconds = Number(setting)
if (!Number.isFinite(guessSeconds) || guessSeconds <= 0) {
  throw new Error(
    `ISOLATION_GUESS_SECONDS is how long the client guesses rkeys, a positive number of seconds, not '${setting}'`
  )
}
export const slowdown = Number(process.env.DEVICE_TEST_SLOWDOWN ?? "1")
/** A bound on a hang: the guessing time, plus what setting up and releasing take on a slow VM. */
export const testTimeout = guessSeconds * 1000 + 120_000 * slowdown

export const REGION = 4096

/** A region's bytes, different for each seed. */
export const pattern = (seed: number) => Uint8Array.from({ length: REGION }, (_, i) => (i * 13 + seed) % 251)
export const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i])

/** The n-th guess at the rkey of a region whose rkey is `rkey`: the exact one every 16th, else one of its neighbours (an index near its own, any of the 256 keys). */
export const guessAt = (rkey: number, n: number): number => {
  if (n % 16 === 0) return rkey
  const index = (rkey >>> 8) + ((n >>> 8) % 17) - 8
  return ((index << 8) | (n & 0xff)) >>> 0
}

/** What the guesses came to: refused by the device, ended otherwise, or reached another client's region. */
export class Tally {
  guesses = 0
  refused = 0
  ended = 0
  reached = 0
  /** How many times the guesser read the region it was given (so the guesses could have worked). */
  given = 0
  readonly reachedRkeys: Array<number> = []
  /** One guess at `rkey`: its failure, if it failed. */
  record(rkey: number, failure: Option.Option<{ readonly _tag: string }>): void {
    this.guesses++
    if (Option.isNone(failure)) {
      this.reached++
      this.reachedRkeys.push(rkey)
    } else if (
      // librpma's path reports IBV_WC_REM_ACCESS_ERR (10) as a CompletionError, librdmacm's as a RemoteKeyRefusedError.
      failure.value._tag === "RemoteKeyRefusedError" ||
      (failure.value._tag === "CompletionError" && (failure.value as { status?: number }).status === 10)
    ) {
      this.refused++
    } else {
      this.ended++
    }
  }
  /** Prints the tally and holds it to the rule: nothing reached, every guess refused or ended. */
  check(label: string, seconds: number, connections: number): void {
    console.log(
      `${label}: ${this.guesses} guesses in ${seconds.toFixed(0)} s over ${connections} connections: ` +
        `${this.refused} refused (REM_ACCESS_ERR), ${this.ended} ended the connection otherwise, ` +
        `${this.reached} reached another client's region; the given region read ${this.given} times`
    )
    assert.strictEqual(
      this.reached,
      0,
      `guesses that reached another client's region: rkeys ${this.reachedRkeys.slice(0, 10).join(", ")}`
    )
    assert.isAbove(this.guesses, 0)
    assert.strictEqual(this.refused + this.ended, this.guesses)
  }
}
