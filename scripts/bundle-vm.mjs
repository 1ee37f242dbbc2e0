// Bundles the programs `pnpm test` runs in the Soft-RoCE VM (the soak, the doctor) into single ESM
// files under packages/native/.vm-build/, on the host, with the esbuild that tsx already brings.
// Under qemu's emulation tsx compiles the sources at start-up for over a minute a process (several
// when the host is busy); a bundle starts in seconds. The bundles stay under packages/native, so
// the addon is still found from the package root.
import { realpathSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const esbuild = createRequire(realpathSync(join(root, "node_modules", "tsx", "package.json")))("esbuild")

await esbuild.build({
  entryPoints: {
    soak: join(root, "scripts", "soak.ts"),
    doctor: join(root, "packages", "native", "src", "doctor", "bin.ts")
  },
  outdir: join(root, "packages", "native", ".vm-build"),
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "external",
  logLevel: "warning",
  // For the CommonJS inside dependencies.
  banner: { js: "import { createRequire as __vmRequire } from 'node:module'; const require = __vmRequire(import.meta.url);" }
})
