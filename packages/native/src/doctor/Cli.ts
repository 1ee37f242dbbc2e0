/**
 * `effect-rdma-doctor`: the doctor as a command line (@effect/cli). Prints the report, as text or
 * with `--json` as JSON, and sets the exit code: 0 when no check failed, 1 otherwise.
 *
 * @since 0.1.0
 */
import * as CliApp from "@effect/cli/CliApp"
import * as Command from "@effect/cli/Command"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Checks from "./Checks.js"
import * as Report from "./Report.js"
import * as Size from "./Size.js"

const address = Options.text("address").pipe(
  Options.withPseudoName("ip"),
  Options.repeated,
  Options.withDescription(
    "An IP address an RDMA device should answer at (what a listener or connection there would use). Repeatable."
  )
)

const size = Options.text("size").pipe(
  Options.withPseudoName("bytes"),
  Options.withDefault(Size.format(Checks.defaultSize).replace(" ", "")),
  Options.mapEffect((text) => {
    const bytes = Size.parse(text)
    return bytes === undefined ?
      Effect.fail(ValidationError.invalidValue(HelpDoc.p(`--size: not a size: ${text} (e.g. 64MiB, 1GiB, 4096)`))) :
      Effect.succeed(bytes)
  }),
  Options.withDescription("How much memory this process means to register, for the memlock check: e.g. 16MiB, 1GiB.")
)

const json = Options.boolean("json").pipe(Options.withDescription("Print the report as JSON."))

const addon = Options.text("addon").pipe(
  Options.withPseudoName("path"),
  Options.optional,
  Options.withDescription("Load the addon from this path instead of build/Release/rpma_addon.node.")
)

/**
 * Runs the checks, prints the report and sets `process.exitCode` to 1 when a check failed.
 *
 * @since 0.1.0
 * @category commands
 */
export const command = Command.make("effect-rdma-doctor", { address, size, json, addon }, (options) =>
  Effect.gen(function*() {
    const report = yield* Checks.run({
      addresses: options.address,
      size: options.size,
      addonPath: Option.getOrUndefined(options.addon)
    })
    yield* Console.log(options.json ? Report.renderJson(report) : Report.renderText(report))
    if (!report.ok) yield* Effect.sync(() => process.exitCode = 1)
  })).pipe(
    Command.withDescription(
      "Checks what @effect-rdma/native needs: the addon, librpma and rdma-core, RDMA devices and their ports, " +
        "the addresses they answer at, the memlock limit, and fork safety. Exit code 1 when a check fails."
    )
  )

/**
 * The command line over `argv` (`process.argv`: node, the script, then the arguments).
 *
 * @since 0.1.0
 * @category commands
 */
export const run: (
  argv: ReadonlyArray<string>
) => Effect.Effect<void, ValidationError.ValidationError, CliApp.CliApp.Environment | CommandExecutor.CommandExecutor> =
  Command.run(command, { name: "effect-rdma doctor", version: "0.1.0" })

/**
 * {@link run} for a bin: invalid options (which the command line has already explained) set the
 * exit code to 1 instead of failing.
 *
 * @since 0.1.0
 * @category commands
 */
export const main = (
  argv: ReadonlyArray<string>
): Effect.Effect<void, never, CliApp.CliApp.Environment | CommandExecutor.CommandExecutor> =>
  run(argv).pipe(
    Effect.catchIf(ValidationError.isValidationError, () => Effect.sync(() => process.exitCode = 1)),
    Effect.orDie
  )
