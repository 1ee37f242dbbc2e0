/**
 * PostgreSQL inside VM a, for the cluster suite (cluster.ts): the runners on both VMs share it
 * over TCP on the wire. scripts/test-pair has made the data directory on the host (initdb, trust
 * authentication, PAIR_PG_DATA), since initdb under qemu's emulation would take a minute; here it
 * is copied to the VM's /tmp (a tmpfs; the host's root is read-only in the VM) and the server runs
 * from Debian's binaries (PAIR_PG_BIN, the host's /usr/lib/postgresql/<version>/bin, which the VM
 * sees through its 9p root) as the data directory's owner (PostgreSQL refuses to run as root).
 */
import * as Effect from "effect/Effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import { createInterface } from "node:readline"
import { PairFailure } from "./harness.js"

export const PG_PORT = 5432

const dataDir = "/tmp/pair-pg"

let server: ChildProcess | undefined

/** Starts the server listening on `address`:PG_PORT; answers once it accepts connections. */
export const startPostgres = (address: string): Effect.Effect<number, PairFailure> =>
  Effect.async<number, PairFailure>((resume) => {
    const started = performance.now()
    const source = process.env.PAIR_PG_DATA
    const bin = process.env.PAIR_PG_BIN
    if (server !== undefined) return resume(Effect.fail(new PairFailure({ message: "postgres is already running" })))
    if (!source || !bin || !fs.existsSync(source)) {
      return resume(Effect.fail(
        new PairFailure({
          message: `no PostgreSQL data directory prepared (PAIR_PG_DATA=${source}, PAIR_PG_BIN=${bin})`
        })
      ))
    }
    try {
      fs.rmSync(dataDir, { recursive: true, force: true })
      execFileSync("cp", ["-a", source, dataDir])
    } catch (error) {
      return resume(Effect.fail(new PairFailure({ message: `copying the data directory: ${String(error)}` })))
    }
    const { gid, uid } = fs.statSync(dataDir)
    const c = spawn("setpriv", [
      `--reuid=${uid}`,
      `--regid=${gid}`,
      "--clear-groups",
      `${bin}/postgres`,
      "-D",
      dataDir,
      "-c",
      `listen_addresses=${address}`,
      "-c",
      `port=${PG_PORT}`,
      "-c",
      `unix_socket_directories=${dataDir}`,
      // A test database in a tmpfs: nothing to make durable.
      "-c",
      "fsync=off",
      "-c",
      "synchronous_commit=off",
      "-c",
      "full_page_writes=off",
      "-c",
      "max_connections=60"
    ], { stdio: ["ignore", "inherit", "pipe"] })
    server = c
    let ready = false
    createInterface({ input: c.stderr! }).on("line", (line) => {
      console.log(`postgres: ${line}`)
      if (!ready && line.includes("ready to accept connections")) {
        ready = true
        resume(Effect.succeed((performance.now() - started) / 1000))
      }
    })
    c.on("exit", (code, signal) => {
      console.log(`postgres: exited (${signal ?? code})`)
      server = undefined
      if (!ready) {
        ready = true
        resume(Effect.fail(new PairFailure({ message: `postgres exited with ${signal ?? code} before it was ready` })))
      }
    })
  }).pipe(
    Effect.timeoutFail({
      duration: "120 seconds",
      onTimeout: () => new PairFailure({ message: "postgres did not accept connections within 120 s" })
    })
  )

/** Stops the server (a fast shutdown: SIGINT), if it runs. */
export const stopPostgres: Effect.Effect<void> = Effect.async<void>((resume) => {
  const c = server
  if (c === undefined) return resume(Effect.void)
  c.once("exit", () => resume(Effect.void))
  c.kill("SIGINT")
}).pipe(Effect.timeout("60 seconds"), Effect.ignore)
