/** Test data for the RdmaStream suites: numbered records and their concatenation. */

/** `n` records of `size` bytes, record i filled with the byte i + 1. */
export const records = (n: number, size: number) =>
  Array.from({ length: n }, (_, i) => new Uint8Array(size).fill((i % 250) + 1))

/** The bytes of `parts`, one after another. */
export const concat = (parts: ReadonlyArray<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}
