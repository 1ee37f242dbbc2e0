// Extracts every TypeScript block of README.md and every `@example` of packages/*/src into a
// directory, one module per block, for scripts/outside-user.sh to type-check against the packed
// packages (what a user sees), not against the workspace's sources.
//
//   node scripts/doc-examples.mjs <out-dir>
//
// Prints one line per file written: "<file>\t<where it came from>". README's block that follows
// the line `<!-- main example -->` is written as main.ts, which the outside-user test also runs.
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = resolve(fileURLToPath(import.meta.url), "..", "..")
const out = resolve(process.argv[2] ?? "")
if (process.argv[2] === undefined) {
  console.error("usage: node scripts/doc-examples.mjs <out-dir>")
  process.exit(2)
}
mkdirSync(out, { recursive: true })

const written = []
const write = (name, code, origin) => {
  writeFileSync(join(out, name), code.endsWith("\n") ? code : `${code}\n`)
  written.push(`${name}\t${origin}`)
}

// README.md: ```ts fences.
const readme = readFileSync(join(root, "README.md"), "utf8").split("\n")
let main = false
for (let i = 0; i < readme.length; i++) {
  if (readme[i].trim() === "<!-- main example -->") main = true
  if (!/^```(ts|typescript)\s*$/.test(readme[i])) continue
  const start = i + 1
  let end = start
  while (end < readme.length && !readme[end].startsWith("```")) end++
  const code = readme.slice(start, end).join("\n")
  write(main ? "main.ts" : `readme-${start}.ts`, code, `README.md:${start}`)
  main = false
  i = end
}

// @example blocks in doc comments: ```ts fences inside /** */, each line starting with " * ".
const sources = (dir) =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return name === "internal" ? [] : sources(path)
    return name.endsWith(".ts") ? [path] : []
  })
for (const pkg of readdirSync(join(root, "packages"))) {
  const src = join(root, "packages", pkg, "src")
  try {
    statSync(src)
  } catch {
    continue
  }
  for (const file of sources(src)) {
    const lines = readFileSync(file, "utf8").split("\n")
    for (let i = 0; i < lines.length; i++) {
      if (!/^\s*\*\s*@example\b/.test(lines[i])) continue
      let j = i + 1
      while (j < lines.length && !/^\s*\*\s*```(ts|typescript)\s*$/.test(lines[j])) j++
      const start = j + 1
      let end = start
      while (end < lines.length && !/^\s*\*\s*```\s*$/.test(lines[end])) end++
      const code = lines.slice(start, end).map((l) => l.replace(/^\s*\* ?/, "")).join("\n")
      const where = `${relative(root, file)}:${start}`
      write(`${relative(root, file).replace(/[/.]/g, "_")}-${start}.ts`, code, where)
      i = end
    }
  }
}
console.log(written.join("\n"))
