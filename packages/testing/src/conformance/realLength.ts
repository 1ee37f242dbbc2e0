/**
 * Conformance cases for memory whose getters lie (issue 31, item 14): a Uint8Array subclass that
 * says it is 1 GiB long, from another offset, over another buffer, and holds 64 bytes. Both paths
 * register the real 64 bytes (the addon reads them in C++, the simulated driver and core through
 * the engine's own getters), and a request beyond them is refused before it is posted.
 */
import { CmEndpoint, Connection, LocalMr, Usage } from "@effect-rdma/core"
import * as Driver from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Case } from "../Conformance.js"
import { endpoint } from "./cmEndpointSupport.js"
import { connectedPair } from "./pair.js"
import { equal, expectTag, Lying, rawPeer } from "./support.js"

const REAL = 64

export const realLengthCases: ReadonlyArray<Case> = [
  {
    name: "a Uint8Array whose getters lie (1 GiB, holds 64 bytes) registers as its 64 bytes on both paths; a " +
      "1024-byte send from it is an OutOfRangeError, not posted",
    run: (address, port) =>
      Effect.gen(function*() {
        // The drivers themselves, given the lying memory (core hands them its real view).
        const driver = yield* Driver.RdmaDriver
        const rawEndpoint = yield* endpoint(address, port)
        const rawMessages = yield* Effect.acquireRelease(
          driver.cmReg(rawEndpoint, "msgs", new Lying(REAL)),
          (mr) => Effect.ignore(driver.cmDeregMr(mr))
        )
        yield* equal((yield* driver.cmMrInfo(rawMessages)).length, REAL, "rdma_reg_msgs's region (the driver's)")
        const peer = yield* rawPeer(address)
        const rawLocal = yield* Effect.acquireRelease(
          driver.mrReg(peer, new Lying(REAL), Usage.SEND),
          ({ handle }) => Effect.ignore(driver.mrDereg(handle))
        )
        yield* equal(yield* driver.mrGetSize(rawLocal.handle), REAL, "rpma_mr_reg's region (the driver's)")

        // librdmacm: rdma_reg_msgs on an endpoint of its own (the range check comes before the post).
        const ep = yield* CmEndpoint.make(address, port)
        const messages = yield* CmEndpoint.registerMessages(ep, new Lying(REAL))
        yield* equal(messages.length, REAL, "the librdmacm region's length")
        yield* equal(messages.memory.byteLength, REAL, "the librdmacm region's memory")
        yield* expectTag(CmEndpoint.send(ep, { src: messages, length: 1024 }), "OutOfRangeError", "a 1024-byte send")

        // librpma: over a connection, where a posted send would reach the device.
        const { client, clientPeer } = yield* connectedPair(address, port)
        const src = yield* LocalMr.register(clientPeer, new Lying(REAL), Usage.SEND)
        yield* equal(src.size, REAL, "the librpma region's size")
        yield* equal(src.memory.byteLength, REAL, "the librpma region's memory")
        yield* expectTag(Connection.send(client, { src, length: 1024 }), "OutOfRangeError", "a 1024-byte send")
        yield* expectTag(Connection.send(client, { src, offset: 32, length: 64 }), "OutOfRangeError", "past the end")
      })
  }
]
