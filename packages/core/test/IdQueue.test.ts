import { assert, describe, it } from "@effect/vitest"
import { IdQueue } from "../src/internal/idQueue.js"

const contents = (queue: IdQueue): Array<number> => Array.from({ length: queue.length }, (_, i) => queue.at(i))

describe("IdQueue (a connection's send queue in posting order)", () => {
  it("takes from the front and the back in order", () => {
    const queue = new IdQueue()
    assert.strictEqual(queue.first(), -1)
    assert.strictEqual(queue.last(), -1)
    for (const id of [1, 2, 3, 4]) queue.push(id)
    assert.deepStrictEqual(contents(queue), [1, 2, 3, 4])
    assert.strictEqual(queue.first(), 1)
    assert.strictEqual(queue.last(), 4)
    queue.dropFirst(1)
    queue.pop()
    assert.deepStrictEqual(contents(queue), [2, 3])
    assert.strictEqual(queue.indexOf(3), 1)
    assert.strictEqual(queue.indexOf(4), -1)
    // The ids before one are handed out before they leave the queue.
    const earlier = queue.firstOnes(1)
    queue.dropFirst(2)
    assert.deepStrictEqual(earlier, [2])
    assert.strictEqual(queue.length, 0)
    assert.strictEqual(queue.first(), -1)
    queue.pop()
    assert.strictEqual(queue.length, 0)
  })

  it("keeps its order across compactions and growth while it is never empty", () => {
    const queue = new IdQueue()
    const model: Array<number> = []
    let next = 1
    // A sliding window whose width changes: each step pushes a few and takes a few from the front.
    for (let step = 0; step < 5000; step++) {
      const width = 1 + (step % 40)
      while (model.length < width) {
        queue.push(next)
        model.push(next++)
      }
      const take = 1 + (step % 3)
      queue.dropFirst(Math.min(take, model.length - 1))
      model.splice(0, Math.min(take, model.length - 1))
      if (step % 97 === 0) {
        queue.pop()
        model.pop()
      }
    }
    assert.deepStrictEqual(contents(queue), model)
    assert.strictEqual(queue.first(), model[0])
    assert.strictEqual(queue.last(), model.at(-1))
    queue.clear()
    assert.strictEqual(queue.length, 0)
    queue.push(7)
    assert.deepStrictEqual(contents(queue), [7])
  })
})
