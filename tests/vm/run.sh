#!/bin/bash
# run.sh - boot the test VM once (qemu TCG, no KVM needed) and run guest
# test steps in it; prints PASS/FAIL per step.
#
#   tests/vm/run.sh [STEPS]     STEPS: comma list of nbd,iscsi (default nbd,iscsi)
#   tests/vm/run.sh systemd     boot prepare.sh --systemd's rootfs with systemd
#                               as PID 1 (tests/vm/test-systemd.sh); alone
#   tests/vm/run.sh drbd        the same, running guest-drbd.sh: one node of
#                               the DRBD pair (tests/vm/test-drbd.sh); alone
#   tests/vm/run.sh nandsim     flashd on raw NAND (nandsim) inside the guest
#                               (tests/vm/test-nandsim.sh, guest-nandsim.sh); alone
#
# Needs the cache from tests/vm/prepare.sh and an NBD server listening on
# 127.0.0.1:$NBD_PORT (the guest reaches it as 10.0.2.2:$NBD_PORT through
# qemu's user-mode network).  tests/vm/test-kernel-clients.sh is the entry
# point that starts flashd and answers the guest's host requests.
# The systemd and drbd steps need no server on the host: run.sh runs `make
# install DESTDIR=<share>/root PREFIX=/usr` of this tree, stage 1 copies
# that into the VM and switch_roots into systemd, flashd-vmtest@STEP.service
# runs guest-STEP.sh (the server is the VM's own flashd.service).  For drbd
# the share also gets deploy/drbd/ (as drbd/) and drbd-writer.py; the guest
# runs the commands the host drops into the share (cmd.N -> out.N, rc.N;
# guest-drbd.sh) until told to power off.
#
# Environment:
#   FLASHD_VM_CACHE  cache (default /var/cache/flashd-vm)
#   VM_RUN_DIR       this run's directory (default $FLASHD_VM_CACHE/runs/<stamp>;
#                    the newest 10 of those are kept): console.log, the
#                    initramfs, and share/ = the guest's /vmtest (9p, rw):
#                    guest-test.sh, guest-lib.sh (the iSCSI and fio shell
#                    functions the guests share), iscsi-lun.sh, handlers/,
#                    config, the host requests req.N / answers ack.N, logs/
#                    from the guest
#   NBD_PORT         required (not for systemd): the server's TCP port on 127.0.0.1
#   EXPORT0, EXPORT1 export names for the nbd and iscsi steps (dimm0, dimm1)
#   EXPORT1_SIZE     bytes of EXPORT1 (default: asked with nbdinfo --size)
#   HANDLER_SO       handler for the iscsi step (default build/handler_flashd.so)
#   HOST_AGENT=1     somebody answers the guest's host requests (else the
#                    guest skips the server restart sub-steps, saying so)
#   SERVER_KIND      label for the logs (flashd)
#   VM_TIMEOUT       hard limit for the whole VM in seconds (900, at most 1200)
#   TEST_TIMEOUT     limit per step inside the guest (420)
#   VM_MEM, VM_SMP   guest RAM in MiB (1024) and vCPUs (1)
#   VM_HOSTNAME      the guest's host name (systemd.hostname=; systemd/drbd)
#   VM_PEER          LPORT:RPORT:ADDR/PREFIX - a second NIC (eth1) on a qemu
#                    UDP socket netdev: sends to 127.0.0.1:RPORT, receives on
#                    127.0.0.1:LPORT; the guest gives it ADDR/PREFIX.  Two VMs
#                    with mirrored ports share one virtual wire; either can
#                    be killed and booted again without the other noticing
#                    more than lost frames.
#   VM_DISK          a raw image file: the first virtio disk (/dev/vda); the
#                    drbd step mounts it (ext4) on /var/lib/private
#   VERBOSE=1        echo the whole serial console, not just the @@ markers
# Exit status: 0 every step PASSed, 1 a FAIL, 124 timeout, 2 usage/setup.
# qemu is always killed (by pid) when run.sh exits, however it exits.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
CACHE=${FLASHD_VM_CACHE:-/var/cache/flashd-vm}
STEPS=${1:-nbd,iscsi}
NBD_PORT=${NBD_PORT:-}
EXPORT0=${EXPORT0:-dimm0}
EXPORT1=${EXPORT1:-dimm1}
EXPORT1_SIZE=${EXPORT1_SIZE:-}
HANDLER_SO=${HANDLER_SO:-$TOP/build/handler_flashd.so}
HOST_AGENT=${HOST_AGENT:-0}
SERVER_KIND=${SERVER_KIND:-flashd}
VM_TIMEOUT=${VM_TIMEOUT:-900}
TEST_TIMEOUT=${TEST_TIMEOUT:-420}
VERBOSE=${VERBOSE:-}

die() {
	echo "run.sh: $*" >&2
	exit 2
}
has_step() { [[ ,$STEPS, == *,$1,* ]]; }

[[ $STEPS =~ ^[a-z0-9]+(,[a-z0-9]+)*$ ]] || die "bad step list '$STEPS' (want e.g. nbd,iscsi)"
for s in ${STEPS//,/ }; do
	case $s in nbd | iscsi) ;; systemd | drbd | nandsim) [ "$STEPS" = "$s" ] || die "the $s step runs alone" ;;
	*) die "unknown step '$s' (known: nbd, iscsi, systemd, drbd, nandsim)" ;; esac
done
[[ $VM_TIMEOUT =~ ^[0-9]+$ ]] && [ "$VM_TIMEOUT" -ge 60 ] || die "bad VM_TIMEOUT=$VM_TIMEOUT"
[ "$VM_TIMEOUT" -gt 1200 ] && VM_TIMEOUT=1200
[[ $NBD_PORT =~ ^[0-9]+$ ]] || has_step systemd || has_step drbd || has_step nandsim ||
	die "set NBD_PORT to the TCP port the server listens on (127.0.0.1)"
[ "$(id -u)" = 0 ] || die "run as root (the cached rootfs is root-owned)"
[ -d "$CACHE" ] || die "no cache at $CACHE: run tests/vm/prepare.sh first"
CACHE=$(cd "$CACHE" && pwd)
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing: run tests/vm/prepare.sh"

# shared lock: runs may share the cache, prepare.sh (exclusive) waits for them
exec 9>"$CACHE/.lock"
flock -s -w 900 9 || die "timed out waiting for prepare.sh to release $CACHE/.lock"
KV=$(cat "$CACHE/kernel-version" 2>/dev/null) || die "no $CACHE/kernel-version: run tests/vm/prepare.sh"
KERNEL=$CACHE/kernel/$KV/vmlinuz
BASE=$CACHE/initrd-base.cpio.gz
ROOTFS=$CACHE/rootfs
STAMPS=("$ROOTFS/.flashd-rootfs-ok" "$ROOTFS/.flashd-modules-ok")
SYSTEMD_STEP=
has_step systemd && SYSTEMD_STEP=systemd
has_step drbd && SYSTEMD_STEP=drbd
PEER_ARGS=() PEER_APPEND=
if [ -n "${VM_PEER:-}" ]; then
	[[ $VM_PEER =~ ^([0-9]+):([0-9]+):([0-9]+\.[0-9]+\.[0-9]+\.([0-9]+)/[0-9]+)$ ]] ||
		die "VM_PEER=$VM_PEER: want LPORT:RPORT:ADDR/PREFIX"
	# shellcheck disable=SC2054 # commas are qemu option syntax
	PEER_ARGS=(-netdev "socket,id=n1,udp=127.0.0.1:${BASH_REMATCH[2]},localaddr=127.0.0.1:${BASH_REMATCH[1]}"
		-device "virtio-net-pci,netdev=n1,romfile=,mac=52:54:00:fd:00:$(printf %02x "${BASH_REMATCH[4]}")")
	PEER_APPEND=" vmtest.peer=${BASH_REMATCH[3]}"
fi
DISK_ARGS=()
if [ -n "${VM_DISK:-}" ]; then
	[ -f "$VM_DISK" ] || die "VM_DISK=$VM_DISK: no such file"
	DISK_ARGS=(-drive "file=$VM_DISK,format=raw,if=virtio,cache=writeback")
fi
if [ -n "$SYSTEMD_STEP" ]; then
	ROOTFS=$CACHE/rootfs-systemd
	STAMPS=("$ROOTFS/.flashd-systemd-ok")
fi
for f in "$KERNEL" "$BASE" "${STAMPS[@]}"; do
	[ -e "$f" ] || die "missing $f: run tests/vm/prepare.sh$([ -n "$SYSTEMD_STEP" ] && echo ' --systemd')"
done

# A listener must be there; look without connecting.
[ -n "$SYSTEMD_STEP" ] || has_step nandsim || [ -n "$(ss -Hltn "sport = :$NBD_PORT" 2>/dev/null)" ] ||
	die "nothing listens on TCP port $NBD_PORT: start the server on 127.0.0.1:$NBD_PORT first"

if [ -n "${VM_RUN_DIR:-}" ]; then
	RUN=$VM_RUN_DIR
else
	RUN=$CACHE/runs/$(date +%Y%m%d-%H%M%S)-$$
	mapfile -t old < <(ls -1dt "$CACHE"/runs/*/ 2>/dev/null | tail -n +10)
	[ ${#old[@]} -gt 0 ] && rm -rf "${old[@]}"
fi
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
LOG=$RUN/console.log
SHARE=$RUN/share
rm -rf "$SHARE"
mkdir -p "$SHARE/handlers" "$SHARE/logs"

# ---- what the guest gets on /vmtest
install -m 0755 "$HERE/guest-test.sh" "$SHARE/guest-test.sh"
install -m 0644 "$HERE/guest-lib.sh" "$SHARE/guest-lib.sh"
install -m 0755 "$TOP/deploy/iscsi-lun.sh" "$SHARE/iscsi-lun.sh"
if [ -n "$SYSTEMD_STEP" ]; then
	install -m 0755 "$HERE/guest-$SYSTEMD_STEP.sh" "$SHARE/guest-$SYSTEMD_STEP.sh"
	install -m 0644 "$HERE/flashd-vmtest@.service" "$SHARE/flashd-vmtest@.service"
	if has_step drbd; then
		install -m 0755 "$HERE/drbd-writer.py" "$SHARE/drbd-writer.py"
		cp -r "$TOP/deploy/drbd" "$SHARE/drbd"
	fi
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$TOP" install DESTDIR="$SHARE/root" PREFIX=/usr \
		>"$RUN/make-install.log" 2>&1 || { tail -n 20 "$RUN/make-install.log"; die "make install DESTDIR=$SHARE/root PREFIX=/usr failed"; }
fi
if has_step nandsim; then
	# flashd, flashctl and the backend conformance test run in the guest
	mkdir -p "$SHARE/bin"
	for f in flashd flashctl tests/t_nand_conformance; do
		[ -x "$TOP/build/$f" ] || die "no build/$f (make)"
		install -m 0755 "$TOP/build/$f" "$SHARE/bin/"
	done
	install -m 0755 "$HERE/guest-nandsim.sh" "$SHARE/guest-nandsim.sh"
	# nandsim.ko + the MTD modules, mtd-utils and flashd's libraries
	[ -f "$CACHE/nandsim/.ok" ] || die "no $CACHE/nandsim: run tests/vm/prepare.sh"
	cp -a "$CACHE/nandsim/mod" "$CACHE/nandsim/root" "$SHARE/" || die "copying $CACHE/nandsim failed"
	install -m 0644 "$HERE/nandsim_crash.py" "$TOP/tests/nbd/nbdraw.py" "$TOP/tests/nbd/image_tool.py" "$SHARE/"
fi
if has_step iscsi; then
	[ -f "$HANDLER_SO" ] || die "no handler at $HANDLER_SO (make build/handler_flashd.so)"
	# tcmu-runner loads handler_<subtype>.so files only
	install -m 0644 "$HANDLER_SO" "$SHARE/handlers/handler_flashd.so"
	if [ -z "$EXPORT1_SIZE" ]; then
		EXPORT1_SIZE=$(nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/$EXPORT1" 2>/dev/null) ||
			die "cannot get the size of export $EXPORT1 (nbdinfo --size); set EXPORT1_SIZE"
	fi
fi
{
	for v in NBD_PORT EXPORT0 EXPORT1 EXPORT1_SIZE HOST_AGENT SERVER_KIND TEST_TIMEOUT; do
		printf '%s=%q\n' "$v" "${!v}"
	done
} >"$SHARE/config"

# ---- initramfs = tiny uncompressed cpio holding /init + the cached archive
# (the kernel unpacks concatenated archives in order)
mkdir -p "$RUN/init"
install -m 0755 "$HERE/guest-init.sh" "$RUN/init/init"
(cd "$RUN/init" && echo init | cpio -o -H newc -R 0:0 --quiet) >"$RUN/initrd.img" || die "cpio failed"
cat "$BASE" >>"$RUN/initrd.img"

# systemd: less chatter on the console, no first-boot questions
SYSTEMD_APPEND=
[ -n "$SYSTEMD_STEP" ] && SYSTEMD_APPEND="systemd.show_status=error systemd.firstboot=0 systemd.unit=multi-user.target"
[ -n "${VM_HOSTNAME:-}" ] && SYSTEMD_APPEND="$SYSTEMD_APPEND systemd.hostname=$VM_HOSTNAME"
# no_timer_check: on a loaded host TCG can miss the kernel's early IO-APIC
# timer check, which then panics at boot ("IO-APIC + timer doesn't work!")
# shellcheck disable=SC2054 # commas are qemu option syntax
QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -accel tcg
	-m "${VM_MEM:-1024}" -smp "${VM_SMP:-1}"
	-display none -serial stdio -no-reboot
	-kernel "$KERNEL" -initrd "$RUN/initrd.img"
	-append "console=ttyS0 quiet loglevel=4 panic=-1 no_timer_check vmtest=$STEPS${SYSTEMD_APPEND:+ $SYSTEMD_APPEND}$PEER_APPEND"
	-netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile=
	"${PEER_ARGS[@]}" "${DISK_ARGS[@]}"
	-fsdev "local,id=fs0,path=$ROOTFS,security_model=none,readonly=on"
	-device virtio-9p-pci,fsdev=fs0,mount_tag=rootfs
	-fsdev "local,id=fs1,path=$SHARE,security_model=none"
	-device virtio-9p-pci,fsdev=fs1,mount_tag=vmtest
	-pidfile "$RUN/qemu.pid")

# Always power the VM off: if qemu is still there when we leave, kill it by pid.
cleanup() {
	local pid
	pid=$(cat "$RUN/qemu.pid" 2>/dev/null) || return 0
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == qemu-system-x86* ]] || return 0
	kill "$pid" 2>/dev/null
	sleep 1
	kill -9 "$pid" 2>/dev/null
	echo "run.sh: killed leftover qemu pid $pid" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "== run.sh: steps=$STEPS kernel=$KV server=$SERVER_KIND port=$NBD_PORT timeout=${VM_TIMEOUT}s${VM_HOSTNAME:+ host=$VM_HOSTNAME}"
echo "== run.sh: console log $LOG"
T0=${EPOCHREALTIME//[.,]/}
{
	# timeout forwards a TERM to qemu; --pdeathsig sends timeout one if
	# this subshell dies without its parent's traps running
	setpriv --pdeathsig TERM -- timeout -k 10 "$VM_TIMEOUT" "${QEMU[@]}" </dev/null 2>&1
	echo "$?" >"$RUN/qemu.rc"
} | while IFS= read -r line || [ -n "$line" ]; do
	line=${line%$'\r'}
	el=$(((${EPOCHREALTIME//[.,]/} - T0) / 10000))
	printf -v ts '%4d.%02d' $((el / 100)) $((el % 100))
	printf '[%s] %s\n' "$ts" "$line" >>"$LOG"
	if [ -n "$VERBOSE" ] || [[ $line == '@@ '* ]]; then
		printf '[%s] %s\n' "$ts" "$line"
	fi
done &
# wait (unlike a foreground pipeline) is interrupted by INT/TERM, so the
# traps run at once and cleanup kills qemu
wait $!
WALL=$(((${EPOCHREALTIME//[.,]/} - T0) / 10000))
QRC=$(cat "$RUN/qemu.rc" 2>/dev/null || echo 255)

# ---- verdict
RC=0
echo "== run.sh: VM finished (wall $((WALL / 100)).$(printf %02d $((WALL % 100))) s, qemu rc=$QRC)"
for s in ${STEPS//,/ }; do
	r=$(grep -aoE "^\[[ 0-9.]+\] @@ t=[0-9.]+ RESULT $s (PASS|FAIL).*" "$LOG" | tail -n1 | sed 's/.* RESULT [a-z0-9]* //')
	case $r in
	PASS*) echo "PASS vm:$s ${r#PASS }" ;;
	FAIL*) echo "FAIL vm:$s ${r#FAIL }"; RC=1 ;;
	*) echo "FAIL vm:$s (no result: the guest did not get there)"; RC=1 ;;
	esac
done
grep -a 'STAGE1 FAIL' "$LOG" && RC=1
if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
	echo "TIMEOUT: the VM was killed after ${VM_TIMEOUT}s"
	RC=124
elif ! grep -aq '@@ t=[0-9.]* ALL DONE' "$LOG"; then
	echo "FAIL: the guest did not finish (no 'ALL DONE'; kernel panic?)"
	[ $RC = 0 ] && RC=1
fi
if [ $RC != 0 ] && [ -z "$VERBOSE" ]; then
	echo "== last 40 console lines ($LOG):"
	tail -n 40 "$LOG"
fi
exit $RC
