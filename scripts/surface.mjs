// Counts the names a user of each package can reach: every value and type exported by the
// package index, namespaces (`export * as X`) counted by their members, as the type checker sees
// them. Also the separate subpath modules (`@effect-rdma/core/Driver`). Prints one line per entry
// point; `--names` lists the names. The counts are the ones issue 30's closing note reports.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"

const packages = ["core", "native", "testing", "rpc", "cluster"]
const listNames = process.argv.includes("--names")

const entries = packages.flatMap((name) => {
  const dir = join("packages", name, "src")
  const manifest = JSON.parse(readFileSync(join("packages", name, "package.json"), "utf8"))
  const index = { label: `@effect-rdma/${name}`, file: join(dir, "index.ts") }
  // A "./*" export makes every top-level module a subpath of its own; the index re-exports most
  // of them as namespaces, so only the modules it does not re-export are counted apart.
  if (!manifest.exports?.["./*"]) return [index]
  const indexText = readFileSync(index.file, "utf8")
  const subpaths = readdirSync(dir)
    .filter((f) => f.endsWith(".ts") && f !== "index.ts" && !indexText.includes(`"./${f.replace(/\.ts$/, ".js")}"`))
    .map((f) => ({ label: `@effect-rdma/${name}/${f.replace(/\.ts$/, "")}`, file: join(dir, f) }))
  return [index, ...subpaths]
})

const program = ts.createProgram(entries.map((e) => e.file), {
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  target: ts.ScriptTarget.ES2022,
  allowImportingTsExtensions: true,
  noEmit: true,
  strict: true
})
const checker = program.getTypeChecker()

const namesOf = (moduleSymbol, prefix) =>
  checker.getExportsOfModule(moduleSymbol).flatMap((exported) => {
    const target = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported
    const isNamespace = target.flags & ts.SymbolFlags.ValueModule && target.declarations?.some(ts.isSourceFile)
    return isNamespace ? namesOf(target, `${prefix}${exported.name}.`) : [`${prefix}${exported.name}`]
  })

let total = 0
for (const entry of entries) {
  const source = program.getSourceFile(entry.file)
  const names = namesOf(checker.getSymbolAtLocation(source), "")
  total += names.length
  console.log(`${entry.label}\t${names.length}`)
  if (listNames) { for (const n of names) console.log(`  ${n}`) }
}
console.log(`all\t${total}`)
