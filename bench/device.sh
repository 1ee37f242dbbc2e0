#!/usr/bin/env bash
# Runs the device benchmarks in the Soft-RoCE VM: builds the C baseline on the host, then runs
# bench/native.ts inside one VM boot so that both sides measure the same device.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/.build
cc -O2 -Wall -Wextra -o bench/.build/mr_reg_loop bench/c/mr_reg_loop.c $(pkg-config --cflags --libs librpma)
exec vm/run 'node --expose-gc --import tsx bench/native.ts'
