// The package's `prepack` and `prepublishOnly`: a pack without every promised prebuilt addon
// (scripts/promised.mjs) would install and then fail at run time with AddonNotBuilt, so it is
// refused here, naming the missing addons and the command that builds them.
import { existsSync } from "node:fs"
import { dirname, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { prebuildPath, promised } from "./promised.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const missing = promised.filter(({ abi, arch }) => !existsSync(prebuildPath(root, arch, abi)))
if (missing.length > 0) {
  const targets = missing.map(({ arch, major }) => `${arch}@${major}`)
  console.error(`@effect-rdma/native: refusing to pack without every promised prebuilt addon; missing:`)
  for (const { abi, arch, major } of missing) {
    console.error(`  ${relative(root, prebuildPath(root, arch, abi))} (linux-${arch}, Node.js ${major})`)
  }
  console.error(`build them (from packages/native; arm64 needs scripts/setup-arm64.sh first):`)
  console.error(`  node scripts/prebuild.mjs ${targets.join(" ")}`)
  process.exit(1)
}
console.error(
  `@effect-rdma/native: all ${promised.length} prebuilt addons present (linux x64 and arm64, ABI ${
    [...new Set(promised.map((p) => p.abi))].join(" ")
  }, glibc)`
)
