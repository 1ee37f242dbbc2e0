/**
 * A zero-cost JavaScript stand-in for the addon (RpmaBinding.Binding), for the host benchmarks:
 * the real NativeDriver runs over it, so what is measured is the driver and core, not a device.
 *
 * Completions come in one of two ways (`mode`, switchable at any time):
 * - "queued": `post` queues the completion synchronously, so the poll right after it finds it
 *   (as Soft-RoCE often does: the request completes inside the post call);
 * - "later": the completion is delivered on a later loop turn (setImmediate) through the callback
 *   of the pending `waitCompletions`, or left in the queue for the next poll if none waits.
 *
 * Connection events: ESTABLISHED on the turn after the connection is made, CLOSED on the turn
 * after it is disconnected. Everything else answers at once with a plausible value.
 */
import { Descriptor } from "@effect-rdma/core"
import type { RpmaBinding } from "@effect-rdma/native"

type Callback<A> = RpmaBinding.WaitCallback<A>
type Completion = RpmaBinding.WaitedCompletion

const unsupported = (): never => {
  throw Object.assign(new Error("not in the fake binding"), { errno: 38, operation: "rdma_cm" })
}

interface FakeConn {
  /** The ids of completed requests, made completions as the addon makes them (objects or numbers). */
  queue: Array<number>
  inflight: Array<number>
  waiter: Callback<Array<Completion>> | undefined
  /** The waiter's array, when it waits packed (waitPacked): it is told a count. */
  waiterInto: Float64Array | undefined
  waiterId: number
  eventWaiter: Callback<string> | undefined
  eventId: number
  established: boolean
  disconnected: boolean
  deliveryScheduled: boolean
}

export interface Fake {
  readonly binding: RpmaBinding.Binding
  mode: "queued" | "later"
}

const EMPTY: Array<Completion> = []
const completionOf = (id: number): Completion => ({ id, status: 0, byteLength: 0, opcode: 1, flags: 0 })
const PACKED_FIELDS = 7

export const make = (): Fake => {
  let nextId = 1
  const fake: Fake = { binding: undefined as unknown as RpmaBinding.Binding, mode: "queued" }

  const deliver = (conn: FakeConn) => {
    conn.deliveryScheduled = false
    if (conn.inflight.length > 0) {
      for (const c of conn.inflight) conn.queue.push(c)
      conn.inflight = []
    }
    const waiter = conn.waiter
    if (waiter === undefined || conn.queue.length === 0) return
    conn.waiter = undefined
    const into = conn.waiterInto
    conn.waiterInto = undefined
    if (into !== undefined) return (waiter as unknown as Callback<number>)(null, pollPacked(conn, into))
    const ready = conn.queue.map(completionOf)
    conn.queue = []
    waiter(null, ready)
  }
  const schedule = (conn: FakeConn) => {
    if (conn.deliveryScheduled) return
    conn.deliveryScheduled = true
    setImmediate(deliver, conn)
  }
  // A posted request's completion: queued now, or delivered a turn later.
  const enqueue = (conn: FakeConn, id: number) => {
    if (fake.mode === "queued") {
      conn.queue.push(id)
      if (conn.waiter !== undefined) schedule(conn)
    } else {
      conn.inflight.push(id)
      schedule(conn)
    }
  }
  // The addon's pollPacked: as many as fit, as numbers, the rest left queued.
  const pollPacked = (handle: unknown, into: Float64Array): number => {
    const conn = handle as FakeConn
    const count = Math.min(conn.queue.length, Math.floor(into.length / PACKED_FIELDS))
    for (let i = 0; i < count; i++) {
      const at = i * PACKED_FIELDS
      into[at] = conn.queue[i]!
      into[at + 1] = 0
      into[at + 2] = 0
      into[at + 3] = 1
      into[at + 4] = 0
      into[at + 5] = 0
      into[at + 6] = -1
    }
    if (count === conn.queue.length) conn.queue = []
    else conn.queue.splice(0, count)
    return count
  }
  const sendEvent = (conn: FakeConn, event: string) => {
    const waiter = conn.eventWaiter
    if (waiter === undefined) return
    conn.eventWaiter = undefined
    setImmediate(() => waiter(null, event))
  }

  const binding: RpmaBinding.Binding = {
    installLogCapture: () => {},
    privateDataLimits: { connect: 56, accept: 196, reject: 148 },
    getIbvContext: () => Promise.resolve({ kind: "context" }),
    peerNew: () => ({ kind: "peer" }),
    peerDelete: () => {},
    mrReg: (_peer, memory) => ({ handle: { kind: "mr", memory }, address: 0x7f0000001000n }),
    mrRegAsync: (_peer, memory) => Promise.resolve({ handle: { kind: "mr", memory }, address: 0x7f0000001000n }),
    // Shared receive queues are not on the benchmarked path.
    srqNew: () => ({ kind: "srq" }),
    srqDelete: () => {},
    connQpNum: () => 1,
    peerCfgDescriptor: () => new Uint8Array(1),
    connApplyRemotePeerCfg: () => {},
    mapFile: () => new Uint8Array(4096),
    unmapFile: () => {},
    liveMappings: () => 0,
    mrDereg: () => {},
    mrDeregAsync: () => Promise.resolve(),
    mrGetDescriptorSize: () => 21,
    mrGetDescriptor: (mr) =>
      Descriptor.encode({
        address: 0x7f0000001000n,
        length: BigInt((mr as { memory: Uint8Array }).memory.byteLength),
        rkey: 0x1234,
        usage: 0x1f
      }),
    mrGetPtr: () => 0x7f0000001000n,
    mrGetSize: (mr) => (mr as { memory: Uint8Array }).memory.byteLength,
    mrRemoteFromDescriptor: () => ({ kind: "remote" }),
    mrRemoteDelete: () => {},
    mrRemoteGetSize: () => 1n << 20n,
    mrRemoteGetFlushType: () => 1,
    cmReg: () => ({ kind: "cmMr" }),
    cmDeregMr: () => {},
    cmMrInfo: () => ({ address: 0n, length: 0, lkey: 0, rkey: 0 }),
    // librdmacm's endpoints are not benchmarked on the fake: every call is ENOSYS.
    cmEpCreate: unsupported,
    cmConnect: unsupported,
    cmListen: unsupported,
    cmGetRequest: unsupported,
    cmPrivateData: unsupported,
    cmAccept: unsupported,
    cmReject: unsupported,
    cmNextEvent: unsupported,
    cmDisconnect: unsupported,
    cmEpDestroy: unsupported,
    cmListenerDestroy: unsupported,
    cmEpInfo: unsupported,
    cmPost: unsupported,
    cmPostOne: unsupported,
    cmPostWindow: unsupported,
    cmPollPacked: unsupported,
    cmSpinPacked: unsupported,
    cmWaitCompletions: unsupported,
    cmWaitPacked: unsupported,
    cmCancel: () => false,
    epListen: () => ({ kind: "ep" }),
    epShutdown: () => {},
    epNextConnReq: () => nextId++,
    connReqNew: () => Promise.resolve({ kind: "req" }),
    connReqPrivateData: () => new Uint8Array(0),
    connReqConnect: (): object => {
      const conn: FakeConn = {
        queue: [],
        inflight: [],
        waiter: undefined,
        waiterInto: undefined,
        waiterId: 0,
        eventWaiter: undefined,
        eventId: 0,
        established: false,
        disconnected: false,
        deliveryScheduled: false
      }
      return conn
    },
    connReqDelete: () => {},
    connNextEvent: (handle, callback) => {
      const conn = handle as FakeConn
      conn.eventWaiter = callback
      conn.eventId = nextId++
      if (!conn.established) {
        conn.established = true
        sendEvent(conn, "ESTABLISHED")
      } else if (conn.disconnected) {
        sendEvent(conn, "CLOSED")
      }
      return conn.eventId
    },
    connPrivateData: () => new Uint8Array(0),
    connDisconnect: (handle) => {
      const conn = handle as FakeConn
      if (conn.disconnected) return
      conn.disconnected = true
      sendEvent(conn, "CLOSED")
    },
    connDelete: () => {},
    post: (handle, request) => enqueue(handle as FakeConn, (request as { id: number }).id),
    // Each request as post takes it, read from the numbers as the addon does: no object a
    // request. An id comes back as the addon's napi_create_double makes it (a small integer).
    postWindow: (handle, _regions, fields, count) => {
      const numbers = fields as Float64Array
      for (let i = 0; i < (count as number); i++) {
        const id = numbers[i * 9 + 1]!
        enqueue(handle as FakeConn, (id | 0) === id ? id | 0 : id)
      }
      return count as number
    },
    pollCompletions: (handle) => {
      const conn = handle as FakeConn
      if (conn.queue.length === 0) return EMPTY
      const ready = conn.queue.map(completionOf)
      conn.queue = []
      return ready
    },
    pollPacked,
    // A fake device completes on its own schedule (the loop's): nothing to spin for.
    spinCompletions: () => EMPTY,
    spinPacked: () => 0,
    waitPacked: (handle, into, callback) => {
      const id = binding.waitCompletions(handle, callback as unknown as Callback<Array<Completion>>)
      ;(handle as FakeConn).waiterInto = into
      return id
    },
    waitCompletions: (handle, callback) => {
      const conn = handle as FakeConn
      conn.waiter = callback
      conn.waiterInto = undefined
      conn.waiterId = nextId++
      if (conn.queue.length > 0 || conn.inflight.length > 0) schedule(conn)
      return conn.waiterId
    },
    cancelWait: (handle, id) => {
      const conn = handle as FakeConn
      if (conn.waiter !== undefined && conn.waiterId === id) {
        conn.waiter = undefined
        return true
      }
      if (conn.eventWaiter !== undefined && conn.eventId === id) {
        conn.eventWaiter = undefined
        return true
      }
      return false
    },
    allocate: (size) => new Uint8Array(size as number),
    free: () => {},
    liveHandles: () => ({
      peers: 0,
      localRegions: 0,
      remoteRegions: 0,
      cmRegions: 0,
      endpoints: 0,
      connectionRequests: 0,
      connections: 0,
      sharedReceiveQueues: 0,
      cmEndpoints: 0,
      cmListeners: 0
    }),
    liveAllocations: () => 0,
    mallocInUse: () => undefined,
    ibvDevices: () => [],
    ibvForkStatus: () => "unneeded",
    ibvContextDeviceName: () => "fake0",
    buildInfo: () => ({ napiVersion: 9 })
  }
  ;(fake as { binding: RpmaBinding.Binding }).binding = binding
  return fake
}
