#!/usr/bin/env bash
# Runs the addon's no-device paths (scripts/valgrind-smoke.cjs) under valgrind memcheck and fails
# on any invalid read, write or free whose stack passes through the addon.
#   scripts/valgrind.sh               the smoke program
#   scripts/valgrind.sh worker-loop   a worker calling the addon in a loop, terminated 100 times
#                                     (test/fixtures/worker-loop.cjs; about 10 minutes)
#
# Node under valgrind is noisy: V8's JIT and GC trip "uninitialised value" reports, and Node
# keeps memory until exit. So: --jitless (no generated code), undefined-value and leak checks off,
# and only errors with a frame in rpma_addon.node (or librpma/librdmacm called from it) count.
# The log stays in build/valgrind.log for reading.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -f build/Release/rpma_addon.node ] || node scripts/build.mjs
log=build/valgrind.log

program=(scripts/valgrind-smoke.cjs)
[ "${1:-}" = worker-loop ] && program=(test/fixtures/worker-loop.cjs "$PWD/build/Release/rpma_addon.node" 100)

status=0
valgrind --tool=memcheck --error-exitcode=99 --undef-value-errors=no --leak-check=no \
  --smc-check=all-non-file --num-callers=30 --log-file="$log" \
  node --jitless --expose-gc "${program[@]}" || status=$?

# Each error block starts at "==PID== Invalid ..." and ends at a blank "==PID== " line.
ours=$(awk '
  /== (Invalid (read|write|free)|Mismatched free|Source and destination overlap)/ { block = $0; inside = 1; next }
  inside && /==[0-9]+== *$/ { if (block ~ /rpma_addon|librpma|librdmacm|libibverbs/) print block "\n"; inside = 0; next }
  inside { block = block "\n" $0 }
' "$log")
total=$(grep -cE "== (Invalid (read|write|free)|Mismatched free)" "$log" || true)

echo "valgrind: exit $status, $total invalid access(es) in the whole process log ($log)"
if [ -n "$ours" ]; then
  echo "valgrind: invalid accesses through the addon:"
  echo "$ours"
  exit 1
fi
if [ "$status" -ne 0 ] && [ "$status" -ne 99 ]; then
  echo "valgrind: ${program[0]} failed (exit $status)"
  exit "$status"
fi
grep -q "ERROR SUMMARY" "$log" && grep "ERROR SUMMARY" "$log" | tail -1
echo "valgrind: no invalid read/write/free through the addon"
