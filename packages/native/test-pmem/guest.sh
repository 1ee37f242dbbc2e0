#!/usr/bin/env bash
# In the VM (scripts/test-pmem): makes the NVDIMM's namespace a device DAX on first use, then runs
# one phase of pmem.mjs. Linux keeps the namespace's mode in an info block on the NVDIMM itself, so
# after a reboot on the same backing file /dev/dax0.0 comes back by itself.
set -euo pipefail
phase=$1
nd=/sys/bus/nd/devices
fail() {
	echo "pmem $phase: FAILED: $*" >&2
	exit 1
}
if [[ ! -e /dev/dax0.0 ]]; then
	[[ $phase == write ]] || fail "no /dev/dax0.0 after the reboot: the namespace's devdax info block was lost"
	[[ -e $nd/namespace0.0 ]] || fail "no NVDIMM namespace (VM_PMEM unset?)"
	mode=$(<"$nd/namespace0.0/mode")
	[[ $mode == raw ]] || fail "namespace0.0 is in mode $mode, not raw: use a fresh backing file"
	# What 'ndctl create-namespace -m devdax -e namespace0.0' does, through sysfs.
	echo namespace0.0 >/sys/bus/nd/drivers/nd_pmem/unbind
	seed=$(<"$nd/region0/dax_seed")
	echo namespace0.0 >"$nd/$seed/namespace"
	echo ram >"$nd/$seed/mode" # struct pages in RAM: the NVDIMM is small
	cat /proc/sys/kernel/random/uuid >"$nd/$seed/uuid"
	echo "$seed" >/sys/bus/nd/drivers/dax_pmem/bind
	for _ in $(seq 50); do [[ -e /dev/dax0.0 ]] && break; sleep 0.1; done
	[[ -e /dev/dax0.0 ]] || fail "binding $seed to dax_pmem made no /dev/dax0.0"
fi
echo "pmem $phase: namespace0.0 mode $(<"$nd/namespace0.0/mode"), /dev/dax0.0 $(<"/sys/bus/dax/devices/dax0.0/size") bytes, align $(<"/sys/bus/dax/devices/dax0.0/align")"
cd "$(dirname "$0")/.."
exec node test-pmem/build/pmem.mjs "$phase"
