/** The range of effect the effect-rdma packages support (core's peer dependency). */
export declare const required: string
/** Whether `version` (x.y.z) satisfies the caret range `range` (^a.b.c). */
export declare const satisfies: (version: string, range: string) => boolean
/** Thrown at import when the installed effect is outside {@link required}. */
export declare class UnsupportedEffectVersion extends Error {
  readonly _tag: "UnsupportedEffectVersion"
  readonly found: string
  readonly required: string
  constructor(found: string, where?: string)
}
/** The effect that resolves from `from` (a file URL or path), or `undefined` when none does. */
export declare const installed: (from?: string) => { readonly version: string; readonly manifest: string } | undefined
/** The error for the installed effect, or `undefined` when it is supported (or not found). */
export declare const check: (from?: string) => UnsupportedEffectVersion | undefined
/** Throws {@link UnsupportedEffectVersion} when the installed effect is not supported. */
export declare const assertSupported: (from?: string) => void
