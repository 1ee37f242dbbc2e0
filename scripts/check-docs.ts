/**
 * Every public export of every package carries a doc comment with `@since`, checked with the
 * TypeScript compiler API. (TypeDoc 0.28's own `validation.notDocumented` reports nothing:
 * TypeStrong/typedoc#3046.) Internal modules (src/internal/) and `@internal` exports are exempt.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"

const problems: Array<string> = []
for (const pkg of ["core", "native", "testing", "rpc", "cluster"]) {
  const dir = join("packages", pkg, "src")
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
    const path = join(dir, file)
    const source = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.ES2022, true)
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
