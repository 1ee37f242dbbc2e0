// Bundles the two-host programs (agent.ts, runner.ts) into single ESM files under
// test-pair/build/, on the host, with the esbuild that tsx already brings. Under qemu's emulation
// tsx compiling the sources at start-up costs over a minute a process; a bundle starts in seconds.
// The bundles stay under packages/native, so the addon is still found from the package root.
// Other programs for the VM: `node bundle.mjs <entry.ts>...` bundles those instead, each into the
// build/ folder beside it (scripts/test-pmem does).
import { realpathSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const root = join(here, "..", "..", "..")
const tsx = realpathSync(join(root, "node_modules", "tsx", "package.json"))
const esbuild = createRequire(tsx)("esbuild")

const entries = process.argv.length > 2
  ? process.argv.slice(2).map((entry) => resolve(entry))
  : [join(here, "agent.ts"), join(here, "runner.ts"), join(here, "client-server.ts")]
for (const dir of new Set(entries.map(dirname))) {
  await bundle(entries.filter((entry) => dirname(entry) === dir), join(dir, "build"))
}

async function bundle(entryPoints, outdir) {
  await esbuild.build({
    entryPoints,
    outdir,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    sourcemap: "external",
    logLevel: "warning",
    // pg (@effect/sql-pg, packages/cluster/test-pair/node.ts) requires its optional native binding lazily.
    external: ["pg-native"],
    // For the CommonJS inside dependencies.
    banner: {
      js:
        "import { createRequire as __pairRequire } from 'node:module'; const require = __pairRequire(import.meta.url);"
    }
  })
}
