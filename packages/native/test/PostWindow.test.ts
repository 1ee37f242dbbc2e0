// A window of work requests in one addon call (postWindow) without a device: every argument
// check the addon makes before a request reaches a connection, each a tagged refusal with
// `posted`, never a crash; the driver's refusals identical with and without windows; and how the
// driver splits a list between postWindow and post (checked against a recording binding).
// The checks of each request's numbers and regions need a connection: test-device/Window.test.ts.
import { Descriptor } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

type Bad = never
const real = Effect.runSync(RpmaBinding.load())
const descriptor = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 0x08 })

const driverWith = (binding: RpmaBinding.Binding): Driver =>
  Effect.runSync(
    Effect.provide(
      RdmaDriver,
      NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding)))
    )
  )

const refusal = (f: () => unknown) => {
  try {
    f()
  } catch (e) {
    const error = e as { code?: unknown; detail?: unknown; posted?: unknown; cause?: unknown }
    return { code: error.code, detail: String(error.detail), posted: error.posted, cause: error.cause }
  }
  return assert.fail("expected a refusal")
}

/** One write of 8 bytes, as nine numbers: remote region 0, local region 1. */
const oneWrite = () => new Float64Array([0, 1, 0, 0, 1, 0, 8, 0, 0])

describe("postWindow's own checks", () => {
  const remote = real.mrRemoteFromDescriptor(descriptor)
  const cases: Array<[string, () => unknown, RegExp]> = [
    ["count a string", () => real.postWindow({}, [], oneWrite(), "1"), /^count must be a number$/],
    ["count NaN", () => real.postWindow({}, [], oneWrite(), Number.NaN), /^count nan is not an integer from 0 to 1$/],
    ["count -1", () => real.postWindow({}, [], oneWrite(), -1), /^count -1 is not an integer/],
    ["count 1.5", () => real.postWindow({}, [], oneWrite(), 1.5), /^count 1.5 is not an integer/],
    ["count past the array", () => real.postWindow({}, [], oneWrite(), 2), /^count 2 is not an integer from 0 to 1$/],
    ["count 2^53", () => real.postWindow({}, [], new Float64Array(18), 2 ** 53), /from 0 to 2$/],
    ["regions a string", () => real.postWindow({}, "r", oneWrite(), 1), /^regions must be an array/],
    ["regions null", () => real.postWindow({}, null, oneWrite(), 1), /^regions must be an array/],
    [
      "regions too many",
      () => real.postWindow({}, new Array(5000).fill({}), oneWrite(), 1),
      /more than a window names/
    ],
    [
      "fields a plain array",
      () => real.postWindow({}, [], [0, 1, 0, 0, 1, 0, 8, 0, 0], 1),
      /^fields must be a Float64Array$/
    ],
    ["fields a Float32Array", () => real.postWindow({}, [], new Float32Array(9), 1), /^fields must be a Float64Array$/],
    ["fields a DataView", () => real.postWindow({}, [], new DataView(new ArrayBuffer(72)), 1), /Float64Array/],
    ["fields undefined", () => real.postWindow({}, [], undefined, 1), /Float64Array/],
    [
      "op 9",
      () => real.postWindow({}, [], new Float64Array([9, 1, 0, 0, 0, 0, 0, 0, 0]), 1),
      /^op 9 is not an integer from 0 to 3$/
    ],
    ["op NaN", () => real.postWindow({}, [], new Float64Array(9).fill(Number.NaN), 1), /^op nan is not an integer/],
    ["conn null", () => real.postWindow(null, [remote], oneWrite(), 1), /^conn is NULL$/],
    ["conn a plain object", () => real.postWindow({}, [remote], oneWrite(), 1), /^expected a conn handle$/],
    ["conn a region", () => real.postWindow(remote, [remote], oneWrite(), 1), /^expected a conn, got a mr_remote$/],
    ["conn a region, count 0", () => real.postWindow(remote, [], oneWrite(), 0), /^expected a conn, got a mr_remote$/]
  ]
  for (const [name, call, detail] of cases) {
    it(`${name}: RPMA_E_INVAL, nothing posted`, () => {
      const got = refusal(call)
      assert.strictEqual(got.code, -100004)
      assert.match(got.detail, detail)
      assert.strictEqual(got.posted, 0)
    })
  }

  it("regions whose reading throws: refused, the thrown error as cause", () => {
    const regions = [remote]
    Object.defineProperty(regions, 0, {
      get() {
        throw new Error("trap")
      }
    })
    const got = refusal(() => real.postWindow({}, regions, oneWrite(), 1))
    assert.strictEqual(got.code, -100004)
    assert.match(got.detail, /reading the regions threw/)
    assert.strictEqual((got.cause as Error).message, "trap")
  })
})

const write = (id: number, dst: unknown, src: unknown, extra: Record<string, unknown> = {}) =>
  ({ op: "write", id, dst, dstOffset: 8 * id, src, srcOffset: 16 * id, length: 8, ...extra }) as Model.WorkRequest

describe("the addon's refusals and the prototype chain", () => {
  // An error's properties are defined on it: a setter on Object.prototype never runs while the
  // addon makes a refusal (it would run JavaScript in the middle of a call that has checked its
  // handles already), and a setter that throws there cannot leave an exception pending under the
  // refusal's throw, which node-addon-api answers by aborting the process.
  it("a setter on Object.prototype for an error's properties never runs, whatever it does", () => {
    const keys = ["operation", "code", "errno", "detail", "cause", "posted"] as const
    let ran = 0
    const before = keys.map((key) => Object.getOwnPropertyDescriptor(Object.prototype, key))
    for (const key of keys) {
      Object.defineProperty(Object.prototype, key, {
        configurable: true,
        set() {
          ran++
          throw new Error(`the setter of ${key} ran`)
        }
      })
    }
    const refusals: Array<{ readonly detail?: unknown; readonly posted?: unknown; readonly own: boolean }> = []
    try {
      for (
        const call of [
          () => real.postWindow({}, [], new Float64Array(9), -1),
          () => real.cmPostWindow({}, [], new Float64Array(8), 1),
          () => real.mrRemoteFromDescriptor(new Uint8Array(3))
        ]
      ) {
        try {
          call()
        } catch (e) {
          const error = e as { readonly detail?: unknown; readonly posted?: unknown }
          refusals.push({ detail: error.detail, posted: error.posted, own: Object.hasOwn(error, "detail") })
        }
      }
    } finally {
      keys.forEach((key, i) => {
        const was = before[i]
        if (was === undefined) delete (Object.prototype as Record<string, unknown>)[key]
        else Object.defineProperty(Object.prototype, key, was)
      })
    }
    assert.strictEqual(ran, 0)
    assert.strictEqual(refusals.length, 3)
    for (const refusal of refusals) {
      assert.isTrue(refusal.own)
      assert.isString(refusal.detail)
    }
    assert.strictEqual(refusals[0]!.posted, 0)
  })
})

describe("the driver's refusals, with windows and without", () => {
  const remote = real.mrRemoteFromDescriptor(descriptor)
  const { postWindow: _, ...perRequest } = real
  const windowed = driverWith(real)
  const single = driverWith(perRequest as RpmaBinding.Binding)
  const throwingId = {
    op: "write",
    get id() {
      throw new Error("id")
    }
  }
  const lists: Array<[string, unknown, unknown]> = [
    ["writes on a plain object", {}, [write(1, remote, remote), write(2, remote, remote), write(3, remote, remote)]],
    ["writes on null", null, [write(1, remote, remote), write(2, remote, remote)]],
    ["sends on a region", remote, [{ op: "send", id: 1, src: remote, offset: 0, length: 8 }, write(2, remote, remote)]],
    ["a flush between writes", {}, [write(1, remote, remote), {
      op: "flush",
      id: 2,
      dst: remote,
      dstOffset: 0,
      length: 8,
      type: "visibility"
    }]],
    ["a getter that throws", {}, [throwingId, write(2, remote, remote)]],
    ["an odd op", {}, [{ op: "cas", id: 1 }, write(2, remote, remote)]],
    ["NaN numbers", {}, [write(1, remote, remote, { dstOffset: Number.NaN }), write(2, remote, remote)]],
    [
      "a Proxy list whose length throws",
      {},
      new Proxy([write(1, remote, remote), write(2, remote, remote)], {
        get(target, key) {
          if (key === "length") throw new Error("length")
          return Reflect.get(target, key)
        }
      })
    ],
    ["not a list", {}, "requests"]
  ]
  for (const [name, queue, requests] of lists) {
    it(`${name}: the same outcome`, () => {
      const a = windowed.postMany(queue as Bad, requests as Bad)
      const b = single.postMany(queue as Bad, requests as Bad)
      assert.strictEqual(a.posted, 0)
      assert.deepStrictEqual(
        { posted: a.posted, tag: a.error?._tag, operation: a.error?.operation, detail: a.error?.detail },
        { posted: b.posted, tag: b.error?._tag, operation: b.error?.operation, detail: b.error?.detail }
      )
      assert.isDefined(a.error)
    })
  }
})

describe("how the driver splits a list", () => {
  const record = (answer: (count: number, fields: Float64Array) => number = (n) => n) => {
    const log: Array<string> = []
    const windows: Array<{ regions: Array<unknown>; fields: Array<number> }> = []
    const binding = {
      installLogCapture: () => {},
      post: (_queue: unknown, request: { readonly id: number }) => {
        if (request.id === 99) {
          throw Object.assign(new Error("x"), { code: -100004, operation: "rpma_write", detail: "99" })
        }
        log.push(`post ${request.id}`)
      },
      postWindow: (_queue: unknown, regions: Array<unknown>, fields: Float64Array, count: number) => {
        log.push(`window ${count}`)
        windows.push({ regions: [...regions], fields: [...fields.subarray(0, count * 9)] })
        return answer(count, fields)
      },
      pollCompletions: () => {
        log.push("poll")
        return []
      }
    } as unknown as RpmaBinding.Binding
    return { driver: driverWith(binding), log, windows }
  }
  const dst = { kind: "remote" } as unknown as Model.RemoteMrHandle
  const src = { kind: "local" } as unknown as Model.MrHandle

  it("plain writes, reads, sends and receives: one call, regions once each, the numbers in order", () => {
    const { driver, log, windows } = record()
    const outcome = driver.postMany(dst as Bad, [
      write(1, dst, src, { completion: "onError" }),
      { op: "read", id: 2, dst: src, dstOffset: 3, src: dst, srcOffset: 4, length: 5 },
      { op: "send", id: 3, src, offset: 6, length: 7, imm: 8 },
      { op: "recv", id: 4, dst: src, offset: 9, length: 10 },
      write(5, dst, src, { imm: 11, completion: "always" })
    ])
    assert.strictEqual(outcome.posted, 5)
    assert.deepStrictEqual(log, ["window 5", "poll"])
    assert.deepStrictEqual(windows[0]!.regions, [dst, src])
    assert.deepStrictEqual(windows[0]!.fields, [
      ...[0, 1, 0, 8, 1, 16, 8, 1, 0],
      ...[1, 2, 1, 3, 0, 4, 5, 0, 0],
      ...[2, 3, 0, 0, 1, 6, 7, 2, 8],
      ...[3, 4, 1, 9, 0, 0, 10, 0, 0],
      ...[0, 5, 0, 40, 1, 80, 8, 2, 11]
    ])
  })

  it("regions past the first two, and a window naming one: each once, in the order first named", () => {
    const { driver, windows } = record()
    const third = { kind: "third" }
    const fourth = { kind: "fourth" }
    const outcome = driver.postMany(dst as Bad, [
      write(1, dst, src),
      write(2, third, src),
      write(3, dst, fourth),
      write(4, third, fourth),
      // A region named by a request that is not packed (its src is no region) is in the list too.
      write(5, { kind: "fifth" }, null)
    ])
    assert.strictEqual(outcome.posted, 5)
    assert.strictEqual(windows.length, 1)
    assert.deepStrictEqual(windows[0]!.regions, [dst, src, third, fourth, { kind: "fifth" }])
    assert.deepStrictEqual(windows[0]!.fields.filter((_, i) => i % 9 === 2 || i % 9 === 4), [0, 1, 2, 1, 0, 3, 2, 3])
    driver.postMany(dst as Bad, [
      { op: "send", id: 6, src, offset: 0, length: 1 },
      { op: "send", id: 7, src, offset: 1, length: 1 }
    ])
    assert.deepStrictEqual(windows[1]!.regions, [src])
  })

  it("one request goes in a window too; a request that is not plain and those after it go through post", () => {
    const { driver, log } = record()
    driver.postMany(dst as Bad, [write(1, dst, src)])
    assert.deepStrictEqual(log, ["window 1", "poll"])
    log.length = 0
    const flush: Model.WorkRequest = { op: "flush", id: 3, dst, dstOffset: 0, length: 8, type: "visibility" }
    const outcome = driver.postMany(dst as Bad, [write(1, dst, src), write(2, dst, src), flush, write(4, dst, src)])
    assert.strictEqual(outcome.posted, 4)
    assert.deepStrictEqual(log, ["window 2", "post 3", "post 4", "poll"])
    log.length = 0
    // A null where a region goes is post's to refuse ("is NULL"), in the window's first place too.
    driver.postMany(dst as Bad, [write(1, null, src), write(2, dst, src)])
    assert.deepStrictEqual(log, ["post 1", "post 2", "poll"])
  })

  it("a post that runs while the addon holds a window (a refusal's setter, say) goes one by one", () => {
    let seen: Array<number> = []
    const inner: { driver?: Driver } = {}
    const recorded = record((count, fields) => {
      inner.driver!.postMany(dst as Bad, [write(21, dst, src), write(22, dst, src)])
      seen = Array.from({ length: count }, (_, i) => fields[i * 9 + 1]!)
      return count
    })
    inner.driver = recorded.driver
    const outcome = recorded.driver.postMany(dst as Bad, [write(1, dst, src), write(2, dst, src)])
    assert.strictEqual(outcome.posted, 2)
    // The window's numbers are still its own after the nested post.
    assert.deepStrictEqual(seen, [1, 2])
    assert.deepStrictEqual(recorded.log.filter((line) => line !== "poll"), ["window 2", "post 21", "post 22"])
  })

  it("a long list in windows of 32", () => {
    const { driver, log } = record()
    const outcome = driver.postMany(dst as Bad, Array.from({ length: 40 }, (_, i) => write(i, dst, src)))
    assert.strictEqual(outcome.posted, 40)
    assert.deepStrictEqual(log, ["window 32", "window 8", "poll"])
  })

  it("a refusal in a window: those before it counted, the refused request named, one poll", () => {
    const { driver, log } = record((count) => {
      throw Object.assign(new Error("x"), {
        code: -100004,
        operation: "rpma_read",
        detail: "refused",
        posted: count - 2
      })
    })
    const outcome = driver.postMany(dst as Bad, [
      write(1, dst, src),
      write(2, dst, src),
      write(3, dst, src),
      write(4, dst, src)
    ])
    assert.strictEqual(outcome.posted, 2)
    assert.strictEqual(outcome.error?._tag, "RpmaInvalidError")
    assert.strictEqual(outcome.error?.detail, "refused")
    assert.deepStrictEqual(log, ["window 4", "poll"])
    const none = record(() => {
      throw Object.assign(new Error("x"), { code: -100004, operation: "rpma_write", detail: "first", posted: 0 })
    })
    const nothing = none.driver.postMany(dst as Bad, [write(1, dst, src), write(2, dst, src)])
    assert.strictEqual(nothing.posted, 0)
    assert.deepStrictEqual(none.log, ["window 2"])
  })

  it("not a connection (-1): every request through post, the first refusal stops them", () => {
    const { driver, log } = record(() => -1)
    const outcome = driver.postMany(dst as Bad, [write(1, dst, src), write(99, dst, src), write(3, dst, src)])
    assert.strictEqual(outcome.posted, 1)
    assert.strictEqual(outcome.error?.detail, "99")
    assert.deepStrictEqual(log, ["window 3", "post 1", "poll"])
  })

  it("a getter that posts on the same driver while a window is packed: both lists posted whole", () => {
    const { driver, log, windows } = record()
    const inner = [write(7, dst, src), write(8, dst, src)]
    const sneaky = {
      op: "write",
      id: 2,
      dst,
      get dstOffset() {
        driver.postMany(dst as Bad, inner)
        return 0
      },
      src,
      srcOffset: 0,
      length: 8
    } as unknown as Model.WorkRequest
    const outcome = driver.postMany(dst as Bad, [write(1, dst, src), sneaky, write(3, dst, src)])
    assert.strictEqual(outcome.posted, 3)
    assert.deepStrictEqual(log, ["post 7", "post 8", "poll", "window 3", "poll"])
    assert.deepStrictEqual(windows[0]!.fields.filter((_, i) => i % 9 === 1), [1, 2, 3])
  })
})
