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
  for (const name of ["peerNew", "peerDelete", "mrDereg", "mrGetDescriptorSize", "mrGetDescriptor", "mrGetPtr", "mrGetSize"]) {
    expectThrow(name, () => binding[name](value), "code", -100004)
  }
  expectThrow("mrReg", () => binding.mrReg(value, new Uint8Array(64), 1), "code", -100004)
  for (const name of ["cmDestroyId", "cmDeregMr", "cmMrInfo"]) expectThrow(name, () => binding[name](value), "errno", 22)
  expectThrow("cmReg", () => binding.cmReg(value, "msgs", new Uint8Array(64)), "errno", 22)
}
// Connection calls (endpoints, requests, connections, work requests, waits): every guard.
const config = { timeoutMs: 1000, sqSize: 4, rqSize: 4, cqSize: 8, directWriteToPmem: false }
const badConfigs = [null, {}, { ...config, timeoutMs: -1 }, { ...config, sqSize: 2 ** 32 }, { ...config, directWriteToPmem: 1 }]
const rejections = []
for (const value of bogus) {
  for (const name of ["epShutdown", "connReqPrivateData", "connReqDelete", "connPrivateData", "connDisconnect", "connDelete", "pollCompletions", "srqDelete", "connQpNum"]) {
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
  for (const request of [
    null,
    { op: "nope", id: 1 },
    { op: "write", id: 1, dst: remote, dstOffset: 0, src: value, srcOffset: 0, length: 8 },
    { op: "read", id: 2, dst: value, dstOffset: 0, src: remote, srcOffset: 0, length: 8 },
    { op: "flush", id: 3, dst: remote, dstOffset: 0, length: 8, type: "nope" },
    { op: "atomicWrite", id: 4, dst: remote, dstOffset: 0, value: new Uint8Array(7) },
    { op: "send", id: 5, src: value, offset: -1, length: 8 },
    { op: "recv", id: 6, dst: value, offset: 0, length: 2 ** 40 }
  ]) {
    expectThrow("post", () => binding.post(value, request), "code", -100004)
  }
  if (binding.cancelWait(value, 1) !== false) failures++
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
  binding.cmCreateId("127.0.0.1"),
  binding.cmCreateId(undefined),
  ...rejections
]).then((results) => {
  for (const result of results) if (result.status !== "rejected") failures++
  if (typeof globalThis.gc === "function") globalThis.gc()
  setImmediate(() => {
    console.log(`valgrind-smoke: ${failures === 0 ? "ok" : `${failures} failures`}, live allocations ${binding.liveAllocations()}`)
    process.exitCode = failures === 0 ? 0 : 1
  })
})
