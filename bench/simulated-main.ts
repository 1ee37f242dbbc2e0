/**
 * The simulated driver's rows as a program, run from its bundle (bench/bundle.ts) by bench/run.ts:
 * compiled JavaScript, as users run it. Under tsx every closure created per operation is wrapped
 * in `__name` (see bench/host.ts): the simulated `Connection.write` row measured 3.1× there and
 * 2.3× from the bundle, in the same hour.
 */
import { Effect } from "effect"
import { simulatedRows } from "./simulated.js"
import { printTable } from "./table.js"

printTable(await Effect.runPromise(simulatedRows))
