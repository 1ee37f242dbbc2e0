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
    for (let i = 0; i < 100_000; i++) {
      const e = put(table)
      assert.isFalse(ids.has(e.id))
      ids.add(e.id)
      assert.strictEqual(table.get(e.id), e)
      table.delete(e)
    }
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
