// effect-rdma-doctor: checks what @effect-rdma/native needs on this machine (see src/doctor/).
//
//   node --import tsx packages/native/bin/doctor.ts [--address <ip>]... [--size 1GiB] [--json]
//   pnpm --filter @effect-rdma/native doctor -- --address 192.168.77.1
//
// Exit code 0 when no check failed, 1 otherwise (also for invalid options).
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Cli from "../src/doctor/Cli.js"

Cli.main(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain
)
