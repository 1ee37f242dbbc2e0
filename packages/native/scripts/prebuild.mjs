// Builds the prebuilt addons the published package ships: one per Node.js ABI and architecture,
// because the addon shares V8's backing stores (src/memory.cc), which ties it to the V8 of one
// Node.js line, not only to Node-API.
//
//   node scripts/prebuild.mjs [<arch>@<major> ...]     default: every promised addon
//                                                       (scripts/promised.mjs: x64 and arm64 @20 22 24 26)
//   node scripts/prebuild.mjs --check [<arch>@<major> ...]
//                                                       load each prebuilt addon under its Node.js
//   node scripts/prebuild.mjs --where <arch>@<major>   print the directory of that Node.js (fetched
//                                                       if need be), for scripts/test-nodes.sh
//
// Each Node.js comes from the npm registry as the package `node-linux-<arch>@<major>` (its
// `bin/node` and `include/node/`, node-gyp's --nodedir), unpacked once under .cache/nodes/. Each
// addon is built in a staging copy of the sources under .cache/prebuild/, so the workspace's own
// build/Release stays the one for the Node.js that runs its tests. arm64 is cross-compiled with
// Debian's cross toolchain (g++-aarch64-linux-gnu) against Debian's arm64 -dev packages
// (dpkg --add-architecture arm64; librpma-dev:arm64 librdmacm-dev:arm64 libibverbs-dev:arm64) and
// loaded under qemu's user-mode emulation (qemu-aarch64 from qemu-user).
// Output: prebuilds/linux-<arch>/rpma_addon.abi<N>.glibc.node, stripped; one newer than
// gyp/binding.gyp and every src/*.cc, src/*.h is kept (--force builds it again).
import { spawnSync } from "node:child_process"
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync
} from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { prebuildPath, promised } from "./promised.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const cache = resolve(root, "..", "..", ".cache")
const require = createRequire(import.meta.url)
const say = (line) => console.error(`prebuild: ${line}`)
const die = (line) => {
  say(`FAILED: ${line}`)
  process.exit(1)
}

const check = process.argv.includes("--check")
const where = process.argv.includes("--where")
const requested = process.argv.slice(2).filter((a) => !a.startsWith("--"))
const targets = (requested.length > 0 ? requested : promised.map(({ arch, major }) => `${arch}@${major}`))
  .map((t) => {
    const match = /^(x64|arm64)@(\d+)$/.exec(t)
    if (match === null) die(`'${t}' is not <arch>@<major> (x64@22, arm64@26)`)
    return { arch: match[1], major: match[2] }
  })

/** What cross-compiling for an architecture needs; undefined for the host's own. */
const cross = {
  arm64: { triple: "aarch64-linux-gnu", pkgconfig: "/usr/lib/aarch64-linux-gnu/pkgconfig", emulator: "qemu-aarch64" }
}

const run = (command, args, options = {}) => {
  const child = spawnSync(command, args, { stdio: ["ignore", "inherit", "inherit"], ...options })
  if (child.status !== 0) die(`${command} ${args.join(" ")} exited ${child.status ?? child.signal}`)
}

/** The Node.js `node-linux-<arch>@<major>` from the npm registry, unpacked: its directory. */
const nodeOf = ({ arch, major }) => {
  const dir = join(cache, "nodes")
  mkdirSync(dir, { recursive: true })
  const have = readdirSync(dir).find((f) => f.startsWith(`node-linux-${arch}-${major}.`) && !f.endsWith(".tgz"))
  if (have !== undefined) return join(dir, have)
  const packed = spawnSync("npm", ["pack", "--silent", `node-linux-${arch}@${major}`], { cwd: dir, encoding: "utf8" })
  const tarball = packed.stdout.trim().split("\n").pop()
  if (packed.status !== 0 || !tarball) die(`npm pack node-linux-${arch}@${major}: ${packed.stderr.trim()}`)
  const target = join(dir, tarball.replace(/\.tgz$/, ""))
  mkdirSync(target, { recursive: true })
  run("tar", ["-xzf", join(dir, tarball), "-C", target, "--strip-components=1"])
  rmSync(join(dir, tarball))
  return target
}

/** NODE_MODULE_VERSION of the Node.js whose headers are in `nodedir`. */
const abiOf = (nodedir) => {
  const header = readFileSync(join(nodedir, "include", "node", "node_version.h"), "utf8")
  const match = /#define NODE_MODULE_VERSION (\d+)/.exec(header)
  if (match === null) die(`no NODE_MODULE_VERSION in ${nodedir}/include/node/node_version.h`)
  return match[1]
}

const outputOf = (arch, abi) => prebuildPath(root, arch, abi)

/** The command that runs `bin/node` of `nodedir` on this machine (under qemu for another arch). */
const nodeCommand = (arch, nodedir) => {
  const node = join(nodedir, "bin", "node")
  return cross[arch] === undefined || arch === process.arch ? [node] : [cross[arch].emulator, node]
}

/** Whether `output` is newer than binding.gyp and every source: then it is not built again. */
const upToDate = (output) => {
  if (!existsSync(output)) return false
  const sources = [
    join(root, "gyp", "binding.gyp"),
    ...readdirSync(join(root, "src")).filter((f) => /\.(cc|h)$/.test(f)).map((f) => join(root, "src", f))
  ]
  const built = statSync(output).mtimeMs
  return sources.every((f) => statSync(f).mtimeMs < built)
}

const build = (target) => {
  const nodedir = nodeOf(target)
  const abi = abiOf(nodedir)
  if (upToDate(outputOf(target.arch, abi)) && !process.argv.includes("--force")) {
    say(`${outputOf(target.arch, abi).slice(root.length + 1)} is newer than its sources (--force builds it again)`)
    return
  }
  const stage = join(cache, "prebuild", `${target.arch}-abi${abi}`)
  rmSync(stage, { recursive: true, force: true })
  mkdirSync(join(stage, "src"), { recursive: true })
  mkdirSync(join(stage, "gyp"), { recursive: true })
  copyFileSync(join(root, "gyp", "binding.gyp"), join(stage, "gyp", "binding.gyp"))
  for (const f of readdirSync(join(root, "src"))) {
    if (/\.(cc|h)$/.test(f)) cpSync(join(root, "src", f), join(stage, "src", f))
  }
  // gyp/binding.gyp finds node-addon-api with `node -p "require('node-addon-api')"` from stage/gyp.
  symlinkSync(join(root, "node_modules"), join(stage, "node_modules"))
  const env = { ...process.env }
  const foreign = target.arch !== process.arch ? cross[target.arch] : undefined
  if (target.arch !== process.arch && foreign === undefined) die(`no cross toolchain known for ${target.arch}`)
  if (foreign !== undefined) {
    for (const tool of ["gcc", "g++"]) {
      if (spawnSync("which", [`${foreign.triple}-${tool}`]).status !== 0) {
        die(`${foreign.triple}-${tool} is missing: apt-get install g++-${foreign.triple}`)
      }
    }
    env.CC = `${foreign.triple}-gcc`
    env.CXX = `${foreign.triple}-g++`
    env.LINK = `${foreign.triple}-g++`
    env.AR = `${foreign.triple}-ar`
    // binding.gyp asks pkg-config for the C libraries: the arm64 ones (multiarch), not the host's.
    env.PKG_CONFIG_LIBDIR = `${foreign.pkgconfig}:/usr/share/pkgconfig`
  }
  if (spawnSync("pkg-config", ["--exists", "librpma", "librdmacm", "libibverbs"], { env }).status !== 0) {
    die(
      `pkg-config finds no librpma/librdmacm/libibverbs for ${target.arch} (install their -dev packages${
        foreign ? `:${target.arch}` : ""
      })`
    )
  }
  const nodeGyp = require.resolve("node-gyp/bin/node-gyp.js")
  const started = Date.now()
  run(process.execPath, [nodeGyp, "rebuild", `--nodedir=${nodedir}`, `--arch=${target.arch}`, "--jobs=2", "--silent"], {
    cwd: join(stage, "gyp"),
    env
  })
  const output = outputOf(target.arch, abi)
  mkdirSync(dirname(output), { recursive: true })
  copyFileSync(join(stage, "gyp", "build", "Release", "rpma_addon.node"), output)
  run(foreign ? `${foreign.triple}-strip` : "strip", ["--strip-unneeded", output])
  say(
    `${output.slice(root.length + 1)} (Node.js ${nodedir.split("-").pop()}) in ${
      ((Date.now() - started) / 1000).toFixed(0)
    } s`
  )
  rmSync(stage, { recursive: true, force: true })
}

/** Loads the prebuilt addon for `target` under its own Node.js and calls one function. */
const load = (target) => {
  const nodedir = nodeOf(target)
  const abi = abiOf(nodedir)
  const output = outputOf(target.arch, abi)
  if (!existsSync(output)) die(`${output} is missing: run node scripts/prebuild.mjs ${target.arch}@${target.major}`)
  const [command, ...args] = nodeCommand(target.arch, nodedir)
  const child = spawnSync(command, [
    ...args,
    "-e",
    "const a = require(process.argv[1]); if (typeof a.peerNew !== 'function') throw new Error('no peerNew'); console.log(process.version, process.arch, 'ABI', process.versions.modules)",
    output
  ], { encoding: "utf8" })
  if (child.status !== 0) die(`${output} does not load under ${command} ${args.join(" ")}: ${child.stderr.trim()}`)
  say(`loads: ${output.slice(root.length + 1)} under ${child.stdout.trim()}`)
}

for (const target of targets) {
  if (where) console.log(nodeOf(target))
  else (check ? load : build)(target)
}
