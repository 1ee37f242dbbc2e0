#!/usr/bin/env bash
# Runs the device benchmarks in the Soft-RoCE VM: builds the C baselines and bundles the programs
# (scripts/bundle-vm.mjs) on the host, then runs
# bench/native.ts (registration), bench/write.ts (rpma_write latency and bandwidth), bench/cm.ts
# (librdmacm's verbs API: ping-pong latency and write bandwidth, issue 20) and bench/rpc.ts (one
# @effect/rpc call over RDMA against the same call over TCP on the VM's loopback, issue 21) and
# bench/isolation.ts (accept time and memory per client, isolated against shared, issue 34) in one
# VM boot, so that each compares against its baseline on the same device in the same boot. All run
# even if one fails; the exit code is the first non-zero one. Under TCG this takes
# several minutes: VM_TIMEOUT defaults to 2400 s here.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/.build
cc -O2 -Wall -Wextra -o bench/.build/mr_reg_loop bench/c/mr_reg_loop.c $(pkg-config --cflags --libs librpma)
cc -O2 -Wall -Wextra -o bench/.build/write_bench bench/c/write_bench.c $(pkg-config --cflags --libs librpma) -lpthread
cc -O2 -Wall -Wextra -o bench/.build/cm_bench bench/c/cm_bench.c -lrdmacm -libverbs -lpthread
node scripts/bundle-vm.mjs native-bench write-bench cm-bench rpc-bench isolation-bench
export VM_TIMEOUT="${VM_TIMEOUT:-2400}"
exec vm/run 'node --expose-gc packages/native/.vm-build/native-bench.mjs; registration=$?
node packages/native/.vm-build/write-bench.mjs; write=$?
node packages/native/.vm-build/cm-bench.mjs; cm=$?
node packages/native/.vm-build/rpc-bench.mjs; rpc=$?
node --expose-gc packages/native/.vm-build/isolation-bench.mjs; isolation=$?
exit $(( registration != 0 ? registration : write != 0 ? write : cm != 0 ? cm : rpc != 0 ? rpc : isolation ))'
