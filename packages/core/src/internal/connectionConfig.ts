/**
 * Connection settings as a user gives them, and the driver's configuration they make.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import type { ConnConfig } from "../Driver.js"
import type { SharedReceiveQueue } from "../SharedReceiveQueue.js"

/**
 * Connection settings; every field has a default.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** How long to wait for address resolution and for the connection to be established. Default 5 seconds. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Requests in flight at once on the send queue. Default 64. */
  readonly sendQueueSize?: number | undefined
  /** Receives posted at once. Default 64. */
  readonly receiveQueueSize?: number | undefined
  /** Completion queue size. Default: send + receive queue sizes. */
  readonly completionQueueSize?: number | undefined
  /** The remote peer writes straight to persistent memory, so persistent flushes are allowed. Default false. */
  readonly directWriteToPmem?: boolean | undefined
  /**
   * Bytes sent with the connection request (rdma_cm private data). It is neither encrypted nor
   * authenticated: carry descriptors over `DescriptorExchange` instead, unless a C peer needs it.
   */
  readonly privateData?: Uint8Array | undefined
  /**
   * rpma_conn_cfg_set_srq: the connection's incoming messages land in this queue's receives (post
   * them with {@link SharedReceiveQueue.postRecv}); `Connection.recv` on the connection is refused. The
   * queue is deleted only after the connection.
   */
  readonly sharedReceiveQueue?: SharedReceiveQueue | undefined
  /**
   * rpma_conn_cfg_set_rcq_size: receives complete on a receive completion queue of their own, of
   * this size (at least the receive queue size), and the completion queue then needs only the send
   * queue's size. Operations complete the same way. Default 0: receives complete on the completion queue.
   */
  readonly receiveCompletionQueueSize?: number | undefined
  /**
   * rpma_conn_cfg_set_compl_channel: the completion queue and the receive completion queue signal
   * on one channel (waited on with rpma_conn_wait). Not with a shared receive queue. Default false.
   */
  readonly sharedCompletionChannel?: boolean | undefined
}

/** A timeout in milliseconds; NaN for what is not a duration (refused when the connection opens). */
const timeoutMillis = (timeout: Duration.DurationInput | undefined): number => {
  try {
    return Duration.toMillis(Duration.decode(timeout ?? "5 seconds"))
  } catch {
    return Number.NaN
  }
}

/** @internal */
export const toConfig = (options: Options | undefined): ConnConfig => {
  const sqSize = options?.sendQueueSize ?? 64
  const rqSize = options?.receiveQueueSize ?? 64
  const rcqSize = options?.receiveCompletionQueueSize ?? 0
  // Receives elsewhere (a shared receive queue, a receive CQ of its own): the CQ holds the sends.
  const receivesOnCq = options?.sharedReceiveQueue === undefined && rcqSize === 0
  return {
    timeoutMs: timeoutMillis(options?.timeout),
    sqSize,
    rqSize,
    cqSize: options?.completionQueueSize ?? (receivesOnCq ? sqSize + rqSize : sqSize),
    rcqSize,
    sharedCompletionChannel: options?.sharedCompletionChannel ?? false,
    directWriteToPmem: options?.directWriteToPmem ?? false,
    srq: options?.sharedReceiveQueue?.handle
  }
}

