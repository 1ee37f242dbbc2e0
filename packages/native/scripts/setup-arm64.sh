#!/usr/bin/env bash
# What cross-compiling the linux-arm64 prebuilt addon and running it under qemu needs on a Debian 12
# x64 machine (root): the arm64 architecture, Debian's cross toolchain, the arm64 -dev packages the
# addon links against, qemu's user-mode emulator, and the arm64 C++ runtime that arm64 Node needs.
# librpma-dev is not co-installable across architectures as packaged (its gzipped man pages differ
# between amd64 and arm64, and dpkg refuses to overwrite them), so man pages are not unpacked.
set -euo pipefail
packages=(g++-aarch64-linux-gnu librpma-dev:arm64 librdmacm-dev:arm64 libibverbs-dev:arm64 qemu-user
  libstdc++6:arm64 libatomic1:arm64)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "setup-arm64: as root: dpkg --add-architecture arm64 && apt-get update && apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "setup-arm64: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
# CI runs this beside `pnpm test`, whose vm/run may use apt too: wait for its lock, not fail.
lock=(-o DPkg::Lock::Timeout=600)
apt-get update -qq "${lock[@]}"
apt-get install -y -qq --no-install-recommends "${lock[@]}" -o DPkg::Options::=--path-exclude=/usr/share/man/* "${missing[@]}" >/dev/null
