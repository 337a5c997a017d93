# tests/functions.sh - helpers for shell tests that drive a real flashd.
#
#   source "$(dirname "$0")/functions.sh"
#   start_flashd [--preset test-1g] [--timing off] [other flashd options]
#   ... use $FLASHD_URI0 / $FLASHD_URI1 (TCP), $FLASHD_UNIX_URI0 (unix socket),
#       $FLASHD_PORT, $FLASHD_SOCK, $FLASHD_CTL, $FLASHD_STATE, $FLASHD_PID
#   stop_flashd            SIGTERM, wait for a clean exit (fails otherwise)
#   kill_flashd            SIGKILL (a crash), wait
#   restart_flashd         start again with the same state and arguments
#   write_dimms CONFIG DATA   flashd writes DATA to dimm0 and dimm1, stops
#   skip WHY               this test cannot run here: "SKIP: WHY", exit 77
#   requires CMD...        skip (or, under make check, fail) without CMD
#   skip_part WHY          one part cannot run here: the rest runs, and a
#                          test that would pass then ends as a skip
#   part_requires PART CMD...  true with CMD; else skip_part (make check: fail)
#   conf_err NAME TEXT     flashd refuses $T/NAME.conf with TEXT (exit 2)
#   dimms_conf FILE [SECTION.KEY=VALUE]...  a config of dimm0 and dimm1
#   tls_ca, tls_cert, tls_crl, tls_psk_line   keys for the TLS tests
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
_parts_not_run=()

_cleanup() {
	local rc=$?
	if [ $rc -eq 0 ] && [ ${#_parts_not_run[@]} -gt 0 ]; then
		local why=${_parts_not_run[0]} part
		for part in "${_parts_not_run[@]:1}"; do why+="; $part"; done
		echo "SKIP: not run: $why"
		rc=77
	fi
	for p in "${_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in "${_pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/flashd.log" ]; then
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

# skip WHY: the whole test cannot run on this machine (not root, no network
# namespaces, ...).  Exit status 77: tests/run.sh counts a skip, never a pass,
# and lists WHY in its summary.
skip() {
	echo "SKIP: $*"
	exit 77
}

# _not_installed CMD...: true when a CMD is not installed, with the missing
# ones in _missing; under make check (FLASHD_DEPS_INSTALLED=1) a missing CMD
# fails the test instead (scripts/deps.sh should have installed it, or
# should list its package).
_not_installed() {
	local c
	_missing=()
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || _missing+=("$c")
	done
	[ ${#_missing[@]} -eq 0 ] && return 1
	[ "${FLASHD_DEPS_INSTALLED:-}" = 1 ] &&
		fail "not installed: ${_missing[*]} (after scripts/deps.sh; is its package in deps.sh's lists?)"
	return 0
}

# requires CMD...: every CMD is installed, or the test skips (under make
# check: fails, see _not_installed).
requires() {
	_not_installed "$@" || return 0
	skip "not installed: ${_missing[*]} (scripts/deps.sh installs it)"
}

# skip_part WHY: one part of the test cannot run on this machine; the test
# goes on with the rest, and where it would pass it ends as a skip instead
# (exit 77, "SKIP: not run: WHY; ..."): a test that did not run all its
# parts is never counted as passed.  A failure still fails.
skip_part() {
	echo "not run: $*"
	_parts_not_run+=("$*")
}

# part_requires PART CMD...: true when every CMD is installed; else false,
# after skip_part PART (under make check: fails, see _not_installed).  PART names what is not run ("the unit's systemd-analyze verify").
part_requires() {
	local part=$1
	shift
	_not_installed "$@" || return 0
	skip_part "$part (not installed: ${_missing[*]}; scripts/deps.sh installs it)"
	return 1
}

# dimms_conf FILE [SECTION.KEY=VALUE]...: a flashd.conf in FILE with two
# ioDimms of preset test-1g, dimm0 and dimm1, and "KEY = VALUE" for each
# argument in its SECTION: server (a [server] section first), dimm0 or dimm1
#   dimms_conf "$T/gc.conf" dimm0.op=10 dimm0.parity_width=1 dimm1.op=10
dimms_conf() {
	local file=$1 setting server
	shift
	for setting in "$@"; do
		case $setting in
		server.*=* | dimm0.*=* | dimm1.*=*) ;;
		*) fail "dimms_conf: '$setting': want server, dimm0 or dimm1 .KEY=VALUE" ;;
		esac
	done
	server=$(_conf_lines server "$@")
	{
		[ -z "$server" ] || printf '[server]\n%s\n' "$server"
		printf '[dimm dimm0]\npreset = test-1g\n'
		_conf_lines dimm0 "$@"
		printf '[dimm dimm1]\npreset = test-1g\n'
		_conf_lines dimm1 "$@"
	} >"$file"
}

# _conf_lines SECTION SETTING...: "KEY = VALUE" for each SETTING SECTION.KEY=VALUE
_conf_lines() {
	local section=$1 setting
	shift
	for setting in "$@"; do
		[ "${setting%%.*}" = "$section" ] || continue
		setting=${setting#*.}
		echo "${setting%%=*} = ${setting#*=}"
	done
}

# conf_err NAME EXPECTED-TEXT: flashd refuses $T/NAME.conf, both with
# --check-config and at a start, with exit 2 and a message that holds
# EXPECTED-TEXT, and opens no image before (in $T/cfgstate)
conf_err() {
	local name=$1 want=$2 out rc=0
	out=$("$FLASHD" --check-config --config "$T/$name.conf" 2>&1) || rc=$?
	[ $rc -eq 2 ] || fail "$name: --check-config exit $rc, want 2: $out"
	grep -qF -- "$want" <<<"$out" || fail "$name: --check-config says '$out', want '$want'"
	rc=0
	out=$("$FLASHD" --foreground --config "$T/$name.conf" --state-dir "$T/cfgstate" \
		--listen 127.0.0.1:"$(free_port)" 2>&1) || rc=$?
	[ $rc -eq 2 ] || fail "$name: flashd exit $rc, want 2: $out"
	grep -qF -- "$want" <<<"$out" || fail "$name: flashd says '$out', want '$want'"
	[ ! -e "$T/cfgstate/dimm0.img" ] || fail "$name: an image was created before the error"
	ok "config error $name: $out"
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
	wait_ready "$FLASHD_PID" "$FLASHD_STATE/flashd.pid" flashd
}

# wait_ready PID PIDFILE WHAT: the flashd started in the background as PID
# is ready: it wrote PID to PIDFILE, which it does once everything listens.
# Fails when it exits first ("WHAT exited during start-up") or after 60 s.
wait_ready() {
	local pid=$1 pidfile=$2 what=$3 i
	for i in $(seq 1 600); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || true
			fail "$what exited during start-up"
		fi
		[ "$(cat "$pidfile" 2>/dev/null)" = "$pid" ] && return 0
		sleep 0.1
	done
	fail "$what did not become ready within 60 s"
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

# write_dimms CONFIG DATA: a flashd started with CONFIG (timing off)
# writes the file DATA at the start of dimm0 and of dimm1, and stops
write_dimms() {
	start_flashd --config "$1" --timing off
	qemu-img convert -n -f raw -O raw "$2" "$FLASHD_URI0" || fail "writing dimm0"
	qemu-img convert -n -f raw -O raw "$2" "$FLASHD_URI1" || fail "writing dimm1"
	stop_flashd
}

# JSON status of the running flashd (flashctl status --json); its exit
# status says the health (0 ok, 1 warning, 2 degraded or failed): any of
# those is an answer, 3 (no answer) fails
flashd_status() {
	local rc=0
	"$FLASHCTL" status --control "$FLASHD_CTL" --json || rc=$?
	[ $rc -le 2 ]
}

# flashctl status ARGS... with the health's exit status (0-2) taken as an
# answer: for tests that look at the text, not at the health
flashd_status_text() {
	local rc=0
	"$FLASHCTL" status --control "$FLASHD_CTL" "$@" || rc=$?
	[ $rc -le 2 ]
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

# ---- helpers for the NBD tests (tests/test-nbd-*.sh) -------------------------

NBD_CHECKS=$top/tests/nbd

# run a Python check from tests/nbd with the system python (python3-libnbd)
nbd_py() {
	local script=$1
	shift
	"$PYTHON" "$NBD_CHECKS/$script" "$@"
}

# nbdsh with the system python: /usr/bin/nbdsh runs whatever python3 is
# first in PATH, which may lack the nbd module
nbdsh_sys() {
	"$PYTHON" -m nbd "$@"
}

# top-level connection count of the running flashd (negotiating or not)
flashd_connections() {
	flashd_status | $PYTHON -c 'import json, sys; print(json.load(sys.stdin)["connections"])'
}

# wait_connections N [SECONDS]: until flashd counts N connections; fails after
wait_connections() {
	local want=$1 secs=${2:-10} n
	for _ in $(seq 1 $((secs * 10))); do
		n=$(flashd_connections)
		[ "$n" = "$want" ] && return 0
		sleep 0.1
	done
	fail "flashd counts $n connection(s) after ${secs}s, want $want"
}

# make a file of random data: random_file PATH MIB
random_file() {
	head -c "$(($2 << 20))" /dev/urandom >"$1"
}

# fail unless the flashd started last is still running
flashd_running() {
	kill -0 "$FLASHD_PID" 2>/dev/null || fail "flashd (pid $FLASHD_PID) is not running any more"
}

# check_flashd_log [LOG]: the flashd log shows no crash, sanitizer report,
# assertion or error-level message
check_flashd_log() {
	local log=${1:-$T/flashd.log} bad
	bad=$(grep -E 'flashd\[(error|crit|alert|emerg)\]|Segmentation fault|Aborted|core dumped|AddressSanitizer|LeakSanitizer|runtime error:|Assertion|double free|corrupted|stack smashing' "$log" || true)
	[ -z "$bad" ] || fail "the flashd log shows trouble:
$bad"
}

# nbd_region_is URI OFFSET LENGTH FILE [FILE_OFFSET]: the export's bytes
# [OFFSET, OFFSET+LENGTH) equal FILE's from FILE_OFFSET (FILE "zero": zeroes)
nbd_region_is() {
	"$PYTHON" - "$@" <<'PY'
import sys, nbd
uri, off, n, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
foff = int(sys.argv[5]) if len(sys.argv) > 5 else 0
h = nbd.NBD()
h.connect_uri(uri)
step = 8 << 20
f = None if path == "zero" else open(path, "rb")
if f:
    f.seek(foff)
pos = 0
while pos < n:
    k = min(step, n - pos)
    got = h.pread(k, off + pos)
    want = bytes(k) if f is None else f.read(k)
    if got != want:
        bad = next(i for i in range(k) if got[i] != want[i])
        sys.exit("%s: byte %d differs (export offset %d): %#x, want %#x" % (
            uri, pos + bad, off + pos + bad, got[bad], want[bad]))
    pos += k
h.shutdown()
PY
}

# summary_add TEXT: remember TEXT and print it at exit if the test fails,
# after the cleanup output (tests/run.sh shows a failing test's last lines)
_summary=()
summary_add() {
	_summary+=("$*")
	trap _summary_exit EXIT
}
_summary_exit() {
	local rc=$?
	(
		set +e
		(exit $rc)
		_cleanup
	) || true
	if [ $rc -ne 0 ] && [ ${#_summary[@]} -gt 0 ]; then
		echo "--- failed checks:"
		printf '  %s\n' "${_summary[@]}"
	fi
	exit $rc
}

# run_check NAME CMD...: run one check program, print its output and time;
# a failure (with the program's "FAIL ..." lines) goes to the summary and
# the test goes on.  checks_passed: true if no check has failed so far.
run_check() {
	local name=$1 rc=0 t0=$EPOCHREALTIME line
	shift
	echo "=== $name"
	"$@" 2>&1 | tee "$T/check.out" || rc=$?
	printf '=== %s: %s (%.1f s)\n' "$name" "$([ $rc -eq 0 ] && echo passed || echo "FAILED, exit $rc")" \
		"$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
	if [ $rc -ne 0 ]; then
		summary_add "$name (exit $rc):"
		while IFS= read -r line; do
			summary_add "    $line"
		done < <(grep -E '^(FAIL|     at )' "$T/check.out" || true)
	fi
	return 0
}
checks_passed() {
	[ ${#_summary[@]} -eq 0 ]
}

# wait_http URL: URL answers (curl), within 5 s, or the test fails
wait_http() {
	local i
	for i in $(seq 1 50); do
		curl -s -o /dev/null --max-time 5 "$1" && return 0
		sleep 0.1
	done
	fail "$1 does not answer"
}

# start_ctl_forward [--http]: tests/nbd/ctl_forward.py from 127.0.0.1 to
# flashd's control socket, answering; its port in FWD_PORT, its pid in
# FWD_PID (tracked).  --http: one request per connection, see the script.
start_ctl_forward() {
	FWD_PORT=$(free_port)
	"$PYTHON" "$NBD_CHECKS/ctl_forward.py" "$FWD_PORT" "$FLASHD_CTL" "$@" 2>>"$T/fwd.log" &
	FWD_PID=$!
	track_pid "$FWD_PID"
	wait_http "http://127.0.0.1:$FWD_PORT/v1/version"
}

# ---- keys for the TLS tests ---------------------------------------------------

# tls_psk_line NAME: "NAME:HEX", a random 32-byte key in the format of
# psktool's files (flashd's tls_psk, libnbd's tls-psk-file)
tls_psk_line() {
	echo "$1:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
}

_certtool() {
	certtool "$@" >/dev/null 2>&1 || fail "certtool $*"
}

# tls_ca DIR CN: a certificate authority (ECDSA, 30 days) in DIR/ca-key.pem
# and DIR/ca-cert.pem, allowed to sign certificates and CRLs
tls_ca() {
	mkdir -p "$1"
	_certtool --generate-privkey --key-type=ecdsa --outfile "$1/ca-key.pem"
	printf 'cn = %s\nca\ncert_signing_key\ncrl_signing_key\nexpiration_days = 30\n' "$2" >"$1/ca.info"
	_certtool --generate-self-signed --load-privkey "$1/ca-key.pem" --template "$1/ca.info" \
		--outfile "$1/ca-cert.pem"
}

# tls_cert CADIR OUTDIR server|client CN: a key and a certificate signed by
# CADIR's CA in OUTDIR/KIND-key.pem and KIND-cert.pem, with the CA's
# certificate as OUTDIR/ca-cert.pem: the directory layout of flashd's
# tls_certificates and of libnbd's and qemu's x509 credentials.  A server's
# names are localhost and 127.0.0.1.
tls_cert() {
	local ca=$1 out=$2 kind=$3 cn=$4
	mkdir -p "$out"
	_certtool --generate-privkey --key-type=ecdsa --outfile "$out/$kind-key.pem"
	{
		printf 'organization = flashd test\ncn = %s\nexpiration_days = 30\n' "$cn"
		printf 'encryption_key\nsigning_key\n'
		if [ "$kind" = server ]; then
			printf 'dns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\n'
		else
			printf 'tls_www_client\n'
		fi
	} >"$out/$kind.info"
	_certtool --generate-certificate --load-ca-certificate "$ca/ca-cert.pem" \
		--load-ca-privkey "$ca/ca-key.pem" --load-privkey "$out/$kind-key.pem" \
		--template "$out/$kind.info" --outfile "$out/$kind-cert.pem"
	cp "$ca/ca-cert.pem" "$out/ca-cert.pem"
	rm -f "$out/$kind.info"
}

# tls_crl CADIR CERT OUT: a CRL of CADIR's CA that revokes CERT, in OUT
tls_crl() {
	printf 'crl_next_update = 30\ncrl_number = 1\n' >"$1/crl.info"
	_certtool --generate-crl --load-ca-privkey "$1/ca-key.pem" --load-ca-certificate "$1/ca-cert.pem" \
		--load-certificate "$2" --template "$1/crl.info" --outfile "$3"
}
