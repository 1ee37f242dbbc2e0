/**
 * Where the addon is and whether it fits this Node.js: the one place that knows the package's
 * layout on disk (the workspace's `src/`, a published `dist/`, node-gyp's `build/Release/`, the
 * shipped `prebuilds/`).
 *
 * @internal
 */
import { existsSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const require = createRequire(import.meta.url)

/** @internal The package's root: the directory of its package.json, from src/ or dist/ alike. */
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

/** @internal What a user runs in their own project to build the addon again. */
export const rebuildHelp: string = "run `npm rebuild @effect-rdma/native` in your project " +
  "(pnpm: `pnpm rebuild @effect-rdma/native`, after allowing its build script with `pnpm approve-builds` " +
  "or \"pnpm\": { \"onlyBuiltDependencies\": [\"@effect-rdma/native\"] } in package.json); " +
  "in the effect-rdma workspace: `pnpm --filter @effect-rdma/native build:addon`"

/** @internal The Debian packages a build from source needs. */
export const buildPackages = "build-essential python3 pkg-config librpma-dev librdmacm-dev libibverbs-dev"

/**
 * @internal The addon this package would load: node-gyp's `build/Release/*.node` when there is
 * one (built on this machine), otherwise the `prebuilds/<platform>-<arch>/` file whose tags
 * (`abi115`, `glibc`) fit this process, found by node-gyp-build. Throws MODULE_NOT_FOUND when
 * there is neither.
 */
export const resolveAddon = (root: string = packageRoot): string => {
  const nodeGypBuild = require("node-gyp-build") as { readonly resolve: (dir: string) => string }
  try {
    return nodeGypBuild.resolve(root)
  } catch (cause) {
    throw Object.assign(new Error(cause instanceof Error ? cause.message.trim() : String(cause)), {
      code: "MODULE_NOT_FOUND",
      cause
    })
  }
}

/** @internal What a build records about itself next to `rpma_addon.node` (see scripts/install.mjs). */
export interface BuildInfo {
  readonly abi: string
  readonly node: string
  readonly platform: string
  readonly arch: string
}

/** @internal The sidecar that scripts/install.mjs writes after building `build/Release/x.node`. */
export const buildInfoPath = (addon: string): string => `${addon}.json`

/**
 * @internal The Node.js ABI (`process.versions.modules`) an addon was built for: from a
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
 * @internal Loads the addon at `path`, refusing one built for another Node.js ABI before dlopen
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
