#!/usr/bin/env node
// The package's bin: the doctor is TypeScript, so register tsx (resolved from this package) and run it.
import { register } from "tsx/esm/api"

register()
await import("./doctor.ts")
