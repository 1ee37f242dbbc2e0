// Fails when the value imports among packages/*/src form a cycle: a cycle makes load order matter
// (a module can run while another it needs is half-initialised). Type-only imports (`import type`,
// and imports whose specifiers are all inline `type`) are erased by tsc, so they are left out: an
// internal module may import types back from its public module. madge does the walk, as in
// Effect's repository; each package is walked from its own src with its own tsconfig, so a
// `./x.js` specifier resolves to `x.ts` as tsc resolves it.
import madge from "madge"
import { existsSync, readdirSync } from "node:fs"

const packages = readdirSync("packages").filter((name) => existsSync(`packages/${name}/src`))

let cycles = 0
for (const name of packages) {
  const result = await madge(`packages/${name}/src`, {
    fileExtensions: ["ts"],
    tsConfig: `packages/${name}/tsconfig.src.json`,
    detectiveOptions: { ts: { skipTypeImports: true }, tsx: { skipTypeImports: true } }
  })
  const circular = result.circular()
  // A relative specifier madge could not resolve would hide its edges: fail rather than pass on
  // part of the graph. Another package (`@effect-rdma/core`) is outside the walk, as it should be:
  // core depends on no other package here, so no cycle can cross packages.
  const skipped = result.warnings().skipped.filter((specifier) => specifier.startsWith("."))
  if (skipped.length > 0) {
    console.error(`packages/${name}/src: imports madge could not resolve: ${skipped.join(", ")}`)
    cycles += 1
  }
  for (const cycle of circular) console.error(`packages/${name}/src: ${[...cycle, cycle[0]].join(" -> ")}`)
  cycles += circular.length
  console.log(`packages/${name}/src: ${Object.keys(result.obj()).length} modules, ${circular.length} import cycles`)
}
if (cycles > 0) {
  console.error(
    "Import cycles among value imports (type-only imports excluded): break each one, e.g. move what both sides need into a module of its own."
  )
  process.exit(1)
}
