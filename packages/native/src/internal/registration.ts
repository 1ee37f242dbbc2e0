/**
 * The native driver's registration calls (mr.cc): local regions, registered synchronously or, when
 * large, on a worker thread; their descriptors; remote regions made from descriptors.
 */
import { Arguments, type Driver, Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Binding } from "../RpmaBinding.js"
import { as, attemptPromise, rpma } from "./addon.js"
import { inUseExitOr, inUseOr, rpmaExit, rpmaFailure } from "./failures.js"

/** Registrations of this many bytes or more run on a worker thread (about 10 ms of pinning). */
const LARGE_REGISTRATION = 16 * 2 ** 20

/**
 * Whether `memory` is a large Uint8Array by its real length (the addon registers that, whatever a
 * subclass's getters say); false for anything else (a Proxy: the addon refuses it).
 */
const isLarge = (memory: unknown): boolean =>
  Arguments.isUint8Array(memory) && Arguments.byteLengthOf(memory) >= LARGE_REGISTRATION

export const registrationCalls = (binding: Binding): Pick<
  Driver,
  | "mrReg"
  | "mrDereg"
  | "mrGetDescriptorSize"
  | "mrGetDescriptor"
  | "mrGetPtr"
  | "mrGetSize"
  | "mrRemoteFromDescriptor"
  | "mrRemoteDelete"
  | "mrRemoteGetSize"
  | "mrRemoteGetFlushType"
> => {
  // The handles of large regions, deregistered on a worker too (the handle does not tell its size).
  const large = new WeakSet<object>()
  return {
    // Pinning and unpinning are proportional to size (hundreds of milliseconds for 512 MiB): large
    // regions are registered and deregistered on a worker thread so that the event loop keeps
    // running. The rest is synchronous in the addon, so `now` makes those calls (and declines the large).
    mrReg: Model.synchronousCall(
      (peer, memory, usage) => {
        if (isLarge(memory)) return undefined
        try {
          return Exit.succeed(as<Model.MrRegistration>(binding.mrReg(peer, memory, usage)))
        } catch (cause) {
          return rpmaExit("rpma_mr_reg", cause)
        }
      },
      (peer, memory, usage) =>
        attemptPromise(() => binding.mrRegAsync(peer, memory, usage), rpmaFailure("rpma_mr_reg")).pipe(
          Effect.map((registered) => {
            large.add(registered.handle)
            return as<Model.MrRegistration>(registered)
          })
        )
    ),
    mrDereg: Model.synchronousCall(
      (mr) => {
        if (large.has(mr)) return undefined
        try {
          binding.mrDereg(mr)
          return Exit.void
        } catch (cause) {
          return inUseExitOr("rpma_mr_dereg", cause)
        }
      },
      (mr) => attemptPromise(() => binding.mrDeregAsync(mr), inUseOr("rpma_mr_dereg", rpmaFailure("rpma_mr_dereg")))
    ),
    mrGetDescriptorSize: (mr) => rpma("rpma_mr_get_descriptor_size", () => binding.mrGetDescriptorSize(mr)),
    mrGetDescriptor: (mr) => rpma("rpma_mr_get_descriptor", () => binding.mrGetDescriptor(mr)),
    mrGetPtr: (mr) => rpma("rpma_mr_get_ptr", () => binding.mrGetPtr(mr)),
    mrGetSize: (mr) => rpma("rpma_mr_get_size", () => binding.mrGetSize(mr)),
    mrRemoteFromDescriptor: (descriptor) =>
      rpma(
        "rpma_mr_remote_from_descriptor",
        () => as<Model.RemoteMrHandle>(binding.mrRemoteFromDescriptor(descriptor))
      ),
    mrRemoteDelete: (mr) => rpma("rpma_mr_remote_delete", () => binding.mrRemoteDelete(mr)),
    mrRemoteGetSize: (mr) => rpma("rpma_mr_remote_get_size", () => binding.mrRemoteGetSize(mr)),
    mrRemoteGetFlushType: (mr) => rpma("rpma_mr_remote_get_flush_type", () => binding.mrRemoteGetFlushType(mr))
  }
}
