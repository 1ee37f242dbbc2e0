/**
 * Every public export of every package carries a doc comment with `@since`, checked with the
 * TypeScript compiler API. (TypeDoc 0.28's own `validation.notDocumented` reports nothing:
 * TypeStrong/typedoc#3046.) Internal modules (src/internal/) and `@internal` exports are exempt.
 *
 * Every `@since` names a version the package has (its package.json version or an older one) or
 * the one its pending changesets release next (`changeset status`): a name cannot claim a version
 * that never was. A prerelease counts as its release (`1.0.0-rc.0` is `@since 1.0.0`).
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import ts from "typescript"

// With no changeset pending there is no next release (and `changeset status` may say so by failing).
const pendingReleases = (): Array<{ name: string; newVersion: string }> => {
  const status = join(mkdtempSync(join(tmpdir(), "changeset-status-")), "status.json")
  try {
    execFileSync("node_modules/.bin/changeset", ["status", `--output=${status}`], { stdio: "ignore" })
    return JSON.parse(readFileSync(status, "utf8")).releases
  } catch {
    return []
  }
}
const release = (version: string) => version.replace(/-.*$/, "")
const nextRelease = new Map(pendingReleases().map((r) => [r.name, release(r.newVersion)]))
const parts = (version: string) => release(version).split(".").map(Number)
const atMost = (a: string, b: string) => {
  const [x, y] = [parts(a), parts(b)]
  const differs = x.findIndex((n, i) => n !== y[i])
  return differs === -1 || x[differs] < y[differs]
}

const problems: Array<string> = []
for (const pkg of ["core", "native", "testing", "rpc", "cluster"]) {
  const dir = join("packages", pkg, "src")
  const manifest = JSON.parse(readFileSync(join("packages", pkg, "package.json"), "utf8"))
  const next = nextRelease.get(manifest.name)
  const current = release(manifest.version)
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
    const path = join(dir, file)
    const text = readFileSync(path, "utf8")
    for (const [index, line] of text.split("\n").entries()) {
      const since = /@since\s+(\S+)/.exec(line)?.[1]
      if (since === undefined || atMost(since, current) || since === next) continue
      problems.push(
        `${path}:${index + 1}: @since ${since}, a version ${manifest.name} never had: ` +
          `it is at ${manifest.version} and its pending changesets release ${next ?? "nothing"} next`
      )
    }
    const source = ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, true)
    for (const statement of source.statements) {
      const exported = ts.canHaveModifiers(statement) &&
        ts.getModifiers(statement)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)
      const reexport = ts.isExportDeclaration(statement)
      if (!exported && !reexport) continue
      const docs = ts.getJSDocCommentsAndTags(statement).map((d) => d.getText()).join("\n")
      const leading = (ts.getLeadingCommentRanges(source.text, statement.getFullStart()) ?? [])
        .map((r) => source.text.slice(r.pos, r.end)).join("\n")
      const text = docs + leading + (reexport ? statement.getText() : "")
      if (/@internal/.test(text)) continue
      if (!/\/\*\*/.test(text) || !/@since/.test(text)) {
        const { line } = source.getLineAndCharacterOfPosition(statement.getStart())
        problems.push(`${path}:${line + 1}: an export without a doc comment and @since`)
      }
    }
  }
}
if (problems.length > 0) {
  console.error(problems.join("\n"))
  process.exit(1)
}
console.log("every public export is documented")
