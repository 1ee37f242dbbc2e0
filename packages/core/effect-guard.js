// Which Effect the effect-rdma packages run on, checked before any of their modules that import
// effect is loaded. Effect 4 moved and renamed modules (effect/Either is gone), so under it the
// packages' own imports fail while Node links them, before any of their code runs; the entry
// Node loads ("module-sync" in each package's exports, written at pack time by
// scripts/guarded-entry.mjs) imports this module alone first, then the package. The doctor's
// "effect" row reads the same verdict.
//
// Plain JavaScript with node: imports only, so that it loads under any Effect.
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"

/** The range of effect the packages support: core's own peer dependency, the one place it is said. */
export const required =
  JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8")).peerDependencies.effect

/** Whether `version` (x.y.z) satisfies a caret range `^a.b.c`, the only form `required` takes. */
export const satisfies = (version, range) => {
  const want = /^\^(\d+)\.(\d+)\.(\d+)$/.exec(range)
  const have = /^(\d+)\.(\d+)\.(\d+)(-.*)?$/.exec(version)
  if (want === null) throw new Error(`effect-guard: ${range} is not a caret range ^x.y.z`)
  if (have === null || have[4] !== undefined) return false
  const [a, b] = [want.slice(1, 4).map(Number), have.slice(1, 4).map(Number)]
  if (b[0] !== a[0]) return false
  return b[1] > a[1] || (b[1] === a[1] && b[2] >= a[2])
}

/** Thrown (at import) when the installed effect is outside {@link required}. */
export class UnsupportedEffectVersion extends Error {
  constructor(found, where) {
    super(
      `@effect-rdma needs effect ${required}, but found effect ${found}` +
        `${where === undefined ? "" : ` (${where})`}: install a supported one with ` +
        `\`npm install effect@${required}\` (pnpm: \`pnpm add effect@${required}\`); ` +
        "Effect 4 is not supported yet (see docs/effect-4.md in the effect-rdma repository)"
    )
    this.name = "UnsupportedEffectVersion"
    this._tag = "UnsupportedEffectVersion"
    this.found = found
    this.required = required
  }
}

/**
 * The effect that resolves from `from` (default: this package): its version and package.json, or
 * `undefined` when none resolves (a bundle, where effect is inlined: nothing to check here).
 */
export const installed = (from = import.meta.url) => {
  try {
    const manifest = createRequire(from).resolve("effect/package.json")
    return { version: String(JSON.parse(readFileSync(manifest, "utf8")).version), manifest }
  } catch {
    return undefined
  }
}

/** The error for the installed effect, or `undefined` when it is supported (or not found). */
export const check = (from = import.meta.url) => {
  const effect = installed(from)
  return effect === undefined || satisfies(effect.version, required) ?
    undefined :
    new UnsupportedEffectVersion(effect.version, effect.manifest)
}

/** Throws {@link UnsupportedEffectVersion} when the installed effect is not supported. */
export const assertSupported = (from = import.meta.url) => {
  const error = check(from)
  if (error !== undefined) throw error
}
