// The prebuilt addons the published package promises (README, package.json's `cpu` and `libc`):
// Linux glibc, x64 and arm64, one per Node.js line's ABI. scripts/prebuild.mjs builds them,
// scripts/check-prebuilds.mjs refuses a pack without them; src/internal/load.ts names the lines
// in its messages.
import { join } from "node:path"

/** NODE_MODULE_VERSION of each Node.js line the package ships an addon for. */
export const abiOfNodeLine = { 20: "115", 22: "127", 24: "137", 26: "147" }

/** Every promised addon: its architecture, Node.js line and ABI. */
export const promised = ["x64", "arm64"].flatMap((arch) =>
  Object.entries(abiOfNodeLine).map(([major, abi]) => ({ arch, major, abi }))
)

/** Where the addon for `arch` and `abi` sits, under the package's root. */
export const prebuildPath = (root, arch, abi) =>
  join(root, "prebuilds", `linux-${arch}`, `rpma_addon.abi${abi}.glibc.node`)
