// How the native driver hands a librdmacm list to the addon (cmEndpoint.ts's postList), over a
// recording binding: a list's packable head in one cmPostWindow call, the rest one by one from the
// first request it cannot pack, one request alone through cmPostOne, and a window's refusal mapped
// with the count it carries.
import type { Model } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import { cmEndpointCalls } from "../src/internal/cmEndpoint.js"
import type { Binding } from "../src/RpmaBinding.js"

type Bad = never
interface Window {
  readonly regions: ReadonlyArray<unknown>
  readonly rows: ReadonlyArray<ReadonlyArray<number>>
  readonly remotes: ReadonlyArray<bigint>
}

/** A binding that records the posting calls; `refuseAt` makes a window refuse its request at that index. */
const recording = (refuseAt?: number) => {
  const windows: Array<Window> = []
  const calls: Array<string> = []
  let held: ReadonlyArray<unknown> = []
  const binding = {
    cmPostWindow: (
      _ep: unknown,
      regions: ReadonlyArray<unknown>,
      fields: Float64Array,
      count: number,
      remotes?: BigUint64Array
    ) => {
      calls.push(`window ${count}`)
      held = regions
      windows.push({
        regions: [...regions],
        rows: Array.from({ length: count }, (_, i) => Array.from(fields.subarray(i * 8, i * 8 + 8))),
        remotes: Array.from(remotes ?? [])
      })
      if (refuseAt !== undefined && refuseAt < count) {
        throw Object.assign(new Error("refused"), {
          errno: 22,
          operation: "rdma_post_write",
          detail: "offset NaN is not an integer",
          posted: refuseAt
        })
      }
      return count
    },
    cmPostOne: (_ep: unknown, op: unknown) => void calls.push(`one ${String(op)}`),
    cmPost: () => void calls.push("general"),
    cmPollPacked: () => {
      calls.push("poll")
      return 0
    }
  }
  return {
    driver: cmEndpointCalls(binding as unknown as Binding),
    windows,
    calls,
    heldAfter: () => held.length
  }
}

const mr = { region: 1 }
const other = { region: 2 }
const send = (id: number, region: object = mr): Model.CmWorkRequest => ({
  op: "send",
  id,
  segments: [{ mr: region as Bad, offset: id * 8, length: 8 }]
})
const write = (id: number): Model.CmWorkRequest => ({
  op: "write",
  id,
  remoteAddress: 2n ** 63n + BigInt(id),
  rkey: 77,
  completion: "onError",
  imm: 5,
  segments: [{ mr: mr as Bad, offset: 0, length: 64 }]
})
const recv = (id: number): Model.CmWorkRequest => ({
  op: "recv",
  id,
  segments: [{ mr: other as Bad, offset: 0, length: 64 }]
})

describe("cmPostMany over cmPostWindow", () => {
  it("a list's requests in one call, as numbers, each region once; the array holds no handle after", () => {
    const { calls, driver, heldAfter, windows } = recording()
    const outcome = driver.cmPostMany({} as Bad, [recv(1), send(2), write(3), send(4, other)])
    assert.strictEqual(outcome.posted, 4)
    assert.isUndefined(outcome.error)
    assert.deepStrictEqual(calls, ["window 4", "poll"])
    assert.deepStrictEqual(windows[0]!.regions, [other, mr])
    assert.deepStrictEqual(windows[0]!.rows, [
      [1, 1, 0, 0, 64, 1, 0, 0],
      [0, 2, 1, 16, 8, 1, 0, 0],
      [3, 3, 1, 0, 64, 4, 5, 77],
      [0, 4, 0, 32, 8, 1, 0, 0]
    ])
    assert.strictEqual(windows[0]!.remotes[2], 2n ** 63n + 3n)
    assert.strictEqual(heldAfter(), 0)
  })

  it("one request goes through cmPostOne, as before", () => {
    const { calls, driver } = recording()
    assert.strictEqual(driver.cmPostMany({} as Bad, [send(1)]).posted, 1)
    assert.deepStrictEqual(calls, ["one send", "poll"])
  })

  it("from the first request it cannot pack, the rest go one by one", () => {
    const { calls, driver } = recording()
    const plain: Model.CmWorkRequest = {
      op: "send",
      id: 3,
      inline: true,
      segments: [{ mr: new Uint8Array(8) as Bad, offset: 0, length: 8 }]
    }
    const twoSegments: Model.CmWorkRequest = {
      op: "send",
      id: 5,
      segments: [{ mr: mr as Bad, offset: 0, length: 8 }, { mr: mr as Bad, offset: 8, length: 8 }]
    }
    const outcome = driver.cmPostMany({} as Bad, [send(1), send(2), plain, send(4), twoSegments])
    assert.strictEqual(outcome.posted, 5)
    assert.deepStrictEqual(calls, ["window 2", "one send", "one send", "general", "poll"])
    const odd = recording()
    const stringOffset = {
      op: "send",
      id: 1,
      segments: [{ mr, offset: "0", length: 8 }]
    } as unknown as Model.CmWorkRequest
    const bigAddress = { ...write(2), remoteAddress: 2n ** 64n }
    odd.driver.cmPostMany({} as Bad, [stringOffset, send(2)])
    odd.driver.cmPostMany({} as Bad, [send(1), bigAddress])
    assert.deepStrictEqual(odd.calls, ["one send", "one send", "poll", "window 1", "one write", "poll"])
  })

  it("a throwing getter is not packed: the general path reads it and refuses it", () => {
    const { calls, driver } = recording()
    const hostile = {
      op: "send",
      id: 2,
      get segments() {
        throw new Error("hostile")
      }
    } as unknown as Model.CmWorkRequest
    driver.cmPostMany({} as Bad, [send(1), hostile, send(3)])
    assert.deepStrictEqual(calls.slice(0, 2), ["window 1", "general"])
  })

  it("a window's refusal: those before it count as posted, the error names the refused request's operation", () => {
    const { calls, driver } = recording(1)
    const outcome = driver.cmPostMany({} as Bad, [write(1), write(2), write(3)])
    assert.strictEqual(outcome.posted, 1)
    assert.strictEqual(outcome.error?._tag, "RdmaCmError")
    assert.strictEqual(outcome.error?.errnoName, "EINVAL")
    assert.strictEqual(outcome.error?.operation, "rdma_post_write")
    assert.deepStrictEqual(calls, ["window 3", "poll"])
    const none = recording(0)
    const refused = none.driver.cmPostMany({} as Bad, [send(1), send(2)])
    assert.strictEqual(refused.posted, 0)
    assert.deepStrictEqual(none.calls, ["window 2"])
  })

  it("a post that a getter starts while a window is packed goes one by one, and the window keeps its own requests", () => {
    const { calls, driver, windows } = recording()
    let nested: { readonly posted: number } | undefined
    const reentrant = {
      op: "send",
      get id() {
        nested ??= driver.cmPostMany({} as Bad, [send(21, other), send(22, other)])
        return 11
      },
      segments: [{ mr: mr as Bad, offset: 88, length: 8 }]
    } as unknown as Model.CmWorkRequest
    const outcome = driver.cmPostMany({} as Bad, [send(10), reentrant, send(12)])
    assert.strictEqual(outcome.posted, 3)
    assert.strictEqual(nested?.posted, 2)
    // The nested list went request by request; the window holds the outer list's three, in order.
    assert.deepStrictEqual(calls.filter((call) => call !== "poll"), ["one send", "one send", "window 3"])
    assert.deepStrictEqual(windows[0]!.rows.map((row) => row[1]), [10, 11, 12])
    assert.deepStrictEqual(windows[0]!.regions, [mr])
  })

  it("a list longer than a window goes in several", () => {
    const { calls, driver } = recording()
    const outcome = driver.cmPostMany({} as Bad, Array.from({ length: 130 }, (_, i) => send(i)))
    assert.strictEqual(outcome.posted, 130)
    assert.deepStrictEqual(calls, ["window 64", "window 64", "window 2", "poll"])
  })
})
