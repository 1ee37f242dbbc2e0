#!/usr/bin/env bash
# Runs the device benchmarks in the Soft-RoCE VM: builds the C baselines and bundles the programs
# (scripts/bundle-vm.mjs) on the host, then runs
# bench/native.ts (registration), bench/write.ts (rpma_write latency and bandwidth), bench/cm.ts
# (librdmacm's verbs API: ping-pong latency and write bandwidth, issue 20) and bench/rpc.ts (one
# @effect/rpc call over RDMA against the same call over TCP on the VM's loopback, issue 21, with
# C's ping-pong over each transport as floors, issue 31), bench/isolation.ts (accept time and
# memory per client, isolated against shared, issue 34) and bench/cluster.ts (an @effect/cluster
# entity call across two runners over RDMA against cluster's socket runner over TCP, with the same
# floors, issue 33) in one VM boot, so that each compares
# against its baseline on the same device in the same boot. All run even if one fails; the exit
# code is the first non-zero one. Under TCG this takes several minutes: VM_TIMEOUT defaults to
# 2400 s here.
#
#   bench/device.sh            all seven (polling: issue 35's latency rows, waiting against polling)
#   bench/device.sh rpc        only those named (native, write, cm, rpc, isolation, polling, cluster), in that order
#   RPC_SCALE=0.25 ...         passed into the VM (RPC_SCALE, RPC_TRANSPORT, CM_SCALE, CLUSTER_SCALE), as VM_PASS_ENV names them
#   RPC_TRANSPORT=cm ...       bench/rpc.ts over @effect-rdma/rpc's librdmacm transport (default rpma)
set -euo pipefail
cd "$(dirname "$0")/.."
selected=("$@")
[ ${#selected[@]} -eq 0 ] && selected=(native write cm rpc isolation polling cluster)
for name in "${selected[@]}"; do
  case "$name" in native | write | cm | rpc | isolation | polling | cluster) ;; *) echo "bench/device.sh: unknown benchmark $name (native, write, cm, rpc, isolation, polling, cluster)" >&2; exit 2 ;; esac
done
wants() { [[ " ${selected[*]} " == *" $1 "* ]]; }
mkdir -p bench/.build
cc -O2 -Wall -Wextra -o bench/.build/mr_reg_loop bench/c/mr_reg_loop.c $(pkg-config --cflags --libs librpma)
cc -O2 -Wall -Wextra -o bench/.build/write_bench bench/c/write_bench.c $(pkg-config --cflags --libs librpma) -lpthread
cc -O2 -Wall -Wextra -o bench/.build/cm_bench bench/c/cm_bench.c -lrdmacm -libverbs -lpthread
cc -O2 -Wall -Wextra -o bench/.build/tcp_bench bench/c/tcp_bench.c -lpthread
bundles=()
command='status=0'
for name in native write cm rpc isolation polling cluster; do
  wants "$name" || continue
  bundles+=("$name-bench")
  flags=""
  [ "$name" = native ] || [ "$name" = isolation ] && flags="--expose-gc "
  command+="
node ${flags}packages/native/.vm-build/$name-bench.mjs; code=\$?; [ \$status -eq 0 ] && status=\$code"
done
command+='
exit $status'
node scripts/bundle-vm.mjs "${bundles[@]}"
export VM_TIMEOUT="${VM_TIMEOUT:-2400}"
export VM_PASS_ENV="${VM_PASS_ENV:-} RPC_SCALE RPC_TRANSPORT CM_SCALE POLLING_SCALE POLLING_ROUNDS CLUSTER_SCALE"
exec vm/run "$command"
