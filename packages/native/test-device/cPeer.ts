// A C program written against librpma, built on first use and run as the other side of a device
// test: its output is collected, "ready\n" marks the moment it listens, and its exit is bounded.
import * as Effect from "effect/Effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { join } from "node:path"

export interface Run {
  readonly child: ChildProcess
  readonly output: () => string
  readonly ready: Promise<void>
  readonly exit: Promise<number | null>
}

const root = join(import.meta.dirname, "..")

/** Runs test-device/<name>.c, or the C program at `source` (built into build/<name>), with `args`. */
export const runC = (
  name: string,
  args: ReadonlyArray<string>,
  source = join(root, "test-device", `${name}.c`)
): Run => {
  const binary = join(root, "build", name)
  if (!existsSync(binary)) {
    const flags = execFileSync("pkg-config", ["--cflags", "--libs", "librpma"], { encoding: "utf8" }).trim().split(
      /\s+/
    )
    execFileSync("cc", ["-O2", "-Wall", "-o", binary, source, ...flags])
  }
  return runBinary(binary, args)
}

/** Runs a program already built (a C peer, or one of librdmacm's own such as rping) with `args`. */
export const runBinary = (binary: string, args: ReadonlyArray<string>): Run => {
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  let onReady: () => void = () => {}
  const ready = new Promise<void>((resolve) => (onReady = resolve))
  const take = (chunk: Buffer) => {
    output += chunk.toString()
    if (output.includes("ready\n")) onReady()
  }
  child.stdout!.on("data", take)
  child.stderr!.on("data", take)
  // "close", not "exit": at "exit" the child's stdout and stderr may still hold output not yet read
  // (under load a test once read '' from a C program that had printed its "ok" and exited 0).
  const exit = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)))
  return { child, output: () => output, ready, exit }
}

/** Its exit code, or -1 (and SIGKILL) if it has not exited within 20 s. */
export const awaitExit = (run: Run) =>
  Effect.promise(() =>
    Promise.race([run.exit, new Promise<number | null>((resolve) => setTimeout(() => resolve(-1), 20_000))])
  ).pipe(Effect.tap((code) => Effect.sync(() => code === -1 && run.child.kill("SIGKILL"))))

export const pattern = (length: number, seed: number) => Uint8Array.from({ length }, (_, i) => (i * seed + seed) % 251)
export const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i])
