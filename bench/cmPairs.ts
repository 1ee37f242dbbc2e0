/**
 * The ping-pong of bench/cm.ts (issue 20), for any driver: a client and a server endpoint in one
 * process, the server echoing, made with `CmEndpoint` (ours) and with the driver's cm calls alone
 * (from plain callbacks, or polling without waiting). bench/cm.ts runs them on the device;
 * bench/cmHost.ts on the simulated driver under callgrind, so that both measure the same code.
 */
import { CmEndpoint, CmListener, Memory, RemoteKey } from "@effect-rdma/core"
import { type Driver, type Model, RdmaDriver } from "@effect-rdma/core/Driver"
import { Cause, Effect, Exit, Fiber } from "effect"

/** Writes in flight: the send queue size, on every side (cm_bench.c's WINDOW). */
export const W = 16
export const MESSAGE = 64
/**
 * Bytes a write of each bandwidth part (CM_WRITE, a comma-separated list; default 64 KiB, where the
 * kernel's copy dominates, and 64 B, which shows the per-request cost).
 */
export const WRITES: ReadonlyArray<number> = (process.env.CM_WRITE ?? "65536,64").split(",").map(Number)
/** The largest of them: what each side's regions are sized for. */
export const WRITE = Math.max(...WRITES)

/**
 * The endpoints' settings: queues of W, one segment a request, 64 B inline (as cm_bench.c's). Every
 * region is page-aligned (Memory.allocate), as cm_bench.c's are: a Uint8Array's bytes start 16 B
 * into a page, so each 64 KiB write would span 17 pages on each side where C's span 16.
 */
export const options: CmEndpoint.Options = {
  timeout: "10 seconds",
  maxSendWr: W,
  maxRecvWr: W,
  maxSendSge: 1,
  maxRecvSge: 1,
  maxInlineData: 64
}
export const config: Model.CmEpConfig = {
  timeoutMs: 10_000,
  maxSendWr: W,
  maxRecvWr: W,
  maxSendSge: 1,
  maxRecvSge: 1,
  maxInlineData: 64
}

export const log = (line: string) => Effect.sync(() => console.error(`[cm] ${line}`))

// ---- ours: CmEndpoint ----

/**
 * A client and a server endpoint connected, the server echoing every message from two receive
 * slots in turn: with `CmEndpoint.reply` (the next receive and the echo in one post), or with
 * `postRecv` and `send` apart.
 */
export const oursPair = (address: string, echoWith: "reply" | "postRecv+send" = "reply") =>
  Effect.gen(function*() {
    const listener = yield* CmListener.make(address, 0, options)
    // Memory before the endpoints that use it: released after them (else its free waits for theirs).
    const echoMemory = yield* Memory.allocate(2 * MESSAGE)
    const targetMemory = yield* Memory.allocate(W * WRITE)
    const localMemory = yield* Memory.allocate(W * WRITE + MESSAGE)
    const accepted = yield* Effect.fork(Effect.gen(function*() {
      const request = yield* CmListener.next(listener)
      const echo = yield* CmEndpoint.registerMessages(request, echoMemory)
      const target = yield* CmEndpoint.registerWrite(request, targetMemory)
      const first = yield* CmEndpoint.postRecv(request, { segments: [{ mr: echo, offset: 0, length: MESSAGE }] })
      yield* CmListener.accept(request, { privateData: RemoteKey.encode(RemoteKey.make(target)) })
      return { request, echo, first }
    }))
    const client = yield* CmEndpoint.make(address, listener.port, options)
    const local = yield* CmEndpoint.registerMessages(client, localMemory.fill(0xa5))
    yield* CmEndpoint.establish(client)
    const server = yield* Fiber.join(accepted)
    const key = yield* RemoteKey.decode(client.privateData.slice(0, 24)).pipe(
      Effect.flatMap(RemoteKey.require("write"))
    )
    yield* Effect.forkScoped(
      Effect.gen(function*() {
        let posted = server.first
        for (let slot = 0;; slot = 1 - slot) {
          const message = yield* posted.completion
          const recv = { dst: server.echo, offset: (1 - slot) * MESSAGE, length: MESSAGE }
          const send = { src: server.echo, offset: slot * MESSAGE, length: message.byteLength }
          if (echoWith === "reply") {
            posted = yield* CmEndpoint.reply(server.request, { recv, send })
          } else {
            posted = yield* CmEndpoint.postRecv(server.request, {
              segments: [{ mr: recv.dst, offset: recv.offset, length: recv.length }]
            })
            yield* CmEndpoint.send(server.request, send)
          }
        }
      }).pipe(Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.void : log(`echo: ${Cause.pretty(cause)}`)
      ))
    )
    return { client, local, key }
  })

/** `count` round trips with `CmEndpoint`: the client's receive posted, its send, then the echo awaited. */
export const oursPingPong = (
  ours: { readonly client: CmEndpoint.CmEndpoint; readonly local: CmEndpoint.MessageRegion },
  count: number
) => {
  const sendMessage = { src: ours.local, offset: 0, length: MESSAGE }
  const recvMessage = { segments: [{ mr: ours.local, offset: W * WRITE, length: MESSAGE }] }
  return Effect.gen(function*() {
    for (let i = 0; i < count; i++) {
      const echo = yield* CmEndpoint.postRecv(ours.client, recvMessage)
      yield* CmEndpoint.send(ours.client, sendMessage)
      yield* echo.completion
    }
  })
}

/** `count` round trips with `CmEndpoint.call`: the answer's receive and the send in one post, one wait. */
export const oursCallPingPong = (
  ours: { readonly client: CmEndpoint.CmEndpoint; readonly local: CmEndpoint.MessageRegion },
  count: number
) => {
  const exchange: CmEndpoint.ExchangeArgs = {
    send: { src: ours.local, offset: 0, length: MESSAGE },
    recv: { dst: ours.local, offset: W * WRITE, length: MESSAGE }
  }
  return Effect.gen(function*() {
    for (let i = 0; i < count; i++) yield* CmEndpoint.call(ours.client, exchange)
  })
}

// ---- addon: the driver's calls from plain callbacks ----

export interface RawSide {
  readonly ep: Model.CmEpHandle
  readonly mr: Model.CmMrHandle
}

/** The driver's completion callbacks in this process so far (both sides' wake-ups, for the trace). */
export let wakeUps = 0
/**
 * Milliseconds spent so far in the raw rows' driver calls: cmPostMany on each side (the post and its
 * poll; on Soft-RoCE a send's protocol processing runs inside the post), the completion callbacks
 * (which include the server's posts made from them), and the spinning row's polls.
 */
export const spent = { clientPost: 0, serverPost: 0, callbacks: 0, polls: 0 }
/** The raw pair's server endpoint, to tell its posts from the client's. */
let serverEp: Model.CmEpHandle | undefined

/** An endpoint's completions to `take` as they come, from the driver's callbacks, until `take` says stop. */
export const watch = (
  driver: Driver,
  ep: Model.CmEpHandle,
  take: (c: Model.Completion) => "more" | "stop",
  fail: (e: unknown) => void
) => {
  const arm = (): void =>
    void driver.cmArmCompletions(ep, (exit) => {
      wakeUps++
      const t0 = performance.now()
      try {
        if (Exit.isFailure(exit)) return fail(Cause.squash(exit.cause))
        for (const c of exit.value) if (take(c) === "stop") return
        arm()
      } finally {
        spent.callbacks += performance.now() - t0
      }
    })
  arm()
}

/** Posts `requests`, handing the completions already queued to `take`; a refusal to `fail`. */
export const post = (
  driver: Driver,
  ep: Model.CmEpHandle,
  requests: ReadonlyArray<Model.CmWorkRequest>,
  take: (c: Model.Completion) => "more" | "stop",
  fail: (e: unknown) => void
): "more" | "stop" => {
  const t0 = performance.now()
  const outcome = driver.cmPostMany(ep, requests)
  spent[ep === serverEp ? "serverPost" : "clientPost"] += performance.now() - t0
  const error = outcome.error ?? outcome.queueError
  if (error !== undefined) {
    fail(error)
    return "stop"
  }
  for (const c of outcome.ready) if (take(c) === "stop") return "stop"
  return "more"
}

export const registered = (driver: Driver, ep: Model.CmEpHandle, kind: "msgs" | "write", size: number) =>
  Effect.flatMap(Memory.allocate(size), (memory) =>
    Effect.acquireRelease(
      driver.cmReg(ep, kind, memory.fill(0xa5)),
      (mr) => Effect.orDie(driver.cmDeregMr(mr))
    ))

/** `effect`, its time added to `spent.polls`. */
export const timed = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.suspend(() => {
    const t0 = performance.now()
    return Effect.ensuring(effect, Effect.sync(() => void (spent.polls += performance.now() - t0)))
  })

/** The same pair as {@link oursPair} through the driver alone, the server echoing from callbacks. */
export const rawPair = (address: string) =>
  Effect.gen(function*() {
    const driver = yield* RdmaDriver
    const listening = yield* Effect.acquireRelease(
      driver.cmListen(address, 0, config),
      (l) => Effect.orDie(driver.cmListenerDestroy(l.handle))
    )
    const endpoint = (make: Effect.Effect<Model.CmEpHandle, unknown>) =>
      Effect.acquireRelease(Effect.orDie(make), (ep) =>
        Effect.orDie(Effect.zipRight(Effect.ignore(driver.cmDisconnect(ep)), driver.cmEpDestroy(ep))))
    const accepted = yield* Effect.fork(Effect.gen(function*() {
      const ep = yield* endpoint(driver.cmGetRequest(listening.handle))
      const echo = yield* registered(driver, ep, "msgs", 2 * MESSAGE)
      const target = yield* registered(driver, ep, "write", W * WRITE)
      const info = yield* driver.cmMrInfo(target)
      const key = RemoteKey.encode({
        address: info.address,
        length: BigInt(info.length),
        rkey: info.rkey,
        access: "write"
      })
      const recv = (slot: number): Model.CmWorkRequest => ({
        op: "recv",
        id: slot,
        segments: [{ mr: echo, offset: slot * MESSAGE, length: MESSAGE }]
      })
      const first = driver.cmPostMany(ep, [recv(0)])
      if (first.error !== undefined) {
        return yield* Effect.fail(first.error)
      }
      yield* driver.cmAccept(ep, key, config.timeoutMs)
      return { ep, echo, recv }
    }))
    const client = yield* endpoint(driver.cmEpCreate(address, listening.port, config))
    const local = yield* registered(driver, client, "msgs", W * WRITE + MESSAGE)
    yield* driver.cmConnect(client, undefined, config.timeoutMs)
    const server = yield* Fiber.join(accepted)
    const key = yield* Effect.flatMap(driver.cmPrivateData(client), (data) =>
      RemoteKey.decode(data.slice(0, 24)))

    // The echo: a receive (ids 0 and 1: its slot) posts the other slot's receive and sends its bytes back.
    let stopped = false
    const echo = (c: Model.Completion): "more" | "stop" => {
      if (stopped || c.status !== 0) return "stop"
      if (c.id > 1) return "more"
      return post(
        driver,
        server.ep,
        [server.recv(1 - c.id), {
          op: "send",
          id: 2,
          segments: [{ mr: server.echo, offset: c.id * MESSAGE, length: c.byteLength }],
          inline: c.byteLength <= MESSAGE
        }],
        echo,
        (e) => void Effect.runFork(log(`raw echo: ${String(e)}`))
      )
    }
    serverEp = server.ep
    watch(driver, server.ep, echo, () => {})
    yield* Effect.addFinalizer(() => Effect.sync(() => (stopped = true)))
    /** The server's completions polled (no wait) and echoed: for the spinning row. */
    const serve = Effect.flatMap(timed(driver.cmPollCompletions(server.ep)), (cs) =>
      Effect.sync(() => {
        for (const c of cs) echo(c)
      }))
    return { driver, side: { ep: client, mr: local } satisfies RawSide, key, serve }
  })

/** `count` round trips through the driver from callbacks: post receive + send, until both completed. */
export const rawPingPong = (driver: Driver, side: RawSide, count: number) =>
  Effect.async<void, unknown>((resume) => {
    let trip = 0
    let pending = 0
    const fail = (e: unknown) => resume(Effect.fail(e))
    const take = (c: Model.Completion): "more" | "stop" => {
      if (c.status !== 0) {
        fail(new Error(`completion status ${c.status}`))
        return "stop"
      }
      if (--pending > 0) return "more"
      return ++trip === count ? (resume(Effect.void), "stop") : start()
    }
    const start = (): "more" | "stop" => {
      pending = 2
      return post(
        driver,
        side.ep,
        [
          { op: "recv", id: 0, segments: [{ mr: side.mr, offset: W * WRITE, length: MESSAGE }] },
          { op: "send", id: 1, segments: [{ mr: side.mr, offset: 0, length: MESSAGE }], inline: true }
        ],
        take,
        fail
      )
    }
    if (start() === "more") watch(driver, side.ep, take, fail)
  })

/**
 * `count` round trips through the driver with no wait at all: after posting, both sides' queues are
 * polled in turn until the trip's two completions are in (the server's echoed as they come). The
 * floor of the JavaScript path without the event loop: what is left over C is the calls' own cost.
 */
export const spinPingPong = (driver: Driver, side: RawSide, serve: Effect.Effect<void, unknown>, count: number) =>
  Effect.gen(function*() {
    const deadline = performance.now() + 60_000
    for (let trip = 0; trip < count; trip++) {
      let pending = 2
      const take = (c: Model.Completion): "more" | "stop" => {
        if (c.status !== 0) throw new Error(`completion status ${c.status}`)
        pending--
        return "more"
      }
      post(
        driver,
        side.ep,
        [
          { op: "recv", id: 0, segments: [{ mr: side.mr, offset: W * WRITE, length: MESSAGE }] },
          { op: "send", id: 1, segments: [{ mr: side.mr, offset: 0, length: MESSAGE }], inline: true }
        ],
        take,
        (e) => {
          throw e
        }
      )
      while (pending > 0) {
        if (performance.now() > deadline) {
          return yield* Effect.fail(new Error("spinning ping-pong: no echo within 60 s"))
        }
        yield* serve
        for (const c of yield* timed(driver.cmPollCompletions(side.ep))) take(c)
      }
    }
  })
