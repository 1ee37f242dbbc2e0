/**
 * What the doctor found: one {@link Check} per question, and how it is printed.
 *
 * @since 0.1.0
 */

/**
 * `fail`: the native driver will not work (or not for what was asked) until it is fixed. `warn`:
 * it works, with a risk or something the doctor could not find out.
 *
 * @since 0.1.0
 * @category models
 */
export type Status = "ok" | "warn" | "fail"

/**
 * One finding. `details` say what was seen; `fixes` say what to do, one step each (empty when the
 * status is ok). `data` is the same as facts, for `--json`.
 *
 * @since 0.1.0
 * @category models
 */
export interface Check {
  readonly id: string
  readonly title: string
  readonly status: Status
  readonly summary: string
  readonly details: ReadonlyArray<string>
  readonly fixes: ReadonlyArray<string>
  readonly data: Readonly<Record<string, unknown>>
}

/**
 * All the checks. `ok` is false when any failed: the exit code is then 1.
 *
 * @since 0.1.0
 * @category models
 */
export interface Report {
  readonly ok: boolean
  readonly counts: { readonly ok: number; readonly warn: number; readonly fail: number }
  readonly options: { readonly size: number; readonly addresses: ReadonlyArray<string> }
  readonly checks: ReadonlyArray<Check>
}

/**
 * A check, with empty details, fixes and data unless given.
 *
 * @since 0.1.0
 * @category constructors
 */
export const check = (
  fields: Pick<Check, "id" | "title" | "status" | "summary"> & Partial<Pick<Check, "details" | "fixes" | "data">>
): Check => ({
  id: fields.id,
  title: fields.title,
  status: fields.status,
  summary: fields.summary,
  details: fields.details ?? [],
  fixes: fields.fixes ?? [],
  data: fields.data ?? {}
})

/**
 * The report over `checks`.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make = (checks: ReadonlyArray<Check>, options: Report["options"]): Report => {
  const count = (status: Status) => checks.filter((c) => c.status === status).length
  const counts = { ok: count("ok"), warn: count("warn"), fail: count("fail") }
  return { ok: counts.fail === 0, counts, options, checks }
}

/**
 * The report for a terminal: a line per check, then its details, then its fixes.
 *
 * @since 0.1.0
 * @category formatting
 */
export const renderText = (report: Report): string => {
  const titleWidth = Math.max(...report.checks.map((c) => c.title.length), 0)
  const indent = " ".repeat(6 + titleWidth + 2)
  const lines: Array<string> = []
  for (const c of report.checks) {
    lines.push(`${c.status.padEnd(6)}${c.title.padEnd(titleWidth)}  ${c.summary}`)
    for (const detail of c.details) lines.push(...wrap(detail, indent, indent))
    for (const fix of c.fixes) lines.push(...wrap(fix, `${indent}fix: `, `${indent}     `))
  }
  const { fail, ok, warn } = report.counts
  lines.push("")
  lines.push(
    `${fail} failed, ${warn} ${warn === 1 ? "warning" : "warnings"}, ${ok} ok` +
      (fail === 0 ? "" : ": the native driver needs the fixes above")
  )
  return lines.join("\n")
}

/** Continuation lines of a long text start with `rest`; lines are broken at spaces near 100 columns. */
const wrap = (text: string, first: string, rest: string): Array<string> => {
  const width = 100
  const out: Array<string> = []
  let line = first
  let empty = true
  for (const word of text.split(" ")) {
    if (!empty && line.length + 1 + word.length > width) {
      out.push(line)
      line = rest + word
    } else {
      line += (empty ? "" : " ") + word
    }
    empty = false
  }
  out.push(line)
  return out
}

/**
 * The report as JSON, as `--json` prints it.
 *
 * @since 0.1.0
 * @category formatting
 */
export const renderJson = (report: Report): string => JSON.stringify(report, null, 2)
