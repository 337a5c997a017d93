#!/bin/bash
# timeout: 420
# exclusive: headless Chromium beside flashd; each view is read within seconds of a fault
# Health that tells the truth and configuration checked early (issue 13):
#   1. an image whose format differs from its [dimm] keys (sector_size =
#      4096 on a 512-byte image): flashd refuses to start (exit 1), logs an
#      error naming `flashctl format`, leaves the image as it was; with
#      JOURNAL_STREAM naming its stderr every line carries its priority
#      (<3> for the error, <6> for info) and no timestamp of its own;
#   2. --allow-degraded: READY=1 and "STATUS=failed: ..." (the server's
#      health is its worst ioDimm's) reach systemd's notify socket (a Python
#      listener here), a warning-level line says what is not served, status
#      says so with the reason (health FAILED, exit status 2), a client
#      of that export is refused with a message, the other export serves
#      its data; `flashctl attach` opens it anyway (a warning: the admin
#      asked), a format through flashd makes it match, and a plain restart
#      then starts normally ("serving 2 of 2", not degraded);
#   3. allow_degraded = yes in [server] does the same; a bad value of it is
#      a configuration error (exit 2, naming the key);
#   4. --check-config: exit 0 and a summary for a good file, 2 for a bad
#      one, and it creates and opens nothing (works while flashd runs);
#   5. the command line wins over the file for unix, control, listen and
#      timing;
#   6. /etc/flashd/flashd.conf is the default configuration when it exists
#      (shown in a mount namespace with an overlay on /etc), --no-config
#      ignores it.
#   7. log = syslog (flashd in a mount namespace with a /dev/log of its own,
#      a Python listener): a refused control request whose path holds ESC
#      and CR reaches syslog with them escaped, no raw byte.
#   8. every fault flashctl inject can cause, each on an ioDimm of its own,
#      moves health to its documented state, with its reason, in flashctl
#      status (text and exit status: 0 ok, 1 warning, 2 degraded or
#      failed), --json, /metrics (on metrics_listen), the dashboard
#      (Chromium) and systemd's STATUS=; the server's is the worst:
#      temperature 80 C warning (thermal_throttled), 86 C degraded
#      (thermal_stop), cooled (35 C) ok again; bit errors that lose units
#      warning (lost_units); a bad block past the ioDimm's reserves_warn
#      (95 %) warning (reserves_low); a dead die with parity
#      warning (die_rebuilt), without degraded (dies_lost); an image that is
#      not one failed (open_failed), ok once attached with it removed;
#      after a restart every ioDimm's health and reasons are what they were
#      (the FTL keeps dead dies, lost units and grown bad blocks).
# 6 and 7 need mount namespaces (7 also root): without them the test runs
# the rest and ends as a skip (exit 77) naming what was not run.
source "$(dirname "$0")/functions.sh"

MiB=$((1 << 20))
TOOL="$PYTHON $NBD_CHECKS/image_tool.py"
dimms_conf "$T/base.conf"
sed '/^\[dimm dimm0\]/a sector_size = 4096' "$T/base.conf" >"$T/4k.conf"
DATA=$T/data
random_file "$DATA" 8
write_dimms "$T/base.conf" "$DATA"
PORT=$FLASHD_PORT

# run_flashd NAME ARGS...: flashd in the foreground on the test's state, its
# stderr in $T/NAME.log; the exit status in $rc (or a timeout after 60 s)
run_flashd() {
	local name=$1
	shift
	rc=0
	timeout 60 "$FLASHD" --foreground --state-dir "$FLASHD_STATE" --listen "127.0.0.1:$PORT" \
		--unix "$FLASHD_SOCK" --timing off "$@" 2>"$T/$name.log" || rc=$?
}

# ---- 1. refused start ---------------------------------------------------------------------
before=$($TOOL "$FLASHD_STATE/dimm0.img" sha256)
run_flashd refuse --config "$T/4k.conf"
cat "$T/refuse.log"
[ $rc = 1 ] || fail "a start with a format mismatch exits $rc, want 1"
grep -q "flashd\[error\]: dimm0: image .*dimm0.img is formatted with 1677720 sectors of 512 bytes" "$T/refuse.log" ||
	fail "no error-level line explaining dimm0"
grep -q "asks for sector_size = 4096" "$T/refuse.log" || fail "the error does not say what the file asks for"
grep -q "flashctl format dimm0 --yes" "$T/refuse.log" || fail "the error does not name flashctl format"
grep -q "flashd\[error\]: refusing to start: 1 of 2 ioDimm(s) did not open (--allow-degraded" "$T/refuse.log" ||
	fail "no error-level line saying flashd refuses to start"
grep -q "dimm1: closed cleanly" "$T/refuse.log" || fail "dimm1 was not closed cleanly on the way out"
[ "$($TOOL "$FLASHD_STATE/dimm0.img" sha256)" = "$before" ] || fail "the refused image was written to"
[ -e "$FLASHD_SOCK" ] && fail "a refused start left its NBD socket"
ok "format mismatch: refused to start (exit 1), error names flashctl format, image untouched"

# journal priorities: stderr is "the journal" when JOURNAL_STREAM names it
: >"$T/journal.log"
rc=0
JOURNAL_STREAM=$(stat -c '%d:%i' "$T/journal.log") timeout 60 "$FLASHD" --foreground \
	--state-dir "$FLASHD_STATE" --listen "127.0.0.1:$PORT" --unix "$FLASHD_SOCK" --timing off \
	--config "$T/4k.conf" 2>>"$T/journal.log" || rc=$?
cat "$T/journal.log"
[ $rc = 1 ] || fail "exit $rc with JOURNAL_STREAM"
grep -q '^<3>dimm0: image .*flashctl format' "$T/journal.log" || fail "the error is not a <3> line"
grep -q '^<3>refusing to start' "$T/journal.log" || fail "the refusal is not a <3> line"
grep -q '^<6>dimm1: ' "$T/journal.log" || fail "info lines are not <6> lines"
grep -vq '^<[0-7]>' "$T/journal.log" && fail "a line without a priority prefix: $(grep -v '^<[0-7]>' "$T/journal.log" | head -n1)"
grep -q 'flashd\[' "$T/journal.log" && fail "journal lines carry the stderr format"
# a JOURNAL_STREAM that names another file (inherited) is ignored
rc=0
JOURNAL_STREAM=1:1 timeout 60 "$FLASHD" --foreground --state-dir "$FLASHD_STATE" --config "$T/4k.conf" \
	--listen "127.0.0.1:$PORT" --unix "$FLASHD_SOCK" --timing off 2>"$T/other.log" || rc=$?
grep -q 'flashd\[error\]' "$T/other.log" || fail "a JOURNAL_STREAM of another file changed the log format"
ok "log priorities: <3>/<6> lines for the journal, the stderr format otherwise"

# ---- 2. --allow-degraded --------------------------------------------------------------------
"$PYTHON" - "$T/notify.sock" "$T/notify.txt" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as out:
    while True:
        msg = s.recv(65536).decode(errors="replace")
        out.write(msg.replace("\n", "|") + "\n")
        out.flush()
PY
listener=$!
track_pid $listener
for _ in $(seq 50); do [ -S "$T/notify.sock" ] && break; sleep 0.1; done
export NOTIFY_SOCKET=$T/notify.sock
start_flashd --config "$T/4k.conf" --timing off --allow-degraded
for _ in $(seq 50); do grep -q READY=1 "$T/notify.txt" 2>/dev/null && break; sleep 0.1; done
cat "$T/notify.txt"
grep -q "READY=1" "$T/notify.txt" || fail "no READY=1 on the notify socket"
grep -q "^STATUS=failed: serving 1 of 2 ioDimm(s); dimm0 failed: image .*flashctl format" "$T/notify.txt" ||
	fail "no STATUS=failed naming dimm0 and the way out"
grep -q "flashd\[warning\]: dimm0: image .* it is not exported (degraded start allowed" "$T/flashd.log" ||
	fail "no warning-level line for the ioDimm that did not open"
grep -q "flashd\[warning\]: flashd .* ready, degraded: serving 1 of 2" "$T/flashd.log" || fail "no warning that the start is degraded"
flashd_status >"$T/deg.json"
"$PYTHON" - "$T/deg.json" <<'PY' || fail "status of the degraded start"
import json, sys
st = json.load(open(sys.argv[1]))
d = {x["name"]: x for x in st["dimms"]}
assert st["degraded"] is True and st["failed"] == 1 and st["served"] == 1, st
assert st["health"]["state"] == "failed" and st["health"]["summary"].startswith("dimm0 failed: did not open"), st["health"]
assert d["dimm0"]["health"]["reasons"][0]["reason"] == "open_failed", d["dimm0"]["health"]
assert "flashctl attach dimm0" in d["dimm0"]["health"]["reasons"][0]["action"], d["dimm0"]["health"]
assert d["dimm1"]["health"] == {"state": "ok", "reasons": []}, d["dimm1"]["health"]
assert d["dimm0"]["state"] == "failed" and "flashctl format" in d["dimm0"]["error"], d["dimm0"]
assert d["dimm1"]["state"] == "online", d["dimm1"]
print("status: degraded, dimm0 failed: %s" % d["dimm0"]["error"][:100])
PY
rc=0
"$FLASHCTL" status --control "$FLASHD_CTL" >"$T/deg.txt" || rc=$?
grep -q "serving 1 of 2 ioDimm(s); health: FAILED (dimm0 failed)" "$T/deg.txt" || fail "status text does not say failed"
[ $rc = 2 ] || fail "flashctl status exits $rc with an ioDimm failed, want 2"
nbd_region_is "$FLASHD_URI1" 0 $((8 * MiB)) "$DATA" || fail "dimm1 is not served in the degraded start"
"$PYTHON" - "$FLASHD_URI0" <<PY || fail "a client of the failed export"
import sys
sys.path.insert(0, "$NBD_CHECKS")
import nbdraw
c = nbdraw.Conn.open(sys.argv[1])
c.handshake()
final, _, reps = c.info(nbdraw.OPT_GO, "dimm0")
msg = reps[-1][1].decode()
print("GO dimm0: %s %r" % (nbdraw.repname(final), msg))
assert final == nbdraw.REP_ERR_UNKNOWN and "failed to open" in msg, msg
PY
# the admin attaches it anyway: served as it is, with a warning
n=$(wc -l <"$T/flashd.log")
"$FLASHCTL" attach dimm0 --control "$FLASHD_CTL" || fail "attach of the mismatched dimm0"
tail -n +$((n + 1)) "$T/flashd.log" | grep -q "flashd\[warning\]: dimm0: image .* asks for sector_size = 4096" ||
	fail "attach does not warn about the mismatch"
nbd_region_is "$FLASHD_URI0" 0 $((8 * MiB)) "$DATA" || fail "dimm0's data after attach"
tail -n1 "$T/notify.txt" | grep -q "^STATUS=serving 2 of 2 ioDimm(s)$" || fail "STATUS after the attach: $(tail -n1 "$T/notify.txt")"
# make the image what the file says
"$FLASHCTL" detach dimm0 --control "$FLASHD_CTL" >/dev/null || fail "detach dimm0"
"$FLASHCTL" format dimm0 --yes --control "$FLASHD_CTL" | tee "$T/fmt.out" || fail "format dimm0"
grep -q "4096 bytes" "$T/fmt.out" || fail "format without keys did not take sector_size = 4096 from the file"
grep -q "Warning" "$T/fmt.out" && fail "format to the configured keys warns about a mismatch"
"$FLASHCTL" attach dimm0 --control "$FLASHD_CTL" >/dev/null || fail "attach after the format"
stop_flashd
: >"$T/notify.txt"
start_flashd --config "$T/4k.conf" --timing off
for _ in $(seq 50); do grep -q READY=1 "$T/notify.txt" && break; sleep 0.1; done
grep -q "^STATUS=serving 2 of 2 ioDimm(s)$" "$T/notify.txt" || fail "STATUS after fixing: $(cat "$T/notify.txt")"
flashd_status | "$PYTHON" -c '
import json, sys
st = json.load(sys.stdin)
assert st["degraded"] is False, st["degraded"]
d = [x for x in st["dimms"] if x["name"] == "dimm0"][0]
assert d["format"]["sector_size"] == 4096, d["format"]' || fail "dimm0 after the fix"
stop_flashd
unset NOTIFY_SOCKET
ok "--allow-degraded: READY with STATUS=failed, warning, refused export explained; fixed online"

# ---- 3. allow_degraded in the file ---------------------------------------------------------
{ printf '[server]\nallow_degraded = yes\n'; sed '/^\[dimm dimm1\]/a capacity = 50%' "$T/4k.conf"; } >"$T/deg.conf"
start_flashd --config "$T/deg.conf" --timing off
[ "$(flashd_status | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["failed"])')" = 1 ] ||
	fail "allow_degraded = yes: want dimm1 failed and flashd up"
grep -q "flashd\[warning\]: dimm1: .*asks for capacity = 50%" "$T/flashd.log" || fail "no warning for dimm1's capacity"
stop_flashd
printf '[server]\nallow_degraded = maybe\n[dimm a]\n' >"$T/bad.conf"
run_flashd badkey --config "$T/bad.conf"
[ $rc = 2 ] && grep -q "allow_degraded = 'maybe'" "$T/badkey.log" || fail "allow_degraded = maybe: exit $rc, $(cat "$T/badkey.log")"
ok "allow_degraded = yes in [server]; a bad value is a configuration error"

# ---- 4. --check-config --------------------------------------------------------------------
rc=0
"$FLASHD" --check-config --config "$T/deg.conf" --state-dir "$T/nothing" >"$T/check.out" 2>&1 || rc=$?
cat "$T/check.out"
[ $rc = 0 ] || fail "--check-config of a good file: exit $rc"
grep -q "configuration $T/deg.conf is good: 2 ioDimm(s), degraded start allowed" "$T/check.out" || fail "--check-config summary"
grep -q "\[dimm dimm1\] export 'dimm1', preset test-1g, image $T/nothing/dimm1.img" "$T/check.out" || fail "--check-config lists the ioDimms"
[ -e "$T/nothing" ] && fail "--check-config created the state directory"
printf '[server]\nlisten = 127.0.0.1:99999\n[dimm a]\n' >"$T/port.conf"
rc=0
"$FLASHD" --check-config --config "$T/port.conf" --state-dir "$T/nothing" >"$T/check.out" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "port 99999 is out of range" "$T/check.out" || fail "--check-config of a bad port: exit $rc, $(cat "$T/check.out")"
start_flashd --config "$T/base.conf" --timing off
rc=0
"$FLASHD" --check-config --config "$T/base.conf" --state-dir "$FLASHD_STATE" >"$T/check.out" 2>&1 || rc=$?
[ $rc = 0 ] || fail "--check-config while flashd runs on the same images: exit $rc, $(cat "$T/check.out")"
flashd_running
stop_flashd
ok "--check-config: 0 for good, 2 for bad, touches nothing"

# ---- 5. the command line wins -------------------------------------------------------------------
FILE_PORT=$(free_port)
dimms_conf "$T/paths.conf" server.listen=127.0.0.1:$FILE_PORT server.unix="$T/file.sock" \
	server.control="$T/file.ctl" dimm0.timing=on
start_flashd --config "$T/paths.conf" --control "$T/cli.ctl" --timing off
FLASHD_CTL=$T/cli.ctl
[ -S "$T/cli.ctl" ] || fail "--control was not used"
[ -e "$T/file.ctl" ] && fail "the file's control socket won over --control"
[ -e "$T/file.sock" ] && fail "the file's unix socket won over --unix"
[ -S "$FLASHD_SOCK" ] || fail "--unix was not used"
nbdinfo --size "$FLASHD_UNIX_URI0" >/dev/null || fail "the --unix socket does not serve"
nbdinfo --size "nbd://127.0.0.1:$FILE_PORT/dimm0" >/dev/null 2>&1 && fail "the file's listen address won over --listen"
nbdinfo --size "$FLASHD_URI0" >/dev/null || fail "the --listen address does not serve"
[ "$(flashd_status | "$PYTHON" -c 'import json,sys; print([d["timing"] for d in json.load(sys.stdin)["dimms"]])')" = "[False, False]" ] ||
	fail "--timing off did not win over [dimm] timing = on"
stop_flashd
FLASHD_CTL=$FLASHD_STATE/flashd.ctl
ok "the command line wins over the file (unix, control, listen, timing)"

# ---- 6. /etc/flashd/flashd.conf --------------------------------------------------------------------
mkdir -p "$T/ov/up/flashd" "$T/ov/wk"
printf '[dimm etcdimm]\npreset = test-1g\n' >"$T/ov/up/flashd/flashd.conf"
if [ "$(id -u)" = 0 ]; then ns=(-m); else ns=(-r -m); fi
if unshare "${ns[@]}" --propagation private sh -c \
	"mount -t overlay overlay -o lowerdir=/etc,upperdir=$T/ov/up,workdir=$T/ov/wk /etc" 2>"$T/ov.err"; then
	unshare "${ns[@]}" --propagation private sh -c "
		mount -t overlay overlay -o lowerdir=/etc,upperdir=$T/ov/up,workdir=$T/ov/wk /etc &&
		'$FLASHD' --check-config --state-dir '$T/nothing' >'$T/etc.out' 2>&1 &&
		'$FLASHD' --check-config --no-config --state-dir '$T/nothing' >'$T/noconf.out' 2>&1" ||
		fail "--check-config in the namespace: $(cat "$T/etc.out" "$T/noconf.out" 2>/dev/null)"
	cat "$T/etc.out" "$T/noconf.out"
	grep -q "configuration /etc/flashd/flashd.conf is good: 1 ioDimm(s)" "$T/etc.out" || fail "/etc/flashd/flashd.conf is not the default"
	grep -q "\[dimm etcdimm\]" "$T/etc.out" || fail "/etc/flashd/flashd.conf was not read"
	grep -q "configuration (embedded default) is good: 2 ioDimm(s)" "$T/noconf.out" || fail "--no-config did not ignore it"
	ok "/etc/flashd/flashd.conf is the default configuration; --no-config ignores it"
else
	skip_part "6. /etc/flashd/flashd.conf as the default (cannot mount an overlay on /etc in a mount namespace here: $(cat "$T/ov.err"))"
fi
[ -e "$T/nothing" ] && fail "--check-config created the state directory"

# ---- 7. log = syslog: a client's control characters escaped there too ----------------------------
mkdir -p "$T/probe"
if [ "$(id -u)" != 0 ]; then
	skip_part "7. log = syslog (not root: a /dev/log of our own needs a mount namespace, the request a uid of nobody)"
elif ! unshare -m --propagation private sh -c "mount -t tmpfs probe '$T/probe'" 2>"$T/probe.err"; then
	skip_part "7. log = syslog (cannot mount in a mount namespace here: $(cat "$T/probe.err"))"
else
	mkdir -p "$T/realdev" "$T/pub"
	chmod 0711 "$T"
	chmod 0755 "$T/pub"
	cat >"$T/devlog.py" <<'PY'
# /dev/log: every datagram as a line of FILE (a message that held a newline would be two)
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
with open(sys.argv[1], "ab", buffering=0) as f:
    while True:
        f.write(s.recv(65536) + b"\n")
PY
	cat >"$T/ns-flashd" <<'SH'
#!/bin/bash
# flashd "$@" in a mount namespace whose /dev is a tmpfs with null, zero, random and
# urandom of the real one and a /dev/log of its own (devlog.py; its pid in devlog.pid)
exec unshare -m --propagation private bash -c '
	set -e
	mount --rbind /dev "$NS_T/realdev"
	mount -t tmpfs -o mode=0755 nsdev /dev
	for n in null zero random urandom; do
		touch "/dev/$n"
		mount --bind "$NS_T/realdev/$n" "/dev/$n"
	done
	"$NS_PYTHON" "$NS_T/devlog.py" "$NS_T/syslog.out" &
	echo $! >"$NS_T/devlog.pid"
	for i in $(seq 1 100); do [ -S /dev/log ] && break; sleep 0.05; done
	exec "$NS_FLASHD" "$@"' ns-flashd "$@"
SH
	chmod +x "$T/ns-flashd"
	printf '[server]\nlog = syslog\ncontrol = %s\ncontrol_mode = 0666\n[dimm dimm0]\npreset = test-1g\n' \
		"$T/pub/flashd.ctl" >"$T/syslog.conf"
	export NS_T=$T NS_PYTHON=$PYTHON NS_FLASHD=$FLASHD
	FLASHD=$T/ns-flashd FLASHD_STATE=$T/slstate FLASHD_PORT=
	start_flashd --config "$T/syslog.conf" --timing off
	FLASHD=$NS_FLASHD
	track_pid "$(cat "$T/devlog.pid")"
	code=$(setpriv --reuid=nobody --regid=nogroup --clear-groups curl -s -o /dev/null -w '%{http_code}' \
		-X POST -H "X-Flashd-Action: 1" --unix-socket "$T/pub/flashd.ctl" \
		"http://localhost/v1/dimms/dimm0/detach%1B%5B2J%0D") || true
	[ "$code" = 403 ] || fail "nobody: POST detach<ESC>[2J<CR>: $code"
	stop_flashd
	kill "$(cat "$T/devlog.pid")"
	echo "syslog: $(grep -ac . "$T/syslog.out") datagrams; the refusal: $(grep -a refused "$T/syslog.out")"
	grep -aqF 'control socket: /v1/dimms/dimm0/detach\x1b[2J\x0d refused: uid 65534' "$T/syslog.out" ||
		fail "syslog lacks the refusal with ESC and CR escaped"
	! LC_ALL=C grep -aq $'[\x1b\r]' "$T/syslog.out" || fail "syslog got a raw ESC or CR"
	ok "log = syslog: a client's ESC and CR are escaped"
fi
# ---- 8. every fault flashctl inject can cause, in every view ------------------------------------
# Six ioDimms, one per fault; each state is checked in flashctl status (text,
# exit status), --json, /metrics (on metrics_listen), the dashboard (Chromium)
# and systemd's STATUS= (a notify socket); the server's state is the worst.
CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed (scripts/deps.sh check installs it): the dashboard is one of the views"
MPORT=$(free_port)
cat >"$T/faults.conf" <<EOF
[server]
fault_injection = yes
allow_degraded = yes
metrics_listen = 127.0.0.1:$MPORT
[dimm temp]
preset = test-64m
[dimm diepar]
preset = test-1g
parity_width = 1
op = 36
[dimm die0]
preset = test-64m
[dimm bad]
preset = test-64m
reserves_warn = 95
[dimm bits]
preset = test-64m
[dimm broken]
preset = test-64m
EOF
SAVED_STATE=$FLASHD_STATE
FLASHD_STATE=$T/faults
mkdir -p "$FLASHD_STATE"
head -c 65536 /dev/urandom >"$FLASHD_STATE/broken.img" # not a NAND image: it does not open
"$PYTHON" - "$T/notify8.sock" "$T/notify8.txt" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as out:
    while True:
        for line in s.recv(65536).decode(errors="replace").split("\n"):
            if line.startswith("STATUS="):
                out.write(line + "\n")
                out.flush()
PY
track_pid $!
for _ in $(seq 50); do [ -S "$T/notify8.sock" ] && break; sleep 0.1; done
NOTIFY_SOCKET=$T/notify8.sock start_flashd --config "$T/faults.conf" --timing off
C=("$FLASHCTL" --control "$FLASHD_CTL")
M=http://127.0.0.1:$MPORT
DASH="$PYTHON $NBD_CHECKS/dashcheck.py"
# rc_of STATE: flashctl status's exit status for it
rc_of() { case $1 in ok) echo 0 ;; warning) echo 1 ;; *) echo 2 ;; esac; }
# json_health DIMM: "STATE reason reason..." from --json (every reason has an action)
json_health() {
	flashd_status | "$PYTHON" -c '
import json, sys
d = [x for x in json.load(sys.stdin)["dimms"] if x["name"] == sys.argv[1]][0]["health"]
assert all(r["action"] or r["level"] == "ok" for r in d["reasons"]), d
print(" ".join([d["state"]] + [r["reason"] for r in d["reasons"]]))' "$1"
}
chrome_dump() {
	local prof
	prof=$(mktemp -d "$T/chromium.XXXXXX")
	HOME=$T/home timeout 60 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$prof" --disable-dev-shm-usage --virtual-time-budget=3000 \
		--window-size=1200,800 --dump-dom "$M/" >"$1" 2>>"$T/chromium.log" ||
		fail "chromium --dump-dom: $(tail -n 3 "$T/chromium.log")"
}
has_reason() { [ "$2" = - ] || [[ " $1 " == *" $2 "* ]]; }
# expect DIMM STATE REASON TEXT: within 30 s DIMM's health is STATE with
# REASON ("-": any) and TEXT in flashctl status; then every view agrees
expect() {
	local d=$1 state=$2 reason=$3 text=$4 got="" rc up st=""
	for _ in $(seq 1 300); do
		got=$(json_health "$d")
		[ "${got%% *}" = "$state" ] && has_reason "$got" "$reason" && break
		sleep 0.1
	done
	[ "${got%% *}" = "$state" ] && has_reason "$got" "$reason" || fail "$d: --json says '$got', want $state $reason"
	rc=0
	"${C[@]}" status "$d" >"$T/st-$d.txt" || rc=$?
	[ "$rc" = "$(rc_of "$state")" ] || fail "flashctl status $d exits $rc for $state"
	up=$(tr a-z A-Z <<<"$state")
	[ "$state" = ok ] && up=ok
	grep -q "^    Health: $up\$" "$T/st-$d.txt" || fail "flashctl status $d: no 'Health: $up': $(head -5 "$T/st-$d.txt")"
	[ -z "$text" ] || grep -qF -- "$text" "$T/st-$d.txt" || fail "flashctl status $d does not say '$text': $(head -6 "$T/st-$d.txt")"
	[ "$state" = ok ] || grep -q "^        action: ." "$T/st-$d.txt" || fail "flashctl status $d gives no action"
	curl -sf "$M/metrics" >"$T/m.txt" || fail "GET /metrics on the metrics listener"
	grep -q "^flashd_dimm_health{dimm=\"$d\",export=\"$d\",state=\"$state\"} 1\$" "$T/m.txt" ||
		fail "/metrics: $(grep "^flashd_dimm_health{dimm=\"$d\"" "$T/m.txt" | grep ' 1$')"
	[ "$reason" = - ] || grep -q "^flashd_dimm_health_reason{dimm=\"$d\",export=\"$d\",reason=\"$reason\",level=\"[a-z]*\"} 1\$" "$T/m.txt" ||
		fail "/metrics lacks the reason $reason of $d: $(grep "^flashd_dimm_health_reason{dimm=\"$d\"" "$T/m.txt")"
	want="; $d $state: "
	[ "$state" = failed ] && want="; $d failed: "
	for _ in $(seq 1 50); do
		st=$(tail -n1 "$T/notify8.txt")
		if [ "$state" = ok ]; then [[ "$st" != *"; $d "* ]] && break; else [[ "$st" == *"$want"* ]] && break; fi
		sleep 0.1
	done
	if [ "$state" = ok ]; then
		[[ "$st" != *"; $d "* ]] || fail "STATUS= still names $d: $st"
	else
		[[ "$st" == *"$want"* ]] || fail "STATUS= does not say '$want': $st"
	fi
	chrome_dump "$T/dash.html"
	[ "$($DASH state "$T/dash.html" "h-$d")" = "$state" ] ||
		fail "the dashboard shows $d $($DASH state "$T/dash.html" "h-$d"), want $state"
	has_reason "$($DASH reasons "$T/dash.html" "$d")" "$reason" ||
		fail "the dashboard's reasons for $d: $($DASH reasons "$T/dash.html" "$d")"
	echo "  $d: $state ($reason) in flashctl status (exit $rc), --json, /metrics, STATUS=, the dashboard"
}
# expect_server STATE: the worst, in flashctl status (header, exit status),
# /metrics, STATUS= and the dashboard's badge (of the last expect's pages)
expect_server() {
	local rc=0 st up
	"${C[@]}" status >"$T/st.txt" || rc=$?
	[ "$rc" = "$(rc_of "$1")" ] || fail "flashctl status exits $rc, want $(rc_of "$1") for $1"
	up=$(tr a-z A-Z <<<"$1")
	[ "$1" = ok ] && up=ok
	grep -q "health: $up" "$T/st.txt" || fail "the header: $(head -1 "$T/st.txt")"
	grep -q "^flashd_health{state=\"$1\"} 1\$" "$T/m.txt" || fail "/metrics flashd_health: $(grep '^flashd_health' "$T/m.txt" | grep ' 1$')"
	st=$(tail -n1 "$T/notify8.txt")
	if [ "$1" = ok ]; then
		[ "$st" = "STATUS=serving 6 of 6 ioDimm(s)" ] || fail "STATUS=: $st"
	else
		[[ "$st" == "STATUS=$1: serving "* ]] || fail "STATUS=: $st"
	fi
	[ "$($DASH state "$T/dash.html" health)" = "$1" ] || fail "the dashboard's badge: $($DASH state "$T/dash.html" health)"
	echo "  the server: $1 (flashctl status exit $rc and header, flashd_health, STATUS=, the badge)"
}
# write_all DIMM [HALF [MIB]]: 1 MiB writes over the whole export, or its
# first MIB MiB (HALF 0 or 1: every other MiB, so that GC has data to
# move); prints how many failed (some faults fail writes)
write_all() {
	"$PYTHON" - "nbd://127.0.0.1:$FLASHD_PORT/$1" "${2:-}" "${3:-0}" <<'PY'
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
size, buf, bad = h.get_size(), os.urandom(1 << 20), 0
if int(sys.argv[3]):
    size = int(sys.argv[3]) << 20
for i, off in enumerate(range(0, size - (1 << 20) + 1, 1 << 20)):
    if sys.argv[2] and i % 2 != int(sys.argv[2]):
        continue
    try:
        h.pwrite(buf, off)
    except nbd.Error:
        bad += 1
try:
    h.flush()
except nbd.Error:
    bad += 1
print(bad)
PY
}
st_num() {
	flashd_status | "$PYTHON" -c '
import json, sys
print([d for d in json.load(sys.stdin)["dimms"] if d["name"] == sys.argv[1]][0]["stats"][sys.argv[2]])' "$1" "$2"
}
# rewrite_until DIMM PASSES KEY OP VALUE: DIMM rewritten, every other MiB
# a pass (write_all, the even and the odd ones in turn), until its stat
# KEY OP VALUE (a [ ] test: = or !=); false when not after PASSES passes
rewrite_until() {
	local d=$1 passes=$2 key=$3 op=$4 want=$5 i
	for i in $(seq 1 "$passes"); do
		write_all "$d" $((i % 2)) >/dev/null
		[ "$(st_num "$d" "$key")" "$op" "$want" ] && return 0
	done
	return 1
}

echo "broken.img is not an image"
expect broken failed open_failed "did not open"
expect temp ok - ""
expect_server failed
rm "$FLASHD_STATE/broken.img"
"${C[@]}" attach broken >/dev/null || fail "attach broken with the garbage removed"
expect broken ok - ""
expect_server ok

echo "temperature"
# An injected temperature relaxes towards ambient within seconds (80 C is
# below the throttle's exit point ~7 s later), and on a loaded machine the
# views take longer than that: hold_temp injects it again every half
# second until it is stopped, so every view sees the same state.
hold_pid=""
hold_temp() {
	"${C[@]}" inject temp temperature "$1" >/dev/null || fail "inject temperature $1"
	touch "$T/hold"
	(while [ -e "$T/hold" ] && "${C[@]}" inject temp temperature "$1" >/dev/null; do sleep 0.5; done) &
	hold_pid=$!
	track_pid "$hold_pid"
}
# the loop's last injection is over before the next step
release_temp() { rm -f "$T/hold"; wait "$hold_pid" 2>/dev/null || true; }
hold_temp 80
expect temp warning thermal_throttled "throttle at 78 C"
expect_server warning
release_temp
hold_temp 86
expect temp degraded thermal_stop "thermal stop (at 85 C)"
expect_server degraded
release_temp
"${C[@]}" inject temp temperature 35 >/dev/null || fail "cooling"
expect temp ok - ""
expect_server ok

echo "bit errors that lose units (no parity)"
[ "$(write_all bits)" = 0 ] || fail "filling bits"
"${C[@]}" inject bits bit-errors 100000 >/dev/null || fail "inject bit-errors"
rewrite_until bits 20 lost_units != 0 ||
	fail "100000 uncorrectable reads per million lost no unit in 20 passes"
"${C[@]}" inject bits bit-errors 0 >/dev/null || fail "bit-errors off"
expect bits warning lost_units "lost to media errors, within bytes"

echo "bad blocks past the reserve threshold"
[ "$(write_all bad)" = 0 ] || fail "filling bad"
# test-64m keeps 12 spare blocks: one grown bad block leaves 91.7 %, below
# the 95 % this ioDimm's reserves_warn asks for
"${C[@]}" inject bad bad-block 200 >/dev/null || fail "inject bad-block 200"
rewrite_until bad 10 blocks_bad_grown = 1 ||
	fail "block 200 injected, $(st_num bad blocks_bad_grown) grown bad found"
expect bad warning reserves_low "reserves 91.7 % (warning below 95 %)"

echo "a die fails, with parity"
# test-1g (8 dies, 36 % over-provisioning) has room for a dead die's
# blocks; its data and writes while a die is dead: tests/test-flashback.sh
[ "$(write_all diepar "" 128)" = 0 ] || fail "writing diepar"
"${C[@]}" inject diepar die-fail 1 >/dev/null || fail "inject die-fail 1 on diepar"
for i in $(seq 1 60); do
	[ "$(write_all diepar $((i % 2)) 128)" = 0 ] || fail "a write to diepar failed after one die failed (it has parity)"
	[ "$(st_num diepar dies_failed)" = 1 ] && [ "$(st_num diepar rebuild_bands_left)" = 0 ] && break
done
[ "$(st_num diepar dies_failed)" = 1 ] || fail "diepar's dead die was never found"
expect diepar warning die_rebuilt "rebuilt from parity"

echo "a die fails, no parity"
[ "$(write_all die0)" = 0 ] || fail "filling die0"
"${C[@]}" inject die0 die-fail 1 >/dev/null || fail "inject die-fail 1 on die0"
rewrite_until die0 30 dies_failed = 1 || fail "die0's dead die was never found"
expect die0 degraded dies_lost "the format has no parity"
expect_server degraded

echo "after a restart (the FTL keeps dead dies, lost units and grown bad blocks)"
declare -A before
for d in bits bad diepar die0 temp; do before[$d]=$(json_health "$d"); done
stop_flashd
NOTIFY_SOCKET=$T/notify8.sock restart_flashd
for want in "bits warning lost_units" "bad warning reserves_low" "diepar warning die_rebuilt" \
	"die0 degraded dies_lost" "temp ok -"; do
	read -r d state reason <<<"$want"
	got=$(json_health "$d")
	[ "${got%% *}" = "$state" ] && has_reason "$got" "$reason" && [ "$got" = "${before[$d]}" ] ||
		fail "after a restart $d's health is '$got', before it '${before[$d]}', want $state $reason"
	echo "  $d: $got"
done
rc=0
"${C[@]}" status >/dev/null || rc=$?
[ "$rc" = 2 ] || fail "after a restart flashctl status exits $rc, want 2 (die0 degraded)"
stop_flashd
FLASHD_STATE=$SAVED_STATE
ok "every fault moves health: 80 C warning, 86 C degraded, cooled ok; lost units warning; reserves below reserves_warn warning; a dead die with parity warning, without degraded; an image that does not open failed; in status, its exit status, JSON, /metrics, STATUS= and the dashboard; the same after a restart"

ok "health and configuration checks"
