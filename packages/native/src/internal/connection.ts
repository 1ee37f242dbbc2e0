/**
 * The native driver's connection set-up calls (endpoint.cc, conn_req.cc, conn.cc): endpoints,
 * connection requests, connections and their events, private data and peer configuration. Their
 * work requests and completions are ./queues.ts's.
 */
import { Arguments, type Driver, type Model } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import type { Binding } from "../RpmaBinding.js"
import { as, attempt, attemptPromise, rpma, wait } from "./addon.js"
import { invalidArgument, rpmaFailure } from "./failures.js"

export const connectionCalls = (binding: Binding): Pick<
  Driver,
  | "epListen"
  | "epShutdown"
  | "epNextConnReq"
  | "connReqNew"
  | "connReqPrivateData"
  | "connReqConnect"
  | "connReqDelete"
  | "peerCfgDescriptor"
  | "connApplyRemotePeerCfg"
  | "connNextEvent"
  | "connPrivateData"
  | "connDisconnect"
  | "connDelete"
  | "connQpNum"
> => {
  // Outgoing requests: their private data goes with a connection request (56 bytes on RoCE), not an accept.
  const outgoing = new WeakSet<object>()
  return {
    epListen: (peer, address, port) =>
      rpma("rpma_ep_listen", () => as<Model.EndpointHandle>(binding.epListen(peer, address, port))),
    epShutdown: (ep) => rpma("rpma_ep_shutdown", () => binding.epShutdown(ep)),
    epNextConnReq: (ep, config) =>
      wait<object>(binding, "rpma_ep_next_conn_req", ep, (callback) => binding.epNextConnReq(ep, config, callback))
        .pipe(
          Effect.map(as<Model.ConnReqHandle>)
        ),
    connReqNew: (peer, address, port, config) =>
      attemptPromise(() => binding.connReqNew(peer, address, port, config), rpmaFailure("rpma_conn_req_new")).pipe(
        Effect.map((req) => {
          outgoing.add(req)
          return as<Model.ConnReqHandle>(req)
        })
      ),
    connReqPrivateData: (req) => rpma("rpma_conn_req_get_private_data", () => binding.connReqPrivateData(req)),
    // The Driver's contract: private data the request cannot carry is refused before librpma sees
    // the request, which stays usable; anything else consumes it, success or not. Whatever the
    // addon refused beyond these checks left the request alive: it is deleted then (which rejects
    // an incoming one at once instead of leaving its client waiting out its timeout).
    connReqConnect: (req, privateData) =>
      Effect.suspend(() => {
        let checked = false
        return attempt(
          () => {
            // rdma_cm refuses more than the CM message carries with a bare EINVAL: name the limit first.
            const side = typeof req === "object" && req !== null && outgoing.has(req) ? "connect" : "accept"
            const refused = Arguments.privateData(privateData, side)
            if (refused !== undefined) throw invalidArgument("rpma_conn_req_connect", refused)
            checked = true
            return as<Model.ConnHandle>(binding.connReqConnect(req, privateData))
          },
          (cause) => {
            if (checked) {
              try {
                binding.connReqDelete(req)
              } catch {
                // Already consumed: nothing left to delete.
              }
            }
            return rpmaFailure("rpma_conn_req_connect")(cause)
          }
        )
      }),
    connReqDelete: (req) => rpma("rpma_conn_req_delete", () => binding.connReqDelete(req)),
    peerCfgDescriptor: (direct) => rpma("rpma_peer_cfg_get_descriptor", () => binding.peerCfgDescriptor(direct)),
    // Stricter than librpma, which reads the first byte of a longer descriptor: exactly 1 byte, as
    // the simulated driver requires.
    connApplyRemotePeerCfg: (conn, descriptor) =>
      rpma("rpma_conn_apply_remote_peer_cfg", () => {
        const refused = Arguments.peerCfgDescriptor(descriptor)
        if (refused !== undefined) throw invalidArgument("rpma_conn_apply_remote_peer_cfg", refused)
        return binding.connApplyRemotePeerCfg(conn, descriptor)
      }),
    connNextEvent: (conn) =>
      wait<string>(binding, "rpma_conn_next_event", conn, (callback) => binding.connNextEvent(conn, callback)).pipe(
        Effect.map((event) => event as Model.ConnEvent)
      ),
    connPrivateData: (conn) => rpma("rpma_conn_get_private_data", () => binding.connPrivateData(conn)),
    connDisconnect: (conn) => rpma("rpma_conn_disconnect", () => binding.connDisconnect(conn)),
    connDelete: (conn) => rpma("rpma_conn_delete", () => binding.connDelete(conn)),
    connQpNum: (conn) => rpma("rpma_conn_get_qp_num", () => binding.connQpNum(conn))
  }
}
