#!/bin/bash
# test-systemd.sh - flashd.service under a real systemd (PID 1) in the test
# VM (qemu TCG).  Run by tests/run.sh (make check).
# timeout: 900
# jobs: 2 (a TCG VM takes a core of its own; the guest's timeouts are real time)
#
#   tests/vm/test-systemd.sh
#
# 1. tests/vm/prepare.sh --systemd: the VM cache as for the kernel-client
#    test, plus rootfs-systemd/ = a copy of its Debian 12 rootfs with systemd,
#    systemd-sysv, curl and flashd's libraries (libevent, libinih) installed
#    by chroot + apt-get; built once, rebuilt only when rootfs/ or the
#    package list changes.
# 2. tests/vm/run.sh systemd: `make install DESTDIR=<run share>/root
#    PREFIX=/usr` of this tree; stage 1 (guest-init.sh) copies it into the
#    VM's tmpfs overlay, adds flashd-vmtest@systemd.service and switch_roots into
#    /lib/systemd/systemd; that oneshot unit runs guest-systemd.sh (the
#    checks: start with Type=notify, flashctl status, /metrics, nbd-client
#    data across `systemctl kill -s KILL` + Restart=on-failure, reload, an
#    iSCSI LUN (tcmu-runner.service, the installed iscsi-lun.sh, open-iscsi
#    on 127.0.0.1) kept by a fio verify job across `systemctl restart
#    flashd`, a clean stop, a refused and an allowed degraded start,
#    journalctl -p err) and powers the VM off.  Results: console markers +
#    the share's logs/.
# Needs no TCP port on the host (the VM's flashd listens on the guest's own
# 127.0.0.1:10809).
#
# SKIP (exit 77, "SKIP: ..." on the last line, as tests/functions.sh's skip
# does; tests/run.sh counts it as skipped): not root, qemu cannot run TCG,
# or the rootfs-systemd cache is missing and cannot be built because the
# Debian mirror is unreachable.  Anything else that goes wrong is a FAIL.
# Logs: build/test-logs/vm-systemd/ (prepare, console, journal, checks,
# tcmu-runner.log).
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LOGDIR=$PWD/build/test-logs/vm-systemd
. tests/vm/host-lib.sh

vm_host_ok "chroot + apt-get for the VM rootfs, qemu with the root-owned rootfs"

# ---- 1. the cache (network only the first time)
vm_prepare --systemd
vm_built build/flashd build/flashctl build/handler_flashd.so

# ---- 2. the VM
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flashd-vmsystemd.XXXXXX") || exit 2
VM_RUN_DIR=$WORK/vm VM_TIMEOUT=${VM_TIMEOUT:-600} setpriv --pdeathsig TERM -- tests/vm/run.sh systemd
RC=$?
echo "== checks in the VM:"
grep -a '@@ t=[0-9.]* systemd: \(PASS\|FAIL\)' "$WORK/vm/console.log" | sed 's/^.*@@ t=[0-9.]* systemd: //'
echo "== summary ($(($(date +%s) - T_ALL)) s; logs in $LOGDIR)"
exit $RC
