# tests/functions.sh - helpers for shell tests that drive a real flashd.
#
#   source "$(dirname "$0")/functions.sh"
#   start_flashd [--preset test-1g] [--timing off] [other flashd options]
#   ... use $FLASHD_URI0 / $FLASHD_URI1 (TCP), $FLASHD_UNIX_URI0 (unix socket),
#       $FLASHD_PORT, $FLASHD_SOCK, $FLASHD_CTL, $FLASHD_STATE, $FLASHD_PID
#   stop_flashd            SIGTERM, wait for a clean exit (fails otherwise)
#   kill_flashd            SIGKILL (a crash), wait
#   restart_flashd         start again with the same state and arguments
#
# Everything lives in a fresh temporary directory ($T) that is removed at
# exit; every process a helper starts is killed by pid at exit.  Servers
# listen on 127.0.0.1 and on a unix socket only.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLASHD=$top/build/flashd
FLASHCTL=$top/build/flashctl
PYTHON=/usr/bin/python3 # Debian's python3-libnbd lives here
T=$(mktemp -d /tmp/flashd-test.XXXXXX)
_pids=()

_cleanup() {
	local rc=$?
	for p in "${_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in "${_pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ $rc -ne 0 ] && [ -f "$T/flashd.log" ]; then
		echo "--- last lines of the flashd log:"
		tail -n 30 "$T/flashd.log" || true
	fi
	rm -rf "$T"
	exit $rc
}
trap _cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

ok() {
	echo "ok: $*"
}

free_port() {
	$PYTHON -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# remember a background pid so it is killed at exit
track_pid() {
	_pids+=("$1")
}

_flashd_args=()

start_flashd() {
	_flashd_args=("$@")
	FLASHD_STATE=${FLASHD_STATE:-$T/state}
	mkdir -p "$FLASHD_STATE"
	FLASHD_PORT=${FLASHD_PORT:-$(free_port)}
	FLASHD_SOCK=$FLASHD_STATE/flashd.sock
	FLASHD_CTL=$FLASHD_STATE/flashd.ctl
	"$FLASHD" --foreground --state-dir "$FLASHD_STATE" --listen "127.0.0.1:$FLASHD_PORT" \
		--unix "$FLASHD_SOCK" --pidfile "$FLASHD_STATE/flashd.pid" "$@" \
		>>"$T/flashd.log" 2>&1 &
	FLASHD_PID=$!
	track_pid "$FLASHD_PID"
	FLASHD_URI0=nbd://127.0.0.1:$FLASHD_PORT/dimm0
	FLASHD_URI1=nbd://127.0.0.1:$FLASHD_PORT/dimm1
	FLASHD_UNIX_URI0="nbd+unix:///dimm0?socket=$FLASHD_SOCK"
	FLASHD_UNIX_URI1="nbd+unix:///dimm1?socket=$FLASHD_SOCK"
	export FLASHD_PORT FLASHD_SOCK FLASHD_CTL FLASHD_STATE FLASHD_PID
	export FLASHD_URI0 FLASHD_URI1 FLASHD_UNIX_URI0 FLASHD_UNIX_URI1
	local i
	for i in $(seq 1 600); do
		if ! kill -0 "$FLASHD_PID" 2>/dev/null; then
			wait "$FLASHD_PID" || true
			fail "flashd exited during start-up"
		fi
		# the pidfile is written once everything listens
		if [ "$(cat "$FLASHD_STATE/flashd.pid" 2>/dev/null)" = "$FLASHD_PID" ]; then
			return 0
		fi
		sleep 0.1
	done
	fail "flashd did not become ready within 60 s"
}

stop_flashd() {
	kill -TERM "$FLASHD_PID"
	local rc=0
	timeout 120 tail --pid="$FLASHD_PID" -f /dev/null || fail "flashd did not exit after SIGTERM"
	wait "$FLASHD_PID" || rc=$?
	[ $rc -eq 0 ] || fail "flashd exited with status $rc after SIGTERM"
}

kill_flashd() {
	kill -KILL "$FLASHD_PID"
	wait "$FLASHD_PID" 2>/dev/null || true
}

restart_flashd() {
	start_flashd "${_flashd_args[@]}"
}

# JSON status of the running flashd (flashctl status --json)
flashd_status() {
	"$FLASHCTL" status --control "$FLASHD_CTL" --json
}

# one field of a dimm's stats: dimm_stat dimm0 host_bytes_trimmed
dimm_stat() {
	flashd_status | $PYTHON -c '
import json, sys
st = json.load(sys.stdin)
for d in st["dimms"]:
    if d["name"] == sys.argv[1]:
        print(d["stats"][sys.argv[2]])
        break
else:
    sys.exit("no dimm " + sys.argv[1])
' "$1" "$2"
}
