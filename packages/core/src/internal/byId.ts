/**
 * The posted requests of a connection by id, in an array indexed by the id's low bits. A Map did
 * the same at ~360 more instructions per request under callgrind (its set, get and delete; a Map
 * that keeps emptying shrinks and rehashes): a tenth of a write's own cost.
 *
 * The table hands out the ids itself: an id whose index is taken (a request that waits long, a
 * receive, while many others pass it) is skipped, so a lookup is one index and one compare, and
 * the array grows only with the number of requests in it, never with how far apart their ids are.
 */

export class ById<T extends { readonly id: number }> {
  private slots: Array<T | undefined> = new Array<T | undefined>(64).fill(undefined)
  private mask = 63
  private count = 0
  private next = 1

  /** A new id, whose index is free (the table keeps at least half its indexes free). */
  nextId(): number {
    if (2 * (this.count + 1) > this.slots.length) this.grow()
    let id = this.next++
    while (this.slots[id & this.mask] !== undefined) id = this.next++
    return id
  }

  /** Adds `entry`, whose id came from {@link nextId} with nothing added since. */
  add(entry: T): void {
    this.slots[entry.id & this.mask] = entry
    this.count++
  }

  get(id: number): T | undefined {
    const entry = this.slots[id & this.mask]
    return entry !== undefined && entry.id === id ? entry : undefined
  }

  /** Removes `entry` if it is in the table. */
  delete(entry: T): void {
    const i = entry.id & this.mask
    if (this.slots[i] !== entry) return
    this.slots[i] = undefined
    this.count--
  }

  get size(): number {
    return this.count
  }

  /** The entries in id order (what was posted first, first). */
  values(): Array<T> {
    const all: Array<T> = []
    if (this.count === 0) return all
    for (const entry of this.slots) if (entry !== undefined) all.push(entry)
    return all.sort((a, b) => a.id - b.id)
  }

  /** Whether some entry satisfies `predicate` (in no particular order). */
  some(predicate: (entry: T) => boolean): boolean {
    if (this.count === 0) return false
    for (const entry of this.slots) if (entry !== undefined && predicate(entry)) return true
    return false
  }

  clear(): void {
    if (this.count === 0) return
    this.slots.fill(undefined)
    this.count = 0
  }

  /** Twice the indexes: two ids apart in the smaller array are apart in the larger one too. */
  private grow(): void {
    const old = this.slots
    this.slots = new Array<T | undefined>(old.length * 2).fill(undefined)
    this.mask = this.slots.length - 1
    for (const entry of old) if (entry !== undefined) this.slots[entry.id & this.mask] = entry
  }
}
