// Core's internal modules take the connection errors from their own module, not back through
// Connection.ts (which imports them): a cycle that makes load order matter. Read from the sources
// with the TypeScript parser, so a type-only import counts as much as a value import.
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import ts from "typescript"

const internalDir = new URL("../src/internal/", import.meta.url)

const parse = (file: URL) =>
  ts.createSourceFile(file.pathname, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS)

/** The names a module exports by declaration (classes, types, interfaces, constants). */
const exportedNames = (source: ts.SourceFile): Set<string> => {
  const names = new Set<string>()
  for (const statement of source.statements) {
    const exported = ts.canHaveModifiers(statement) &&
      ts.getModifiers(statement)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword) === true
    if (!exported) continue
    if (
      (ts.isClassDeclaration(statement) || ts.isTypeAliasDeclaration(statement) || ts.isInterfaceDeclaration(statement)) &&
      statement.name !== undefined
    ) names.add(statement.name.text)
  }
  return names
}

/** The names a module imports from `specifier` (a namespace import counts as "*"). */
const importedFrom = (source: ts.SourceFile, specifier: string): Array<string> =>
  source.statements.flatMap((statement) => {
    if (!ts.isImportDeclaration(statement) || (statement.moduleSpecifier as ts.StringLiteral).text !== specifier) return []
    const bindings = statement.importClause?.namedBindings
    if (bindings === undefined) return statement.importClause?.name !== undefined ? ["default"] : []
    return ts.isNamespaceImport(bindings) ? ["*"] : bindings.elements.map((e) => (e.propertyName ?? e.name).text)
  })

describe("core's internal imports", () => {
  it("no internal module imports the connection errors (or OperationError) through ../Connection.js", () => {
    const errors = exportedNames(parse(new URL("connectionErrors.ts", internalDir)))
    assert.isTrue(errors.has("OutOfRangeError") && errors.has("OperationError"), `parsed: ${[...errors].join(", ")}`)
    const offenders = readdirSync(internalDir)
      .filter((name) => name.endsWith(".ts"))
      .flatMap((name) =>
        importedFrom(parse(new URL(name, internalDir)), "../Connection.js")
          .filter((imported) => imported === "*" || errors.has(imported))
          .map((imported) => `${name}: ${imported}`)
      )
    assert.deepStrictEqual(offenders, [])
  })
})
