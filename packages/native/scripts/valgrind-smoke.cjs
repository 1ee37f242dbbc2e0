// The addon's no-device paths, for scripts/valgrind.sh: descriptors, every guard, allocate/free,
// and the failing device lookups. Exits 0 when every call behaved; valgrind judges the memory.
"use strict"
const { join } = require("node:path")

const binding = require(join(__dirname, "..", "build", "Release", "rpma_addon.node"))

binding.installLogCapture()
let failures = 0
const expectThrow = (name, run, key, value) => {
  try {
    run()
  } catch (error) {
    if (error[key] === value) return
    console.error(`${name}: threw ${error.message}`)
  }
  failures++
  console.error(`${name}: expected ${key} ${value}`)
}

const descriptor = (length, usage) => {
  const d = new Uint8Array(length)
  for (let i = 0; i < length; i++) d[i] = (i * 37) & 0xff
  if (length > 20) d[20] = usage
  return d
}

// Descriptors: every length 0..40, usage 0 and not, padded and exact.
for (let round = 0; round < 20; round++) {
  for (let length = 0; length <= 40; length++) {
    for (const usage of [0, 0x11, 0xff]) {
      let remote
      try {
        remote = binding.mrRemoteFromDescriptor(descriptor(length, usage))
      } catch (error) {
        if (error.code !== -100004) failures++
        continue
      }
      binding.mrRemoteGetSize(remote)
      binding.mrRemoteGetFlushType(remote)
      binding.mrRemoteDelete(remote)
      expectThrow("double delete", () => binding.mrRemoteDelete(remote), "code", -100004)
      expectThrow("use after delete", () => binding.mrRemoteGetSize(remote), "code", -100004)
    }
  }
}

// Guards: wrong kinds, forged objects, nulls.
const remote = binding.mrRemoteFromDescriptor(descriptor(21, 0x11))
const bogus = [null, undefined, {}, 1, "x", () => {}, remote, Object.create(remote), new Proxy({}, {})]
for (const value of bogus) {
  for (
    const name of [
      "peerNew",
      "peerDelete",
      "mrDereg",
      "mrGetDescriptorSize",
      "mrGetDescriptor",
      "mrGetPtr",
      "mrGetSize"
    ]
  ) {
    expectThrow(name, () => binding[name](value), "code", -100004)
  }
  expectThrow("mrReg", () => binding.mrReg(value, new Uint8Array(64), 1), "code", -100004)
  for (const name of ["cmDeregMr", "cmMrInfo"]) expectThrow(name, () => binding[name](value), "errno", 22)
  expectThrow("cmReg", () => binding.cmReg(value, "msgs", new Uint8Array(64)), "errno", 22)
}
// Connection calls (endpoints, requests, connections, work requests, waits): every guard.
const config = { timeoutMs: 1000, sqSize: 4, rqSize: 4, cqSize: 8, directWriteToPmem: false }
const badConfigs = [null, {}, { ...config, timeoutMs: -1 }, { ...config, sqSize: 2 ** 32 }, {
  ...config,
  directWriteToPmem: 1
}]
const rejections = []
for (const value of bogus) {
  for (
    const name of [
      "epShutdown",
      "connReqPrivateData",
      "connReqDelete",
      "connPrivateData",
      "connDisconnect",
      "connDelete",
      "pollCompletions",
      "srqDelete",
      "connQpNum"
    ]
  ) {
    expectThrow(name, () => binding[name](value), "code", -100004)
  }
  expectThrow("epListen", () => binding.epListen(value, "127.0.0.1", 7000), "code", -100004)
  expectThrow("epListen port 0", () => binding.epListen(value, "127.0.0.1", 0), "code", -100004)
  expectThrow("connReqConnect", () => binding.connReqConnect(value, new Uint8Array(300)), "code", -100004)
  for (const cfg of [config, ...badConfigs]) {
    expectThrow("epNextConnReq", () => binding.epNextConnReq(value, cfg, () => failures++), "code", -100004)
    rejections.push(binding.connReqNew(value, "127.0.0.1", 7000, cfg))
  }
  expectThrow("connNextEvent", () => binding.connNextEvent(value, () => failures++), "code", -100004)
  expectThrow("waitCompletions", () => binding.waitCompletions(value, undefined), "code", -100004)
  for (const into of [new Float64Array(7), new Float64Array(6), new Uint8Array(56), undefined]) {
    expectThrow("pollPacked", () => binding.pollPacked(value, into), "code", -100004)
    expectThrow("spinPacked", () => binding.spinPacked(value, into, 1000), "code", -100004)
    expectThrow("waitPacked", () => binding.waitPacked(value, into, () => failures++), "code", -100004)
  }
  expectThrow("spinCompletions", () => binding.spinCompletions(value, -1), "code", -100004)
  for (
    const request of [
      null,
      { op: "nope", id: 1 },
      { op: "write", id: 1, dst: remote, dstOffset: 0, src: value, srcOffset: 0, length: 8 },
      { op: "read", id: 2, dst: value, dstOffset: 0, src: remote, srcOffset: 0, length: 8 },
      { op: "flush", id: 3, dst: remote, dstOffset: 0, length: 8, type: "nope" },
      { op: "atomicWrite", id: 4, dst: remote, dstOffset: 0, value: new Uint8Array(7) },
      { op: "send", id: 5, src: value, offset: -1, length: 8 },
      { op: "recv", id: 6, dst: value, offset: 0, length: 2 ** 40 }
    ]
  ) {
    expectThrow("post", () => binding.post(value, request), "code", -100004)
  }
  if (binding.cancelWait(value, 1) !== false) failures++
}

// librdmacm's verbs API (cm_ep.cc, cm_ep_post.cc): every guard.
const epConfig = { timeoutMs: 1000, maxSendWr: 4, maxRecvWr: 4, maxSendSge: 2, maxRecvSge: 2, maxInlineData: 64 }
for (const value of bogus) {
  for (const name of ["cmPrivateData", "cmReject", "cmDisconnect", "cmEpDestroy", "cmListenerDestroy", "cmEpInfo"]) {
    expectThrow(name, () => binding[name](value), "errno", 22)
  }
  for (const into of [new Float64Array(6), new Float64Array(0), new Uint8Array(48), undefined]) {
    expectThrow("cmPollPacked", () => binding.cmPollPacked(value, into), "errno", 22)
  }
  for (const name of ["cmConnect", "cmAccept"]) {
    expectThrow(name, () => binding[name](value, new Uint8Array(300), () => failures++), "errno", 22)
  }
  for (const name of ["cmGetRequest", "cmNextEvent", "cmWaitCompletions"]) {
    expectThrow(name, () => binding[name](value, () => failures++), "errno", 22)
  }
  expectThrow("cmWaitPacked", () => binding.cmWaitPacked(value, new Float64Array(6), () => failures++), "errno", 22)
  for (
    const request of [null, { op: "nope" }, { op: "send", id: 1, segments: [{ mr: value, offset: 0, length: 8 }] }]
  ) {
    expectThrow("cmPost", () => binding.cmPost(value, request), "errno", 22)
  }
  for (const fields of [new Float64Array(8), new Float64Array(0), [0, 1, 0, 0, 8, 1, 0, 0], undefined]) {
    expectThrow("cmPostWindow", () => binding.cmPostWindow(value, [value], fields, 1), "errno", 22)
  }
  for (const cfg of [null, {}, { ...epConfig, maxSendWr: 0 }, { ...epConfig, timeoutMs: -1 }]) {
    expectThrow("cmEpCreate", () => binding.cmEpCreate("127.0.0.1", 7000, cfg, () => failures++), "errno", 22)
    expectThrow("cmListen", () => binding.cmListen(typeof value === "string" ? null : value, 7000, cfg), "errno", 22)
  }
  if (binding.cmCancel(value, 1) !== false) failures++
}

try {
  new remote.constructor()
  failures++
} catch {}
binding.mrRemoteDelete(remote)

// Memory: allocate, write, free, free again, foreign frees, dropped allocations.
for (let i = 0; i < 200; i++) {
  const memory = binding.allocate(4096 + i)
  memory.fill(i & 0xff)
  binding.free(memory)
  binding.free(memory)
  binding.allocate(1000) // dropped: freed by its finalizer
}
expectThrow("allocate(0)", () => binding.allocate(0), "code", -100004)
expectThrow("allocate(-1)", () => binding.allocate(-1), "code", -100004)
expectThrow("free(foreign)", () => binding.free(new Uint8Array(8)), "code", -100004)
const kept = binding.allocate(4096)
structuredClone(kept.buffer, { transfer: [kept.buffer] })
binding.free(kept)

// The failing device lookups, through librpma's and librdmacm's error paths.
Promise.allSettled([
  binding.getIbvContext("127.0.0.1", "local"),
  binding.getIbvContext("127.0.0.1", "remote"),
  binding.getIbvContext(null, "local"),
  ...rejections
]).then(async (results) => {
  results.forEach((result, i) => {
    if (result.status === "rejected") return
    // librdmacm resolves a loopback address to a local device when there is one (its loopback
    // resolution), so "remote 127.0.0.1" fails only where there is no device.
    if (i === 1 && process.env.RDMA_ADDRESS) return
    failures++
    console.error(`device lookup ${i}: expected a rejection, got ${String(result.value)}`)
  })
  if (process.env.RDMA_ADDRESS) await deviceRound(process.env.RDMA_ADDRESS)
  if (typeof globalThis.gc === "function") globalThis.gc()
  setImmediate(() => {
    console.log(
      `valgrind-smoke: ${failures === 0 ? "ok" : `${failures} failures`}, live allocations ${binding.liveAllocations()}`
    )
    process.exitCode = failures === 0 ? 0 : 1
  })
})

// With a device (RDMA_ADDRESS, in the VM): one endpoint pair through its whole life, so that
// valgrind sees the event and completion paths too.
async function deviceRound(address) {
  const waitFor = (start) =>
    new Promise((resolve, reject) => start((error, value) => (error ? reject(error) : resolve(value))))
  const { handle: listener, port } = binding.cmListen(address, 0, epConfig)
  let client
  const created = waitFor((callback) => (client = binding.cmEpCreate(address, port, epConfig, callback)))
  await created
  const clientMr = binding.cmReg(client, "msgs", new Uint8Array(64))
  binding.cmPost(client, { op: "recv", id: 1, segments: [{ mr: clientMr, offset: 0, length: 64 }] })
  const connected = waitFor((callback) => binding.cmConnect(client, new Uint8Array(8), callback))
  const server = await waitFor((callback) => binding.cmGetRequest(listener, callback))
  const serverMr = binding.cmReg(server, "write", new Uint8Array(64))
  const serverMsgs = binding.cmReg(server, "msgs", new Uint8Array(64))
  await waitFor((callback) => binding.cmAccept(server, new Uint8Array(16), callback))
  await connected
  binding.cmPrivateData(client)
  binding.cmEpInfo(server)
  const info = binding.cmMrInfo(serverMr)
  binding.cmPost(client, {
    op: "write",
    id: 2,
    imm: 5,
    remoteAddress: info.address,
    rkey: info.rkey,
    segments: [{ mr: clientMr, offset: 0, length: 8 }]
  })
  binding.cmPost(server, { op: "recv", id: 3, segments: [{ mr: serverMsgs, offset: 0, length: 64 }] })
  binding.cmPost(server, { op: "send", id: 4, inline: true, segments: [{ mr: serverMsgs, offset: 0, length: 8 }] })
  // A window in one call (cmPostWindow): two writes, the first unsignalled; then one refused at its
  // first request (a NaN offset), nothing posted.
  const rows = new Float64Array([3, 6, 0, 0, 8, 0, 0, info.rkey, 3, 7, 0, 8, 8, 1, 0, info.rkey])
  const remotes = new BigUint64Array([info.address, info.address + 8n])
  if (binding.cmPostWindow(client, [clientMr], rows, 2, remotes) !== 2) failures++
  rows[3] = NaN
  expectThrow("cmPostWindow", () => binding.cmPostWindow(client, [clientMr], rows, 2, remotes), "posted", 0)
  const want = { client: new Set([1, 2, 7]), server: new Set([3, 4]) }
  const packed = new Float64Array(6)
  for (const [side, ep] of [["client", client], ["server", server]]) {
    while (want[side].size > 0) {
      // One completion a packed read (the rest stay in the CQs for the next).
      const count = binding.cmPollPacked(ep, packed)
      const ready = count === 0
        ? await waitFor((callback) => binding.cmWaitCompletions(ep, callback))
        : [{ id: packed[0] }]
      for (const c of ready) want[side].delete(c.id)
    }
  }
  const disconnected = waitFor((callback) => binding.cmNextEvent(server, callback))
  binding.cmDisconnect(client)
  const event = await disconnected
  if (event !== "DISCONNECTED") {
    failures++
    console.error(`the server's event after the client's disconnect: ${event}`)
  }
  for (const mr of [clientMr, serverMr, serverMsgs]) binding.cmDeregMr(mr)
  binding.cmEpDestroy(server)
  binding.cmEpDestroy(client)
  binding.cmListenerDestroy(listener)
  const live = binding.liveHandles()
  if (live.cmEndpoints !== 0 || live.cmListeners !== 0 || live.cmRegions !== 0) {
    failures++
    console.error(`alive after the device round: ${JSON.stringify(live)}`)
  }
  console.log("valgrind-smoke: device round ok")
}
