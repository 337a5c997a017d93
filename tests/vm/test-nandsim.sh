#!/bin/bash
# test-nandsim.sh - flashd on raw NAND driven by a real Linux kernel: the
# mtd backend on nandsim (the kernel's NAND simulator behind the real MTD,
# ECC and bad-block code) in the test VM (qemu TCG).  Run by tests/run.sh
# (make check).
# timeout: 1100
# jobs: 2 (a TCG VM takes a core of its own; the guest's timeouts are real time)
#
#   tests/vm/test-nandsim.sh
#
# 1. tests/vm/prepare.sh: the VM cache (its nandsim/: nandsim.ko and the MTD
#    modules, mtd-utils and flashd's libraries).
# 2. tests/vm/run.sh nandsim: flashd, flashctl and t_nand_conformance go
#    into the run share; the guest (guest-nandsim.sh) loads nandsim (4 KiB
#    pages, Hamming ECC, two bad blocks, random bit flips), runs the backend
#    conformance test on /dev/mtd0, formats it with flashctl, serves it with
#    flashd, writes and verifies through nbd-client and ext4, kills flashd
#    with SIGKILL under a writer and checks every flushed unit after each
#    restart, finds pages with flashctl locate + nanddump, and checks that
#    the bit flips were corrected and counted.
# Needs no TCP port on the host (flashd listens on the guest's 127.0.0.1).
#
# SKIP (exit 77, "SKIP: ..." on the last line, as tests/functions.sh's skip
# does; tests/run.sh counts it as skipped): not root, qemu cannot run TCG,
# or the cache is missing and cannot be built because the Debian mirror is
# unreachable.  Anything else that goes wrong is a FAIL.
# Logs: build/test-logs/vm-nandsim/ (prepare, console, flashd, dmesg).
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LOGDIR=$PWD/build/test-logs/vm-nandsim
. tests/vm/host-lib.sh

vm_host_ok "debootstrap for the VM rootfs, qemu with the root-owned rootfs"

# ---- 1. the cache (network only the first time)
vm_prepare
vm_built build/flashd build/flashctl build/tests/t_nand_conformance

# ---- 2. the VM (the 64 MiB nandsim chip lives in guest kernel memory)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flashd-vmnandsim.XXXXXX") || exit 2
VM_RUN_DIR=$WORK/vm VM_MEM=${VM_MEM:-1024} VM_TIMEOUT=${VM_TIMEOUT:-1000} TEST_TIMEOUT=${TEST_TIMEOUT:-900} \
	setpriv --pdeathsig TERM -- tests/vm/run.sh nandsim
RC=$?
echo "== checks in the VM:"
grep -a '@@ t=[0-9.]* nandsim: ' "$WORK/vm/console.log" | sed 's/^.*@@ t=[0-9.]* nandsim: /  /'
echo "== summary ($(($(date +%s) - T_ALL)) s; logs in $LOGDIR)"
exit $RC
