// The connection calls without a device: every guard (a value that is not a handle, a handle of
// another kind, bad ports, configs and work requests) is RPMA_E_INVAL, never a crash or a hang;
// and the driver's waits are interruptible Effects whose canceller reaches the addon (checked
// against a fake binding, since without a device nothing can be waited on).
import { Descriptor } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"

type Bad = never
const config: Model.ConnConfig = { timeoutMs: 1000, sqSize: 4, rqSize: 4, cqSize: 8, directWriteToPmem: false }
const descriptor = Descriptor.encode({ address: 0x1000n, length: 64n, rkey: 7, usage: 0x11 })

/** One request through the posting call, as an Effect that fails with its refusal. */
const post = (driver: Driver, queue: unknown, request: unknown) =>
  Effect.suspend(() => {
    const outcome = driver.postMany(queue as Bad, [request as Bad])
    return outcome.error !== undefined ? Effect.fail(outcome.error) : Effect.void
  })

const calls = (driver: Driver, handle: unknown) => ({
  epListen: driver.epListen(handle as Bad, "127.0.0.1", 7000),
  epShutdown: driver.epShutdown(handle as Bad),
  epNextConnReq: driver.epNextConnReq(handle as Bad, config),
  connReqNew: driver.connReqNew(handle as Bad, "127.0.0.1", 7000, config),
  connReqPrivateData: driver.connReqPrivateData(handle as Bad),
  connReqConnect: driver.connReqConnect(handle as Bad, undefined),
  connReqDelete: driver.connReqDelete(handle as Bad),
  connNextEvent: driver.connNextEvent(handle as Bad),
  connPrivateData: driver.connPrivateData(handle as Bad),
  connDisconnect: driver.connDisconnect(handle as Bad),
  connDelete: driver.connDelete(handle as Bad),
  postMany: post(driver, handle, { op: "send", id: 1, src: handle as Bad, offset: 0, length: 1 }),
  pollCompletions: driver.pollCompletions(handle as Bad),
  connQpNum: driver.connQpNum(handle as Bad),
  srqDelete: driver.srqDelete(handle as Bad)
})

const expectInvalid = (name: string, effect: Effect.Effect<unknown, { readonly _tag: string }>) =>
  Effect.map(Effect.flip(effect), (error) => {
    assert.strictEqual(error._tag, "RpmaInvalidError", name)
    return error as unknown as { readonly detail?: string; readonly operation?: string }
  })

layer(NativeDriver.layer)("connection calls without a device", (it) => {
  it.effect("values that are not handles are RpmaInvalidError, never a hang", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      for (const value of [null, undefined, {}, 42, "conn", () => {}, new Proxy({}, {})]) {
        for (const [name, call] of Object.entries(calls(driver, value))) {
          const error = yield* expectInvalid(`${name}(${String(value)})`, call)
          if (value === null || value === undefined) assert.match(error.detail!, / is NULL$/, name)
        }
      }
    }))

  it.effect("a remote region where a peer, endpoint, request or connection is expected names both kinds", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      for (const [name, call] of Object.entries(calls(driver, remote))) {
        const error = yield* expectInvalid(name, call)
        assert.include(error.detail, "got a mr_remote", name)
      }
      assert.strictEqual(yield* driver.mrRemoteGetSize(remote), 64n)
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("post names the operation of the request it refuses", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const remote = yield* driver.mrRemoteFromDescriptor(descriptor)
      const requests = [
        { op: "write", id: 1, dst: remote, dstOffset: 0, src: remote as Bad, srcOffset: 0, length: 8 },
        { op: "read", id: 2, dst: remote as Bad, dstOffset: 0, src: remote, srcOffset: 0, length: 8 },
        { op: "flush", id: 3, dst: remote, dstOffset: 0, length: 8, type: "visibility" },
        { op: "atomicWrite", id: 4, dst: remote, dstOffset: 0, value: new Uint8Array(8) },
        { op: "recv", id: 5, dst: remote as Bad, offset: 0, length: 8 }
      ] as const
      const operations = ["rpma_write", "rpma_read", "rpma_flush", "rpma_atomic_write", "rpma_recv"]
      for (const [i, request] of requests.entries()) {
        const error = yield* expectInvalid(request.op, post(driver, remote, request))
        assert.strictEqual(error.operation, operations[i])
      }
      yield* expectInvalid("not an object", post(driver, remote, null))
      yield* driver.mrRemoteDelete(remote)
    }))

  it.effect("the live counts include endpoints, requests and connections", () =>
    Effect.gen(function*() {
      const live = yield* Effect.flatMap(RdmaDriver, (driver) => driver.live)
      assert.deepStrictEqual(
        { endpoints: live.endpoints, connectionRequests: live.connectionRequests, connections: live.connections },
        { endpoints: 0, connectionRequests: 0, connections: 0 }
      )
    }))
})

describe("the addon's guards, raw", () => {
  it.effect("waits refuse a missing callback; cancelWait never throws", () =>
    Effect.gen(function*() {
      const binding = yield* RpmaBinding.load()
      const remote = binding.mrRemoteFromDescriptor(descriptor)
      for (const value of [null, undefined, {}, 1, "x", remote, Object.create(remote)]) {
        assert.strictEqual(binding.cancelWait(value, 1), false)
        assert.strictEqual(binding.cancelWait(value, "1"), false)
        assert.throws(() => binding.epNextConnReq(value, config, () => {}), /Invalid argument/)
        assert.throws(() => binding.connNextEvent(value, () => {}), /Invalid argument/)
        assert.throws(() => binding.waitCompletions(value, () => {}), /Invalid argument/)
        assert.throws(() => binding.pollCompletions(value), /Invalid argument/)
      }
      binding.mrRemoteDelete(remote)
    }))

  it.effect("connReqNew rejects (never throws) bad arguments", () =>
    Effect.gen(function*() {
      const binding = yield* RpmaBinding.load()
      const cases: ReadonlyArray<readonly [unknown, unknown, unknown, unknown]> = [
        [null, "127.0.0.1", 1, config],
        [{}, 1, 1, config],
        [{}, "127.0.0.1", -1, config]
      ]
      for (const [peer, address, port, cfg] of cases) {
        const promise = binding.connReqNew(peer, address, port, cfg)
        const error = yield* Effect.flip(Effect.tryPromise({ try: () => promise, catch: (e) => e as { code: number } }))
        assert.strictEqual(error.code, -100004)
      }
    }))
})

const handle = {}
/** The native driver over a stand-in binding. */
const driverWith = (binding: RpmaBinding.Binding) =>
  Effect.provide(
    RdmaDriver,
    NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, binding)))
  )

// A binding whose waits never answer by themselves: what the driver does with them.
const fakeBinding = (log: Array<string>) => {
  const callbacks = new Map<number, (error: unknown, value: unknown) => void>()
  let next = 0
  const start = (name: string) => (...args: Array<unknown>) => {
    const id = ++next
    callbacks.set(id, args.at(-1) as (error: unknown, value: unknown) => void)
    log.push(`${name} ${id}`)
    return id
  }
  const binding = {
    installLogCapture: () => {},
    epNextConnReq: start("epNextConnReq"),
    connNextEvent: start("connNextEvent"),
    waitCompletions: start("waitCompletions"),
    pollCompletions: () => [],
    cancelWait: (_handle: unknown, id: number) => {
      log.push(`cancel ${id}`)
      return callbacks.delete(id)
    }
  } as unknown as RpmaBinding.Binding
  return { binding, callbacks }
}

describe("waits are interruptible Effects", () => {
  it.effect("interrupting a wait cancels it in the addon, once", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const { binding, callbacks } = fakeBinding(log)
      const driver = yield* driverWith(binding)
      const waits: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
        driver.epNextConnReq(handle as Bad, config),
        driver.connNextEvent(handle as Bad)
      ]
      for (const wait of waits) {
        const fiber = yield* Effect.fork(wait)
        yield* Effect.yieldNow()
        yield* Fiber.interrupt(fiber)
      }
      assert.deepStrictEqual(log, [
        "epNextConnReq 1",
        "cancel 1",
        "connNextEvent 2",
        "cancel 2"
      ])
      assert.strictEqual(callbacks.size, 0)
    }))

  it.effect("an answer resumes the fiber; an error is a tagged error; a late answer is ignored", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const { binding, callbacks } = fakeBinding(log)
      const driver = yield* driverWith(binding)
      const event = yield* Effect.fork(driver.connNextEvent(handle as Bad))
      const failing = yield* Effect.fork(driver.connNextEvent(handle as Bad))
      yield* Effect.yieldNow()
      callbacks.get(1)!(undefined, "CLOSED")
      callbacks.get(1)!(undefined, "LOST") // ignored
      const deleted = { code: -100004, operation: "rpma_conn_next_event", detail: "the connection was deleted" }
      callbacks.get(2)!(Object.assign(new Error("x"), deleted), undefined)
      assert.strictEqual(yield* Fiber.join(event), "CLOSED")
      const exit = yield* Fiber.await(failing)
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(Fiber.join(failing))
      assert.strictEqual(error._tag, "RpmaInvalidError")
      assert.strictEqual(error.detail, "the connection was deleted")
      // No cancel for waits that ended.
      assert.deepStrictEqual(log, ["connNextEvent 1", "connNextEvent 2"])
    }))
})

describe("the completion channel armed with a callback, and the posting call", () => {
  it.effect("armCompletions answers once from the addon's callback; disarming cancels the wait in the addon, once", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const { binding, callbacks } = fakeBinding(log)
      const driver = yield* driverWith(binding)
      const heard: Array<Exit.Exit<ReadonlyArray<unknown>, { readonly _tag: string }>> = []
      const disarm = driver.armCompletions(handle as Bad, (ready) => heard.push(ready))
      assert.strictEqual(heard.length, 0, "never during the call")
      const completion = { id: 1, status: 0, byteLength: 0, opcode: 1, flags: 0 }
      callbacks.get(1)!(undefined, [completion])
      callbacks.get(1)!(undefined, [completion]) // a late second answer is ignored
      assert.strictEqual(heard.length, 1)
      assert.isTrue(Exit.isSuccess(heard[0]!) && heard[0].value.length === 1)
      disarm() // answered already: nothing to cancel
      const second = driver.armCompletions(handle as Bad, (ready) => heard.push(ready))
      second()
      second()
      assert.deepStrictEqual(log, ["waitCompletions 1", "waitCompletions 2", "cancel 2"])
      const deleted = { code: -100004, operation: "rpma_cq_wait", detail: "the connection was deleted" }
      driver.armCompletions(handle as Bad, (ready) => heard.push(ready))
      callbacks.get(3)!(Object.assign(new Error("x"), deleted), undefined)
      const failed = heard[1]!
      assert.isTrue(
        Exit.isFailure(failed) && failed.cause._tag === "Fail" && failed.cause.error._tag === "RpmaInvalidError"
      )
    }))

  it.effect("a handle the addon refuses is reported through the callback, from the event loop", () =>
    Effect.gen(function*() {
      const binding = {
        installLogCapture: () => {},
        waitCompletions: () => {
          throw Object.assign(new Error("bad"), {
            code: -100004,
            operation: "rpma_cq_wait",
            detail: "expected a connection"
          })
        }
      } as unknown as RpmaBinding.Binding
      const driver = yield* driverWith(binding)
      const heard = yield* Effect.async<Exit.Exit<unknown, { readonly _tag: string }>>((resume) => {
        let during = true
        driver.armCompletions(handle as Bad, (ready) => {
          assert.isFalse(during)
          resume(Effect.succeed(ready))
        })
        during = false
      })
      assert.isTrue(
        Exit.isFailure(heard) && heard.cause._tag === "Fail" && heard.cause.error._tag === "RpmaInvalidError"
      )
    }))

  it.effect("postMany posts in order up to the first refusal, then polls once; nothing posted, no poll", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      const binding = {
        installLogCapture: () => {},
        post: (_conn: unknown, request: { readonly id: number }) => {
          if (request.id === 3) {
            throw Object.assign(new Error("full"), { code: -100004, operation: "rpma_write", detail: "x" })
          }
          log.push(`post ${request.id}`)
        },
        pollCompletions: () => {
          log.push("poll")
          return [{ id: 1, status: 0, byteLength: 0, opcode: 1, flags: 0 }]
        }
      } as unknown as RpmaBinding.Binding
      const driver = yield* driverWith(binding)
      const write = (id: number) => ({
        op: "write" as const,
        id,
        dst: handle as Bad,
        dstOffset: 0,
        src: handle as Bad,
        srcOffset: 0,
        length: 8
      })
      const outcome = driver.postMany(handle as Bad, [write(1), write(2), write(3), write(4)])
      assert.strictEqual(outcome.posted, 2)
      assert.strictEqual(outcome.error?._tag, "RpmaInvalidError")
      assert.strictEqual(outcome.ready.length, 1)
      assert.deepStrictEqual(log, ["post 1", "post 2", "poll"])
      const none = driver.postMany(handle as Bad, [write(3)])
      assert.strictEqual(none.posted, 0)
      assert.deepStrictEqual(log, ["post 1", "post 2", "poll"])
    }))
})
