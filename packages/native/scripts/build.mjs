#!/usr/bin/env node
// Builds @effect-rdma/native's addon from source, with node-gyp against the C libraries' headers and
// the Node.js that runs this script, into build/Release/ (which the loader then prefers, for that
// Node.js). Only needed where no shipped prebuilt addon fits (another Node.js line, libc or
// architecture): the package has no install script, and the prebuilt addon is picked at run time.
//
//   npx effect-rdma-build-addon             in a project that depends on @effect-rdma/native
//                                            (pnpm: pnpm exec effect-rdma-build-addon)
//   node node_modules/@effect-rdma/native/scripts/build.mjs    the same, without npx
//   pnpm build:addon                         in the effect-rdma workspace (scripts/setup runs it)
//
// Exits 1, saying what to install, when the headers, a compiler or node-gyp are missing.
// Written in plain JavaScript: it runs in users' projects, where there is no TypeScript loader.
import { spawnSync } from "node:child_process"
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const require = createRequire(import.meta.url)
const abi = process.versions.modules
const built = join(root, "build", "Release", "rpma_addon.node")
const say = (line) => console.error(`@effect-rdma/native: ${line}`)

const buildPackages = "build-essential python3 pkg-config librpma-dev librdmacm-dev libibverbs-dev"

/**
 * node-gyp is not a dependency of this package: npm and pnpm run scripts (`npm exec`, `pnpm
 * exec`, `npm run`) with their own node-gyp in `npm_config_node_gyp`. Run directly with `node`,
 * fall back to one installed in the project, then to the one npm bundles next to this Node.js.
 */
const findNodeGyp = () => {
  const candidates = [process.env.npm_config_node_gyp]
  try {
    candidates.push(require.resolve("node-gyp/bin/node-gyp.js"))
  } catch {
    // not installed in the project
  }
  const prefix = resolve(dirname(process.execPath), "..")
  candidates.push(join(prefix, "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js"))
  return candidates.find((path) => path !== undefined && path !== "" && existsSync(path))
}

const gyp = () => {
  if (spawnSync("pkg-config", ["--exists", "librpma", "librdmacm", "libibverbs"]).status !== 0) {
    return "pkg-config cannot find librpma, librdmacm and libibverbs (their -dev packages are not installed)"
  }
  // node-gyp otherwise downloads headers; Node.js installs (Debian's, nvm's, the official tarballs)
  // ship them under <prefix>/include/node, which works offline.
  const args = ["rebuild"]
  const prefix = resolve(dirname(process.execPath), "..")
  if (process.env.npm_config_nodedir === undefined && existsSync(join(prefix, "include", "node", "common.gypi"))) {
    args.push(`--nodedir=${prefix}`)
  }
  const nodeGyp = findNodeGyp()
  if (nodeGyp === undefined) {
    return "no node-gyp found: run it through npx or pnpm exec, which bring their own, or `npm install --save-dev node-gyp` in your project"
  }
  // binding.gyp sits in gyp/, not at the package root: npm and pnpm give a package with a root
  // binding.gyp an implicit `node-gyp rebuild` install script, which this package must not have.
  const run = spawnSync(process.execPath, [nodeGyp, ...args], {
    cwd: join(root, "gyp"),
    stdio: ["ignore", "inherit", "inherit"]
  })
  if (run.status !== 0) return `node-gyp ${args.join(" ")} failed (exit ${run.status ?? run.signal})`
  mkdirSync(dirname(built), { recursive: true })
  copyFileSync(join(root, "gyp", "build", "Release", "rpma_addon.node"), built)
  // What the loader checks before it loads the addon (src/internal/load.ts): the addon holds V8
  // backing stores, so it fits only the Node.js ABI it was compiled for.
  writeFileSync(
    `${built}.json`,
    JSON.stringify({ abi, node: process.version, platform: process.platform, arch: process.arch }) + "\n"
  )
  return undefined
}

const failed = gyp()
if (failed !== undefined) {
  say(failed)
  say(`install the headers and a compiler (Debian, Ubuntu): sudo apt-get install ${buildPackages}`)
  say("then run this again")
  process.exit(1)
}
say(`built ${built} for Node.js ${process.version} (ABI ${abi}); the package loads it under this Node.js`)
