/**
 * Where the addon is and whether it fits this Node.js: the one place that knows the package's
 * layout on disk (the workspace's `src/`, a published `dist/`, node-gyp's `build/Release/`, the
 * shipped `prebuilds/`, one per Node.js ABI and architecture, made by scripts/prebuild.mjs).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const require = createRequire(import.meta.url)

/** The package's root: the directory of its package.json, from src/ or dist/ alike. */
export const packageRoot: string = (() => {
  const here = dirname(fileURLToPath(import.meta.url))
  let dir = here
  for (;;) {
    const manifest = join(dir, "package.json")
    if (existsSync(manifest)) {
      try {
        if (JSON.parse(readFileSync(manifest, "utf8")).name === "@effect-rdma/native") return dir
      } catch {
        // not ours; keep looking
      }
    }
    const parent = dirname(dir)
    if (parent === dir) return join(here, "..", "..")
    dir = parent
  }
})()

/** What a user runs in their own project to build the addon again. */
export const rebuildHelp: string = "run `npm rebuild @effect-rdma/native` in your project " +
  "(pnpm: `pnpm rebuild @effect-rdma/native`, after allowing its build script with `pnpm approve-builds` " +
  "or \"pnpm\": { \"onlyBuiltDependencies\": [\"@effect-rdma/native\"] } in package.json); " +
  "in the effect-rdma workspace: `pnpm --filter @effect-rdma/native build:addon`"

/** The Debian packages a build from source needs. */
export const buildPackages = "build-essential python3 pkg-config librpma-dev librdmacm-dev libibverbs-dev"

/** The Node.js line of each ABI the package ships prebuilt addons for (for messages). */
const nodeLineOfAbi: Readonly<Record<string, string>> = { "115": "20", "127": "22", "137": "24", "147": "26" }

/** `glibc` or `musl`: the C library this process runs on, as prebuilds are tagged. */
export const libc = (): "glibc" | "musl" => {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header
  return header?.glibcVersionRuntime !== undefined ? "glibc" : "musl"
}

/** The prebuilt addons under `root`: `prebuilds/<platform>-<arch>/rpma_addon.abi<N>.<libc>.node`. */
export const prebuilds = (root: string): ReadonlyArray<{ readonly path: string; readonly target: string; readonly abi: string; readonly libc: string }> => {
  const found: Array<{ path: string; target: string; abi: string; libc: string }> = []
  const dir = join(root, "prebuilds")
  for (const target of existsSync(dir) ? readdirSync(dir) : []) {
    for (const file of existsSync(join(dir, target)) ? readdirSync(join(dir, target)) : []) {
      const tags = /^rpma_addon\.abi(\d+)\.(glibc|musl)\.node$/.exec(file)
      if (tags !== null) found.push({ path: join(dir, target, file), target, abi: tags[1]!, libc: tags[2]! })
    }
  }
  return found
}

const describeAbi = (abi: string): string => {
  const line = nodeLineOfAbi[abi]
  return line === undefined ? `ABI ${abi}` : `ABI ${abi} (Node.js ${line})`
}

/**
 * The addon this package would load: node-gyp's `build/Release/rpma_addon.node` when it
 * was built on this machine for this Node.js; otherwise the prebuilt addon whose platform, arch,
 * ABI and C library fit this process; otherwise a local build for another ABI (which
 * {@link requireAddon} then refuses by name). Throws MODULE_NOT_FOUND, saying what this process is
 * and what the package ships, when there is none.
 */
export const resolveAddon = (root: string = packageRoot): string => {
  const local = join(root, "build", "Release", "rpma_addon.node")
  const hasLocal = existsSync(local)
  const localAbi = hasLocal ? builtAbi(local) : undefined
  if (hasLocal && (localAbi === undefined || localAbi === process.versions.modules)) return local
  const target = `${process.platform}-${process.arch}`
  const shipped = prebuilds(root)
  const fitting = shipped.find((p) => p.target === target && p.abi === process.versions.modules && p.libc === libc())
  if (fitting !== undefined) return fitting.path
  if (hasLocal) return local
  const here = `Node.js ${process.version} (${describeAbi(process.versions.modules)}) on ${target} ${libc()}`
  const inventory = shipped.length === 0 ?
    "the package ships no prebuilt addons" :
    `its prebuilt addons are for ${
      [...new Set(shipped.map((p) => `${p.target} ${p.libc}`))].map((t) =>
        `${t}: ${shipped.filter((p) => `${p.target} ${p.libc}` === t).map((p) => describeAbi(p.abi)).join(", ")}`
      ).join("; ")
    }`
  throw Object.assign(
    new Error(`no addon for ${here}: ${inventory}, and it was not built on this machine (no ${local})`),
    { code: "MODULE_NOT_FOUND" }
  )
}

/** What a build records about itself next to `rpma_addon.node` (see scripts/install.mjs). */
export interface BuildInfo {
  readonly abi: string
  readonly node: string
  readonly platform: string
  readonly arch: string
}

/** The sidecar that scripts/install.mjs writes after building `build/Release/x.node`. */
export const buildInfoPath = (addon: string): string => `${addon}.json`

/**
 * The Node.js ABI (`process.versions.modules`) an addon was built for: from a
 * prebuild's `abiNNN` tag, or from the sidecar written when it was built here. `undefined` when
 * neither says (a build made by running node-gyp by hand).
 */
export const builtAbi = (addon: string): string | undefined => {
  const tag = /\.abi(\d+)\./.exec(addon.slice(addon.lastIndexOf("/") + 1))
  if (tag !== null) return tag[1]
  try {
    const info = JSON.parse(readFileSync(buildInfoPath(addon), "utf8")) as Partial<BuildInfo>
    return typeof info.abi === "string" ? info.abi : undefined
  } catch {
    return undefined
  }
}

/**
 * Loads the addon at `path`, refusing one built for another Node.js ABI before dlopen
 * sees it: the addon keeps V8 backing stores alive, which ties it to the V8 it was compiled
 * against, not only to N-API. Throws an Error with `code` ERR_ADDON_ABI_MISMATCH, or whatever
 * require throws (MODULE_NOT_FOUND, ERR_DLOPEN_FAILED).
 */
export const requireAddon = (path: string): unknown => {
  const abi = builtAbi(path)
  if (abi !== undefined && abi !== process.versions.modules) {
    throw Object.assign(
      new Error(
        `${path} was built for Node.js ABI ${abi}, but this is Node.js ${process.version} (ABI ${process.versions.modules})`
      ),
      { code: "ERR_ADDON_ABI_MISMATCH", builtAbi: abi }
    )
  }
  return require(path)
}
