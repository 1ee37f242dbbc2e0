/**
 * What is wrong with the options of DescriptorExchange's `serve` and `fetch`, in words that say
 * what to give instead, or undefined when nothing is: read before a socket is made, so that a
 * mistake is a tagged failure of the call (its listen, its connect) and not a TypeError thrown from
 * node:tls or node:net. A getter or a Proxy that throws while they are read is a problem too.
 */

const kindOf = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "an array" : typeof value === "number" ? String(value) : typeof value

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** What node:tls takes as key, certificate or authority: a PEM string or a Buffer. */
const isPem = (value: unknown): boolean => typeof value === "string" || Buffer.isBuffer(value)

const addressProblem = (host: unknown, port: unknown, lowestPort: 0 | 1): string | undefined => {
  if (typeof host !== "string" || host.length === 0) return `host is ${kindOf(host)}: give an address or a name`
  if (typeof port !== "number" || !Number.isInteger(port) || port < lowestPort || port > 65535) {
    return `port is ${kindOf(port)}: give an integer from ${lowestPort} to 65535`
  }
  return undefined
}

const tlsProblem = (tls: unknown, side: "server" | "client"): string | undefined => {
  if (!isRecord(tls)) return `tls is ${kindOf(tls)}: give { ca, key, cert } (PEM strings or Buffers)`
  const { ca, cert, key, servername } = tls
  if (!isPem(ca) && !(Array.isArray(ca) && ca.every(isPem))) {
    return `tls.ca is ${
      kindOf(ca)
    }: give the certificate authorities to trust (a PEM string or Buffer, or a list of them)`
  }
  // A server has to present a certificate; a client only when the server verifies its clients.
  for (const [name, value] of [["key", key], ["cert", cert]] as const) {
    if (side === "server" ? !isPem(value) : value !== undefined && !isPem(value)) {
      return `tls.${name} is ${kindOf(value)}: give the ${side}'s ${
        name === "key" ? "private key" : "certificate"
      } (a PEM string or Buffer)`
    }
  }
  if (servername !== undefined && typeof servername !== "string") {
    return `tls.servername is ${kindOf(servername)}: give the name the server's certificate carries`
  }
  return undefined
}

/** `f`'s problem, or the throw of a getter or Proxy trap it met, in words. */
const read = (f: () => string | undefined): string | undefined => {
  try {
    return f()
  } catch (cause) {
    return `the options cannot be read (${
      cause instanceof Error ? cause.message : "a getter threw"
    }): give plain values`
  }
}

/** `serve`'s options: refused as its listen. */
export const serveProblem = (options: unknown): string | undefined =>
  read(() => {
    if (!isRecord(options)) return `serve takes { host, port, tls, offer }, not ${kindOf(options)}`
    const { host, offer, port, tls } = options
    return addressProblem(host, port, 0) ?? tlsProblem(tls, "server") ??
      (isRecord(offer) ? undefined : `offer is ${kindOf(offer)}: give { rdma, regions, config }`)
  })

/** `fetch`'s options but its timeout: refused as its connect. */
export const fetchProblem = (options: unknown): string | undefined =>
  read(() => {
    if (!isRecord(options)) return `fetch takes { host, port, tls, timeout? }, not ${kindOf(options)}`
    const { host, port, tls } = options
    return addressProblem(host, port, 1) ?? tlsProblem(tls, "client")
  })
