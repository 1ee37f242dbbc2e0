// The driver's side of the addon's packed poll (cmPollPacked): completions read as numbers, six a
// completion, made objects in JavaScript; a full array is read again; a failure after some were
// read returns those (they are gone from the CQ), a failure before any is the poll's failure.
// A scripted binding stands for the addon: no device needed.
import type { Model } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { cmEndpointCalls } from "../src/internal/cmEndpoint.js"
import type { Binding } from "../src/RpmaBinding.js"

const WITH_IMM = 2

/** A binding whose cmPollPacked answers from `script`: a count of completions numbered from `next`, or a throw. */
const scripted = (script: Array<number | Error>) => {
  let next = 0
  const calls: Array<number> = []
  const binding = {
    cmPollPacked: (_ep: unknown, into: Float64Array) => {
      calls.push(into.length / 6)
      const step = script.shift() ?? 0
      if (step instanceof Error) throw step
      for (let i = 0; i < step; i++, next++) {
        const odd = next % 2 === 1
        into.set([next, 0, next * 10, 128, odd ? WITH_IMM : 0, odd ? next + 0.5 : 0], i * 6)
      }
      return step
    }
  }
  return { binding: binding as unknown as Binding, calls }
}

const ep = {} as Model.CmEpHandle
const failure = Object.assign(new Error("ibv_poll_cq failed"), { errno: 5, operation: "ibv_poll_cq", detail: "" })

describe("completions read packed from the addon", () => {
  it.effect("a full array is read again until one is not full; every completion in order, immediate data where flagged", () =>
    Effect.gen(function*() {
      const { binding, calls } = scripted([64, 64, 3])
      const ready = yield* cmEndpointCalls(binding).cmPollCompletions(ep)
      assert.strictEqual(calls.length, 3)
      assert.strictEqual(ready.length, 131)
      ready.forEach((c, i) => {
        assert.strictEqual(c.id, i)
        assert.strictEqual(c.byteLength, i * 10)
        assert.strictEqual(c.opcode, 128)
        assert.strictEqual(c.status, 0)
        if (i % 2 === 1) {
          assert.strictEqual(c.flags, WITH_IMM)
          assert.strictEqual(c.imm, i + 0.5)
        } else {
          assert.strictEqual(c.flags, 0)
          assert.isFalse("imm" in c)
        }
      })
    }))

  it.effect("nothing ready: one call, an empty list", () =>
    Effect.gen(function*() {
      const { binding, calls } = scripted([0])
      assert.deepStrictEqual(yield* cmEndpointCalls(binding).cmPollCompletions(ep), [])
      assert.strictEqual(calls.length, 1)
    }))

  it.effect("a failure after a full array returns what was read; a failure first fails the poll", () =>
    Effect.gen(function*() {
      const late = scripted([64, failure])
      assert.strictEqual((yield* cmEndpointCalls(late.binding).cmPollCompletions(ep)).length, 64)
      const early = scripted([failure])
      const error = yield* Effect.flip(cmEndpointCalls(early.binding).cmPollCompletions(ep))
      assert.strictEqual(error._tag, "RdmaCmError")
      assert.strictEqual(error.operation, "ibv_poll_cq")
    }))
})
