// Builds the addon with node-gyp against the headers of the Node.js that runs this script.
//
//   node scripts/build.mjs                  build, fail on any error (`pnpm build:addon`)
//   node scripts/build.mjs --if-possible    the `install` script: a machine without librpma-dev
//                                           still installs the workspace; the layer then fails
//                                           with NativeLoadError "AddonNotBuilt"
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const ifPossible = process.argv.includes("--if-possible")

const skip = (why) => {
  if (!ifPossible) {
    console.error(`@effect-rdma/native: ${why}`)
    process.exit(1)
  }
  console.warn(`@effect-rdma/native: addon not built: ${why}`)
  console.warn("  NativeDriver.layer will fail with NativeLoadError \"AddonNotBuilt\" until `pnpm build:addon` succeeds.")
  process.exit(0)
}

if (spawnSync("pkg-config", ["--exists", "librpma"]).status !== 0) {
  skip("pkg-config cannot find librpma: install the Debian packages librpma-dev librdmacm-dev libibverbs-dev pkg-config")
}

// node-gyp otherwise downloads headers; Node.js installs (Debian's, nvm's, the official tarballs)
// ship them under <prefix>/include/node, which works offline.
const args = ["rebuild"]
const prefix = resolve(dirname(process.execPath), "..")
if (process.env.npm_config_nodedir === undefined && existsSync(join(prefix, "include", "node", "common.gypi"))) {
  args.push(`--nodedir=${prefix}`)
}

const nodeGyp = createRequire(import.meta.url).resolve("node-gyp/bin/node-gyp.js")
const run = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: root, stdio: "inherit" })
if (run.status !== 0) skip(`node-gyp ${args.join(" ")} failed (exit ${run.status ?? run.signal})`)
