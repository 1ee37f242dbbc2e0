/**
 * Connection settings as a user gives them, and the driver's configuration they make.
 */
import * as Duration from "effect/Duration"
import type * as Either from "effect/Either"
import type { Options } from "../Connection.js"
import * as DriverArguments from "../DriverArguments.js"
import type { ConnConfig } from "../DriverModel.js"
import { fromRpmaCode, RpmaCode, type RpmaError } from "../RdmaError.js"
import * as handles from "./handles.js"
import { type Keys, readRpmaSettings } from "./optionsOnce.js"
import * as srq from "./srq.js"

/** A timeout in milliseconds; NaN for what is not a duration (refused before anything opens). */
export const timeoutMillis = (timeout: Duration.DurationInput | undefined): number => {
  // Duration.decode reads a negative amount as zero: refused as what it is instead.
  if (typeof timeout === "number" ? !(timeout >= 0) : typeof timeout === "string" && /^\s*-/.test(timeout)) {
    return Number.NaN
  }
  try {
    // Whole milliseconds, as the C libraries take them: a fraction of one is rounded up, never to 0.
    return Math.ceil(Duration.toMillis(Duration.decode(timeout ?? "5 seconds")))
  } catch {
    return Number.NaN
  }
}

/** Every connection setting, read once where a connect or an accept starts. */
export const connectionKeys: Keys<Options> = {
  timeout: true,
  sendQueueSize: true,
  receiveQueueSize: true,
  completionQueueSize: true,
  directWriteToPmem: true,
  privateData: true,
  sharedReceiveQueue: true,
  receiveCompletionQueueSize: true,
  sharedCompletionChannel: true,
  polling: true
}

/**
 * Connection settings read once (optionsOnce), or RPMA_E_INVAL of `operation` when reading them
 * throws. `keys`: the call's own, when it takes more than the connection's.
 */
export const readSettings = <O extends Options>(
  options: O | undefined,
  operation: string,
  keys: Keys<O> = connectionKeys as Keys<O>
): Either.Either<O | undefined, RpmaError> => readRpmaSettings(options, operation, keys)

/** The driver's configuration that connection settings make (every default filled in). */
export const toConfig = (options: Options | undefined): ConnConfig => {
  const sqSize = options?.sendQueueSize ?? 64
  const rqSize = options?.receiveQueueSize ?? 64
  const rcqSize = options?.receiveCompletionQueueSize ?? 0
  const queue = options?.sharedReceiveQueue
  const srqHandle = queue === undefined ? undefined : handles.srq(queue)
  const srqSizes = srq.sizesOf(srqHandle)
  // The receives completing on the CQ: the connection's own, or its shared receive queue's when that
  // has no receive CQ; none with a receive CQ (the queue's or the connection's).
  const receivesOnCq = rcqSize > 0
    ? 0
    : queue === undefined
    ? rqSize
    : srqSizes?.rcqSize === 0
    ? srqSizes.rqSize
    : 0
  return {
    timeoutMs: timeoutMillis(options?.timeout),
    sqSize,
    rqSize,
    cqSize: options?.completionQueueSize ?? sqSize + receivesOnCq,
    rcqSize,
    sharedCompletionChannel: options?.sharedCompletionChannel ?? false,
    directWriteToPmem: options?.directWriteToPmem ?? false,
    srq: srqHandle
  }
}

/**
 * What a connection could not live with in its queue sizes (DriverArguments.queueSizes,
 * knowing the sizes of the shared receive queue it names), or undefined.
 */
export const queueSizesProblem = (config: ConnConfig): string | undefined =>
  DriverArguments.queueSizes({ ...config, srqSizes: srq.sizesOf(config.srq) })

/**
 * Private data that a connect or an accept cannot carry, refused as the drivers refuse it
 * (RpmaInvalidError of rpma_conn_req_connect) but before a request is made or answered: an
 * outgoing request is then never made, an incoming one stays unanswered and can be accepted again.
 */
export const privateDataRefusal = (
  privateData: Uint8Array | undefined,
  side: "connect" | "accept"
): RpmaError | undefined => {
  const refused = DriverArguments.privateData(privateData, side)
  return refused === undefined ? undefined : fromRpmaCode(RpmaCode.RPMA_E_INVAL, "rpma_conn_req_connect", refused)
}
