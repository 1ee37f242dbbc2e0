// Gets @effect-rdma/native an addon that fits this machine: the prebuilt one when it loads, else a
// build with node-gyp against the C libraries' headers and the Node.js that runs this script.
//
//   node scripts/build.mjs --if-possible  the package's `install` script: use the prebuilt addon
//                                         if it loads here, else build if the headers and a
//                                         compiler are there; otherwise say what to install and
//                                         exit 0 (importing the package stays harmless; only
//                                         NativeDriver.layer fails, with a NativeLoadError)
//   node scripts/build.mjs                build from source, fail on any error (`build:addon`)
//
// The prebuilt addons the package ships (one per Node.js ABI and architecture) are made by
// scripts/prebuild.mjs (`build:prebuild`), which is not published.
//
// EFFECT_RDMA_BUILD_FROM_SOURCE=1 makes the install script build even when the prebuilt addon fits.
// Written in plain JavaScript: it runs in users' projects, where there is no TypeScript loader.
import { spawnSync } from "node:child_process"
import { existsSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const require = createRequire(import.meta.url)
const mode = process.argv.includes("--if-possible") ? "install" : "build"
const abi = process.versions.modules
const built = join(root, "build", "Release", "rpma_addon.node")
const say = (line) => console.error(`@effect-rdma/native: ${line}`)

const runtimePackages = "librpma1 (Debian 12: librpma0) librdmacm1 libibverbs1 ibverbs-providers"
const buildPackages = "build-essential python3 pkg-config librpma-dev librdmacm-dev libibverbs-dev"
const rebuild = [
  "then, in your project: npm rebuild @effect-rdma/native",
  "  (pnpm 10 runs dependencies' build scripts only when allowed: `pnpm approve-builds`, or",
  "   \"pnpm\": { \"onlyBuiltDependencies\": [\"@effect-rdma/native\"] } in package.json, then",
  "   `pnpm rebuild @effect-rdma/native`)"
]

/** Loads `path` in a child process: undefined when it loads, else the error's message. */
const tryLoad = (path) => {
  const child = spawnSync(process.execPath, ["-e", "require(process.argv[1])", path], { encoding: "utf8" })
  return child.status === 0 ? undefined : (child.stderr.split("\n").find((l) => l.startsWith("Error")) ?? child.stderr).trim()
}

/** The shipped prebuilt addon that fits this platform, libc and Node.js ABI, if any. */
const fittingPrebuild = () => {
  const dir = join(root, "prebuilds", `${process.platform}-${process.arch}`)
  if (!existsSync(dir)) return undefined
  const libc = process.report?.getReport().header.glibcVersionRuntime ? "glibc" : "musl"
  const file = readdirSync(dir).find((f) => f.endsWith(".node") && f.includes(`.abi${abi}.`) && f.includes(`.${libc}.`))
  return file === undefined ? undefined : join(dir, file)
}

/**
 * node-gyp is not a dependency of this package: npm and pnpm run install scripts (and
 * `npm/pnpm rebuild`, `npm/pnpm run`) with their own node-gyp in `npm_config_node_gyp`. Run
 * directly with `node`, fall back to one installed in the project, then to the one npm bundles
 * next to this Node.js.
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
    return "no node-gyp found (run this through npm or pnpm, which bring their own, or install node-gyp)"
  }
  const run = spawnSync(process.execPath, [nodeGyp, ...args], { cwd: root, stdio: ["ignore", "inherit", "inherit"] })
  if (run.status !== 0) return `node-gyp ${args.join(" ")} failed (exit ${run.status ?? run.signal})`
  // What the loader checks before it loads the addon (src/internal/load.ts): the addon holds V8
  // backing stores, so it fits only the Node.js ABI it was compiled for.
  writeFileSync(
    `${built}.json`,
    JSON.stringify({ abi, node: process.version, platform: process.platform, arch: process.arch }) + "\n"
  )
  return undefined
}

if (mode === "install") {
  const forced = process.env.EFFECT_RDMA_BUILD_FROM_SOURCE === "1"
  const prebuild = forced ? undefined : fittingPrebuild()
  if (prebuild !== undefined) {
    const error = tryLoad(prebuild)
    if (error === undefined) process.exit(0)
    rmSync(join(root, "build"), { recursive: true, force: true })
    say(`the prebuilt addon does not load here: ${error}`)
    // A missing library with its headers present (e.g. librpma.so.1 where the prebuild wants .so.0):
    // building against what is installed fixes it.
    const headers = spawnSync("pkg-config", ["--exists", "librpma", "librdmacm", "libibverbs"]).status === 0
    if (/cannot open shared object file/.test(error) && !headers) {
      say(`install the C libraries it links against: apt-get install ${runtimePackages}`)
      say("NativeDriver.layer fails with NativeLoadError \"LibraryMissing\" until then; the package still imports.")
      process.exit(0)
    }
  }
  const failed = gyp()
  if (failed === undefined) process.exit(0)
  say(`addon not built: ${failed}`)
  say(`to build it, install the headers and a compiler: apt-get install ${buildPackages}`)
  for (const line of rebuild) say(line)
  say("NativeDriver.layer fails with NativeLoadError \"AddonNotBuilt\" until then; the package still imports.")
  process.exit(0)
}

const failed = gyp()
if (failed !== undefined) {
  say(failed)
  say(`install the headers and a compiler: apt-get install ${buildPackages}`)
  process.exit(1)
}
