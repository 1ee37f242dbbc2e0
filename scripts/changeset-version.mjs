/**
 * `pnpm changeset-version`: `changeset version` (versions and each package's CHANGELOG.md from
 * the pending changesets), then the migration guide (.changeset/migration-*.md, the changeset that
 * says "Migration guide") moved to the top of its release's entries, where a user upgrading reads
 * first (changesets orders the entries of a release by the order it read their files in), then
 * the lockfile refreshed.
 */
import { execFileSync } from "node:child_process"
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"

execFileSync("node_modules/.bin/changeset", ["version"], { stdio: "inherit" })

// An entry is a bullet at column 0 and the indented or blank lines after it.
const isEntryStart = (line) => line.startsWith("- ")
const isHeading = (line) => line.startsWith("#")

for (const pkg of readdirSync("packages")) {
  const path = join("packages", pkg, "CHANGELOG.md")
  let lines
  try {
    lines = readFileSync(path, "utf8").split("\n")
  } catch {
    continue
  }
  const release = lines.findIndex((line) => line.startsWith("## "))
  const nextRelease = lines.findIndex((line, i) => i > release && line.startsWith("## "))
  const end = nextRelease === -1 ? lines.length : nextRelease
  const start = lines.findIndex((line, i) =>
    i > release && i < end && isEntryStart(line) && /Migration guide/.test(line)
  )
  if (start === -1) continue
  let stop = start + 1
  while (stop < end && !isEntryStart(lines[stop]) && !isHeading(lines[stop])) stop++
  const entry = lines.splice(start, stop - start)
  if (entry.at(-1) !== "") entry.push("")
  const firstSection = lines.findIndex((line, i) => i > release && line.startsWith("### "))
  lines.splice(firstSection + 2, 0, ...entry)
  writeFileSync(path, lines.join("\n"))
  console.log(`${path}: the migration guide is the release's first entry`)
}

execFileSync("pnpm", ["install", "--lockfile-only"], { stdio: "inherit" })
