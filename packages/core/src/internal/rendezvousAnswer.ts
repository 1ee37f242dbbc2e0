/**
 * A rendezvous answer (internal/isolation.ts), the private data of a well-known listener's accept:
 * a marker, the port of the client's own listener (2 bytes, big endian), then its one-time token as
 * Admission.privateData encodes it (its length, then its bytes). The marker lets Connection.connect
 * tell an answer from a server's ordinary private data, and follow it.
 */
import { MAX_TOKEN } from "./admission.js"

/** "RDV" and a version: an ordinary accept's private data that starts so is read as an answer. */
const MARKER = Uint8Array.of(0x52, 0x44, 0x56, 0x01)

export const encode = (port: number, wire: Uint8Array): Uint8Array => {
  const answer = new Uint8Array(MARKER.byteLength + 2 + wire.byteLength)
  answer.set(MARKER, 0)
  new DataView(answer.buffer).setUint16(MARKER.byteLength, port)
  answer.set(wire, MARKER.byteLength + 2)
  return answer
}

/** The port and the token's private data (length byte and token) an answer carries, or undefined. */
export const decode = (
  answer: Uint8Array
): { readonly port: number; readonly privateData: Uint8Array } | undefined => {
  const at = MARKER.byteLength
  if (answer.byteLength < at + 4 || MARKER.some((b, i) => answer[i] !== b)) return undefined
  const port = new DataView(answer.buffer, answer.byteOffset).getUint16(at)
  const length = answer[at + 2]!
  if (port === 0 || length === 0 || length > MAX_TOKEN || answer.byteLength < at + 3 + length) return undefined
  return { port, privateData: answer.slice(at + 2, at + 3 + length) }
}
