// Fails when a declaration file a package ships (packages/*/dist/**/*.d.ts, as `pnpm build` emits
// it with `stripInternal`) still says `@internal`: a member marked internal that reached a user's
// types, e.g. because the tag is not in the JSDoc block right above the declaration (stripInternal
// reads only that one), or a file-level `@internal` on a module the public one re-exports.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"

const declarations = (dir) =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? declarations(path) : name.endsWith(".d.ts") ? [path] : []
  })

let files = 0
const found = []
for (const pkg of readdirSync("packages").filter((name) => existsSync(join("packages", name, "package.json")))) {
  const dist = join("packages", pkg, "dist")
  let paths
  try {
    paths = declarations(dist)
  } catch {
    console.error(`${dist}: not built (run pnpm build first)`)
    process.exit(1)
  }
  for (const path of paths) {
    files += 1
    readFileSync(path, "utf8").split("\n").forEach((line, i) => {
      if (line.includes("@internal")) found.push(`${path}:${i + 1}: ${line.trim()}`)
    })
  }
}
if (found.length > 0) {
  console.error(found.join("\n"))
  console.error(
    `${found.length} @internal in emitted declarations: mark the declaration itself (stripInternal drops a ` +
      "declaration whose own JSDoc says @internal), or move it to an internal/ module the public one does not re-export"
  )
  process.exit(1)
}
console.log(`${files} declaration files, no @internal`)
