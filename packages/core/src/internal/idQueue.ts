/**
 * Request ids in posting order, taken from the front: a connection's send queue as the table
 * tracks it (internal/dataPath.ts). An array with a head index, so that taking the first id moves
 * nothing. An array's `shift()` moved every id behind it, and while they were entries (objects) each
 * move of a young one into the long-lived array went through V8's write barrier: about 7.5 barrier
 * calls a write with 16 in flight, a sixth of a batched write's instructions under callgrind. Ids
 * are small integers, which no barrier watches.
 */
export class IdQueue {
  private ids: Array<number> = new Array<number>(16).fill(0)
  private head = 0
  private tail = 0

  get length(): number {
    return this.tail - this.head
  }

  /** The id at `index` from the front (0: the oldest), for `index` below {@link length}. */
  at(index: number): number {
    return this.ids[this.head + index]!
  }

  /** The oldest id, or -1 when empty (ids are positive). */
  first(): number {
    return this.head < this.tail ? this.ids[this.head]! : -1
  }

  /** The newest id, or -1 when empty. */
  last(): number {
    return this.head < this.tail ? this.ids[this.tail - 1]! : -1
  }

  push(id: number): void {
    if (this.tail === this.ids.length) this.makeRoom()
    this.ids[this.tail++] = id
  }

  /** Drops the newest id. */
  pop(): void {
    if (this.head < this.tail && --this.tail === this.head) this.head = this.tail = 0
  }

  /** Drops the oldest `count` ids (at most {@link length}). */
  dropFirst(count: number): void {
    this.head += count
    // Emptied (the usual state between a request and its completion): back to the array's start.
    if (this.head >= this.tail) this.head = this.tail = 0
  }

  /** Where `id` is from the front, or -1. */
  indexOf(id: number): number {
    for (let i = this.head; i < this.tail; i++) if (this.ids[i] === id) return i - this.head
    return -1
  }

  /** The oldest `count` ids, in a new array (they stay in the queue). */
  firstOnes(count: number): Array<number> {
    return this.ids.slice(this.head, this.head + count)
  }

  clear(): void {
    this.head = this.tail = 0
  }

  /** The array is full at its end: the ids moved to its start if that frees half, else a larger one. */
  private makeRoom(): void {
    const live = this.tail - this.head
    if (live * 2 > this.ids.length) {
      const larger = new Array<number>(this.ids.length * 2).fill(0)
      for (let i = 0; i < live; i++) larger[i] = this.ids[this.head + i]!
      this.ids = larger
    } else {
      this.ids.copyWithin(0, this.head, this.tail)
    }
    this.head = 0
    this.tail = live
  }
}
