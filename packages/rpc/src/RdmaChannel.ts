/**
 * The transport under the RPC protocols: whole messages each way over one connection.
 *
 * Frames go by rpma_send into the other side's pool of pre-posted receives. A message that fits
 * in a receive buffer after the frame's 8-byte header goes inline; a larger one is written
 * (rpma_write) into the receiver's registered landing region, a piece at a time, each piece
 * announced by a small frame and acknowledged by the receiver once it has copied it out. Each
 * side sends its landing region's descriptor first. A sender that finds no posted receive is
 * retried by the device until the reader posts one (librpma's RNR retry is unlimited), so a slow
 * reader slows its senders. Whole messages reach the RPC layer through a queue of their own, so
 * that the receive loop never waits on a handler (one sending a large answer needs the loop for
 * its acknowledgement); the RPC protocol's own acknowledgements bound that queue. A large message
 * that fails half-way (a timeout) leaves the channel refusing further sends: open a new connection.
 *
 * @since 1.0.0
 */
import type * as Duration from "effect/Duration"
import * as internal from "./internal/channel.js"

/**
 * @since 1.0.0
 * @category models
 */
export interface Options {
  /**
   * Each receive buffer's size; messages up to this size less 8 bytes go inline. 72 to 1 GiB
   * (2^30); default 4096. `receives` × `inlineSize` and `sends` × `inlineSize` (the two pools) must
   * each be at most 2^31 - 1 bytes.
   */
  readonly inlineSize?: number | undefined
  /**
   * Receives kept posted: the messages the other side can send ahead. 2 to 65536 (a queue's most
   * entries); default 16. They must fit the connection's receive queue: the RPC protocols size it
   * for them unless `connection.receiveQueueSize` is given, and refuse a smaller one.
   */
  readonly receives?: number | undefined
  /** Sends in flight at once. 1 to 65536 (a queue's most entries); default 8. */
  readonly sends?: number | undefined
  /** The landing region's size: larger messages are written in pieces of this size. 1 to 2^31 - 1 bytes; default 1 MiB. */
  readonly landingSize?: number | undefined
  /**
   * The largest message taken from the other side, assembled: a larger one (or its first piece
   * beyond it) ends the channel, with a `"Protocol"` ChannelError saying so (on the server, that
   * client is dropped). It also bounds what the other side can make this side hold: the pieces of
   * one message and the whole messages not yet handed on (at most `maxMessageSize` bytes each),
   * plus the landing region and the receives (`receives` times `inlineSize`). Default 64 MiB.
   *
   * @since 1.0.0
   */
  readonly maxMessageSize?: number | undefined
  /**
   * How long a large message waits for the other side's landing region and for each piece's
   * acknowledgement. Default 30 seconds.
   */
  readonly ackTimeout?: Duration.DurationInput | undefined
  /**
   * How often each side reads 8 bytes of the other's landing region, so that a dead link or peer
   * is found while a side only waits (a call waiting for its answer posts nothing): the read is
   * timed by the connection's watchdog, the connection is lost within its `timeout`, and the
   * channel closes, failing what waits (the client's calls with `RpcClientError`). A dead path is
   * then found within `keepAlive` plus the connection's timeout. Default 5 seconds;
   * `Duration.infinity`: never.
   */
  readonly keepAlive?: Duration.DurationInput | undefined
}

/**
 * The channel failed: `reason` `"Closed"` (the connection ended), `"Protocol"` (a malformed frame
 * or an option out of range: the message says which), `"Transfer"` (an RDMA operation failed:
 * `cause`), `"Timeout"` (an acknowledgement did not come within `ackTimeout`).
 *
 * @since 1.0.0
 * @category errors
 */
export const ChannelError: typeof internal.ChannelError = internal.ChannelError

/**
 * @since 1.0.0
 * @category errors
 */
export type ChannelError = internal.ChannelError
