#!/usr/bin/env node
/**
 * The package's `effect-rdma-doctor` bin (compiled to dist/doctor/bin.js).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Cli from "./Cli.js"

Effect.runFork(Cli.main)
