// Writes dist/node.js, the entry Node.js loads for a package ("module-sync" in its published
// exports; bundlers and TypeScript keep dist/index.js): it checks the installed effect first
// (@effect-rdma/core's effect-guard.js) and only then loads dist/index.js, synchronously
// (require of an ES module, Node.js 20.19+), so that an unsupported effect is a tagged
// UnsupportedEffectVersion naming the version found and the one needed. A plain `import` of the
// guard at the top of index.js cannot do that: Node resolves and links every static import of the
// graph before it runs any module, and under Effect 4 that linking already fails (effect/Either
// is gone). Run by each package's `prepack`, after tsc, from the package's directory.
import { readFileSync, writeFileSync } from "node:fs"

const manifest = JSON.parse(readFileSync("package.json", "utf8"))
const index = readFileSync("dist/index.js", "utf8")
// The indexes re-export each public module as a namespace, and nothing else.
const names = [...index.matchAll(/^export \* as (\w+) from "\.\/[\w/]+\.js";?$/gm)].map((m) => m[1])
const statements = index.split("\n").filter((line) => /^export\b/.test(line))
if (names.length === 0 || names.length !== statements.length) {
  console.error(
    `guarded-entry: ${manifest.name}'s dist/index.js has exports other than \`export * as X from "./X.js"\`:`
  )
  for (const line of statements) console.error(`  ${line}`)
  process.exit(1)
}
const guard = manifest.name === "@effect-rdma/core" ? "../effect-guard.js" : "@effect-rdma/core/effect-guard"
writeFileSync(
  "dist/node.js",
  `// Node.js's entry for ${manifest.name}: the installed effect is checked before any module that imports it
// is linked (written by effect-rdma's scripts/guarded-entry.mjs; dist/index.js is the package itself).
import { assertSupported } from "${guard}"
import { createRequire } from "node:module"
assertSupported(import.meta.url)
const index = createRequire(import.meta.url)("./index.js")
${names.map((name) => `export const ${name} = index.${name}`).join("\n")}
`
)
console.error(`guarded-entry: ${manifest.name} dist/node.js (${names.length} modules behind the effect check)`)
