/** One row of a benchmark table: our figure, the baseline's, their ratio and the target. */
export interface Row {
  readonly what: string
  readonly ours: string
  readonly baseline: string
  /** Our cost over the baseline's (> 1: slower than the baseline). */
  readonly ratio: number | undefined
  readonly target: string
  readonly met: boolean | undefined
}

export const rate = (perSecond: number, unit: string): string =>
  perSecond >= 1e6 ? `${(perSecond / 1e6).toFixed(2)}M ${unit}` : `${(perSecond / 1e3).toFixed(1)}k ${unit}`

/** Prints rows as a Markdown table, so that BENCHMARKS.md can hold it as printed. */
export const printTable = (rows: ReadonlyArray<Row>): void => {
  const header = ["what", "ours", "baseline", "ratio", "target", "met"]
  const cells = rows.map((r) => [
    r.what,
    r.ours,
    r.baseline,
    r.ratio === undefined ? "" : `${r.ratio.toFixed(2)}×`,
    r.target,
    r.met === undefined ? "" : r.met ? "yes" : "no"
  ])
  const line = (c: ReadonlyArray<string>) => `| ${c.join(" | ")} |`
  console.log(line(header))
  console.log(line(header.map(() => "---")))
  for (const c of cells) console.log(line(c))
}
