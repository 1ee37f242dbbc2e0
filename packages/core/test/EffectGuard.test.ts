// The effect check that each package's Node.js entry runs first (effect-guard.js, and the entry
// scripts/guarded-entry.mjs writes), against a simulated Effect 4: a package whose version is
// 4.1.5 and which has no effect/Either, as Effect 4 has none.
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import * as EffectGuard from "../effect-guard.js"

const core = resolve(import.meta.dirname, "..")
const repo = resolve(core, "..", "..")

/** A project with `effect` at `version` (no effect/Either) and a package built as the packages are. */
const project = (version: string): string => {
  const dir = mkdtempSync(join(tmpdir(), "effect-guard-"))
  const effect = join(dir, "node_modules", "effect")
  mkdirSync(join(effect, "dist"), { recursive: true })
  writeFileSync(
    join(effect, "package.json"),
    JSON.stringify({
      name: "effect",
      version,
      type: "module",
      exports: { "./package.json": "./package.json", "./*": "./dist/*.js" }
    })
  )
  mkdirSync(join(dir, "node_modules", "@effect-rdma"), { recursive: true })
  symlinkSync(core, join(dir, "node_modules", "@effect-rdma", "core"))
  const pkg = join(dir, "node_modules", "@effect-rdma", "example")
  mkdirSync(join(pkg, "dist"), { recursive: true })
  writeFileSync(join(pkg, "package.json"), JSON.stringify({ name: "@effect-rdma/example", type: "module" }))
  writeFileSync(
    join(pkg, "dist", "Thing.js"),
    `import * as Either from "effect/Either"\nexport const right = Either.right\n`
  )
  writeFileSync(join(pkg, "dist", "index.js"), `export * as Thing from "./Thing.js"\n`)
  const generated = spawnSync(process.execPath, [join(repo, "scripts", "guarded-entry.mjs")], {
    cwd: pkg,
    encoding: "utf8"
  })
  assert.strictEqual(generated.status, 0, generated.stderr)
  return pkg
}

const load = (file: string, how: "import" | "require") =>
  spawnSync(
    process.execPath,
    [
      "-e",
      how === "import" ?
        `import(${
          JSON.stringify(file)
        }).then(() => console.log("loaded"), (e) => console.log(e._tag ?? e.code, e.message))` :
        `try { require(${
          JSON.stringify(file)
        }); console.log("loaded") } catch (e) { console.log(e._tag ?? e.code, e.message) }`
    ],
    { encoding: "utf8", timeout: 60_000 }
  ).stdout

describe("effect-guard", () => {
  it("the supported range is core's peer dependency; caret ranges are checked as npm does", () => {
    assert.strictEqual(EffectGuard.required, "^3.22.0")
    assert.isTrue(EffectGuard.satisfies("3.22.0", "^3.22.0"))
    assert.isTrue(EffectGuard.satisfies("3.30.1", "^3.22.0"))
    assert.isFalse(EffectGuard.satisfies("3.21.9", "^3.22.0"))
    assert.isFalse(EffectGuard.satisfies("4.1.5", "^3.22.0"))
    assert.isFalse(EffectGuard.satisfies("3.23.0-next.1", "^3.22.0"))
    assert.isUndefined(EffectGuard.check())
  })

  it("under Effect 4 the entry fails at once with UnsupportedEffectVersion, by import and by require", () => {
    const pkg = project("4.1.5")
    for (const how of ["import", "require"] as const) {
      const out = load(join(pkg, "dist", "node.js"), how)
      assert.match(
        out,
        /^UnsupportedEffectVersion @effect-rdma needs effect \^3\.22\.0, but found effect 4\.1\.5 /,
        how
      )
      assert.include(out, "npm install effect@^3.22.0", how)
    }
    // Without the entry, Node fails while linking, before any module runs: why the entry exists.
    assert.match(load(join(pkg, "dist", "index.js"), "import"), /^ERR_MODULE_NOT_FOUND .*effect\/dist\/Either\.js/)
  })

  it("under a supported effect the entry loads the package itself", () => {
    const pkg = project("3.22.4")
    writeFileSync(
      join(pkg, "..", "..", "effect", "dist", "Either.js"),
      "export const right = (a) => ({ _tag: \"Right\", right: a })\n"
    )
    assert.strictEqual(load(join(pkg, "dist", "node.js"), "import").trim(), "loaded")
    assert.strictEqual(load(join(pkg, "dist", "node.js"), "require").trim(), "loaded")
  })
})
