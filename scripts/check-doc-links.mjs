// After TypeDoc: fails the docs build on a link whose host is a file name (http://memory.cc,
// http://BENCHMARKS.md), what markdown's bare-link detection makes of a file named in prose.
// typedoc.json turns that detection off (markdownItOptions.linkify); this keeps it off, and catches
// such a link written by hand. TypeDoc's own validation has no check for it.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const root = "docs/api"
const fileHost = /href="(https?:\/\/[^"/?#]+\.(?:cc|h|c|md|ts|mts|js|mjs|cjs|json|gyp|sh|txt|yaml|yml)(?=["/?#]))/g
const bad = []
for (const entry of readdirSync(root, { recursive: true })) {
  const path = join(root, String(entry))
  if (!path.endsWith(".html")) continue
  for (const [, href] of readFileSync(path, "utf8").matchAll(fileHost)) bad.push(`${path}: ${href}`)
}
if (bad.length > 0) {
  console.error(
    "check-doc-links: links whose host is a file name (write the file name in backticks, or link the file):"
  )
  for (const line of bad) console.error(`  ${line}`)
  process.exit(1)
}
console.log("check-doc-links: no link points at a file name as a host")
