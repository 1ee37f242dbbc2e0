/**
 * librpma's connections from listening to deletion in the simulated network: endpoints and their
 * incoming requests, outgoing requests (to a listener here, or through the network to whichever
 * process listens), accepting, the connection's events and private data, the remote peer's
 * configuration, disconnecting and deleting.
 */
import { RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { Arguments } from "@effect-rdma/core/Driver"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type { ConnectionEnds } from "./connectionEnds.js"
import type { ConnectionRegistry } from "./connectionRegistry.js"
import type * as fabric from "./fabric.js"
import type { HeldRegions } from "./heldRegions.js"
import type { SharedReceiveQueues } from "./sharedReceive.js"
import type { Tools } from "./tools.js"
import type * as wire from "./wire.js"

export const makeConnectionSetup = (
  world: fabric.Fabric,
  tools: Tools,
  link: wire.Link | undefined,
  registry: ConnectionRegistry,
  { dropEarly, letGo, takeEarly }: HeldRegions,
  { disconnect, emit, newConn }: ConnectionEnds,
  srqs: SharedReceiveQueues
) => {
  const { acquire, call, deadOrWrong, invalid, peerOf, problem, refusedOr, releaseHandle, rpma } = tools
  const {
    connOf,
    connecting,
    conns,
    departed,
    endpointOf,
    farOf,
    incoming,
    key,
    listeners,
    q,
    remotePmem,
    reqOf,
    unsafeQueue
  } = registry
  return {
    epListen: (peerValue, address, port) =>
      call(
        "rpma_ep_listen",
        () =>
          deadOrWrong("rpma_ep_listen", "peer", peerOf(peerValue)) ??
            problem("rpma_ep_listen", Arguments.address(address) ?? Arguments.port(port)),
        (code) => rpma("rpma_ep_listen", code, "planned fault"),
        () => {
          const actual = port
          if (!world.devices.has(address)) {
            return Effect.fail(
              rpma("rpma_ep_listen", RdmaError.RpmaCode.RPMA_E_PROVIDER, `rdma_bind_addr: no RDMA device at ${address}`)
            )
          }
          if (listeners.has(key(address, actual))) {
            return Effect.fail(
              rpma(
                "rpma_ep_listen",
                RdmaError.RpmaCode.RPMA_E_PROVIDER,
                `rdma_bind_addr: ${address}:${actual} is in use`
              )
            )
          }
          const listen = () => {
            const ep: fabric.Endpoint = {
              kind: "Endpoint",
              id: world.nextId++,
              alive: true,
              peer: peerOf(peerValue)!,
              address,
              port: actual
            }
            listeners.set(key(address, actual), ep)
            incoming.set(ep, unsafeQueue())
            return acquire(ep, "Endpoint", `endpoint listening on ${address}:${actual}`)
          }
          if (link === undefined) return listen()
          // On a shared network the address is claimed for this process first: one listener in all.
          // Uninterruptible (the claim is bounded by the link's timeout), so a claim granted is never lost.
          return Effect.uninterruptible(
            Effect.flatMap(Effect.promise(() => link.claim(key(address, actual))), (claimed) =>
              claimed === "ok"
                ? listen()
                : Effect.fail(rpma(
                  "rpma_ep_listen",
                  RdmaError.RpmaCode.RPMA_E_PROVIDER,
                  claimed === "taken"
                    ? `rdma_bind_addr: ${address}:${actual} is in use (by another process on the simulated network)`
                    : `rdma_bind_addr: the simulated network at ${link.path} is gone`
                )))
          )
        }
      ),

    epShutdown: (value) =>
      Effect.suspend(() => {
        const ep = endpointOf(value)
        const refused = deadOrWrong("rpma_ep_shutdown", "endpoint", ep)
        if (refused !== undefined) return Effect.fail(refused)
        listeners.delete(key(ep!.address, ep!.port))
        link?.send({ t: "unclaim", key: key(ep!.address, ep!.port) })
        releaseHandle(ep!)
        // Waiters wake up to a shut-down endpoint.
        Queue.unsafeOffer(incoming.get(ep!)!, undefined)
        return Effect.void
      }),

    epNextConnReq: (value, config) =>
      call(
        "rpma_ep_next_conn_req",
        () =>
          deadOrWrong("rpma_ep_next_conn_req", "endpoint", endpointOf(value)) ??
            problem("rpma_ep_next_conn_req", Arguments.connConfig(config)) ??
            srqs.refuseConfig("rpma_ep_next_conn_req", config),
        (code) => rpma("rpma_ep_next_conn_req", code, "planned fault"),
        () => {
          const ep = endpointOf(value)!
          const queue = incoming.get(ep)!
          return Effect.flatMap(Queue.take(queue), (client) => {
            if (client === undefined || !ep.alive) {
              Queue.unsafeOffer(queue, undefined)
              return Effect.fail(invalid("rpma_ep_next_conn_req", "the endpoint was shut down"))
            }
            const req: fabric.ConnReq = {
              kind: "ConnReq",
              id: world.nextId++,
              alive: true,
              peer: ep.peer,
              config,
              address: ep.address,
              port: ep.port,
              client: client.client,
              privateData: client.privateData
            }
            return acquire(req, "ConnReq", `incoming connection request on ${ep.address}:${ep.port}`)
          })
        }
      ),

    connReqNew: (peerValue, address, port, config) =>
      call(
        "rpma_conn_req_new",
        () =>
          deadOrWrong("rpma_conn_req_new", "peer", peerOf(peerValue)) ??
            problem(
              "rpma_conn_req_new",
              Arguments.address(address) ?? Arguments.port(port) ?? Arguments.connConfig(config)
            ) ?? srqs.refuseConfig("rpma_conn_req_new", config),
        (code) => rpma("rpma_conn_req_new", code, "planned fault"),
        () => {
          if (!world.devices.has(address)) {
            return Effect.fail(
              rpma("rpma_conn_req_new", RdmaError.RpmaCode.RPMA_E_PROVIDER, `rdma_resolve_addr: no route to ${address}`)
            )
          }
          const req: fabric.ConnReq = {
            kind: "ConnReq",
            id: world.nextId++,
            alive: true,
            peer: peerOf(peerValue)!,
            config,
            address,
            port,
            client: undefined,
            privateData: new Uint8Array(0)
          }
          return acquire(req, "ConnReq", `outgoing connection request to ${address}:${port}`)
        }
      ),

    connReqPrivateData: (value) =>
      Effect.suspend(() => {
        const req = reqOf(value)
        return refusedOr(deadOrWrong("rpma_conn_req_get_private_data", "connection request", req), () =>
          Effect.succeed(Uint8Array.from(req!.privateData)))
      }),

    connReqConnect: (value, privateData) =>
      call(
        "rpma_conn_req_connect",
        () =>
          deadOrWrong("rpma_conn_req_connect", "connection request", reqOf(value)) ??
            // rdma_cm on RoCE: at most 56 bytes with a request and 196 with an accept. Refused
            // before librpma sees the request, which stays usable (the Driver's contract).
            problem(
              "rpma_conn_req_connect",
              Arguments.privateData(privateData, reqOf(value)!.client === undefined ? "connect" : "accept")
            ),
        (code) => {
          releaseHandle(reqOf(value)!)
          dropEarly(reqOf(value)!)
          return rpma("rpma_conn_req_connect", code, "planned fault")
        },
        () => {
          const req = reqOf(value)!
          releaseHandle(req) // consumed, as rpma_conn_req_connect does
          // What arrives is padded with zeros to rdma_cm's limit.
          const side = req.client === undefined ? "connect" : "accept"
          const sent = new Uint8Array(Arguments.PRIVATE_DATA_LIMIT[side])
          if (privateData !== undefined && privateData !== null) sent.set(privateData)
          if (req.client === undefined) {
            return Effect.tap(
              newConn(req.peer, req.config, new Uint8Array(0), `${req.address}:${req.port}`),
              (conn) => {
                takeEarly(req, conn)
                const ep = listeners.get(key(req.address, req.port))
                if (ep !== undefined) {
                  return void Queue.unsafeOffer(incoming.get(ep)!, {
                    client: conn,
                    privateData: sent
                  })
                }
                if (link === undefined) return void emit(conn, "REJECTED")
                // Perhaps another process listens there: the network's router knows (REJECTED if none).
                connecting.set(conn, key(req.address, req.port))
                link.send({ t: "connect", key: key(req.address, req.port), from: farOf(conn)!, privateData: sent })
              }
            )
          }
          const client = req.client
          return Effect.tap(newConn(req.peer, req.config, req.privateData, `${req.address}:${req.port}`), (server) => {
            takeEarly(req, server)
            if (
              !client.alive || client.state !== "connecting" ||
              (client.far !== undefined && departed.has(client.far.process))
            ) {
              return void emit(server, "LOST")
            }
            server.other = client
            client.other = server
            client.privateData = sent
            server.state = "established"
            client.state = "established"
            emit(server, "ESTABLISHED")
            emit(client, "ESTABLISHED")
          })
        }
      ),

    connReqDelete: (value) =>
      Effect.suspend(() => {
        const req = reqOf(value)
        const refused = deadOrWrong("rpma_conn_req_delete", "connection request", req)
        if (refused !== undefined) return Effect.fail(refused)
        releaseHandle(req!)
        dropEarly(req!)
        if (req!.client !== undefined && req!.client.alive) emit(req!.client, "REJECTED")
        return Effect.void
      }),

    peerCfgDescriptor: (direct) =>
      typeof direct !== "boolean"
        ? Effect.fail(invalid("rpma_peer_cfg_get_descriptor", "directWriteToPmem must be a boolean"))
        : Effect.succeed(Uint8Array.of(direct ? 1 : 0)),

    connApplyRemotePeerCfg: (value, descriptor) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        const refused = problem("rpma_conn_apply_remote_peer_cfg", Arguments.peerCfgDescriptor(descriptor)) ??
          deadOrWrong("rpma_conn_apply_remote_peer_cfg", "connection", conn)
        if (refused !== undefined) return Effect.fail(refused)
        remotePmem.set(conn!, descriptor[0] !== 0)
        return Effect.void
      }),

    connNextEvent: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        return refusedOr(deadOrWrong("rpma_conn_next_event", "connection", conn), () => Queue.take(q(conn!).events))
      }),

    connPrivateData: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        return refusedOr(deadOrWrong("rpma_conn_get_private_data", "connection", conn), () =>
          Effect.succeed(Uint8Array.from(conn!.privateData)))
      }),

    connDisconnect: (value) =>
      call(
        "rpma_conn_disconnect",
        () => deadOrWrong("rpma_conn_disconnect", "connection", connOf(value)),
        (code) => rpma("rpma_conn_disconnect", code, "planned fault"),
        () => Effect.sync(() => disconnect(connOf(value)!))
      ),

    connDelete: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        const refused = deadOrWrong("rpma_conn_delete", "connection", conn)
        if (refused !== undefined) return Effect.fail(refused)
        // Deleting ends the connection for the other side too.
        disconnect(conn!)
        letGo(conn!, undefined)
        releaseHandle(conn!)
        conns.delete(conn!.id)
        connecting.delete(conn!)
        // As the addon: a wait still armed hears of it, at once.
        q(conn!).completions.close(invalid("rpma_cq_wait", "the connection was deleted"))
        return Effect.void
      }),

    connQpNum: (value) =>
      Effect.suspend(() => {
        const conn = connOf(value)
        // The simulated queue pair number: what this side's shared receive queue completions carry.
        return refusedOr(deadOrWrong("rpma_conn_get_qp_num", "connection", conn), () => Effect.succeed(conn!.id))
      })
  } satisfies Partial<Driver.Driver>
}
