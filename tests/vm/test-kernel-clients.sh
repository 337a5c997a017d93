#!/bin/bash
# test-kernel-clients.sh - flashd against the real Linux kernel clients, in
# one throw-away VM (qemu TCG): the kernel NBD client, and LIO iSCSI through
# tcmu-runner + handler_flashd.so.  Run by tests/run.sh (make check).
# timeout: 1500
# jobs: 2 (a TCG VM takes a core of its own; the guest's timeouts are real time)
#
#   tests/vm/test-kernel-clients.sh
#
# 1. tests/vm/prepare.sh: builds the VM cache outside the repository
#    (${FLASHD_VM_CACHE:-/var/cache/flashd-vm}) the first time (2-5 min),
#    seconds afterwards.
# 2. Starts flashd on the host with its own temporary state dir:
#      build/flashd --foreground --state-dir DIR --listen 127.0.0.1:PORT
#                   --unix DIR/flashd.sock --pidfile DIR/flashd.pid --preset test-1g
# 3. Boots the VM once (tests/vm/run.sh nbd,iscsi) and acts as its host
#    agent: the guest drops a request (restart-server, stop-server,
#    start-server, kill-restart-server) into the run share, this script does
#    it (SIGTERM, or SIGKILL; wait for the exit, start again on the same
#    state dir and port) and answers.
#      nbd:   nbd-client attaches dimm0; mkfs.ext4, files, fsck, verify;
#             detach; flashd restarts; re-attach and verify again.
#      iscsi: tcmu-runner + handler_flashd.so, deploy/iscsi-lun.sh creates
#             the user:flashd backstores (dimm1 over the default unix socket,
#             bridged by socat, its size from the export, and
#             dimm1@10.0.2.2/PORT;grace=5 over TCP) and the target with
#             CHAP; open-iscsi is refused without CHAP, logs in with it;
#             data, parallel writers, flashd restarted (SIGTERM, as
#             systemctl restart does, then SIGKILL) under a fio verify job
#             (libaio, O_DIRECT + O_SYNC 64k writes, crc32c headers read
#             back after the restart, and again after both) and reads:
#             held and sent again, no I/O error, no lost write,
#             flashd stopped (LUN1 fails after its grace) and started, mkfs +
#             files, blkdiscard (+ -z) reading back zeros; logout and delete.
# 4. Checks on the host that flashd's trim counter for dimm1 moved
#    (build/flashctl status --control DIR/flashd.ctl --json), and that
#    flashd exits cleanly on SIGTERM.
# Prints PASS/FAIL per step; exits 0 only when every step passed.
#
# FLASHD_VM_PORTS=LO-HI: the host TCP port range the server's port is picked
# from (a free port, looked up with ss; default 20000-59999).
#
# Development only: FLASHD_VM_SERVER=nbdkit runs the same test against a
# STAND-IN (nbdkit's file plugin serving DIR/exports/dimm0 and dimm1, 800 MiB
# sparse files), says so loudly, and skips the flashd-only check (trim
# counter); all else passing, it exits 77 (a skip: flashd was not tested).
# The default, and what make check runs, is build/flashd.
# Logs: build/test-logs/vm-kernel-clients/ (server log, console, tcmu-runner).
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LOGDIR=$PWD/build/test-logs/vm-kernel-clients
. tests/vm/host-lib.sh
SERVER=${FLASHD_VM_SERVER:-flashd}
MiB=$((1 << 20))

SPID='' RUNPID=''
cleanup() {
	local p
	if [ -n "$RUNPID" ] && kill -0 "$RUNPID" 2>/dev/null; then
		kill "$RUNPID" 2>/dev/null # run.sh's own trap kills qemu by pid
		wait "$RUNPID" 2>/dev/null
	fi
	if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then
		kill "$SPID" 2>/dev/null
		for p in $(seq 1 50); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$SPID" 2>/dev/null
		wait "$SPID" 2>/dev/null
	fi
	vm_cleanup
}
trap cleanup EXIT

finish() {
	echo "== summary ($(($(date +%s) - T_ALL)) s, server: $SERVER)"
	printf '%s\n' "${RESULTS[@]}"
	if [ "$SERVER" != flashd ]; then
		echo "NOTE: FLASHD_VM_SERVER=$SERVER: this ran against a STAND-IN, not flashd; it is no verdict on flashd."
		# flashd was not tested: a skip, never a pass
		[ $FAILED = 0 ] && { echo "SKIP: ran against the $SERVER stand-in, not flashd"; exit 77; }
	fi
	exit $FAILED
}

rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"

# ---------------------------------------------------------------- 0. basics
if [ "$(id -u)" != 0 ]; then
	fail "setup: needs root (apt-get, debootstrap, qemu with the root-owned VM rootfs)"
	finish
fi
case $SERVER in
flashd | nbdkit) ;;
*) fail "setup: FLASHD_VM_SERVER=$SERVER (want flashd, or nbdkit for the development stand-in)"; finish ;;
esac
[ "$SERVER" = flashd ] ||
	note "FLASHD_VM_SERVER=$SERVER: DEVELOPMENT STAND-IN (nbdkit file plugin), NOT flashd"

# ---------------------------------------------------------------- 1. prepare
t=$(date +%s)
if tests/vm/prepare.sh >"$LOGDIR/prepare.log" 2>&1; then
	pass "prepare VM cache ($(($(date +%s) - t)) s; $CACHE)"
else
	tail -n 25 "$LOGDIR/prepare.log" | sed 's/^/    | /'
	fail "prepare VM cache (log: $LOGDIR/prepare.log)"
	finish
fi

missing=
[ -f build/handler_flashd.so ] || missing="$missing build/handler_flashd.so"
if [ "$SERVER" = flashd ]; then
	[ -x build/flashd ] || missing="$missing build/flashd"
	[ -x build/flashctl ] || missing="$missing build/flashctl"
fi
command -v nbdinfo >/dev/null || missing="$missing nbdinfo(libnbd-bin)"
[ "$SERVER" = nbdkit ] && ! command -v nbdkit >/dev/null && missing="$missing nbdkit"
if [ -n "$missing" ]; then
	fail "setup: missing:$missing (run make; scripts/deps.sh check)"
	finish
fi

# ---------------------------------------------------------------- 2. server
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flashd-vmtest.XXXXXX") || exit 2
STATE=$WORK/state
mkdir -p "$STATE"
# a free loopback port in FLASHD_VM_PORTS (looked up, not probed)
PORTS=${FLASHD_VM_PORTS:-20000-59999}
if [[ ! $PORTS =~ ^([0-9]+)-([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -lt 1 ] ||
	[ "${BASH_REMATCH[2]}" -gt 65535 ] || [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
	fail "setup: FLASHD_VM_PORTS='$PORTS', want LO-HI within 1-65535"
	finish
fi
PLO=${BASH_REMATCH[1]} PHI=${BASH_REMATCH[2]}
PORT=
for _ in $(seq 1 50); do
	p=$((PLO + (RANDOM * 32768 + RANDOM) % (PHI - PLO + 1)))
	[ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] && { PORT=$p; break; }
done
if [ -z "$PORT" ] && [ $((PHI - PLO)) -lt 1000 ]; then # small range: try each
	for p in $(seq "$PLO" "$PHI"); do
		[ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] && { PORT=$p; break; }
	done
fi
[ -n "$PORT" ] || { fail "setup: no free TCP port in $PORTS (FLASHD_VM_PORTS)"; finish; }

if [ "$SERVER" = flashd ]; then
	CMD=("$TOP/build/flashd" --foreground --state-dir "$STATE" --listen "127.0.0.1:$PORT"
		--unix "$STATE/flashd.sock" --pidfile "$STATE/flashd.pid" --preset test-1g)
else
	mkdir -p "$STATE/exports"
	truncate -s 800M "$STATE/exports/dimm0" "$STATE/exports/dimm1"
	CMD=(nbdkit -f -i 127.0.0.1 -p "$PORT" -P "$STATE/flashd.pid" file dir="$STATE/exports")
fi
SRVLOG=$LOGDIR/server.log
note "server: ${CMD[*]}"

# Start the server as OUR child (so we can wait for it); wait until it
# listens on the port (and, for flashd, has made its unix socket).
start_server() {
	echo "=== $(date '+%F %T') start: ${CMD[*]}" >>"$SRVLOG"
	# --pdeathsig: the server also gets SIGTERM should this script die
	# without running its EXIT trap (belt and braces; cleanup stops it by pid)
	setpriv --pdeathsig TERM -- "${CMD[@]}" >>"$SRVLOG" 2>&1 </dev/null &
	SPID=$!
	for _ in $(seq 1 1200); do
		if ! kill -0 "$SPID" 2>/dev/null; then
			wait "$SPID"
			START_ERR="exited with status $? while starting (log: $SRVLOG)"
			SPID=
			return 1
		fi
		if [ -n "$(ss -Hltn "sport = :$PORT" 2>/dev/null)" ] &&
			{ [ "$SERVER" != flashd ] || [ -S "$STATE/flashd.sock" ]; }; then
			return 0
		fi
		sleep 0.1
	done
	START_ERR="not listening on 127.0.0.1:$PORT after 120 s"
	return 1
}
# SIGTERM, wait (at most 60 s) for the exit; STOP_RC = exit status.
# The nbdkit stand-in may linger on SIGTERM while clients behind qemu's
# user-mode network stay connected: it gets 10 s, then SIGKILL (STOP_RC
# "killed"), which is reported as a NOTE about the stand-in, never a PASS.
stop_server() {
	local st wait_ds=600
	STOP_RC=
	[ -n "$SPID" ] || return 1
	[ "$SERVER" = nbdkit ] && wait_ds=100
	kill -TERM "$SPID" 2>/dev/null
	for _ in $(seq 1 $wait_ds); do
		st=$(awk '{print $3}' "/proc/$SPID/stat" 2>/dev/null)
		[ -z "$st" ] || [ "$st" = Z ] && break
		sleep 0.1
	done
	if [ -n "$st" ] && [ "$st" != Z ]; then
		kill -KILL "$SPID" 2>/dev/null
		wait "$SPID" 2>/dev/null
		SPID=
		if [ "$SERVER" = nbdkit ]; then
			STOP_RC=killed
			echo "=== $(date '+%F %T') stand-in still running 10 s after SIGTERM: SIGKILL" >>"$SRVLOG"
			return 0
		fi
		STOP_RC=timeout
		return 1
	fi
	wait "$SPID"
	STOP_RC=$?
	SPID=
	echo "=== $(date '+%F %T') exited with status $STOP_RC after SIGTERM" >>"$SRVLOG"
	return 0
}
# A clean SIGTERM shutdown is exit status 0 for flashd.  (nbdkit, the
# stand-in, exits 143 when it still had clients.)
clean_rc() { [ "$STOP_RC" = 0 ] || { [ "$SERVER" = nbdkit ] && [ "$STOP_RC" = 143 ]; }; }

t=$(date +%s)
if start_server; then
	pass "start $SERVER on 127.0.0.1:$PORT, state dir $STATE ($(($(date +%s) - t)) s)"
else
	tail -n 20 "$SRVLOG" | sed 's/^/    | /'
	fail "start $SERVER: $START_ERR"
	finish
fi
if [ "$SERVER" = flashd ] && [ "$(cat "$STATE/flashd.pid" 2>/dev/null)" != "$SPID" ]; then
	fail "flashd --pidfile: $STATE/flashd.pid holds '$(cat "$STATE/flashd.pid" 2>/dev/null)', not $SPID"
fi

SIZE0=$(nbdinfo --size "nbd://127.0.0.1:$PORT/dimm0" 2>>"$LOGDIR/nbdinfo.err")
SIZE1=$(nbdinfo --size "nbd://127.0.0.1:$PORT/dimm1" 2>>"$LOGDIR/nbdinfo.err")
if [[ $SIZE0 =~ ^[0-9]+$ ]] && [[ $SIZE1 =~ ^[0-9]+$ ]] && [ "$SIZE1" -ge $((256 * MiB)) ]; then
	pass "exports: dimm0 $SIZE0 bytes, dimm1 $SIZE1 bytes (nbdinfo)"
else
	fail "exports dimm0/dimm1 not served: '$SIZE0' '$SIZE1' ($(head -c 300 "$LOGDIR/nbdinfo.err"))"
	finish
fi

# flashd's trim counter for dimm1 (bytes), from flashctl's JSON
trimmed() {
	build/flashctl status --control "$STATE/flashd.ctl" --json 2>>"$LOGDIR/flashctl.err" |
		/usr/bin/python3 -c '
import json, sys
def walk(o):
    if isinstance(o, dict):
        if o.get("name") == "dimm1" and isinstance(o.get("stats"), dict) \
                and "host_bytes_trimmed" in o["stats"]:
            yield o["stats"]["host_bytes_trimmed"]
        for v in o.values():
            yield from walk(v)
    elif isinstance(o, list):
        for v in o:
            yield from walk(v)
found = list(walk(json.load(sys.stdin)))
if len(found) != 1:
    sys.exit("want exactly one dimm1 stats.host_bytes_trimmed, found %d" % len(found))
print(int(found[0]))
' 2>>"$LOGDIR/flashctl.err"
}
TRIM0=
if [ "$SERVER" = flashd ]; then
	TRIM0=$(trimmed) || fail "flashctl status --json before the VM run: $(tail -n 3 "$LOGDIR/flashctl.err" | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- 3. the VM
export FLASHD_VM_CACHE=${FLASHD_VM_CACHE:-/var/cache/flashd-vm}
SHARE=$WORK/vm/share
# the iscsi step took 5 to 8 min on a busy 2-core host (the
# fio jobs' FUA writes): 10 min per step, 20 for the VM
VM_RUN_DIR=$WORK/vm NBD_PORT=$PORT EXPORT0=dimm0 EXPORT1=dimm1 EXPORT1_SIZE=$SIZE1 \
	HOST_AGENT=1 SERVER_KIND=$SERVER TEST_TIMEOUT=${TEST_TIMEOUT:-600} VM_TIMEOUT=${VM_TIMEOUT:-1200} setpriv --pdeathsig TERM -- tests/vm/run.sh nbd,iscsi &
RUNPID=$!

# host agent: answer the guest's requests until the VM is done
answer() { # N TEXT
	echo "$2" >"$SHARE/ack.$1.tmp" && mv "$SHARE/ack.$1.tmp" "$SHARE/ack.$1"
}
while kill -0 "$RUNPID" 2>/dev/null; do
	for f in "$SHARE"/req.[0-9]*; do
		[ -e "$f" ] || continue
		case $f in *.tmp | *.done) continue ;; esac
		n=${f##*.}
		verb=$(cat "$f")
		mv -f "$f" "$f.done"
		t=$EPOCHREALTIME
		case $verb in
		restart-server | stop-server)
			if stop_server && [ "$STOP_RC" = killed ]; then
				note "NOTE: the $SERVER stand-in ignored SIGTERM for 10 s with clients connected; killed [guest request #$n $verb]"
			elif [ -z "$SPID" ] && clean_rc; then
				pass "host: $SERVER exits cleanly on SIGTERM (status $STOP_RC) [guest request #$n $verb]"
			else
				fail "host: $SERVER did not exit cleanly on SIGTERM (status ${STOP_RC:-none}) [guest request #$n $verb]"
			fi
			if [ "$verb" = stop-server ]; then
				if [ -z "$SPID" ]; then answer "$n" "ok stopped, exit status $STOP_RC"; else answer "$n" "fail still running"; fi
				continue
			fi
			;;&
		kill-restart-server)
			if [ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null; then
				wait "$SPID" 2>/dev/null
				SPID=
				echo "=== $(date '+%F %T') killed with SIGKILL [guest request #$n]" >>"$SRVLOG"
				note "host: $SERVER killed with SIGKILL [guest request #$n $verb]"
			else
				fail "host: no $SERVER to kill [guest request #$n $verb]"
			fi
			;;&
		restart-server | start-server | kill-restart-server)
			if start_server; then
				pass "host: $SERVER started again on the same state dir and port [guest request #$n $verb]"
				answer "$n" "ok running again, pid $SPID, took $(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
			else
				tail -n 20 "$SRVLOG" | sed 's/^/    | /'
				fail "host: $SERVER did not start again: $START_ERR [guest request #$n $verb]"
				answer "$n" "fail $START_ERR"
			fi
			;;
		*)
			answer "$n" "fail unknown request '$verb'"
			;;
		esac
	done
	sleep 0.2
done
wait "$RUNPID"
VMRC=$?
RUNPID=
for s in nbd iscsi; do
	r=$(grep -aoE "@@ t=[0-9.]+ RESULT $s (PASS|FAIL).*" "$WORK/vm/console.log" 2>/dev/null | tail -n1 | sed 's/.* RESULT [a-z]* //')
	case $r in
	PASS*) pass "vm step $s: ${r#PASS }" ;;
	FAIL*) fail "vm step $s: ${r#FAIL } (console: $LOGDIR/console.log)" ;;
	*) fail "vm step $s: no result (run.sh exit $VMRC; console: $LOGDIR/console.log)" ;;
	esac
done
[ "$VMRC" = 124 ] && fail "vm: timed out"

# ---------------------------------------------------------------- 4. host checks
if [ "$SERVER" = flashd ]; then
	if [ -z "$SPID" ]; then
		fail "flashd trim counter: flashd is not running"
	elif TRIM1=$(trimmed); then
		if [[ $TRIM0 =~ ^[0-9]+$ ]] && [ $((TRIM1 - TRIM0)) -ge $((4 * MiB)) ]; then
			pass "flashd trim counter for dimm1 moved: host_bytes_trimmed $TRIM0 -> $TRIM1"
		else
			fail "flashd trim counter for dimm1: host_bytes_trimmed '$TRIM0' -> '$TRIM1' (want +>= 4 MiB: the guest discarded 4 MiB and mkfs the whole LUN)"
		fi
	else
		fail "flashctl status --json after the VM run: $(tail -n 3 "$LOGDIR/flashctl.err" | tr '\n' ' ')"
	fi
else
	note "SKIP flashd trim counter: the $SERVER stand-in has no flashctl"
fi

if [ -n "$SPID" ]; then
	if stop_server && clean_rc; then
		pass "host: $SERVER exits cleanly on SIGTERM at the end (status $STOP_RC)"
	else
		fail "host: $SERVER did not exit cleanly on SIGTERM at the end (status ${STOP_RC:-none})"
	fi
fi
finish
