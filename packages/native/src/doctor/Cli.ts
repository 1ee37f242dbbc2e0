/**
 * `effect-rdma-doctor`: the doctor as a command line. Prints the report, as text or with `--json`
 * as JSON, and gives the exit code: 0 when no check failed, 1 when one did, 2 for a usage error.
 * Plain `node:util` parseArgs, so that the package's users get the doctor without a CLI framework.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { readFileSync } from "node:fs"
import { isIP } from "node:net"
import { parseArgs } from "node:util"
import * as Checks from "./Checks.js"
import * as Report from "./Report.js"
import * as Size from "./Size.js"

/**
 * The version of `--json`'s document. It changes only when a field is removed or changes meaning.
 *
 * @since 0.1.0
 * @category constants
 */
export const jsonSchemaVersion = 1

/**
 * The exit codes.
 *
 * @since 0.1.0
 * @category constants
 */
export const ExitCode = { ok: 0, checkFailed: 1, usage: 2 } as const

/**
 * Where the command line writes, and how: `color` only when output goes to a terminal and
 * NO_COLOR is not set.
 *
 * @since 0.1.0
 * @category models
 */
export interface Output {
  readonly out: (text: string) => void
  readonly err: (text: string) => void
  readonly color: boolean
  /** The terminal's width; `undefined` when output is not a terminal. */
  readonly columns?: number | undefined
}

/**
 * The process's stdout and stderr; colour when stdout is a terminal and NO_COLOR is unset or empty.
 *
 * @since 0.1.0
 * @category constructors
 */
export const processOutput = (): Output => ({
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
  color: process.stdout.isTTY === true && (process.env["NO_COLOR"] ?? "") === "",
  columns: process.stdout.isTTY === true ? process.stdout.columns : undefined
})

/**
 * The help text.
 *
 * @since 0.1.0
 * @category constants
 */
export const help: string = `effect-rdma-doctor: checks what @effect-rdma/native needs on this machine: the addon,
librpma and rdma-core, RDMA devices and their ports, the addresses they answer at, the memlock
limit, fork safety (where a device exists) and the installed effect. Each problem comes with what to do.

usage: effect-rdma-doctor [--address <ip>]... [--size <bytes>] [--addon <path>] [--json]

  --address <ip>    an IP address an RDMA device should answer at (what a listener or a
                    connection there would use); repeatable
  --size <bytes>    how much memory this process means to register, for the memlock check:
                    e.g. 16MiB, 1GiB, 4096 (default ${Size.format(Checks.defaultSize).replace(" ", "")})
  --addon <path>    load the addon from this path instead of the one the package picks
  --json            print the report as JSON (with "schemaVersion": ${jsonSchemaVersion})
  -h, --help        print this help
  -v, --version     print the version

exit status: 0 no check failed, 1 a check failed, 2 usage error`

/**
 * This package's version, from its package.json (two levels up from src/doctor/ and from
 * dist/doctor/ alike).
 *
 * @since 0.1.0
 * @category constants
 */
export const version: string = (() => {
  try {
    return String(JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")).version)
  } catch {
    return "(unknown: package.json not found)"
  }
})()

const paint = (color: boolean, status: Report.Status, text: string): string => {
  if (!color) return text
  const code = status === "ok" ? 32 : status === "warn" ? 33 : 31
  return `\x1b[${code}m${text}\x1b[39m`
}

/**
 * Runs the command line over `args` (the arguments only, without node and the script) and gives
 * the exit code.
 *
 * @since 0.1.0
 * @category commands
 */
export const run = (args: ReadonlyArray<string>, output: Output = processOutput()): Effect.Effect<number> =>
  Effect.suspend(() => {
    const usage = (problem: string) =>
      Effect.sync(() => {
        output.err(`effect-rdma-doctor: ${problem}`)
        output.err("try: effect-rdma-doctor --help")
        return ExitCode.usage
      })
    let parsed
    try {
      parsed = parseArgs({
        args: [...args],
        strict: true,
        allowPositionals: false,
        options: {
          address: { type: "string", multiple: true },
          size: { type: "string" },
          addon: { type: "string" },
          json: { type: "boolean" },
          help: { type: "boolean", short: "h" },
          version: { type: "boolean", short: "v" }
        }
      }).values
    } catch (error) {
      return usage(error instanceof Error ? error.message : String(error))
    }
    if (parsed.help === true) return Effect.sync(() => (output.out(help), ExitCode.ok))
    if (parsed.version === true) return Effect.sync(() => (output.out(version), ExitCode.ok))
    const size = parsed.size === undefined ? Checks.defaultSize : Size.parse(parsed.size)
    if (size === undefined) return usage(`--size: not a size: ${parsed.size} (e.g. 64MiB, 1GiB, 4096)`)
    const malformed = (parsed.address ?? []).find((address) => isIP(address) === 0)
    if (malformed !== undefined) {
      return usage(`--address: not an IPv4 or IPv6 address: ${malformed} (e.g. --address 192.168.77.1)`)
    }
    return Checks.run({ addresses: parsed.address ?? [], size, addonPath: parsed.addon }).pipe(
      Effect.map((report) => {
        if (parsed.json === true) {
          output.out(JSON.stringify({ schemaVersion: jsonSchemaVersion, ...report }, null, 2))
        } else {
          const text = Report.renderText(report, output.columns)
          output.out(
            output.color ?
              text.split("\n").map((line) => {
                const status = /^(ok|warn|fail)\b/.exec(line)?.[1] as Report.Status | undefined
                return status === undefined ? line : paint(true, status, status) + line.slice(status.length)
              }).join("\n") :
              text
          )
        }
        return report.ok ? ExitCode.ok : ExitCode.checkFailed
      })
    )
  })

/**
 * {@link run} over `process.argv`, setting `process.exitCode`: what the package's bin does.
 *
 * @since 0.1.0
 * @category commands
 */
export const main: Effect.Effect<void> = Effect.suspend(() => run(process.argv.slice(2))).pipe(
  Effect.flatMap((code) => Effect.sync(() => void (process.exitCode = code)))
)
