/**
 * Type tests: compiled by `pnpm check`; each `@ts-expect-error` fails the build if the line compiles.
 * The protocol constructors take the exported option unions (`ServerOptions`, `ClientOptions`), for
 * a transport chosen at run time, as well as either transport's own options, whose requirements
 * stay their own (only librpma's needs a Peer).
 */
import type { Peer, RdmaError } from "@effect-rdma/core"
import type * as Driver from "@effect-rdma/core/Driver"
import { type RdmaChannel, RdmaRpc } from "@effect-rdma/rpc"
import type { RpcClient, RpcSerialization, RpcServer } from "@effect/rpc"
import { describe, expect, it } from "@effect/vitest"
import type { Effect, Layer, Scope } from "effect"

type Needs = RpcSerialization.RpcSerialization | Driver.RdmaDriver

export const typeTests = (useCm: boolean) => {
  const address = "192.168.77.1"
  const port = 7480
  // The transport is known only at run time (a config, say).
  const serverOptions: RdmaRpc.ServerOptions = useCm
    ? { transport: "cm", address, port, inlineSize: 4096 }
    : { transport: "rpma", address, port, landingSize: 1 << 20 }
  const clientOptions: RdmaRpc.ClientOptions = useCm
    ? { transport: "cm", address, port }
    : { transport: "rpma", address, port }

  const server: Layer.Layer<
    RpcServer.Protocol,
    RdmaError.RdmaCmError | RdmaError.RpmaError | RdmaChannel.ChannelError,
    Peer.Peer | Needs
  > = RdmaRpc.layerProtocolServer(serverOptions)
  const client: Layer.Layer<RpcClient.Protocol, RdmaChannel.ChannelError, Peer.Peer | Needs> = RdmaRpc
    .layerProtocolClient(clientOptions)
  const madeServer: Effect.Effect<
    RpcServer.Protocol["Type"],
    RdmaError.RdmaCmError | RdmaError.RpmaError | RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | Needs
  > = RdmaRpc.makeProtocolServer(serverOptions)
  const madeClient: Effect.Effect<
    RpcClient.Protocol["Type"],
    RdmaChannel.ChannelError,
    Scope.Scope | Peer.Peer | Needs
  > = RdmaRpc.makeProtocolClient(clientOptions)

  // @ts-expect-error a server that may be librpma's needs a Peer
  const serverNoPeer: Layer.Layer<RpcServer.Protocol, unknown, Needs> = RdmaRpc.layerProtocolServer(serverOptions)
  // @ts-expect-error a client that may be librpma's needs a Peer
  const clientNoPeer: Layer.Layer<RpcClient.Protocol, unknown, Needs> = RdmaRpc.layerProtocolClient(clientOptions)

  // Each transport's own options keep their own requirements: librdmacm's needs no Peer.
  const cmServer: Layer.Layer<RpcServer.Protocol, unknown, Needs> = RdmaRpc.layerProtocolServer({
    transport: "cm",
    address,
    port
  })
  const cmClient: Layer.Layer<RpcClient.Protocol, unknown, Needs> = RdmaRpc.layerProtocolClient({
    transport: "cm",
    address,
    port
  })
  // @ts-expect-error librpma's does
  const rpmaServer: Layer.Layer<RpcServer.Protocol, unknown, Needs> = RdmaRpc.layerProtocolServer({
    transport: "rpma",
    address,
    port
  })

  return [server, client, madeServer, madeClient, serverNoPeer, clientNoPeer, cmServer, cmClient, rpmaServer]
}

describe("RdmaRpc, types", () => {
  it("compiles (the checks are the @ts-expect-error lines above)", () => {
    expect(typeof typeTests).toBe("function")
  })
})
