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
 * The width {@link renderText} wraps at when not given one: output that is not a terminal has no
 * width to fit.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultWidth = 100

/** However narrow the terminal, a wrapped line keeps this many columns for its text. */
const minimumText = 24

/**
 * The report for a terminal `width` columns wide: a line per check, then its details, then its
 * fixes, each wrapped at spaces to fit.
 *
 * @since 0.1.0
 * @category formatting
 */
export const renderText = (report: Report, width: number = defaultWidth): string => {
  const titleWidth = Math.max(...report.checks.map((c) => c.title.length), 0)
  const indent = " ".repeat(6 + titleWidth + 2)
  let lines: Array<string> = []
  for (const c of report.checks) {
    lines = lines.concat(wrap(c.summary, `${c.status.padEnd(6)}${c.title.padEnd(titleWidth)}  `, indent, width))
    for (const detail of c.details) lines = lines.concat(wrap(detail, indent, indent, width))
    for (const fix of c.fixes) lines = lines.concat(wrap(fix, `${indent}fix: `, `${indent}     `, width))
  }
  const { fail, ok, warn } = report.counts
  lines.push("")
  const tally = `${fail} failed, ${warn} ${warn === 1 ? "warning" : "warnings"}, ${ok} ok` +
    (fail === 0 ? "" : ": the native driver needs the fixes above")
  lines = lines.concat(wrap(tally, "", "", width))
  return lines.join("\n")
}

/**
 * `text` after `first`, its continuation lines after `rest`, broken at spaces to fit `width` (a
 * word longer than a line gets a line of its own). A newline in `text` starts a new line after `rest`.
 */
const wrap = (text: string, first: string, rest: string, width: number): Array<string> => {
  const limit = Math.max(width, rest.length + minimumText)
  const out: Array<string> = []
  let line = first
  let empty = true
  for (const paragraph of text.split("\n")) {
    if (!empty) {
      out.push(line)
      line = rest
      empty = true
    }
    for (const word of paragraph.split(" ")) {
      if (word === "") continue
      if (!empty && line.length + 1 + word.length > limit) {
        out.push(line)
        line = rest + word
      } else {
        line += (empty ? "" : " ") + word
      }
      empty = false
    }
    empty = false
  }
  out.push(line)
  return out.map((l) => l.trimEnd())
}

/**
 * The report as JSON, as `--json` prints it.
 *
 * @since 0.1.0
 * @category formatting
 */
export const renderJson = (report: Report): string => JSON.stringify(report, null, 2)
