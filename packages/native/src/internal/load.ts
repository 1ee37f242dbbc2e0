/**
 * Where the addon is and whether it fits this Node.js: the one place that knows the package's
 * layout on disk (the workspace's `src/`, a published `dist/`, node-gyp's `build/Release/`, the
 * shipped `prebuilds/`, one per Node.js ABI and architecture, made by scripts/prebuild.mjs).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

/**
 * This module's own file URL; empty when a bundler inlined the package into a CommonJS
 * bundle (esbuild leaves `import.meta` empty there).
 */
const here: string = typeof import.meta.url === "string" ? import.meta.url : ""

const require = createRequire(here === "" ? join(process.cwd(), "noop.js") : here)

/** The directory of the nearest package.json above `from` that is this package's, if any. */
const findPackageRoot = (from: string): string | undefined => {
  let dir = from
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
    if (parent === dir) return undefined
    dir = parent
  }
}

const foundRoot = here === "" ? undefined : findPackageRoot(dirname(fileURLToPath(here)))

/**
 * Whether this code runs outside its package: a bundler copied it into a bundle, away
 * from the package.json, the prebuilt addons and any build.
 */
export const bundled: boolean = foundRoot === undefined

/** The package's root: the directory of its package.json, from src/ or dist/ alike. */
export const packageRoot: string = foundRoot ??
  (here === "" ? process.cwd() : join(dirname(fileURLToPath(here)), "..", ".."))

/** What a bundle's user does so that the package finds its addon. */
export const bundledHelp: string = "@effect-rdma/native was bundled (its code runs from " +
  `${here === "" ? "a CommonJS bundle" : fileURLToPath(here)}, away from its package.json and its prebuilt addons): ` +
  "mark it external so that it is loaded from node_modules (esbuild: `--external:@effect-rdma/native`; " +
  "webpack: `externals`; Rollup and Vite: `external`), and install it beside the bundle"

/** What a user runs in their own project to build the addon from source. */
export const rebuildHelp: string = "build it from source: run `npx effect-rdma-build-addon` in your project " +
  `(pnpm: \`pnpm exec effect-rdma-build-addon\`; or \`node ${join(packageRoot, "scripts", "build.mjs")}\`)`

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
export const prebuilds = (
  root: string
): ReadonlyArray<{ readonly path: string; readonly target: string; readonly abi: string; readonly libc: string }> => {
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
  if (bundled && root === packageRoot) {
    throw Object.assign(new Error(bundledHelp), { code: "ERR_ADDON_BUNDLED" })
  }
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

/** What a build records about itself next to `rpma_addon.node` (see scripts/build.mjs). */
export interface BuildInfo {
  readonly abi: string
  readonly node: string
  readonly platform: string
  readonly arch: string
}

/** The sidecar that scripts/build.mjs writes after building `build/Release/x.node`. */
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
