// A window of work requests in one addon call (postWindow), on a connected pair: a list of plain
// writes goes in one call and lands every byte; a refusal in the middle of a window leaves those
// before it posted (and completing), with the refusal post gives; the addon's own checks of
// every number a caller hands postWindow directly, on a real connection, each a tagged error.
//   cd packages/native && ../../vm/run ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Window.test.ts
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, layer } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { address, nextCompletions, refusalOf } from "./support.js"

const WRITE_SRC = 0x04
const WRITE_DST = 0x08
const SIZE = 4096
const config: Model.ConnConfig = { timeoutMs: 5000, sqSize: 64, rqSize: 8, cqSize: 64, directWriteToPmem: false }

// The addon, its posting calls counted.
const real = Effect.runSync(RpmaBinding.load())
const calls = { post: 0, postWindow: 0 }
const counted: RpmaBinding.Binding = {
  ...real,
  post: (queue, request) => {
    calls.post++
    real.post(queue, request)
  },
  postWindow: (conn, regions, fields, count) => {
    calls.postWindow++
    return real.postWindow(conn, regions, fields, count)
  }
}
const driverLayer = NativeDriver.layerWithBinding.pipe(Layer.provide(Layer.succeed(RpmaBinding.RpmaBinding, counted)))

interface Pair {
  readonly driver: Driver
  readonly peer: Model.PeerHandle
  readonly client: Model.ConnHandle
  readonly local: Model.MrHandle
  readonly source: Uint8Array
  readonly remote: Model.RemoteMrHandle
  readonly target: Uint8Array
}

/** A connected pair on `port`: the client's region `source` writes into the server's `target` (as `remote`). */
const withPair = <A, E>(port: number, f: (pair: Pair) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const context = yield* driver.getIbvContext(address, "local")
    const peer = Effect.acquireRelease(driver.peerNew(context), (p) => Effect.orDie(driver.peerDelete(p)))
    const server = yield* peer
    const clientPeer = yield* peer
    const region = (p: Model.PeerHandle, usage: number) =>
      Effect.acquireRelease(
        Effect.flatMap(
          driver.allocate(SIZE),
          (memory) => Effect.map(driver.mrReg(p, memory, usage), (r) => ({ memory, handle: r.handle }))
        ),
        (r) => Effect.ignore(driver.mrDereg(r.handle))
      )
    const target = yield* region(server, WRITE_DST)
    const source = yield* region(clientPeer, WRITE_SRC)
    const remote = yield* Effect.acquireRelease(
      Effect.flatMap(driver.mrGetDescriptor(target.handle), (d) => driver.mrRemoteFromDescriptor(d)),
      (r) => Effect.ignore(driver.mrRemoteDelete(r))
    )
    const ep = yield* Effect.acquireRelease(
      driver.epListen(server, address, port),
      (e) => Effect.ignore(driver.epShutdown(e))
    )
    const incoming = yield* Effect.fork(driver.epNextConnReq(ep, config))
    const client = yield* Effect.acquireRelease(
      driver.connReqConnect(yield* driver.connReqNew(clientPeer, address, port, config), undefined),
      (c) => Effect.ignore(driver.connDelete(c))
    )
    const serverConn = yield* Effect.acquireRelease(
      driver.connReqConnect(yield* Fiber.join(incoming), undefined),
      (c) => Effect.ignore(driver.connDelete(c))
    )
    assert.strictEqual(yield* driver.connNextEvent(client), "ESTABLISHED")
    assert.strictEqual(yield* driver.connNextEvent(serverConn), "ESTABLISHED")
    return yield* f({
      driver,
      peer: clientPeer,
      client,
      local: source.handle,
      source: source.memory,
      remote,
      target: target.memory
    })
  }).pipe(Effect.scoped)

const write = (
  pair: Pair,
  id: number,
  offset: number,
  length: number,
  signalled = false
): Extract<Model.WorkRequest, { op: "write" }> => ({
  op: "write",
  id,
  dst: pair.remote,
  dstOffset: offset,
  src: pair.local,
  srcOffset: offset,
  length,
  completion: signalled ? "always" : "onError"
})

/** Completions on `conn` until `ids` have all come (in any order), each successful. */
const awaitIds = (driver: Driver, conn: Model.ConnHandle, ready: ReadonlyArray<Model.Completion>, ids: Array<number>) =>
  Effect.gen(function*() {
    const missing = new Set(ids)
    let batch = ready
    for (;;) {
      for (const c of batch) {
        assert.strictEqual(c.status, 0, `completion ${c.id}`)
        missing.delete(c.id)
      }
      if (missing.size === 0) return
      batch = yield* nextCompletions(driver, conn)
    }
  })

layer(driverLayer, { timeout: "120 seconds" })("a window of requests in one addon call", (it) => {
  it.effect(
    "16 writes go in one postWindow and land every byte",
    () =>
      withPair(18990, (pair) =>
        Effect.gen(function*() {
          for (let i = 0; i < SIZE; i++) pair.source[i] = (i * 7 + 3) & 0xff
          const requests = Array.from({ length: 16 }, (_, i) => write(pair, i + 1, i * 256, 256, i === 15))
          const before = { ...calls }
          const outcome = pair.driver.postMany(pair.client, requests)
          assert.strictEqual(outcome.posted, 16)
          assert.isUndefined(outcome.error)
          assert.deepStrictEqual({ post: calls.post - before.post, postWindow: calls.postWindow - before.postWindow }, {
            post: 0,
            postWindow: 1
          })
          yield* awaitIds(pair.driver, pair.client, outcome.ready, [16])
          assert.deepStrictEqual(pair.target, pair.source)
        })),
    60_000
  )

  it.effect(
    "a refusal in the middle of a window: those before it posted and completing, post's refusal",
    () =>
      withPair(18991, (pair) =>
        Effect.gen(function*() {
          pair.source.fill(0x5a)
          pair.target.fill(0)
          const bad = { ...write(pair, 3, 512, 256, true), dstOffset: Number.NaN }
          const requests = [
            write(pair, 1, 0, 256, true),
            write(pair, 2, 256, 256, true),
            bad,
            write(pair, 4, 768, 256, true)
          ]
          const before = calls.postWindow
          const outcome = pair.driver.postMany(pair.client, requests)
          assert.strictEqual(calls.postWindow - before, 1)
          assert.strictEqual(outcome.posted, 2)
          assert.strictEqual(outcome.error?._tag, "RpmaInvalidError")
          assert.strictEqual(outcome.error?.operation, "rpma_write")
          // post's own words for the same request.
          const alone = pair.driver.postMany(pair.client, [bad])
          assert.strictEqual(alone.posted, 0)
          assert.strictEqual(outcome.error?.detail, alone.error?.detail)
          assert.include(outcome.error?.detail, "dst_offset nan is not an integer")
          yield* awaitIds(pair.driver, pair.client, outcome.ready, [1, 2])
          assert.isTrue(pair.target.subarray(0, 512).every((b) => b === 0x5a))
          assert.isTrue(pair.target.subarray(512).every((b) => b === 0))

          // A region deregistered before the window: refused where it is first named, as post refuses it.
          const gone = (yield* pair.driver.mrReg(pair.peer, yield* pair.driver.allocate(SIZE), WRITE_SRC)).handle
          yield* pair.driver.mrDereg(gone)
          const closed = pair.driver.postMany(pair.client, [write(pair, 5, 0, 8, true), {
            ...write(pair, 6, 8, 8),
            src: gone
          }])
          assert.strictEqual(closed.posted, 1)
          assert.strictEqual(closed.error?.detail, "the mr_local was already deregistered")
          yield* awaitIds(pair.driver, pair.client, closed.ready, [5])
        })),
    60_000
  )

  it.effect(
    "postWindow called directly: every number and handle checked, a tagged refusal with posted",
    () =>
      withPair(18992, (pair) =>
        Effect.gen(function*() {
          const conn = pair.client as unknown
          const regions = [pair.remote, pair.local]
          // Two signalled writes of 8 bytes (ids 100 and 109), remote (0) from local (1), then `change`.
          const refusal = (
            change: (f: Float64Array) => void,
            count = 2,
            list: unknown = regions,
            conn_: unknown = conn
          ) => {
            const f = new Float64Array(18)
            for (const at of [0, 9]) f.set([0, 100 + at, 0, at * 8, 1, at * 8, 8, 0, 0], at)
            change(f)
            try {
              real.postWindow(conn_, list, f, count)
            } catch (e) {
              const error = e as { code?: number; detail?: string; posted?: number }
              return { code: error.code, detail: error.detail, posted: error.posted }
            }
            return assert.fail("expected a refusal")
          }
          const second = (i: number, v: number) => (f: Float64Array) => (f[9 + i] = v)
          const cases: Array<[string, ReturnType<typeof refusal>, RegExp]> = [
            ["op 7", refusal(second(0, 7)), /op 7 is not an integer from 0 to 3/],
            ["op NaN", refusal(second(0, Number.NaN)), /op nan is not an integer/],
            ["dst index 2", refusal(second(2, 2)), /dst 2 is not an integer from 0 to 1/],
            ["src index -1", refusal(second(4, -1)), /src -1 is not an integer/],
            ["src index 0.5", refusal(second(4, 0.5)), /src 0.5 is not an integer/],
            ["local where remote goes", refusal(second(2, 1)), /expected a mr_remote, got a mr_local/],
            ["remote where local goes", refusal(second(4, 0)), /expected a mr_local, got a mr_remote/],
            ["dst_offset -1", refusal(second(3, -1)), /dst_offset -1 is not an integer/],
            ["src_offset 2^53", refusal(second(5, 2 ** 53)), /src_offset 9007199254740992 is not an integer/],
            ["len 2^32", refusal(second(6, 2 ** 32)), /len 4294967296 is not an integer/],
            ["len Infinity", refusal(second(6, Infinity)), /len inf is not an integer/],
            ["flags 4", refusal(second(7, 4)), /flags 4 is not an integer from 0 to 3/],
            [
              "imm on a read",
              refusal((f) => f.set([1, 1, 1, 0, 0, 0, 8, 2, 5], 9)),
              /immediate data goes with a write or a send/
            ],
            ["imm 2^32", refusal((f) => f.set([2, 4294967296], 16)), /imm 4294967296 is not an integer/],
            [
              "onError on a receive",
              refusal((f) => f.set([3, 1, 1, 0, 0, 0, 8, 1, 0], 9)),
              /a receive always completes/
            ]
          ]
          for (const [name, got, detail] of cases) {
            assert.strictEqual(got.code, -100004, name)
            assert.match(String(got.detail), detail, name)
            assert.strictEqual(got.posted, 1, name)
          }
          // Refused before any request: nothing posted.
          const before: Array<[string, ReturnType<typeof refusal>, RegExp]> = [
            ["count 3", refusal(() => {}, 3), /count 3 is not an integer from 0 to 2/],
            ["count -1", refusal(() => {}, -1), /count -1/],
            ["count NaN", refusal(() => {}, Number.NaN), /count nan is not an integer/],
            ["regions not an array", refusal(() => {}, 2, "regions"), /regions must be an array/],
            [
              "a region as the connection",
              refusal(() => {}, 2, regions, pair.remote),
              /expected a conn, got a mr_remote/
            ]
          ]
          for (const [name, got, detail] of before) {
            assert.strictEqual(got.code, -100004, name)
            assert.match(String(got.detail), detail, name)
            assert.strictEqual(got.posted, 0, name)
          }
          // Each refusal of a second request posted the first (id 100): its completions come, and the
          // connection still works.
          const ready = yield* pair.driver.pollCompletions(pair.client)
          yield* awaitIds(pair.driver, pair.client, ready, [100])
          const outcome = pair.driver.postMany(pair.client, [write(pair, 1, 0, 8), write(pair, 2, 8, 8, true)])
          assert.strictEqual(outcome.posted, 2)
          yield* awaitIds(pair.driver, pair.client, outcome.ready, [2])
        })),
    60_000
  )

  it.effect(
    "completions read packed, one at a time when the array holds one; refusals of the packed calls; objects defined, whatever Object.prototype says",
    () =>
      withPair(18993, (pair) =>
        Effect.gen(function*() {
          const conn = pair.client as unknown
          // A bounded spin (10 ms a call, 2,000 calls at most) until `wanted` completions are read, `into` at a time.
          const spinFor = (wanted: number, into: Float64Array) => {
            const read: Array<Array<number>> = []
            for (let calls = 0; read.length < wanted && calls < 2000; calls++) {
              const count = real.spinPacked(conn, into, 10_000_000)
              for (let i = 0; i < count; i++) read.push(Array.from(into.subarray(i * 7, i * 7 + 7)))
            }
            return read
          }
          const outcome = pair.driver.postMany(
            pair.client,
            [1, 2, 3, 4, 5].map((id) => write(pair, id, id * 8, 8, true))
          )
          assert.strictEqual(outcome.posted, 5)
          const early = outcome.ready.map((c) => c.id)
          const one = new Float64Array(7) // room for one completion
          const read = spinFor(5 - early.length, one)
          // In posting order: id, status 0, byteLength 0 (a write), IBV_WC_RDMA_WRITE, no flags, no imm, no qpNum.
          assert.deepStrictEqual(
            read,
            [1, 2, 3, 4, 5].filter((id) => !early.includes(id)).map((id) => [id, 0, 0, 1, 0, 0, -1])
          )

          const refused = (f: () => unknown) => {
            try {
              f()
            } catch (e) {
              const error = e as { code?: number; detail?: string }
              return `${error.code} ${error.detail}`
            }
            return assert.fail("expected a refusal")
          }
          assert.match(
            refused(() => real.pollPacked(conn, new Float64Array(6))),
            /-100004 .*at least one completion \(7 numbers\)/
          )
          assert.match(
            refused(() => real.pollPacked(conn, new Uint8Array(7) as never)),
            /-100004 .*must be a Float64Array/
          )
          assert.match(refused(() => real.pollPacked(conn, undefined as never)), /-100004 .*must be a Float64Array/)
          assert.match(
            refused(() => real.pollPacked(pair.remote, one)),
            /-100004 .*expected a conn or an srq, got a mr_remote/
          )
          assert.match(refused(() => real.spinPacked(conn, one, -1)), /-100004 .*spin budget/)
          assert.match(refused(() => real.spinPacked(conn, one, 2e7)), /-100004 .*spin budget/)

          // The addon's objects (the wait's and pollCompletions') get their properties defined: a
          // throwing setter on Object.prototype or Array.prototype runs for none of them.
          const hostile = (what: object, key: string) =>
            Object.defineProperty(what, key, {
              configurable: true,
              set() {
                throw new Error(`${key} assigned`)
              }
            })
          const keys: Array<[object, string]> = [[Object.prototype, "status"], [Object.prototype, "id"], [
            Array.prototype,
            "0"
          ]]
          // Posted with the addon's post alone (the driver would poll it, in JavaScript, itself
          // subject to the setters): only the addon runs between the setters' install and removal.
          real.post(conn, write(pair, 6, 0, 8, true))
          for (const [what, key] of keys) hostile(what, key)
          let objects: ReadonlyArray<object> = []
          try {
            for (let calls = 0; objects.length === 0 && calls < 2000; calls++) {
              objects = real.spinCompletions(conn, 10_000_000)
            }
          } finally {
            for (const [what, key] of keys) delete (what as Record<string, unknown>)[key]
          }
          assert.strictEqual(objects.length, 1)
          assert.isTrue(Object.hasOwn(objects, "0"))
          assert.deepStrictEqual({ ...objects[0] }, { id: 6, status: 0, byteLength: 0, opcode: 1, flags: 0 })
        })),
    60_000
  )

  it.effect(
    "a wait answered with a count (waitPacked): the completions in the array; a detached array is a tagged error and loses none",
    () =>
      withPair(18994, (pair) =>
        Effect.gen(function*() {
          const conn = pair.client as unknown
          const waitPacked = (into: Float64Array) =>
            Effect.async<number, { code?: number; detail?: string }>((resume) => {
              real.waitPacked(conn, into, (error, count) =>
                resume(error !== undefined && error !== null ? Effect.fail(error as never) : Effect.succeed(count)))
            })
          const into = new Float64Array(64 * 7)
          real.post(conn, write(pair, 7, 0, 8, true))
          const count = yield* waitPacked(into)
          assert.strictEqual(count, 1)
          assert.deepStrictEqual(Array.from(into.subarray(0, 7)), [7, 0, 0, 1, 0, 0, -1])

          // The array detached while the wait is on: the wait fails, the completion stays queued.
          const doomed = new Float64Array(7)
          const answered = yield* Deferred.make<{ readonly error: unknown; readonly count: number }>()
          real.waitPacked(conn, doomed, (error, count) =>
            Effect.runSync(Deferred.succeed(answered, { error, count })))
          structuredClone(doomed.buffer, { transfer: [doomed.buffer] })
          assert.strictEqual(doomed.length, 0)
          real.post(conn, write(pair, 8, 8, 8, true))
          const failed = (yield* Deferred.await(answered)).error as { code?: number; detail?: string } | null
          assert.strictEqual(failed?.code, -100004)
          assert.match(String(failed?.detail), /no longer a Float64Array/)
          let kept: ReadonlyArray<Model.Completion> = []
          for (let calls = 0; kept.length === 0 && calls < 2000; calls++) {
            kept = real.spinCompletions(conn, 10_000_000)
          }
          assert.deepStrictEqual(
            kept.map((c) =>
              c.id
            ),
            [8]
          )

          assert.match(
            refusalOf(() => real.waitPacked(conn, new Float64Array(3), () => {})),
            /Float64Array that holds/
          )
          assert.match(refusalOf(() => real.waitPacked(conn, into, "nope" as never)), /callback must be a function/)
          assert.match(refusalOf(() => real.waitPacked(pair.remote, into, () => {})), /expected a conn or an srq/)
        })),
    60_000
  )
})
