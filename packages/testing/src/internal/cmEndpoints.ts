/**
 * The simulated driver's endpoints of librdmacm's verbs API: rdma_create_ep with a queue pair and
 * rdma_connect on the active side, rdma_listen / rdma_get_request / rdma_accept / rdma_reject on
 * the passive side, rdma_disconnect and rdma_destroy_ep, with rdma_cm's private data (padded as it
 * carries it) and errno values (EINVAL for a wrong or destroyed handle and bad arguments,
 * ECONNREFUSED on a rejection, EHOSTUNREACH with nobody listening, ETIMEDOUT at a wait's bound,
 * ECANCELED for a wait whose handle is destroyed, ECONNABORTED for an accept whose client has gone). The queue pairs are cmQueuePair.ts's.
 * With a link (a network shared by several processes), the other endpoint may be in another
 * process: a request goes to whichever process listens, the answer and disconnects come back as
 * messages, and the other side's half of each request runs there (cmQueuePair.ts's `received`).
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Queue from "effect/Queue"
import { cmPostCalls } from "./cmPosting.js"
import * as QueuePair from "./cmQueuePair.js"
import * as CompletionQueue from "./completionQueue.js"
import * as fabric from "./fabric.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"

const { EADDRINUSE, EADDRNOTAVAIL, ECANCELED, ECONNABORTED, ECONNREFUSED, EHOSTUNREACH, EINVAL, ETIMEDOUT } =
  RdmaError.Errno

/** What rdma_cm carries as private data on RoCE: a request's, an acceptance's and a rejection's (the CM's REQ, REP and REJ less rdma_cm's header). */
const PRIVATE_DATA = Arguments.PRIVATE_DATA_LIMIT

const INT_MAX = 2147483647
/** The device's limits (Soft-RoCE's): rdma_create_ep refuses a queue pair beyond them with EINVAL. */
const MAX_WR = 16384
const MAX_SGE = 32
const MAX_INLINE = 256

/** Where an endpoint's connection is. */
type Stage =
  | "idle" // made, not connected (active) or not answered (passive)
  | "connecting" // rdma_connect waiting for the answer
  | "established"
  | "failed" // a connect that failed or gave up, a rejected request: never connects
  | "disconnected"

const NO_BYTES = new Uint8Array(0)

/** An endpoint's state beside its handle (the fabric's types stay plain data). */
interface Side {
  stage: Stage
  readonly qp: QueuePair.QueuePair
  other: fabric.CmEp | undefined
  privateData: Uint8Array
  /** The answer an rdma_connect waits for (the active side), while it waits. */
  answer: ((exit: Exit.Exit<void, RdmaError.RdmaCmError>) => void) | undefined
  /** For a request (the passive side): the endpoint that asked. */
  readonly client: fabric.CmEp | undefined
  /** Its events after ESTABLISHED; `undefined` wakes the waits of a destroyed endpoint. */
  readonly events: Queue.Queue<Driver.Model.CmEvent | undefined>
  /** Whether it has had its one DISCONNECTED event. */
  toldDisconnected: boolean
  /** The other endpoint when it is in another process (`other` stays undefined then). */
  far: wire.Far | undefined
  /** For a connect to another process's listener, while it waits: the address asked for. */
  asked: string | undefined
  /**
   * For a client that gave up (timed out, interrupted) but is alive, accepted meanwhile: tells the
   * accepting side when it is destroyed. As on the device: the CM hears of a client's end only
   * with its identifier's, so such an accept waits until then, or its own bound.
   */
  acceptor: (() => void) | undefined
}

/** A connection request on its way to a listener: the client and its private data, padded. */
interface Incoming {
  readonly client: fabric.CmEp
  readonly privateData: Uint8Array
}

const padded = (data: Uint8Array | undefined, size: number) => {
  const out = new Uint8Array(size)
  if (data !== undefined && data !== null) out.set(data)
  return out
}

/** An integer within bounds, or what is wrong with it. */
const integerIn = (value: unknown, what: string, min: number, max: number): string | undefined =>
  typeof value === "number" && Number.isInteger(value) && value >= min && value <= max
    ? undefined
    : `${what} ${Arguments.show(value)} is not an integer from ${min} to ${max}`

/** An endpoint's configuration, every field read once and guarded (a throwing getter is a refusal). */
const configProblem = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null) return "the endpoint's config must be an object"
  const read: Record<string, unknown> = {}
  for (const key of [...CONFIG_SIZES, ...CONN_PARAMS]) {
    try {
      read[key] = (value as Record<string, unknown>)[key]
    } catch {
      return `reading config.${key} threw`
    }
  }
  return integerIn(read.timeoutMs, "timeoutMs", 0, INT_MAX) ??
    integerIn(read.maxSendWr, "maxSendWr", 1, MAX_WR) ??
    integerIn(read.maxRecvWr, "maxRecvWr", 1, MAX_WR) ??
    integerIn(read.maxSendSge, "maxSendSge", 1, MAX_SGE) ??
    integerIn(read.maxRecvSge, "maxRecvSge", 1, MAX_SGE) ??
    integerIn(read.maxInlineData, "maxInlineData", 0, MAX_INLINE) ??
    optionalIn(read.retryCount, "retryCount", 7) ??
    optionalIn(read.rnrRetryCount, "rnrRetryCount", 7) ??
    optionalIn(read.responderResources, "responderResources", 255) ??
    optionalIn(read.initiatorDepth, "initiatorDepth", 255)
}

/** rdma_conn_param's fields: absent, or an integer from 0 to `max` (retries are 3 bits, depths 8). */
const optionalIn = (value: unknown, what: string, max: number) =>
  value === undefined ? undefined : integerIn(value, what, 0, max)

const CONFIG_SIZES = ["timeoutMs", "maxSendWr", "maxRecvWr", "maxSendSge", "maxRecvSge", "maxInlineData"] as const
const CONN_PARAMS = ["retryCount", "rnrRetryCount", "responderResources", "initiatorDepth"] as const

const copyConfig = (c: Driver.Model.CmEpConfig): Driver.Model.CmEpConfig => ({
  timeoutMs: c.timeoutMs,
  maxSendWr: c.maxSendWr,
  maxRecvWr: c.maxRecvWr,
  maxSendSge: c.maxSendSge,
  maxRecvSge: c.maxRecvSge,
  maxInlineData: c.maxInlineData,
  retryCount: c.retryCount,
  rnrRetryCount: c.rnrRetryCount,
  responderResources: c.responderResources,
  initiatorDepth: c.initiatorDepth
})

export const makeCmEndpoints = (world: fabric.Fabric, tools: Tools, link?: wire.Link) => {
  const { acquire, call, errno, inUse, releaseHandle } = tools
  const listeners = new Map<string, fabric.CmListener>()
  const incoming = new WeakMap<fabric.CmListener, Queue.Queue<Incoming | undefined>>()
  const sides = new WeakMap<fabric.CmEp, Side>()
  /** Live endpoints by id: what messages from other processes name. */
  const eps = new Map<number, fabric.CmEp>()
  /** Endpoints of other processes asking a listener here, until answered (or their process leaves). */
  const standIns = new Set<fabric.CmEp>()
  /** The address another process's listener claims on the network (rdma_cm's, apart from librpma's). */
  const claimKey = (address: string, port: number) => `cm:${key(address, port)}`
  const farOf = (ep: fabric.CmEp): wire.Far => ({ process: link!.self, conn: ep.id })
  const sayAs = (to: wire.Far, from: wire.Far, cm: wire.CmSays) => link!.send({ t: "cm", to, from, cm })
  const say = (to: wire.Far, from: fabric.CmEp, cm: wire.CmSays) => sayAs(to, farOf(from), cm)
  /** The far endpoint `far` as the queue pair of `ep` sends to it. */
  const farPeer = (ep: fabric.CmEp, far: wire.Far): QueuePair.FarPeer => ({
    post: (reach) => say(far, ep, { k: "post", reach }),
    maxMessageSize: link!.maxMessageSize
  })
  let nextPort = 40000

  const key = (address: string, port: number) => `${address}:${port}`
  const epOf = (value: unknown) => fabric.asHandle(value, "CmEp")
  const listenerOf = (value: unknown) => fabric.asHandle(value, "CmListener")
  const side = (ep: fabric.CmEp) => sides.get(ep)!
  const unsafeQueue = <A>() => Effect.runSync(Queue.unbounded<A>())

  /** The refusal of a value that is not a live endpoint, or nothing. */
  const deadEp = (operation: string, value: unknown) => {
    const ep = epOf(value)
    return ep === undefined
      ? errno(operation, EINVAL, "expected an endpoint handle (from cmEpCreate or cmGetRequest)")
      : !ep.alive
      ? errno(operation, EINVAL, "the endpoint was already destroyed; a handle is not usable after its release")
      : undefined
  }
  const badPrivateData = (operation: string, data: unknown, limit: number) => {
    const problem = Arguments.privateData(data)
    return problem !== undefined
      ? errno(operation, EINVAL, problem)
      : data !== undefined && data !== null && (data as Uint8Array).byteLength > limit
      ? errno(
        operation,
        EINVAL,
        `private data is ${(data as Uint8Array).byteLength} bytes; rdma_cm on RoCE carries at most ${limit} here`
      )
      : undefined
  }
  const badTimeout = (operation: string, timeoutMs: unknown) => {
    const problem = integerIn(timeoutMs, "timeoutMs", 0, INT_MAX)
    return problem === undefined ? undefined : errno(operation, EINVAL, problem)
  }
  const freePort = (address: string) => {
    for (let i = 0; i < 20000; i++) {
      const port = 40000 + ((nextPort++ - 40000) % 20000)
      if (!listeners.has(key(address, port))) return port
    }
    return 0
  }

  const newEndpoint = (
    ends: Omit<fabric.CmEp, "kind" | "id" | "alive" | "regions">,
    config: Driver.Model.CmEpConfig,
    privateData: Uint8Array,
    client: fabric.CmEp | undefined
  ) => {
    const ep: fabric.CmEp = { kind: "CmEp", id: world.nextId++, alive: true, regions: new Set(), ...ends }
    sides.set(ep, {
      stage: "idle",
      qp: QueuePair.make(ep, config),
      other: undefined,
      privateData,
      answer: undefined,
      client,
      events: unsafeQueue(),
      toldDisconnected: false,
      far: undefined,
      asked: undefined,
      acceptor: undefined
    })
    eps.set(ep.id, ep)
    return ep
  }

  /** Its one DISCONNECTED event, once. */
  const tellDisconnected = (ep: fabric.CmEp) => {
    const s = side(ep)
    if (s.toldDisconnected || !ep.alive) return
    s.toldDisconnected = true
    Queue.unsafeOffer(s.events, "DISCONNECTED")
  }

  /** rdma_disconnect's effect: the queue pair in error (flushing), both sides told. */
  const disconnect = (ep: fabric.CmEp) => {
    const s = side(ep)
    if (s.stage !== "established") return
    s.stage = "disconnected"
    QueuePair.toError(s.qp)
    tellDisconnected(ep)
    tellOther(ep)
  }

  /** The other side hears of a disconnect (or a destroyed endpoint): DISCONNECTED, here or in its process. */
  const tellOther = (ep: fabric.CmEp) => {
    const s = side(ep)
    if (s.other !== undefined) tellDisconnected(s.other)
    else if (s.far !== undefined) say(s.far, ep, { k: "disconnected" })
  }

  /** The answer to a waiting rdma_connect, if one still waits. */
  const answer = (client: fabric.CmEp, exit: Exit.Exit<void, RdmaError.RdmaCmError>) => {
    const waiting = side(client).answer
    side(client).answer = undefined
    if (waiting !== undefined) waiting(exit)
  }

  /** A request nobody will accept (its listener or its endpoint destroyed): rdma_cm rejects it. */
  const refuse = (client: fabric.CmEp, why: string, privateData?: Uint8Array) => {
    if (standIns.delete(client)) return say(side(client).far!, client, { k: "rejected", privateData, why })
    if (privateData !== undefined) side(client).privateData = privateData
    answer(client, Exit.fail(errno("rdma_connect", ECONNREFUSED, why)))
  }

  /** rdma_accept of a request whose client gave up, was destroyed, or whose process left: as the device says it. */
  const clientGone = () =>
    errno(
      "rdma_accept",
      ECONNABORTED,
      "the client that asked has gone (it gave up, destroyed its endpoint or was killed): the request is spent; " +
        "take the next one (cmGetRequest)"
    )

  /**
   * Waits for the answer to `ep`'s connect (or, for a far client's request, to its accept), at most
   * `timeoutMs`; interrupted or timed out, the endpoint never connects. The waiter is in place
   * before this returns (an answer may come before the wait runs). The bound is on Effect's Clock,
   * as the native driver's is (a user's TestClock drives it); an answer from another process comes
   * over a real socket whatever this process's clock says.
   */
  const awaitAnswer = (ep: fabric.CmEp, timeoutMs: number, operation = "rdma_connect") => {
    const s = side(ep)
    const answered = Deferred.unsafeMake<void, RdmaError.RdmaCmError>(FiberId.none)
    const waiting = (exit: Exit.Exit<void, RdmaError.RdmaCmError>) => Deferred.unsafeDone(answered, exit)
    s.answer = waiting
    const giveUp = Effect.sync(() => {
      if (s.answer !== waiting) return // answered
      s.answer = undefined
      if (s.stage === "connecting") s.stage = "failed"
    })
    return Deferred.await(answered).pipe(
      Effect.timeoutFail({
        duration: Duration.millis(timeoutMs),
        onTimeout: () => errno(operation, ETIMEDOUT, `no answer within ${timeoutMs} ms`)
      }),
      Effect.ensuring(giveUp)
    )
  }

  /** The endpoint is gone: its queue pair, its events, and whatever waited on it. */
  const destroyEndpoint = (ep: fabric.CmEp) => {
    const s = side(ep)
    if (s.stage === "established") {
      // rdma_destroy_ep of a connected endpoint: the other side hears the disconnect.
      s.stage = "disconnected"
      tellOther(ep)
    }
    if (s.stage === "idle" && s.client !== undefined) refuse(s.client, "the request was destroyed unanswered")
    // A request accepted for a far client but not established: that client hears the disconnect.
    if (s.client !== undefined && s.far !== undefined && (s.stage === "connecting" || s.stage === "failed")) {
      say(s.far, ep, { k: "disconnected" })
    }
    if (s.stage === "connecting") {
      // A connect still waiting (in another fiber) hears of it at once.
      answer(ep, Exit.fail(errno("rdma_connect", ECANCELED, "the endpoint was destroyed")))
      s.stage = "failed"
    }
    s.acceptor?.()
    s.acceptor = undefined
    QueuePair.destroy(s.qp, errno("ibv_get_cq_event", ECANCELED, "the endpoint was destroyed"))
    ep.listener?.requests.delete(ep)
    eps.delete(ep.id)
    releaseHandle(ep)
    Queue.unsafeOffer(s.events, undefined)
  }

  /** A fault plan's lost connection: both sides' queue pairs in error, both told. */
  const lose = (ep: fabric.CmEp) => {
    const { far, other } = side(ep)
    disconnect(ep)
    if (other !== undefined && other.alive) disconnect(other)
    if (far !== undefined) say(far, ep, { k: "lost" })
  }

  /** rdma_listen's listener, once its address is free. */
  const listen = (address: string, actual: number, config: Driver.Model.CmEpConfig) => {
    const listener: fabric.CmListener = {
      kind: "CmListener",
      id: world.nextId++,
      alive: true,
      address,
      port: actual,
      config: copyConfig(config),
      requests: new Set()
    }
    listeners.set(key(address, actual), listener)
    incoming.set(listener, unsafeQueue())
    return Effect.map(
      acquire(listener, "CmListener", `rdma_cm listener on ${address}:${actual}`),
      (handle) => ({ handle, port: actual })
    )
  }

  const calls = {
    cmEpCreate: (address, port, config) =>
      call(
        "rdma_create_ep",
        () =>
          typeof address !== "string"
            ? errno("rdma_getaddrinfo", EINVAL, Arguments.address(address) ?? "address must be a string")
            : integerIn(port, "port", 1, 65535) !== undefined
            ? errno("rdma_getaddrinfo", EINVAL, integerIn(port, "port", 1, 65535)!)
            : configProblem(config) !== undefined
            ? errno("rdma_create_ep", EINVAL, configProblem(config)!)
            : undefined,
        (code) => errno("rdma_create_ep", code, "planned fault"),
        () => {
          // One process, one fabric: an address is reachable when a simulated device answers there.
          if (!world.devices.has(address)) {
            return Effect.fail(errno("rdma_create_ep", EHOSTUNREACH, `rdma_resolve_addr: no route to ${address}`))
          }
          const ep = newEndpoint(
            {
              localAddress: address,
              localPort: freePort(address),
              remoteAddress: address,
              remotePort: port,
              listener: undefined
            },
            copyConfig(config),
            new Uint8Array(0),
            undefined
          )
          return acquire(ep, "CmEp", `rdma_cm endpoint to ${address}:${port}`)
        }
      ),

    cmConnect: (value, privateData, timeoutMs) =>
      call(
        "rdma_connect",
        () =>
          deadEp("rdma_connect", value) ??
            (epOf(value)!.listener !== undefined
              ? errno("rdma_connect", EINVAL, "the endpoint is an incoming request: accept it (cmAccept) or reject it")
              : side(epOf(value)!).stage !== "idle"
              ? errno("rdma_connect", EINVAL, "the endpoint has already connected, or tried to: make a new one")
              : undefined) ??
            badPrivateData("rdma_connect", privateData, PRIVATE_DATA.connect) ??
            badTimeout("rdma_connect", timeoutMs),
        (code) => errno("rdma_connect", code, "planned fault"),
        () =>
          Effect.suspend(() => {
            const ep = epOf(value)!
            const s = side(ep)
            const listener = listeners.get(key(ep.remoteAddress, ep.remotePort))
            if (listener === undefined && link !== undefined) {
              // Perhaps another process listens there: the network's router knows (`unreachable` if none).
              s.stage = "connecting"
              s.asked = claimKey(ep.remoteAddress, ep.remotePort)
              link.send({
                t: "cmConnect",
                key: s.asked,
                from: farOf(ep),
                address: ep.localAddress,
                port: ep.localPort,
                privateData: padded(privateData, PRIVATE_DATA.connect)
              })
              return awaitAnswer(ep, timeoutMs)
            }
            if (listener === undefined) {
              s.stage = "failed"
              return Effect.fail(
                errno(
                  "rdma_connect",
                  EHOSTUNREACH,
                  `nobody listens on ${ep.remoteAddress}:${ep.remotePort} (UNREACHABLE)`
                )
              )
            }
            s.stage = "connecting"
            Queue.unsafeOffer(incoming.get(listener)!, {
              client: ep,
              privateData: padded(privateData, PRIVATE_DATA.connect)
            })
            return awaitAnswer(ep, timeoutMs)
          })
      ),

    cmListen: (address, port, config) =>
      call(
        "rdma_listen",
        () =>
          typeof address !== "string"
            ? errno("rdma_getaddrinfo", EINVAL, Arguments.address(address) ?? "address must be a string")
            : integerIn(port, "port", 0, 65535) !== undefined
            ? errno("rdma_getaddrinfo", EINVAL, integerIn(port, "port", 0, 65535)!)
            : configProblem(config) !== undefined
            ? errno("rdma_create_ep", EINVAL, configProblem(config)!)
            : undefined,
        (code) => errno("rdma_listen", code, "planned fault"),
        () => {
          if (!world.devices.has(address)) {
            return Effect.fail(errno("rdma_bind_addr", EADDRNOTAVAIL, `no RDMA device answers at ${address}`))
          }
          const actual = port === 0 ? freePort(address) : port
          if (listeners.has(key(address, actual))) {
            return Effect.fail(errno("rdma_bind_addr", EADDRINUSE, `${address}:${actual} is in use`))
          }
          if (link === undefined) return listen(address, actual, config)
          // On a shared network the address is claimed from the router first: one listener in all.
          // Uninterruptible (the claim is bounded by the link's timeout), so a claim granted is never lost.
          return Effect.uninterruptible(
            Effect.flatMap(Effect.promise(() => link.claim(claimKey(address, actual))), (claimed) =>
              claimed === "ok"
                ? listen(address, actual, config)
                : Effect.fail(
                  claimed === "taken"
                    ? errno(
                      "rdma_bind_addr",
                      EADDRINUSE,
                      `${address}:${actual} is in use (by another process on the simulated network)`
                    )
                    : errno("rdma_bind_addr", EADDRNOTAVAIL, `the simulated network at ${link.path} is gone`)
                ))
          )
        }
      ),

    cmGetRequest: (value) =>
      call(
        "rdma_get_request",
        () => {
          const listener = listenerOf(value)
          return listener === undefined
            ? errno("rdma_get_request", EINVAL, "expected a listener handle (from cmListen)")
            : !listener.alive
            ? errno(
              "rdma_get_request",
              EINVAL,
              "the listener was already destroyed; a handle is not usable after its release"
            )
            : undefined
        },
        (code) => errno("rdma_get_request", code, "planned fault"),
        () => {
          const listener = listenerOf(value)!
          const queue = incoming.get(listener)!
          const next: Effect.Effect<Driver.Model.CmEpHandle, RdmaError.RdmaCmError> = Effect.flatMap(
            Queue.take(queue),
            (request) => {
              if (request === undefined || !listener.alive) {
                Queue.unsafeOffer(queue, undefined) // for the next waiter
                return Effect.fail(errno("rdma_get_request", ECANCELED, "the listener was destroyed"))
              }
              const client = request.client
              // A client that gave up (timed out, interrupted, destroyed) is not a request any more.
              if (!client.alive || side(client).stage !== "connecting") return next
              const ep = newEndpoint(
                {
                  localAddress: listener.address,
                  localPort: listener.port,
                  remoteAddress: client.localAddress,
                  remotePort: client.localPort,
                  listener
                },
                listener.config,
                request.privateData,
                client
              )
              listener.requests.add(ep)
              return acquire(ep, "CmEp", `incoming rdma_cm request on ${listener.address}:${listener.port}`)
            }
          )
          return next
        }
      ),

    cmPrivateData: (value) =>
      Effect.suspend(() => {
        const refused = deadEp("rdma_cm private data", value)
        return refused !== undefined
          ? Effect.fail(refused)
          : Effect.succeed(Uint8Array.from(side(epOf(value)!).privateData))
      }),

    cmAccept: (value, privateData, timeoutMs) =>
      call(
        "rdma_accept",
        () =>
          deadEp("rdma_accept", value) ??
            (epOf(value)!.listener === undefined || side(epOf(value)!).stage !== "idle"
              ? errno("rdma_accept", EINVAL, "not an unanswered request from cmGetRequest")
              : undefined) ??
            badPrivateData("rdma_accept", privateData, PRIVATE_DATA.accept) ??
            badTimeout("rdma_accept", timeoutMs),
        (code) => errno("rdma_accept", code, "planned fault"),
        () =>
          Effect.suspend(() => {
            const ep = epOf(value)!
            const s = side(ep)
            const client = s.client!
            if (!client.alive) {
              s.stage = "failed"
              return Effect.fail(clientGone())
            }
            const c = side(client)
            if (c.stage !== "connecting") {
              // It gave up but is alive: the accept waits for its end (or its own bound).
              s.stage = "connecting"
              c.acceptor = () => {
                if (s.stage === "connecting") s.stage = "failed"
                answer(ep, Exit.fail(clientGone()))
              }
              return awaitAnswer(ep, timeoutMs, "rdma_accept")
            }
            if (standIns.delete(client)) {
              // The asking endpoint is in another process: established once it answers (the CM's RTU),
              // refused if it has gone meanwhile (the device's REJ), as a wait like a connect's.
              c.stage = "failed"
              s.stage = "connecting"
              s.far = c.far
              say(c.far!, ep, { k: "accepted", privateData: padded(privateData, PRIVATE_DATA.accept) })
              return awaitAnswer(ep, timeoutMs, "rdma_accept")
            }
            s.stage = "established"
            c.stage = "established"
            s.other = client
            c.other = ep
            c.privateData = padded(privateData, PRIVATE_DATA.accept)
            QueuePair.connect(s.qp, c.qp)
            answer(client, Exit.void)
            return Effect.void
          })
      ),

    cmReject: (value, privateData) =>
      call(
        "rdma_reject",
        () =>
          deadEp("rdma_reject", value) ??
            (epOf(value)!.listener === undefined || side(epOf(value)!).stage !== "idle"
              ? errno("rdma_reject", EINVAL, "not an unanswered request from cmGetRequest")
              : undefined) ??
            badPrivateData("rdma_reject", privateData, PRIVATE_DATA.reject),
        (code) => errno("rdma_reject", code, "planned fault"),
        () =>
          Effect.sync(() => {
            const ep = epOf(value)!
            const client = side(ep).client!
            side(ep).stage = "failed"
            if (!client.alive || side(client).stage !== "connecting") return
            side(client).stage = "failed"
            refuse(
              client,
              "the other side rejected the request (REJECTED): its reason is in the private data",
              padded(privateData, PRIVATE_DATA.reject)
            )
          })
      ),

    cmNextEvent: (value) =>
      Effect.suspend(() => {
        const refused = deadEp("rdma_get_cm_event", value)
        if (refused !== undefined) return Effect.fail(refused)
        const events = side(epOf(value)!).events
        return Effect.flatMap(Queue.take(events), (event) => {
          if (event !== undefined) return Effect.succeed(event)
          Queue.unsafeOffer(events, undefined) // for the next waiter
          return Effect.fail(errno("rdma_get_cm_event", ECANCELED, "the endpoint was destroyed"))
        })
      }),

    cmDisconnect: (value) =>
      call(
        "rdma_disconnect",
        () => deadEp("rdma_disconnect", value),
        (code) => errno("rdma_disconnect", code, "planned fault"),
        () => Effect.sync(() => disconnect(epOf(value)!))
      ),

    cmEpDestroy: (value) =>
      call<void, RdmaError.RdmaCmError | RdmaError.ResourceInUseError>(
        "rdma_destroy_ep",
        () => {
          const refused = deadEp("rdma_destroy_ep", value)
          if (refused !== undefined) return refused
          const n = epOf(value)!.regions.size
          return n === 0 ? undefined : inUse(
            "rdma_destroy_ep",
            `${n} ${
              n === 1 ? "region is" : "regions are"
            } still registered on the endpoint: deregister them first (rdma_dereg_mr)`
          )
        },
        (code) => {
          // Gone even when it fails (the Driver's contract).
          destroyEndpoint(epOf(value)!)
          return errno("rdma_destroy_ep", code, "planned fault")
        },
        () => Effect.sync(() => destroyEndpoint(epOf(value)!))
      ),

    cmListenerDestroy: (value) =>
      Effect.suspend((): Effect.Effect<void, RdmaError.RdmaCmError | RdmaError.ResourceInUseError> => {
        const listener = listenerOf(value)
        if (listener === undefined || !listener.alive) {
          return Effect.fail(errno(
            "rdma_destroy_ep",
            EINVAL,
            listener === undefined ? "expected a listener handle (from cmListen)" : "the listener was already destroyed"
          ))
        }
        const n = listener.requests.size
        if (n > 0) {
          return Effect.fail(inUse(
            "rdma_destroy_ep",
            `${n} ${
              n === 1 ? "endpoint it handed out is" : "endpoints it handed out are"
            } still alive: destroy them first`
          ))
        }
        listeners.delete(key(listener.address, listener.port))
        link?.send({ t: "unclaim", key: claimKey(listener.address, listener.port) })
        releaseHandle(listener)
        // Requests nobody took are rejected; waits hear ECANCELED.
        const queue = incoming.get(listener)!
        for (const request of Effect.runSync(Queue.takeAll(queue))) {
          if (request !== undefined) refuse(request.client, "the listener was destroyed")
        }
        Queue.unsafeOffer(queue, undefined)
        return Effect.void
      }),

    cmEpInfo: (value) =>
      Effect.suspend(() => {
        const refused = deadEp("rdma_cm endpoint", value)
        if (refused !== undefined) return Effect.fail(refused)
        const ep = epOf(value)!
        return Effect.succeed({
          qpNum: ep.id & 0xffffff,
          maxInlineData: side(ep).qp.config.maxInlineData,
          localAddress: ep.localAddress,
          localPort: ep.localPort,
          remoteAddress: ep.remoteAddress,
          remotePort: ep.remotePort
        })
      }),

    ...cmPostCalls(world, tools, {
      queuePairOf: (value) => {
        const ep = epOf(value)
        return ep === undefined || !ep.alive ? undefined : side(ep).qp
      },
      lose
    }),

    cmArmCompletions: (value, onReady) => {
      const refused = deadEp("ibv_get_cq_event", value)
      return refused !== undefined
        ? CompletionQueue.refusedWait(refused, onReady)
        : side(epOf(value)!).qp.completions.arm(onReady)
    }
  } satisfies Driver.Model.CmEndpointCalls

  /** A request from an endpoint of another process, queued for rdma_get_request like one from here. */
  const asked = (message: Extract<wire.Message, { readonly t: "cmConnect" }>) => {
    const listener = listeners.get(message.key.slice("cm:".length))
    if (listener === undefined || !listener.alive) {
      // Said as the listener's process (the network lets a process speak for its own only).
      return sayAs(message.from, { process: link!.self, conn: listener?.id ?? 0 }, { k: "unreachable" })
    }
    // Its stand-in here: what the request's checks read (not in the ledger: the other process owns it).
    const client: fabric.CmEp = {
      kind: "CmEp",
      id: message.from.conn,
      alive: true,
      regions: new Set(),
      localAddress: message.address,
      localPort: message.port,
      remoteAddress: listener.address,
      remotePort: listener.port,
      listener: undefined
    }
    sides.set(client, {
      stage: "connecting",
      qp: QueuePair.make(client, listener.config),
      other: undefined,
      privateData: NO_BYTES,
      answer: undefined,
      client: undefined,
      events: unsafeQueue(),
      toldDisconnected: false,
      far: message.from,
      asked: undefined,
      acceptor: undefined
    })
    standIns.add(client)
    Queue.unsafeOffer(incoming.get(listener)!, { client, privateData: message.privateData })
  }

  /** What the other endpoint, in another process, says to one of this process. */
  const heard = (to: wire.Far, from: wire.Far, cm: wire.CmSays) => {
    const ep = eps.get(to.conn)
    const s = ep === undefined ? undefined : side(ep)
    switch (cm.k) {
      case "unreachable":
        if (s === undefined || s.stage !== "connecting") return
        s.stage = "failed"
        s.asked = undefined
        return answer(
          ep!,
          Exit.fail(
            errno(
              "rdma_connect",
              EHOSTUNREACH,
              `nobody listens on ${ep!.remoteAddress}:${ep!.remotePort} (UNREACHABLE)`
            )
          )
        )
      case "rejected":
        if (s === undefined || s.stage !== "connecting") return
        s.stage = "failed"
        s.asked = undefined
        return refuse(ep!, cm.why, cm.privateData)
      case "accepted":
        // Accepted there, destroyed here meanwhile: the accept fails there; given up but alive: it
        // fails when this endpoint is destroyed (or at its bound there).
        if (s === undefined) return sayAs(from, to, { k: "gone" })
        if (s.stage !== "connecting") {
          s.acceptor = () => sayAs(from, to, { k: "gone" })
          return
        }
        s.stage = "established"
        s.asked = undefined
        s.far = from
        s.privateData = cm.privateData
        QueuePair.connectFar(s.qp, farPeer(ep!, from))
        sayAs(from, to, { k: "established" })
        return answer(ep!, Exit.void)
      case "established":
      case "gone": {
        // The far client's answer to this side's accept, if the accept still waits for it.
        if (s === undefined || s.stage !== "connecting" || s.far === undefined) return
        if (cm.k === "gone") {
          s.stage = "failed"
          s.far = undefined
          return answer(ep!, Exit.fail(clientGone()))
        }
        s.stage = "established"
        QueuePair.connectFar(s.qp, farPeer(ep!, s.far))
        return answer(ep!, Exit.void)
      }
      case "disconnected":
        // As within one process: this side is told, and stops only at its own rdma_disconnect.
        return ep === undefined ? undefined : tellDisconnected(ep)
      case "lost":
        // A fault plan's lost connection there: this side's queue pair in error too.
        return ep === undefined ? undefined : disconnect(ep)
      case "post": {
        const reply = (result: number | Uint8Array) => sayAs(from, to, { k: "settle", result })
        // A destroyed endpoint's queue pair is gone: the requester's retries run out.
        if (ep === undefined) return reply(RdmaError.WcStatus.RETRY_EXC_ERR)
        return QueuePair.received(s!.qp, cm.reach, reply)
      }
      case "settle":
        return ep === undefined ? undefined : QueuePair.settle(s!.qp, cm.result)
    }
  }

  /** A process left (`undefined`: the whole network did): its endpoints' connections are lost, its requests void. */
  const left = (process: number | undefined, keys: ReadonlyArray<string>) => {
    const gone = (far: wire.Far | undefined) => far !== undefined && (process === undefined || far.process === process)
    for (const client of standIns) {
      if (!gone(side(client).far)) continue
      standIns.delete(client)
      side(client).stage = "failed"
    }
    for (const ep of eps.values()) {
      const s = side(ep)
      if (s.stage === "connecting" && s.asked !== undefined && (process === undefined || keys.includes(s.asked))) {
        s.stage = "failed"
        s.asked = undefined
        answer(
          ep,
          Exit.fail(
            errno(
              "rdma_connect",
              EHOSTUNREACH,
              `the process listening on ${ep.remoteAddress}:${ep.remotePort} left the network`
            )
          )
        )
      } else if (s.stage === "connecting" && s.client !== undefined && gone(s.far)) {
        // An accept waiting for a client whose process left.
        s.stage = "failed"
        s.far = undefined
        answer(ep, Exit.fail(clientGone()))
      } else if (gone(s.far)) {
        s.far = undefined // nobody there to tell
        if (s.stage === "established") disconnect(ep)
        else tellDisconnected(ep)
        QueuePair.toError(s.qp)
      }
    }
  }

  link?.attach({
    message: (message) => {
      if (message.t === "cmConnect") asked(message)
      else if (message.t === "cm") heard(message.to, message.from, message.cm)
      else if (message.t === "gone") left(message.process, message.keys)
    },
    down: () => left(undefined, [])
  })

  return calls
}
