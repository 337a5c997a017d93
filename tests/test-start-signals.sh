#!/bin/bash
# timeout: 300
# Signals at every step of a start.  A large-ish ioDimm (iodimm-slc-160: a
# first start takes a second or two, creating and probing the image, then
# formatting and opening the FTL) is stopped while it starts:
#   1. first starts, SIGTERM or SIGINT as soon as flashd holds the signals
#      (/proc: blocked or caught), once the TCP listener is up (the image is
#      being created), once "formatting" is logged (format and FTL open),
#      and after a fixed delay: flashd exits 0 every time (not killed:
#      143 or 130), says where the signal found it, leaves the image absent
#      or whole, and the next start serves it;
#   2. SIGHUP during a first start does not kill flashd (no exit 129): it
#      becomes ready, then reads the configuration file again;
#   3. later starts of an image holding flushed data, clean and after a
#      kill -9 (the open replays the log), stopped at each step: all exit
#      0, and the data reads back after all of them;
#   4. `flashctl format IMG --preset P` creating a 400 GiB image, killed
#      (SIGKILL) at delays across its run: IMG is absent or a whole image
#      (never a full-size file with no header, which every later start
#      would refuse).  A re-format cut at each NAND operation is in
#      tests/unit/t_ftl_basic.c (reformat_cut).
#   5. without --foreground, flashd returns once the start's result is
#      known: 1 with the reason on stderr for an image that cannot be
#      opened (not 0 at once), 0 once the ioDimm is served (its
#      pidfile written, a client connects right after).
source "$(dirname "$0")/functions.sh"

CONF=$T/slc.conf
cat >"$CONF" <<EOF
[dimm dimm0]
preset = iodimm-slc-160
EOF
FLASHD_STATE=$T/state
IMG=$FLASHD_STATE/dimm0.img
MiB=$((1 << 20))

# holds_signals PID: flashd's main has SIGTERM blocked or caught
FLASHD_EXE=$(readlink -f "$FLASHD")
holds_signals() {
	local k v
	while read -r k v; do
		case $k in
		SigBlk: | SigCgt:) (((0x$v & 0x4000) != 0)) && return 0 ;;
		esac
	done <"/proc/$1/status"
	return 1
}

# interrupted_start WHEN SIG: start flashd on $FLASHD_STATE and send it SIG
# once WHEN holds (signals: it holds the signals; a number: seconds after
# that; else a text its log shows); it must exit 0.  Sets WHERE to what the
# log says about the moment the signal came.
interrupted_start() {
	local when=$1 sig=$2 log=$T/start.log pid rc=0
	mkdir -p "$FLASHD_STATE"
	: >"$log"
	"$FLASHD" --foreground --config "$CONF" --timing off --state-dir "$FLASHD_STATE" \
		--listen "127.0.0.1:$FLASHD_PORT" --unix "$FLASHD_STATE/flashd.sock" \
		--pidfile "$FLASHD_STATE/flashd.pid" >"$log" 2>&1 &
	pid=$!
	track_pid $pid
	# exec'd: a signal before that would find the test's own fork
	for _ in $(seq 1 500); do
		[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$FLASHD_EXE" ] && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.01
	done
	case $when in
	signals)
		for _ in $(seq 1 500); do
			holds_signals $pid && break
			kill -0 $pid 2>/dev/null || break
			sleep 0.001
		done
		;;
	[0-9]*) sleep "$when" ;;
	*)
		for _ in $(seq 1 1000); do
			grep -q "$when" "$log" && break
			kill -0 $pid 2>/dev/null || break
			sleep 0.01
		done
		;;
	esac
	kill -"$sig" $pid 2>/dev/null || true
	for _ in $(seq 1 300); do
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	kill -0 $pid 2>/dev/null && fail "SIG$sig at '$when': flashd still runs 30 s later"
	wait $pid || rc=$?
	cat "$log" >>"$T/flashd.log"
	if [ $rc -ne 0 ]; then
		tail -n 5 "$log"
		fail "SIG$sig at '$when': flashd exited with status $rc, not 0"
	fi
	grep -q "flashd\[info\]: stopped" "$log" || { cat "$log"; fail "SIG$sig at '$when': no 'stopped' line"; }
	if grep -q "received SIG$sig while starting" "$log"; then
		# nothing to show when the signal came before any ioDimm's open
		# began (grep -o fails: pipefail and set -e would end the test
		# without a word)
		WHERE="while starting; then: $(grep -v 'received SIG' "$log" | grep -o 'formatting\|opened in\|not opened\|closed cleanly' | tr '\n' ' ' || true)"
		if [ "$WHERE" = "while starting; then: " ]; then
			WHERE="while starting, before any ioDimm's open"
		fi
	else
		WHERE="once ready"
	fi
}

# image_whole AFTER: the image is absent, or a whole one (blank or formatted)
image_whole() {
	[ -e "$IMG" ] || return 0
	"$FLASHCTL" info --json "$IMG" >"$T/info.json" 2>"$T/info.err" || true
	$PYTHON - "$T/info.json" <<'PY' || { cat "$T/info.err"; fail "after $1, $IMG is not a whole image"; }
import json, sys
try:
    i = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(1)
# true: formatted; false: blank (formatted at the next start); null: does not open
sys.exit(0 if i.get("formatted") is not None else 1)
PY
}

FLASHD_PORT=$(free_port)

# ---- 1. first starts ---------------------------------------------------------------------------
# one after the other on the same state directory: until one formats, each
# is a first start again; then one the same way at a fixed delay
steps=""
rm -rf "$FLASHD_STATE"
for run in "listening.on.127 TERM" "signals INT" "formatting TERM" "fresh" "0.3 INT"; do
	if [ "$run" = fresh ]; then
		start_flashd --config "$CONF" --timing off
		stop_flashd
		rm -rf "$FLASHD_STATE"
		continue
	fi
	read -r when sig <<<"$run"
	interrupted_start "$when" "$sig"
	image_whole "SIG$sig at '$when'"
	steps="$steps
   SIG$sig at '$when': $WHERE; image $([ -e "$IMG" ] && echo whole || echo not created)"
done
start_flashd --config "$CONF" --timing off
stop_flashd
echo "first starts:$steps"
grep -q "received SIGTERM while starting" "$T/flashd.log" || fail "no SIGTERM came while starting"
grep -q "received SIGINT while starting" "$T/flashd.log" || fail "no SIGINT came while starting"
case $steps in
*"not opened"* | *"before any ioDimm's open"*) ;;
*) fail "no signal came before the image was opened" ;;
esac
grep -q "dimm0: formatting" "$T/flashd.log" || fail "no start formatted the image"
ok "first starts stopped at each step: exit 0, the image absent or whole, the next start serves it"

# ---- 2. SIGHUP while starting ----------------------------------------------------------------------
rm -rf "$FLASHD_STATE"
mkdir -p "$FLASHD_STATE"
touch "$T/flashd.log"
start_log_lines=$(wc -l <"$T/flashd.log")
"$FLASHD" --foreground --config "$CONF" --timing off --state-dir "$FLASHD_STATE" \
	--listen "127.0.0.1:$FLASHD_PORT" --unix "$FLASHD_STATE/flashd.sock" \
	--pidfile "$FLASHD_STATE/flashd.pid" >>"$T/flashd.log" 2>&1 &
FLASHD_PID=$!
track_pid $FLASHD_PID
for _ in $(seq 1 500); do
	tail -n +$((start_log_lines + 1)) "$T/flashd.log" | grep -q formatting && break
	sleep 0.01
done
kill -HUP $FLASHD_PID
for _ in $(seq 1 600); do
	kill -0 $FLASHD_PID 2>/dev/null || fail "SIGHUP while starting killed flashd"
	[ "$(cat "$FLASHD_STATE/flashd.pid" 2>/dev/null)" = "$FLASHD_PID" ] && break
	sleep 0.1
done
grep -q "received SIGHUP while starting: the configuration file is read again once flashd is ready" "$T/flashd.log" ||
	fail "SIGHUP while starting is not logged as deferred"
for _ in $(seq 1 50); do
	grep -q "reload of $CONF done" "$T/flashd.log" && break
	sleep 0.1
done
grep -q "SIGHUP (received while starting): reloading $CONF" "$T/flashd.log" || fail "no reload once ready"
stop_flashd
ok "SIGHUP while starting: flashd becomes ready, then reloads $CONF"

# ---- 3. later starts of an image with flushed data ------------------------------------------------
start_flashd --config "$CONF" --timing off
random_file "$T/data" 16
"$PYTHON" - "$FLASHD_URI0" "$T/data" <<'PY' || fail "writing the data"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
h.pwrite(data, 1 << 30)
h.flush()
h.shutdown()
PY
stop_flashd
steps=""
for run in "listening.on.127 TERM" "kill" "listening.on.127 INT" "0.3 TERM"; do
	if [ "$run" = kill ]; then
		start_flashd --config "$CONF" --timing off
		"$PYTHON" -c "
import nbd
h = nbd.NBD()
h.connect_uri('$FLASHD_URI0')
h.pwrite(b'\\x55' * 65536, 2 << 30)
h.shutdown()
" || fail "an unflushed write before kill -9"
		kill_flashd
		steps="$steps
   kill -9 after an unflushed write"
		continue
	fi
	read -r when sig <<<"$run"
	interrupted_start "$when" "$sig"
	steps="$steps
   SIG$sig at '$when': $WHERE"
done
echo "later starts:$steps"
start_flashd --config "$CONF" --timing off
nbd_region_is "$FLASHD_URI0" $((1 << 30)) $((16 * MiB)) "$T/data" || fail "the flushed data after the interrupted starts"
stop_flashd
check_flashd_log
ok "later starts stopped at each step (clean image, and replaying after kill -9): exit 0; the flushed data reads back"

# ---- 4. flashctl format creating an image, killed ------------------------------------------------------
IMG=$T/fresh.img
n=0 absent=0
cut=0
for delay in 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.12 0.15 0.2; do
	rm -f "$IMG" "$IMG.creating"
	"$FLASHCTL" format "$IMG" --preset iodimm-mlc-320 >/dev/null 2>&1 &
	p=$!
	track_pid $p
	sleep "$delay"
	kill -KILL $p 2>/dev/null || true
	wait $p 2>/dev/null || true
	image_whole "flashctl format killed after $delay s"
	[ -e "$IMG" ] || absent=$((absent + 1))
	[ -e "$IMG.creating" ] && cut=$((cut + 1))
	n=$((n + 1))
done
[ $cut -gt 0 ] || fail "no kill landed while the image was being created ($n delays): nothing was tested"
"$FLASHCTL" format "$IMG" --preset iodimm-mlc-320 --yes >/dev/null || fail "formatting after the killed ones"
image_whole "a format after the killed ones"
ok "flashctl format killed at $n delays: the image absent $absent times ($cut of them cut mid-creation), else whole; never half-made"

# ---- 5. without --foreground -------------------------------------------------------------------
S5=$T/daemon
P5=$(free_port)
mkdir -p "$S5/dimm0.img" # a directory where the image should be: it cannot be opened
daemon_start() {
	"$FLASHD" --config "$CONF" --timing off --state-dir "$S5" --listen "127.0.0.1:$P5" \
		--pidfile "$S5/flashd.pid" >"$T/daemon.out" 2>"$T/daemon.err"
}
rc=0
daemon_start || rc=$?
[ $rc = 1 ] || fail "flashd (daemon) with an image it cannot open: exit $rc, want 1; stderr: $(cat "$T/daemon.err")"
grep -q "dimm0: .*dimm0.img" "$T/daemon.err" || fail "the reason is not on stderr: $(cat "$T/daemon.err")"
reason=$(grep -m1 "dimm0: " "$T/daemon.err")
rmdir "$S5/dimm0.img"
daemon_start || fail "flashd (daemon) with a good image: exit $?; stderr: $(cat "$T/daemon.err")"
dpid=$(cat "$S5/flashd.pid" 2>/dev/null) || true
if [ -z "$dpid" ]; then # returned before it was ready: find it to stop it
	for _ in $(seq 1 100); do [ -s "$S5/flashd.pid" ] && break; sleep 0.1; done
	dpid=$(cat "$S5/flashd.pid" 2>/dev/null) || true
	[ -n "$dpid" ] && track_pid "$dpid"
	fail "flashd (daemon) returned before it had written its pidfile (before it was ready)"
fi
track_pid "$dpid"
nbdinfo --size "nbd://127.0.0.1:$P5/dimm0" >"$T/daemon.size" 2>&1 ||
	fail "no client could connect right after the daemon returned: $(cat "$T/daemon.size")"
kill -TERM "$dpid"
for _ in $(seq 1 300); do
	kill -0 "$dpid" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$dpid" 2>/dev/null && fail "the daemon still runs 30 s after SIGTERM"
ok "without --foreground: exit 1 with the reason on stderr ($reason); exit 0 once served (a client connects at once)"
