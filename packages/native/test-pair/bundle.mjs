// Bundles the two-host programs (agent.ts, runner.ts) into single ESM files under
// test-pair/build/, on the host, with the esbuild that tsx already brings. Under qemu's emulation
// tsx compiling the sources at start-up costs over a minute a process; a bundle starts in seconds.
// The bundles stay under packages/native, so the addon is still found from the package root.
import { realpathSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const root = join(here, "..", "..", "..")
const tsx = realpathSync(join(root, "node_modules", "tsx", "package.json"))
const esbuild = createRequire(tsx)("esbuild")

await esbuild.build({
  entryPoints: [join(here, "agent.ts"), join(here, "runner.ts")],
  outdir: join(here, "build"),
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "external",
  logLevel: "warning",
  // For the CommonJS inside dependencies.
  banner: { js: "import { createRequire as __pairRequire } from 'node:module'; const require = __pairRequire(import.meta.url);" }
})
