# tests/vm/host-lib.sh - what the host side of the VM tests (tests/vm/test-*.sh)
# shares: the list of PASS/FAIL steps and its summary, the skip, the checks
# that this host can run the VM (root, qemu with TCG), the VM cache
# (tests/vm/prepare.sh) and keeping a run's logs.  Sourced by those scripts
# only, after they cd to the top of the tree and set LOGDIR; it sets TOP,
# CACHE, MIRROR, T_ALL (the start, for the summary), RESULTS and FAILED,
# and the traps: at exit vm_cleanup (a test with more to stop sets its own
# EXIT trap), on a signal exit 143.

TOP=$PWD
CACHE=${FLASHD_VM_CACHE:-/var/cache/flashd-vm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
T_ALL=$(date +%s)
RESULTS=()
FAILED=0

# skip WHY: exit 77 with "SKIP: WHY" on the last line, as tests/functions.sh's
# skip does; tests/run.sh counts it as skipped, never as passed
skip() {
	echo "SKIP: $*"
	exit 77
}
pass() {
	echo "PASS $*"
	RESULTS+=("PASS $*")
}
fail() {
	echo "FAIL $*"
	RESULTS+=("FAIL $*")
	FAILED=1
}
note() { echo "-- $*"; }

# WORK: the test's scratch directory, made once the checks passed; at exit
# the logs of the VM run in WORK/vm are kept (vm_keep_logs), WORK removed
WORK=''
vm_cleanup() {
	[ -n "$WORK" ] || return 0
	vm_keep_logs "$WORK/vm"
	rm -rf "$WORK"
}
trap vm_cleanup EXIT
trap 'exit 143' TERM INT HUP

# finish: the summary and every step's line; exit 0 only when every step
# passed.  A test with more to say defines its own after sourcing this.
finish() {
	echo "== summary ($(($(date +%s) - T_ALL)) s; logs in $LOGDIR)"
	printf '%s\n' "${RESULTS[@]}"
	exit $FAILED
}

# vm_host_ok WHY: skip unless root (WHY: what needs it) and unless an
# installed qemu-system-x86_64 can run TCG (prepare.sh installs a missing
# one); then LOGDIR, empty
vm_host_ok() {
	[ "$(id -u)" = 0 ] || skip "needs root ($1)"
	if command -v qemu-system-x86_64 >/dev/null &&
		! qemu-system-x86_64 -accel help 2>/dev/null | grep -qx tcg; then
		skip "qemu-system-x86_64 has no TCG accelerator"
	fi
	rm -rf "$LOGDIR"
	mkdir -p "$LOGDIR"
}

# vm_prepare [--systemd]: the VM cache, with the systemd rootfs when asked
# (tests/vm/prepare.sh; the network only the first time), then qemu with
# TCG.  A failed prepare.sh is a skip when the Debian mirror is unreachable
# (no network for apt), else a FAIL that ends the test.
vm_prepare() {
	local t what="prepare VM cache${1:+ with rootfs-systemd}"
	t=$(date +%s)
	if tests/vm/prepare.sh "$@" >"$LOGDIR/prepare.log" 2>&1; then
		pass "$what ($(($(date +%s) - t)) s; $CACHE)"
	else
		tail -n 25 "$LOGDIR/prepare.log" | sed 's/^/    | /'
		timeout 20 curl -sfI -o /dev/null "$MIRROR/dists/${DEBIAN_SUITE:-bookworm}/Release" ||
			skip "tests/vm/prepare.sh${1:+ $1} failed and $MIRROR is unreachable (no network for apt)"
		fail "prepare VM cache (log: $LOGDIR/prepare.log)"
		finish
	fi
	command -v qemu-system-x86_64 >/dev/null || { fail "qemu-system-x86_64 missing after prepare.sh"; finish; }
	qemu-system-x86_64 -accel help 2>/dev/null | grep -qx tcg || skip "qemu-system-x86_64 has no TCG accelerator"
}

# vm_built FILE...: every FILE of the build exists, or a FAIL ends the test
vm_built() {
	local f missing=
	for f in "$@"; do [ -e "$f" ] || missing="$missing $f"; done
	[ -z "$missing" ] || { fail "missing:$missing (run make)"; finish; }
}

# vm_keep_logs RUNDIR: the console (and make-install) log of the VM run in
# RUNDIR (tests/vm/run.sh's VM_RUN_DIR) and its share's logs/ into LOGDIR
vm_keep_logs() {
	mkdir -p "$LOGDIR"
	cp -f "$1/console.log" "$LOGDIR/" 2>/dev/null
	[ ! -f "$1/make-install.log" ] || cp -f "$1/make-install.log" "$LOGDIR/" 2>/dev/null
	cp -rf "$1/share/logs/." "$LOGDIR/" 2>/dev/null
}
