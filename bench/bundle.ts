/**
 * Bundles bench/host-main.ts with core, native and effect into bench/.build/host.mjs: compiled
 * JavaScript as users run it (no tsx loader, no `__name` wrappers), which valgrind also starts
 * in a fraction of the time. esbuild is tsx's own.
 */
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)
const esbuild = require(require.resolve("esbuild", { paths: [require.resolve("tsx")] })) as {
  buildSync: (options: Record<string, unknown>) => unknown
}

export const bundle = (entry = "bench/host-main.ts", outfile = "bench/.build/host.mjs"): string => {
  esbuild.buildSync({
    entryPoints: [entry],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    outfile,
    keepNames: false,
    logLevel: "warning"
  })
  return outfile
}
