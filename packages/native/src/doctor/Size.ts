/**
 * Byte sizes as people write them on a command line ("64MiB", "1G", "4096") and as the doctor
 * prints them.
 *
 * @since 0.1.0
 */

const units: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kib: 1024,
  kb: 1000,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  mb: 1000 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  gb: 1000 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
  tb: 1000 ** 4
}

/**
 * Bytes from "4096", "512KiB", "64MiB", "1.5GiB", "1G" (as `ulimit`, binary), or "1GB"
 * (decimal). `undefined` when the text is not a size.
 *
 * @since 0.1.0
 * @category parsing
 */
export const parse = (text: string): number | undefined => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text)
  if (match === null) return undefined
  const unit = units[match[2]!.toLowerCase()]
  if (unit === undefined) return undefined
  const bytes = Math.round(Number(match[1]) * unit)
  return Number.isSafeInteger(bytes) ? bytes : undefined
}

/**
 * "64 MiB", "1.5 GiB", "100 bytes": the largest binary unit that keeps the number ≥ 1.
 *
 * @since 0.1.0
 * @category formatting
 */
export const format = (bytes: number): string => {
  const names = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
  let value = bytes
  let unit = 0
  while (value >= 1024 && unit < names.length - 1) {
    value /= 1024
    unit++
  }
  if (unit === 0) return `${bytes} bytes`
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${names[unit]}`
}
