// The driver's side of the addon's packed polls (cmPollPacked: six numbers a completion; librpma's
// pollPacked and spinPacked: seven, qpNum last): completions made objects in JavaScript, of the
// shapes the addon made; a full array is read again; a failure after some were read returns those
// (they are gone from the CQ), a failure before any is the poll's failure. A scripted binding
// stands for the addon: no device needed.
import type { Model } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { cmEndpointCalls } from "../src/internal/cmEndpoint.js"
import { queueCalls } from "../src/internal/queues.js"
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

/** librpma's layout: seven numbers, imm where flagged, qpNum on every third (-1 elsewhere). */
const scriptedRpma = (script: Array<number | Error>) => {
  let next = 0
  const calls: Array<string> = []
  const fill = (name: string) => (_queue: unknown, into: Float64Array, ..._rest: Array<unknown>) => {
    calls.push(`${name}:${into.length / 7}`)
    const step = script.shift() ?? 0
    if (step instanceof Error) throw step
    for (let i = 0; i < step; i++, next++) {
      const odd = next % 2 === 1
      into.set([
        next,
        next === 5 ? 12 : 0,
        next * 10,
        2,
        odd ? WITH_IMM : 0,
        odd ? next + 7 : 0,
        next % 3 === 0 ? 40 + next : -1
      ], i * 7)
    }
    return step
  }
  const binding = {
    pollPacked: fill("poll"),
    spinPacked: fill("spin"),
    pollCompletions: () => assert.fail("objects asked of an addon that packs"),
    spinCompletions: () => assert.fail("objects asked of an addon that packs")
  }
  return { binding: binding as unknown as Binding, calls }
}

const queue = {} as Model.ConnHandle
const rpmaFailure = Object.assign(new Error("rpma_cq_get_wc failed"), {
  code: -1,
  operation: "rpma_cq_get_wc",
  detail: ""
})

describe("librpma's completions read packed", () => {
  it.effect("every field as the addon's objects had it: imm only where flagged, qpNum only where named", () =>
    Effect.gen(function*() {
      const { binding, calls } = scriptedRpma([64, 6])
      const ready = yield* queueCalls(binding).pollCompletions(queue)
      assert.deepStrictEqual(calls, ["poll:64", "poll:64"])
      assert.strictEqual(ready.length, 70)
      ready.forEach((c, i) => {
        const expected: Record<string, number> = {
          id: i,
          status: i === 5 ? 12 : 0,
          byteLength: i * 10,
          opcode: 2,
          flags: i % 2 === 1 ? WITH_IMM : 0
        }
        if (i % 2 === 1) expected.imm = i + 7
        if (i % 3 === 0) expected.qpNum = 40 + i
        assert.deepStrictEqual({ ...c } as Record<string, unknown>, expected)
      })
    }))

  it.effect("a spin reads packed, then polls while the array comes back full; nothing ready is an empty list", () =>
    Effect.gen(function*() {
      const spun = scriptedRpma([64, 1])
      const spin = queueCalls(spun.binding).spinCompletions!(queue, 1000)
      assert.isTrue(Exit.isSuccess(spin) && spin.value.length === 65)
      assert.deepStrictEqual(spun.calls, ["spin:64", "poll:64"])
      const idle = scriptedRpma([0])
      assert.deepStrictEqual(yield* queueCalls(idle.binding).pollCompletions(queue), [])
    }))

  it.effect("a failure after a full array returns what was read; a failure first fails the poll with the addon's words", () =>
    Effect.gen(function*() {
      const late = scriptedRpma([64, rpmaFailure])
      assert.strictEqual((yield* queueCalls(late.binding).pollCompletions(queue)).length, 64)
      const early = scriptedRpma([rpmaFailure])
      const error = yield* Effect.flip(queueCalls(early.binding).pollCompletions(queue))
      assert.strictEqual(error.operation, "rpma_cq_get_wc")
    }))

  it.effect("a binding without the packed calls is polled for objects", () =>
    Effect.gen(function*() {
      const objects = [{ id: 1, status: 0, byteLength: 0, opcode: 0, flags: 0 }]
      const binding = { pollCompletions: () => objects, spinCompletions: () => objects } as unknown as Binding
      assert.strictEqual(yield* queueCalls(binding).pollCompletions(queue), objects)
      const spin = queueCalls(binding).spinCompletions!(queue, 10)
      assert.isTrue(Exit.isSuccess(spin) && spin.value === objects)
    }))
})

describe("librpma's completion wait, answered with a count", () => {
  it.effect("the callback's count is read from the array; a full one is polled again; a failure fails the wait", () =>
    Effect.gen(function*() {
      const { binding, calls } = scriptedRpma([1])
      let answer: ((error: unknown, count: number) => void) | undefined
      let array: Float64Array | undefined
      const withWait = {
        ...binding,
        waitPacked: (_queue: unknown, into: Float64Array, callback: (error: unknown, count: number) => void) => {
          array = into
          answer = callback
          return 1
        },
        waitCompletions: () => assert.fail("objects asked of an addon that packs"),
        cancelWait: () => true
      } as unknown as Binding
      // What the addon does before it calls back: `count` completions (ids from `first`) in the wait's array.
      const drain = (first: number, count: number) => {
        for (let i = 0; i < count; i++) array!.set([first + i, 0, 0, 1, 0, 0, -1], i * 7)
        return count
      }
      const driver = queueCalls(withWait)
      const ready: Array<ReadonlyArray<Model.Completion>> = []
      const failed: Array<string> = []
      const onReady = (exit: Exit.Exit<ReadonlyArray<Model.Completion>, unknown>) => {
        if (Exit.isSuccess(exit)) ready.push(exit.value)
        else failed.push(String((Cause.squash(exit.cause) as { operation?: string }).operation))
      }
      driver.armCompletions(queue, onReady)
      assert.strictEqual(array?.length, 64 * 7)
      answer!(null, drain(100, 2))
      assert.deepStrictEqual(ready[0]!.map((c) => ({ ...c })), [
        { id: 100, status: 0, byteLength: 0, opcode: 1, flags: 0 },
        { id: 101, status: 0, byteLength: 0, opcode: 1, flags: 0 }
      ])
      assert.deepStrictEqual(calls, [])

      // A full array: the rest is polled (the scripted poll gives one more).
      driver.armCompletions(queue, onReady)
      answer!(null, drain(200, 64))
      assert.strictEqual(ready[1]!.length, 65)
      assert.deepStrictEqual(calls, ["poll:64"])

      // A failure: the wait fails with the addon's error (its operation kept).
      driver.armCompletions(queue, onReady)
      answer!(rpmaFailure, 0)
      assert.deepStrictEqual(failed, ["rpma_cq_get_wc"])
    }))
})

describe("librdmacm's completion wait, answered with a count", () => {
  it.effect("the callback's count is read from the array; a full one is polled again; a failure fails the wait", () =>
    Effect.gen(function*() {
      const { binding, calls } = scripted([1])
      let answer: ((error: unknown, count: number) => void) | undefined
      let array: Float64Array | undefined
      const withWait = {
        ...binding,
        cmWaitPacked: (_ep: unknown, into: Float64Array, callback: (error: unknown, count: number) => void) => {
          array = into
          answer = callback
          return 1
        },
        cmWaitCompletions: () => assert.fail("objects asked of an addon that packs"),
        cmCancel: () => true
      } as unknown as Binding
      // What the addon does before it calls back: `count` completions (ids from `first`) in the wait's array.
      const drain = (first: number, count: number) => {
        for (let i = 0; i < count; i++) array!.set([first + i, 0, 16, 128, WITH_IMM, 7], i * 6)
        return count
      }
      const driver = cmEndpointCalls(withWait)
      const ready: Array<ReadonlyArray<Model.Completion>> = []
      const failed: Array<string> = []
      const onReady = (exit: Exit.Exit<ReadonlyArray<Model.Completion>, unknown>) => {
        if (Exit.isSuccess(exit)) ready.push(exit.value)
        else failed.push(String((Cause.squash(exit.cause) as { operation?: string }).operation))
      }
      driver.cmArmCompletions(ep, onReady)
      assert.strictEqual(array?.length, 64 * 6)
      answer!(null, drain(100, 2))
      assert.deepStrictEqual(ready[0]!.map((c) => ({ ...c })), [
        { id: 100, status: 0, byteLength: 16, opcode: 128, flags: WITH_IMM, imm: 7 },
        { id: 101, status: 0, byteLength: 16, opcode: 128, flags: WITH_IMM, imm: 7 }
      ])
      assert.deepStrictEqual(calls, [])

      // A full array: the rest is polled (the scripted poll gives one more).
      driver.cmArmCompletions(ep, onReady)
      answer!(null, drain(200, 64))
      assert.strictEqual(ready[1]!.length, 65)
      assert.deepStrictEqual(calls, [64])

      // A failure: the wait fails with the addon's error (its operation kept).
      driver.cmArmCompletions(ep, onReady)
      answer!(failure, 0)
      assert.deepStrictEqual(failed, ["ibv_poll_cq"])
    }))

  it.effect("a binding without the packed wait is waited on for objects, as before", () =>
    Effect.gen(function*() {
      const objects = [{ id: 1, status: 0, byteLength: 0, opcode: 0, flags: 0 }]
      const binding = {
        cmWaitCompletions: (_ep: unknown, callback: (error: unknown, value: unknown) => void) => {
          callback(null, objects)
          return 1
        },
        cmCancel: () => true
      } as unknown as Binding
      const ready: Array<ReadonlyArray<Model.Completion>> = []
      cmEndpointCalls(binding).cmArmCompletions(ep, (exit) => {
        if (Exit.isSuccess(exit)) ready.push(exit.value)
      })
      assert.strictEqual(ready[0], objects)
    }))
})
