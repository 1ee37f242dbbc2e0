import { assert, describe, it } from "@effect/vitest"
import { ById } from "../src/internal/byId.js"

const put = (table: ById<{ readonly id: number }>) => {
  const entry = { id: table.nextId() }
  table.add(entry)
  return entry
}

describe("ById (the pending requests of a connection)", () => {
  it("finds what it holds by id, and nothing else", () => {
    const table = new ById<{ readonly id: number }>()
    const a = put(table)
    const b = put(table)
    assert.notStrictEqual(a.id, b.id)
    assert.strictEqual(table.get(a.id), a)
    assert.strictEqual(table.get(b.id), b)
    assert.strictEqual(table.get(b.id + 64), undefined)
    table.delete(a)
    assert.strictEqual(table.get(a.id), undefined)
    assert.strictEqual(table.get(b.id), b)
    assert.strictEqual(table.size, 1)
    // Deleting what is not there (twice, or an entry of the same index) changes nothing.
    table.delete(a)
    table.delete({ id: b.id + 64 })
    assert.strictEqual(table.size, 1)
    assert.strictEqual(table.get(b.id), b)
  })

  it("skips the ids of an index that is taken, and stays small while one request waits long", () => {
    const table = new ById<{ readonly id: number }>()
    const old = put(table)
    const ids = new Set<number>([old.id])
    // Checked in plain code, asserted once: an assertion call per id made this loop of 100,000 take
    // 11 s on a loaded machine (past its timeout), for nothing ById does.
    let reused = 0
    let lost = 0
    for (let i = 0; i < 100_000; i++) {
      const e = put(table)
      if (ids.has(e.id)) reused++
      ids.add(e.id)
      if (table.get(e.id) !== e) lost++
      table.delete(e)
    }
    assert.strictEqual(reused, 0, "ids handed out twice")
    assert.strictEqual(lost, 0, "entries not found by their id")
    assert.strictEqual(table.get(old.id), old)
    assert.strictEqual(table.size, 1)
    assert.isAtMost((table as unknown as { slots: Array<unknown> }).slots.length, 64)
  })

  it("grows with what it holds, and lists it in id order", () => {
    const table = new ById<{ readonly id: number }>()
    const all = Array.from({ length: 1000 }, () => put(table))
    for (const e of all) assert.strictEqual(table.get(e.id), e)
    assert.deepStrictEqual(table.values(), all)
    assert.isTrue(table.some((e) => e.id === all[500]!.id))
    table.clear()
    assert.strictEqual(table.size, 0)
    assert.deepStrictEqual(table.values(), [])
    assert.isFalse(table.some(() => true))
  })
})
