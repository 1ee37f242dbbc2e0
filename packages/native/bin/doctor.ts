// effect-rdma-doctor from the sources, for the workspace (published packages run scripts/doctor.mjs, which checks effect and then runs dist/doctor/bin.js):
//
//   node --import tsx packages/native/bin/doctor.ts [--address <ip>]... [--size 1GiB] [--json]
//   pnpm doctor --address 192.168.77.1   (from the repository root)
//
// Exit code 0 when no check failed, 1 when one did, 2 for a usage error.
import "../src/doctor/bin.js"
