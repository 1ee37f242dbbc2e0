#!/usr/bin/env bash
# The prebuilt addons under every Node.js line they are for, each Node.js from the npm registry
# (scripts/prebuild.mjs fetches node-linux-<arch>@<major> once into .cache/nodes/):
#   1. each prebuilt addon loads under its own Node.js (arm64 under qemu-aarch64, user mode);
#   2. the conformance suite on the device under x64 Node 26, the newest line (`pnpm test` runs it
#      under the workspace's Node 20, the oldest), in a boot of the Soft-RoCE VM of its own
#      (vm/run), where qemu can run; there the workspace's build/Release is for another ABI, so
#      the loader takes the prebuilt addon, as a user's install does;
#   3. the native package's host tests under Node 22, 24 and 26 on x64 (`pnpm test` runs them
#      under Node 20), on the prebuilt addons likewise;
#   4. the same host tests on arm64 under qemu with arm64 Node 26: vitest in worker threads (qemu
#      without binfmt cannot start an arm64 child), rollup's arm64 binding from the registry, and
#      the host's esbuild binary (an x64 program started from the emulated one runs natively).
#
#   packages/native/scripts/test-nodes.sh     NODES_X64="22 24 26" NODES_ARM64="26" DEVICE_NODES="26"
#                                             choose (an empty list skips that part)
# Needs the prebuilt addons (node scripts/prebuild.mjs), qemu-user and libstdc++6:arm64 for arm64,
# qemu-system-x86 for the device (SKIP_DEVICE_TESTS=1 skips it, as in `pnpm test`).
set -uo pipefail
cd "$(dirname "$0")/../../.."
repo=$PWD
prebuild="node packages/native/scripts/prebuild.mjs"
x64=${NODES_X64-22 24 26}
arm64=${NODES_ARM64-26}
device=${DEVICE_NODES-26}
failed=()
step() { printf '\ntest-nodes: %s\n' "$*"; }
timed() { local start=$(date +%s); "$@"; local status=$?; echo "  ($(($(date +%s) - start)) s)"; return $status; }

step "each prebuilt addon loads under its own Node.js"
targets=()
for f in packages/native/prebuilds/linux-*/rpma_addon.abi*.glibc.node; do
  [[ -e "$f" ]] || { failed+=("no prebuilt addons: run node packages/native/scripts/prebuild.mjs"); break; }
  arch=${f#packages/native/prebuilds/linux-}; arch=${arch%%/*}
  abi=${f##*.abi}; abi=${abi%%.*}
  case $abi in 115) major=20 ;; 127) major=22 ;; 137) major=24 ;; 147) major=26 ;; *) failed+=("$f: unknown ABI"); continue ;; esac
  targets+=("$arch@$major")
done
[[ ${#targets[@]} -eq 0 ]] || $prebuild --check "${targets[@]}" || failed+=("a prebuilt addon does not load")

if [[ -n "$device" ]] && { [[ -n "${SKIP_DEVICE_TESTS:-}" ]] || ! command -v qemu-system-x86_64 >/dev/null; }; then
  step "the conformance suite on the device: skipped (SKIP_DEVICE_TESTS is set or qemu-system-x86_64 is missing)"
  device=""
fi
# As in scripts/test: vitest's default timeouts times 30 under TCG's emulated CPU, 1 under KVM.
slowdown=30
[[ ${ACCEL:-tcg} == kvm ]] && slowdown=1
for major in $device; do
  step "the conformance suite on the device under x64 Node $major (Soft-RoCE VM, a boot of its own)"
  dir=$($prebuild --where "x64@$major") || { failed+=("x64 Node $major: not fetched"); continue; }
  (cd packages/native && VM_TIMEOUT="${VM_TIMEOUT:-1200}" VM_MEMORY="${VM_MEMORY:-3072M}" timed ../../vm/exclusive ../../vm/run "
    export PATH='$dir/bin':\$PATH DEVICE_TEST_SLOWDOWN=$slowdown
    echo \"node \$(node --version), ABI \$(node -p process.versions.modules)\"
    ../../node_modules/.bin/vitest run --config vitest.device.config.ts test-device/Conformance.test.ts") ||
    failed+=("the conformance suite on the device under x64 Node $major")
done

for major in $x64; do
  step "native host tests under x64 Node $major"
  dir=$($prebuild --where "x64@$major") || { failed+=("x64 Node $major: not fetched"); continue; }
  PATH="$dir/bin:$PATH" timed node_modules/.bin/vitest run --project @effect-rdma/native || failed+=("host tests under x64 Node $major")
done

if [[ -n "$arm64" ]] && ! command -v qemu-aarch64 >/dev/null; then
  failed+=("qemu-aarch64 is missing (apt-get install qemu-user): arm64 not tested")
  arm64=""
fi
if [[ -n "$arm64" ]]; then
  # rollup loads a binding for the arch it runs on; install the arm64 one beside, found through NODE_PATH.
  rollup=$(node -p 'require(require.resolve("rollup/package.json", { paths: [require.resolve("vitest")] })).version' 2>/dev/null ||
    node -e 'console.log(require("./node_modules/.pnpm/node_modules/rollup/package.json").version)')
  tools="$repo/.cache/arm64-tools"
  if [[ ! -d "$tools/node_modules/@rollup/rollup-linux-arm64-gnu" ]]; then
    mkdir -p "$tools" && echo '{ "private": true }' >"$tools/package.json"
    (cd "$tools" && npm install --force --no-audit --no-fund --loglevel=error "@rollup/rollup-linux-arm64-gnu@$rollup")
  fi
  esbuild=$(node -e 'const p = require.resolve("esbuild", { paths: [require.resolve("vitest")] });
    console.log(require("path").join(require.resolve("@esbuild/linux-x64/package.json", { paths: [p] }), "..", "bin", "esbuild"))')
fi
# Without binfmt_misc for aarch64 (a container cannot register it), a child Node.js
# (process.execPath, an arm64 program) cannot start on its own: the kernel hands it to /bin/sh. The
# tests start theirs through CHILD_NODE_EMULATOR (test/fixtures/childNode.ts). Doctor, Hostile and
# TestProcessDeath, which start many (TestProcessDeath a whole vitest in forks), are left out
# there for time, and said so. Emulation is 10-30x slower: vitest's default
# timeouts times 20, times TEST_SLOWDOWN when it is set (vitest.shared.ts; CI sets it for a loaded
# machine: a fixed 60 s cut off a fuzz case that took 134 s there).
arm64_slowdown=$(awk -v s="${TEST_SLOWDOWN:-1}" 'BEGIN { print s * 20 }')
arm64_args=(--pool=threads)
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  for f in Doctor Hostile TestProcessDeath; do arm64_args+=(--exclude "**/test/$f.test.ts"); done
  echo "  (no binfmt_misc entry for aarch64: Doctor, Hostile and TestProcessDeath, which start child processes, are left out)"
fi
for major in $arm64; do
  step "native host tests under arm64 Node $major (qemu-aarch64, user mode)"
  dir=$($prebuild --where "arm64@$major") || { failed+=("arm64 Node $major: not fetched"); continue; }
  CHILD_NODE_EMULATOR=$(command -v qemu-aarch64) TEST_SLOWDOWN=$arm64_slowdown NODE_PATH="$tools/node_modules" ESBUILD_BINARY_PATH="$esbuild" timed qemu-aarch64 "$dir/bin/node" \
    node_modules/vitest/vitest.mjs run --project @effect-rdma/native "${arm64_args[@]}" || failed+=("host tests under arm64 Node $major")
done

if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'test-nodes: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
step "ok"
