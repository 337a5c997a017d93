#!/bin/bash
# timeout: 400
# flashd managed while it runs (issue 13): the control socket's API
# (server/ctl.c) and flashctl's verbs against a running flashd, every number
# checked against a known workload.
#   1. versions: flashctl --version, flashctl version, GET /v1/version agree
#      with flashd --version; --control and --json are taken before the
#      command as after it.
#   2. lifetime counters: 12 WRITEs of 2 MiB and 4 READs of 2 MiB move the
#      host bytes written/read by exactly 24/8 MiB, NAND bytes by at least
#      that, the server's request counters and latency histograms by 12/4
#      requests; after a clean restart the lifetime figures are unchanged and
#      go on from there; status -a (text) shows the fio-status fields, with
#      sizes in one convention: MiB below 1 GiB (the 0.8 GiB export, also in
#      the log), no decimal MB.
#   3. checkpoint: `flashctl checkpoint dimm0` while a client writes (no
#      request fails, all data reads back); after a kill -9, dimm0 replays
#      under 64 pages and keeps its lifetime figures, dimm1 (written alike,
#      no checkpoint) replays the log.
#   4. detach (tests/nbd/manage_detach.py, on dimm1 with the NAND timing
#      model on): WRITEs in flight are answered, the connections closed, new
#      clients refused (NBD_REP_ERR_UNKNOWN, saying why); the image is
#      closed (flashctl info reads it while flashd runs, with the drained
#      writes in its lifetime counters); attach serves the data again;
#      detach and attach are idempotent.
#   5. format through flashd: refused while attached and without --yes;
#      detached, `format --capacity 512M` changes the advertised size (nbdinfo),
#      `--sector-size 4096 --op 30` the block size and OP; a fresh format
#      has fresh lifetime counters; flashd restarts on the new format (the
#      file gives no format keys); bad parameters are refused (400).
#   5b. beacon on/off: status (JSON and text), /metrics, the log; bad states.
#   6. HTTP errors: unknown path, ioDimm and action (404), wrong method (405).
#   6b. requests a web page could send, through a TCP forwarder as a browser
#      reaches the socket and on the socket itself: a Host that is not the
#      loopback (DNS rebinding) is refused even for GET; a POST without
#      X-Flashd-Action or a JSON Content-Type, with an Origin other than the
#      page's own or a Sec-Fetch-Site of another site is refused (403) and
#      changes nothing (the refusals not logged one by one are counted in
#      the log when the 10 s are over); the page's own origin may act; a format needs
#      confirm=yes (400 without, dimm1's data unchanged).
#   7. offline `flashctl format IMG` never erases what an image holds
#      unasked: a new image is formatted at once; a formatted one, or one
#      holding data without a superblock, is refused without a terminal
#      (image unchanged) unless --yes, and on a terminal (script(1)) only
#      "yes" formats it;
#   8. every preset `flashctl presets` lists formats with its own defaults
#      (flashctl format, and flashd's first start) and opens: flashctl info
#      reads it, flashd serves it online and its last 4 KiB read back.
source "$(dirname "$0")/functions.sh"

MiB=$((1 << 20))
CTLPY=$NBD_CHECKS/ctlclient.py
dimms_conf "$T/flashd.conf" dimm0.timing=off dimm1.timing=on
start_flashd --config "$T/flashd.conf"

# dimm_json DIMM KEY...: the value (JSON) of a field of GET /v1/dimms/DIMM
dimm_json() {
	"$PYTHON" -c '
import json, sys
sys.path.insert(0, sys.argv[1])
import ctlclient
d = ctlclient.get_json(sys.argv[2], "/v1/dimms/" + sys.argv[3])
for k in sys.argv[4:]:
    d = d[k]
print(json.dumps(d))' "$NBD_CHECKS" "$FLASHD_CTL" "$@"
}

# pwrite_req URI OFFSET COUNT SIZE [FILE]: COUNT WRITEs of SIZE random bytes
# from OFFSET on, one request each, then a FLUSH (data saved to FILE)
pwrite_req() {
	"$PYTHON" - "$@" <<'PY'
import os, sys, nbd
uri, off, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
h = nbd.NBD()
h.connect_uri(uri)
data = os.urandom(count * size)
for i in range(count):
    h.pwrite(data[i * size:(i + 1) * size], off + i * size)
h.flush()
h.shutdown()
if len(sys.argv) > 5:
    open(sys.argv[5], "wb").write(data)
PY
}

# pread_req URI OFFSET COUNT SIZE
pread_req() {
	"$PYTHON" - "$@" <<'PY'
import sys, nbd
uri, off, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(count):
    h.pread(size, off + i * size)
h.shutdown()
PY
}

# ---- 1. versions ----------------------------------------------------------------
v=$("$FLASHD" --version | awk '{print $2}')
[ "$("$FLASHCTL" --version)" = "flashctl $v" ] || fail "flashctl --version: $("$FLASHCTL" --version), flashd $v"
"$FLASHCTL" version --control "$FLASHD_CTL" >"$T/version.out"
cat "$T/version.out"
grep -qx "flashctl $v" "$T/version.out" || fail "flashctl version does not print its own version"
grep -q "^flashd $v (pid $FLASHD_PID, control socket $FLASHD_CTL)" "$T/version.out" ||
	fail "flashctl version does not show the running flashd"
[ "$("$PYTHON" -c "import sys; sys.path.insert(0, '$NBD_CHECKS'); import ctlclient; print(ctlclient.get_json('$FLASHD_CTL', '/v1/version')['version'])")" = "$v" ] ||
	fail "GET /v1/version"
"$FLASHCTL" version --control "$T/nowhere.ctl" | grep -q "^flashd: cannot reach" || fail "flashctl version without a flashd"
ok "versions: flashd, flashctl and the API say $v"
# the common options before the command, as doc/managing.md writes them, or after it
"$FLASHCTL" --control "$FLASHD_CTL" version | grep -q "^flashd $v (pid $FLASHD_PID" || fail "flashctl --control PATH version"
"$FLASHCTL" --control="$FLASHD_CTL" --json status dimm0 | "$PYTHON" -c '
import json, sys
assert json.load(sys.stdin)["name"] == "dimm0"' || fail "flashctl --control=PATH --json status dimm0"
"$FLASHCTL" -c "$FLASHD_CTL" status | grep -q "dimm1: simulated ioDimm" || fail "flashctl -c PATH status"
FLASHD_CONTROL=$T/nowhere.ctl "$FLASHCTL" --json beacon dimm0 off --control "$FLASHD_CTL" | "$PYTHON" -c '
import json, sys
r = json.load(sys.stdin)
assert r["ok"] is True and r["beacon"] is False, r' || fail "flashctl --json beacon dimm0 off --control PATH"
rc=0
"$FLASHCTL" --control "$FLASHD_CTL" >/dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "flashctl --control PATH without a command: exit $rc, want 2 (usage)"
ok "--control and --json before the command as after it"

# ---- 2. lifetime counters ----------------------------------------------------------
snap() { # snap NAME: the JSON of dimm0 into $T/NAME.json
	"$PYTHON" -c '
import json, sys
sys.path.insert(0, sys.argv[1])
import ctlclient
json.dump(ctlclient.get_json(sys.argv[2], "/v1/dimms/dimm0"), open(sys.argv[3], "w"))' \
		"$NBD_CHECKS" "$FLASHD_CTL" "$T/$1.json"
}
snap before
pwrite_req "$FLASHD_URI0" 0 12 $((2 * MiB)) "$T/d24"
pread_req "$FLASHD_URI0" 0 4 $((2 * MiB))
snap after
"$PYTHON" - "$T/before.json" "$T/after.json" <<'PY' || fail "counters after 24 MiB written and 8 MiB read"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
M = 1 << 20
def d(*k):
    x, y = a, b
    for kk in k:
        x, y = x[kk], y[kk]
    return y - x
checks = [
    ("lifetime host_write_bytes", d("lifetime", "host_write_bytes"), 24 * M),
    ("lifetime host_read_bytes", d("lifetime", "host_read_bytes"), 8 * M),
    ("stats host_write_bytes", d("stats", "host_write_bytes"), 24 * M),
    ("io ops write", d("io", "ops", "write"), 12),
    ("io ops read", d("io", "ops", "read"), 4),
    ("io ops flush", d("io", "ops", "flush"), 1),
    ("io bytes write", d("io", "bytes", "write"), 24 * M),
    ("io bytes read", d("io", "bytes", "read"), 8 * M),
    ("latency write count", d("io", "latency", "write", "count"), 12),
    ("latency read count", d("io", "latency", "read", "count"), 4),
    ("latency flush count", d("io", "latency", "flush", "count"), 1),
    ("io errors write", d("io", "errors", "write"), 0),
]
bad = [(n, got, want) for n, got, want in checks if got != want]
for n, got, want in checks:
    print("%-26s moved by %d (want %d)" % (n, got, want))
if d("lifetime", "nand_write_bytes") < 24 * M:
    bad.append(("nand_write_bytes", d("lifetime", "nand_write_bytes"), ">= 24 MiB"))
if d("lifetime", "nand_read_bytes") < 8 * M:
    bad.append(("nand_read_bytes", d("lifetime", "nand_read_bytes"), ">= 8 MiB"))
print("NAND written %d, read %d bytes" % (d("lifetime", "nand_write_bytes"), d("lifetime", "nand_read_bytes")))
if sum(b["io"]["latency"]["write"]["buckets"]) != b["io"]["latency"]["write"]["count"]:
    bad.append(("latency buckets", "sum", "count"))
if bad:
    sys.exit("wrong: %s" % bad)
PY
w_life=$(dimm_json dimm0 lifetime host_write_bytes)
r_life=$(dimm_json dimm0 lifetime host_read_bytes)
nw_life=$(dimm_json dimm0 lifetime nand_write_bytes)
"$FLASHCTL" status -a --control "$FLASHD_CTL" >"$T/status-a.txt"
cat "$T/status-a.txt"
for want in "flashd $v, pid $FLASHD_PID" "dimm0: simulated ioDimm, preset test-1g, export 'dimm0'" \
	"State: online, attached" "Format: 1677720 sectors of 512 bytes (819.20 MiB)" "over-provisioning" \
	"Reserves: 100.00%" "Rated endurance: 5000 P/E cycles; used" \
	"Lifetime: host read 8.00 MiB, written 24.00 MiB; NAND read" "write amplification" \
	"RAM usage: current" "peak" "Connections: 0 now" "Blocks:" "Media errors:" \
	"Requests since flashd started: 4 reads (8.00 MiB), 12 writes (24.00 MiB), 1 flushes"; do
	grep -qF "$want" "$T/status-a.txt" || fail "flashctl status -a lacks '$want'"
done
"$FLASHCTL" status --control "$FLASHD_CTL" >"$T/status.txt"
grep -q "RAM usage" "$T/status.txt" && fail "flashctl status without -a shows the -a details"
grep -qF "Lifetime: host read 8.00 MiB, written 24.00 MiB" "$T/status.txt" || fail "flashctl status lacks the lifetime line"
# the card's configured model: the preset's description, in the text and the JSON
grep -qF "    Model: test device: 1 GiB raw MLC, 4 channels x 2 dies, 2048 blocks" "$T/status.txt" ||
	fail "flashctl status does not show the model"
[ "$(dimm_json dimm0 model)" = '"test device: 1 GiB raw MLC, 4 channels x 2 dies, 2048 blocks"' ] ||
	fail "status JSON model: $(dimm_json dimm0 model)"
# one unit convention (common/units.h): GiB from 1 GiB up, MiB below, in the log too
grep -qF "dimm0: simulated ioDimm dimm0 (test-1g): 819.20 MiB, 512-byte sectors" "$T/flashd.log" ||
	fail "the log does not give the 0.8 GiB export's size in MiB"
! grep -qE "[0-9] (MB|GB|TB)\b|0\.[0-9]+ GiB" "$T/status-a.txt" "$T/status.txt" ||
	fail "flashctl status mixes decimal units or shows a size under 1 GiB in GiB"
stop_flashd
restart_flashd
[ "$(dimm_json dimm0 lifetime host_write_bytes)" = "$w_life" ] || fail "host_write_bytes after a clean restart: $(dimm_json dimm0 lifetime host_write_bytes), want $w_life"
[ "$(dimm_json dimm0 lifetime host_read_bytes)" = "$r_life" ] || fail "host_read_bytes after a clean restart"
[ "$(dimm_json dimm0 lifetime nand_write_bytes)" -ge "$nw_life" ] || fail "nand_write_bytes went back after a restart"
[ "$(dimm_json dimm0 io ops write)" = 0 ] || fail "the server's request counters did not start again at 0"
pwrite_req "$FLASHD_URI0" $((64 * MiB)) 2 $((2 * MiB))
[ "$(dimm_json dimm0 lifetime host_write_bytes)" = $((w_life + 4 * MiB)) ] || fail "host_write_bytes does not go on after the restart"
nbd_region_is "$FLASHD_URI0" 0 $((24 * MiB)) "$T/d24" || fail "data after the restart"
ok "lifetime counters: exact, kept across a clean restart; request counters and histograms exact"

# ---- 3. checkpoint ----------------------------------------------------------------
# writes go on while the checkpoints are written beside them: none may fail
"$PYTHON" - "$FLASHD_URI0" "$T/cpw" <<'PY' &
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
data = os.urandom(400 * 65536)
for i in range(400):
    h.pwrite(data[i * 65536:(i + 1) * 65536], (128 << 20) + i * 65536)
h.flush()
h.shutdown()
open(sys.argv[2], "wb").write(data)
PY
writer=$!
track_pid $writer
for i in 1 2 3; do
	"$FLASHCTL" checkpoint dimm0 --control "$FLASHD_CTL" || fail "flashctl checkpoint dimm0 (round $i)"
done
wait $writer || fail "a writer failed during checkpoints"
nbd_region_is "$FLASHD_URI0" $((128 * MiB)) $((400 * 65536)) "$T/cpw" || fail "data written across the checkpoints"
pwrite_req "$FLASHD_URI0" $((160 * MiB)) 16 $MiB "$T/c0"
pwrite_req "$FLASHD_URI1" $((160 * MiB)) 16 $MiB "$T/c1"
"$FLASHCTL" checkpoint dimm0 --control "$FLASHD_CTL" | tee "$T/cp.out"
grep -q "dimm0: checkpoint written" "$T/cp.out" || fail "flashctl checkpoint: $(cat "$T/cp.out")"
w_cp=$(dimm_json dimm0 lifetime host_write_bytes)
kill_flashd
restart_flashd
rp0=$(dimm_json dimm0 format recovered_pages)
rp1=$(dimm_json dimm1 format recovered_pages)
echo "after kill -9: dimm0 replayed $rp0 pages (checkpoint), dimm1 $rp1 (none)"
[ "$rp0" -lt 64 ] || fail "dimm0 replayed $rp0 pages after its checkpoint"
[ "$rp1" -ge 4096 ] || fail "dimm1 replayed only $rp1 pages (16 MiB were written after its last checkpoint)"
[ "$(dimm_json dimm0 lifetime host_write_bytes)" = "$w_cp" ] || fail "dimm0's lifetime figures after the crash are not those of its checkpoint"
nbd_region_is "$FLASHD_URI0" $((160 * MiB)) $((16 * MiB)) "$T/c0" || fail "dimm0 data after the crash"
nbd_region_is "$FLASHD_URI1" $((160 * MiB)) $((16 * MiB)) "$T/c1" || fail "dimm1 data after the crash"
rc=0
"$FLASHCTL" checkpoint nosuch --control "$FLASHD_CTL" 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "no ioDimm 'nosuch'" "$T/err" || fail "checkpoint of an unknown ioDimm: exit $rc, $(cat "$T/err")"
ok "checkpoint: taken under load without a failed request; after kill -9 nothing to replay"

# ---- 4. detach and attach ---------------------------------------------------------
w1=$(dimm_json dimm1 lifetime host_write_bytes)
run_check "detach drains dimm1" timeout 120 "$PYTHON" "$NBD_CHECKS/manage_detach.py" \
	--ctl "$FLASHD_CTL" --uri "$FLASHD_URI1" --count 32 --data-out "$T/dd"
checks_passed || fail "detach"
grep -q "closed (the export was detached" "$T/flashd.log" || fail "the log does not say why the connections closed"
# the image is closed: flashctl reads it while flashd runs
"$FLASHCTL" info "$FLASHD_STATE/dimm1.img" --json >"$T/info1.json" || fail "flashctl info of the detached image"
"$PYTHON" - "$T/info1.json" "$w1" "$T/dd" <<'PY' || fail "the detached image's counters"
import json, sys
i = json.load(open(sys.argv[1]))
w, w1 = i["stats"]["host_write_bytes"], int(sys.argv[2])
dd = open(sys.argv[3], "rb").read()
ok = sum(1 for k in range(0, len(dd), 1 << 20) if any(dd[k:k + (1 << 20)]))
print("detached image: clean %s, host_write_bytes %d (%d before %d drained writes)" % (
    i["format"]["last_close_clean"], w, w1, ok))
assert i["format"]["last_close_clean"], "not closed cleanly"
assert w == w1 + (ok << 20), "the drained writes are not in the checkpointed lifetime counters"
PY
"$FLASHCTL" detach dimm1 --control "$FLASHD_CTL" | grep -q "not attached" || fail "a second detach is not a no-op"
"$FLASHCTL" status --control "$FLASHD_CTL" | grep -A5 "dimm1:" | grep -q "State: detached" || fail "status text of a detached ioDimm"
[ "$(dimm_json dimm1 state)" = '"detached"' ] || fail "state of dimm1"
"$FLASHCTL" attach dimm1 --control "$FLASHD_CTL" | tee "$T/attach.out"
grep -q "dimm1 attached: 1677720 sectors of 512 bytes" "$T/attach.out" || fail "flashctl attach dimm1"
nbd_region_is "$FLASHD_URI1" 0 $((32 * MiB)) "$T/dd" || fail "the drained writes after attach"
nbd_region_is "$FLASHD_URI1" $((160 * MiB)) $((16 * MiB)) "$T/c1" || fail "older dimm1 data after attach"
"$FLASHCTL" attach dimm1 --control "$FLASHD_CTL" | grep -q "attached already" || fail "a second attach is not a no-op"
[ "$(dimm_json dimm1 state)" = '"online"' ] || fail "dimm1 is not online after attach"
ok "detach drains, closes and refuses; attach serves the same data again"

# a detach with clients connected is refused, naming them (as fio-detach
# refuses a device in use); --force detaches and disconnects them
"$PYTHON" - "$NBD_CHECKS" "$FLASHD_PORT" "$FLASHD_SOCK" "$T/held" <<'PY' &
import os, socket, sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
from nbdraw import *
conns = [Conn(socket.AF_INET, ("127.0.0.1", int(sys.argv[2]))), Conn(socket.AF_UNIX, sys.argv[3])]
for c in conns:
    c.handshake()
    c.go("dimm1")
open(sys.argv[4] + ".tmp", "w").write("%d %d\n" % (conns[0].sock.getsockname()[1], os.getpid()))
os.rename(sys.argv[4] + ".tmp", sys.argv[4])
for c in conns:  # until flashd closes them (the forced detach)
    c.settimeout(60)
    if c.sock.recv(1):
        sys.exit("FAIL: bytes from flashd on an idle connection")
PY
held=$!
track_pid $held
for i in $(seq 1 100); do [ -s "$T/held" ] && break; sleep 0.1; done
read -r hport hpid <"$T/held" || fail "the held clients did not connect"
rc=0
"$FLASHCTL" detach dimm1 --control "$FLASHD_CTL" >/dev/null 2>"$T/err" || rc=$?
[ $rc = 1 ] || fail "detach with 2 clients connected: exit $rc, $(cat "$T/err")"
grep -q "dimm1 is in use: 2 client(s) connected: .*detach --force" "$T/err" && grep -q "127\.0\.0\.1:$hport[,;]" "$T/err" &&
	grep -q "unix#[0-9]* (uid=$(id -u) pid=$hpid)" "$T/err" || fail "the refusal does not name the clients: $(cat "$T/err")"
[ "$(dimm_json dimm1 state)" = '"online"' ] || fail "dimm1 is not online after the refused detach"
nbd_region_is "$FLASHD_URI1" 0 $((1 * MiB)) "$T/dd" || fail "dimm1 not served after the refused detach"
"$FLASHCTL" detach --force dimm1 --control "$FLASHD_CTL" >/dev/null || fail "detach --force"
wait $held || fail "the held clients were not disconnected by detach --force"
[ "$(dimm_json dimm1 state)" = '"detached"' ] || fail "dimm1 is not detached after detach --force"
grep -q "dimm1: detach (force) requested over the control socket by uid=" "$T/flashd.log" || fail "the forced detach is not logged"
"$FLASHCTL" attach dimm1 --control "$FLASHD_CTL" >/dev/null || fail "attach after detach --force"
ok "detach refused with 2 clients connected ($(sed 's/.*connected: //; s/; stop.*//' "$T/err")); --force detaches them"

# ---- 5. format through flashd ------------------------------------------------------
rc=0
"$FLASHCTL" format dimm0 --capacity 512M --yes --control "$FLASHD_CTL" 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "is attached: detach it first" "$T/err" || fail "format of an attached ioDimm: exit $rc, $(cat "$T/err")"
"$FLASHCTL" detach dimm0 --control "$FLASHD_CTL" >/dev/null || fail "detach dimm0"
rc=0
"$FLASHCTL" format dimm0 --capacity 512M --control "$FLASHD_CTL" </dev/null 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "add --yes" "$T/err" || fail "format without --yes and no terminal: exit $rc, $(cat "$T/err")"
rc=0
"$FLASHCTL" format dimm0 --capacity 80 --yes --control "$FLASHD_CTL" 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "did you mean a percentage" "$T/err" || fail "format --capacity 80: exit $rc, $(cat "$T/err")"
code=$("$PYTHON" -c "
import sys; sys.path.insert(0, '$NBD_CHECKS'); import ctlclient
print(ctlclient.post('$FLASHD_CTL', '/v1/dimms/dimm0/format?capacity=1G&op=20')[0])")
[ "$code" = 400 ] || fail "format with capacity and op: HTTP $code, want 400"
"$FLASHCTL" format dimm0 --capacity 512M --yes --control "$FLASHD_CTL" | tee "$T/fmt.out"
grep -q "dimm0 formatted: 1048576 sectors of 512 bytes (512.00 MiB)" "$T/fmt.out" || fail "format --capacity 512M"
nbdinfo "$FLASHD_URI0" >/dev/null 2>&1 && fail "dimm0 is served while detached after its format"
"$FLASHCTL" attach dimm0 --control "$FLASHD_CTL" >/dev/null || fail "attach after the format"
[ "$(nbdinfo --size "$FLASHD_URI0")" = $((512 * MiB)) ] || fail "dimm0's size after format --capacity 512M: $(nbdinfo --size "$FLASHD_URI0")"
[ "$(dimm_json dimm0 format capacity_bytes)" = $((512 * MiB)) ] || fail "status capacity after the format"
[ "$(dimm_json dimm0 lifetime host_write_bytes)" = 0 ] || fail "a fresh format has lifetime host writes"
nbd_region_is "$FLASHD_URI0" 0 $MiB zero || fail "a fresh format does not read as zeros"
"$FLASHCTL" detach dimm0 --control "$FLASHD_CTL" >/dev/null
"$FLASHCTL" format dimm0 --sector-size 4096 --op 30 --yes --control "$FLASHD_CTL" >/dev/null || fail "format --sector-size 4096 --op 30"
"$FLASHCTL" attach dimm0 --control "$FLASHD_CTL" >/dev/null || fail "attach after the second format"
nbdinfo --json "$FLASHD_URI0" >"$T/nbdinfo.json"
"$PYTHON" - "$T/nbdinfo.json" <<'PY' || fail "dimm0 after format --sector-size 4096 --op 30"
import json, sys
e = json.load(open(sys.argv[1]))["exports"][0]
print("nbdinfo: size %d, minimum block %d" % (e["export-size"], e["block_size_minimum"]))
assert e["block_size_minimum"] == 4096, e
PY
op=$(dimm_json dimm0 format op_percent)
size30=$(dimm_json dimm0 format capacity_bytes)
"$PYTHON" -c "assert abs($op - 30) < 0.01, $op" || fail "op_percent after --op 30: $op"
[ "$(nbdinfo --size "$FLASHD_URI0")" = "$size30" ] || fail "the advertised size is not the format's"
stop_flashd
restart_flashd
[ "$(nbdinfo --size "$FLASHD_URI0")" = "$size30" ] || fail "after a restart dimm0 is not served with its new format"
ok "format: refused while attached or unconfirmed; changes the advertised size, block size and OP"

# ---- 5b. beacon ---------------------------------------------------------------------
"$FLASHCTL" beacon dimm1 --control "$FLASHD_CTL" | tee "$T/beacon.out"
grep -qx "dimm1: beacon on" "$T/beacon.out" || fail "flashctl beacon dimm1"
[ "$(dimm_json dimm1 beacon)" = true ] || fail "status does not show dimm1's beacon on"
[ "$(dimm_json dimm0 beacon)" = false ] || fail "dimm0's beacon is on too"
"$FLASHCTL" status dimm1 --control "$FLASHD_CTL" | grep -q "Beacon: on" || fail "status text lacks 'Beacon: on'"
curl -sf --unix-socket "$FLASHD_CTL" http://localhost/metrics >"$T/beacon-metrics.txt" || fail "curl /metrics"
grep -qx 'flashd_dimm_beacon{dimm="dimm1",export="dimm1"} 1' "$T/beacon-metrics.txt" || fail "/metrics: dimm1's beacon is not 1"
grep -qx 'flashd_dimm_beacon{dimm="dimm0",export="dimm0"} 0' "$T/beacon-metrics.txt" || fail "/metrics: dimm0's beacon is not 0"
"$FLASHCTL" beacon dimm1 off --control "$FLASHD_CTL" | grep -qx "dimm1: beacon off" || fail "flashctl beacon dimm1 off"
[ "$(dimm_json dimm1 beacon)" = false ] || fail "the beacon stays on after 'off'"
"$FLASHCTL" status -a dimm1 --control "$FLASHD_CTL" | grep -q "Beacon: off" || fail "status -a lacks 'Beacon: off'"
rc=0
"$FLASHCTL" beacon dimm1 blink --control "$FLASHD_CTL" 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "neither on nor off" "$T/err" || fail "beacon with a bad state: exit $rc, $(cat "$T/err")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "X-Flashd-Action: 1" --unix-socket "$FLASHD_CTL" "http://localhost/v1/dimms/dimm1/beacon?state=blink")
[ "$code" = 400 ] || fail "POST beacon?state=blink: HTTP $code, want 400"
grep -q "dimm1: beacon on" "$T/flashd.log" || fail "the beacon is not logged"
ok "beacon: on and off through flashctl, shown by status, status -a, /metrics and the log"

# ---- 6. HTTP errors ------------------------------------------------------------------
"$PYTHON" - "$NBD_CHECKS" "$FLASHD_CTL" <<'PY' || fail "HTTP errors"
import json, sys
sys.path.insert(0, sys.argv[1])
import ctlclient
s = sys.argv[2]
for method, url, want in [("GET", "/nope", 404), ("GET", "/v1/dimms/nosuch", 404),
                          ("POST", "/v1/dimms/dimm0/explode", 404), ("GET", "/v1/dimms/dimm0/attach", 405),
                          ("POST", "/v1/status", 405), ("POST", "/metrics", 405),
                          ("POST", "/v1/dimms/dimm0/test-stall?ms=10", 404),
                          ("POST", "/v1/dimms/dimm0/format?sector_size=4096", 409),
                          ("POST", "/v1/dimms/dimm0/format?sector_size=1024", 400)]:
    code, headers, body = ctlclient.request(s, method, url)
    j = json.loads(body)
    print("%s %s -> %d %s" % (method, url, code, j.get("error")))
    assert code == want, (method, url, code, want)
    assert j["ok"] is False and j["error"], j
PY

# ---- 6b. requests a web page could send -----------------------------------------------
# A browser reaches the control socket through a forwarder (doc/managing.md, "Dashboard"), and so
# does every page it shows.  The forwarder here passes bytes as they are; curl sends the
# headers such pages send.
start_ctl_forward
FWD=http://127.0.0.1:$FWD_PORT
hcode() { curl -s -o "$T/body" -w '%{http_code}' --max-time 20 "$@"; }
# refused WHAT CURL-ARGS...: 403, said why
refused() {
	local what=$1 c
	shift
	c=$(hcode "$@")
	[ "$c" = 403 ] || fail "$what: HTTP $c, want 403: $(head -c 300 "$T/body")"
	echo "403 for $what: $(cat "$T/body")"
}
ACT=(-H "X-Flashd-Action: 1")
# first (its log line is not held back): a form another site posts, its path with ESC and CR
refused "a form of another site posting detach" -H "Origin: http://evil.example" --data a=1 \
	"$FWD/v1/dimms/dimm0/detach%1B%5B2J%0D"
grep -qF 'control socket: /v1/dimms/dimm0/detach\x1b[2J\x0d refused: an action needs the header X-Flashd-Action' \
	"$T/flashd.log" || fail "the refusal is not logged (with ESC and CR escaped)"
! LC_ALL=C grep -q $'[\x1b\r]' "$T/flashd.log" || fail "the log holds a raw ESC or CR"
# DNS rebinding: a page whose name now resolves to the forwarder sends that name as Host
refused "GET /v1/status for Host evil.example" -H "Host: evil.example:$FWD_PORT" "$FWD/v1/status"
refused "GET /v1/status for Host x on the socket" --unix-socket "$FLASHD_CTL" http://x/v1/status
# what a flashctl of an older release sends (doc/security.md: flashctl must be of flashd's release)
refused "an older flashctl's request (HTTP/1.0, Host: flashd)" --http1.0 -H "Host: flashd" \
	--unix-socket "$FLASHD_CTL" http://localhost/v1/status
refused "an absolute request target of another host" --unix-socket "$FLASHD_CTL" \
	--request-target http://evil.example/v1/status http://localhost/
refused "a rebound page posting detach" "${ACT[@]}" -H "Host: evil.example:$FWD_PORT" \
	-H "Origin: http://evil.example:$FWD_PORT" -X POST "$FWD/v1/dimms/dimm0/detach"
grep -q "is not localhost, 127.x.y.z or \[::1\]" "$T/body" || fail "the refusal does not say why"
for h in "127.0.0.1:$FWD_PORT" localhost:8080 LOCALHOST 127.3.2.1 "[::1]:8080" "[::ffff:127.0.0.1]"; do
	c=$(hcode -H "Host: $h" "$FWD/v1/version")
	[ "$c" = 200 ] || fail "GET /v1/version for Host $h: HTTP $c"
done
[ "$(hcode "$FWD/")" = 200 ] || fail "the dashboard through the forwarder"
# actions another page could send: none may act
D0=$FWD/v1/dimms/dimm0
refused "POST without X-Flashd-Action" -X POST "$D0/detach"
refused "a text/plain POST (a simple request)" -H "Content-Type: text/plain" --data x "$D0/detach"
refused "Origin of another site" "${ACT[@]}" -H "Origin: http://evil.example" -X POST "$D0/detach"
refused "Origin null" "${ACT[@]}" -H "Origin: null" -X POST "$D0/detach"
refused "Origin of another local page" "${ACT[@]}" -H "Origin: http://127.0.0.1:1" -X POST "$D0/detach"
refused "Sec-Fetch-Site cross-site" "${ACT[@]}" -H "Sec-Fetch-Site: cross-site" -X POST "$D0/detach"
refused "Sec-Fetch-Site same-site" "${ACT[@]}" -H "Sec-Fetch-Site: same-site" -X POST "$D0/detach"
refused "reload from another site" "${ACT[@]}" -H "Origin: http://evil.example" -X POST "$FWD/v1/reload"
[ "$(dimm_json dimm0 state)" = '"online"' ] || fail "dimm0 is $(dimm_json dimm0 state) after the refused requests"
# the page's own origin, and a JSON request, may act
c=$(hcode "${ACT[@]}" -H "Origin: $FWD" -H "Sec-Fetch-Site: same-origin" -X POST "$D0/beacon?state=on")
[ "$c" = 200 ] || fail "POST beacon from the page's own origin: HTTP $c: $(cat "$T/body")"
c=$(hcode -H "Content-Type: application/json" -X POST "$D0/beacon?state=off")
[ "$c" = 200 ] || fail "POST beacon with Content-Type: application/json: HTTP $c: $(cat "$T/body")"
# a format needs confirm=yes; dimm1 holds the data of section 4
"$FLASHCTL" detach dimm1 --control "$FLASHD_CTL" >/dev/null || fail "detach dimm1"
c=$(hcode --unix-socket "$FLASHD_CTL" "${ACT[@]}" -X POST http://localhost/v1/dimms/dimm1/format)
[ "$c" = 400 ] && grep -q "add confirm=yes" "$T/body" || fail "format without confirm=yes: HTTP $c: $(cat "$T/body")"
refused "format from another site" "${ACT[@]}" -H "Origin: http://evil.example" -X POST \
	"$FWD/v1/dimms/dimm1/format?confirm=yes"
"$FLASHCTL" attach dimm1 --control "$FLASHD_CTL" >/dev/null || fail "attach dimm1"
nbd_region_is "$FLASHD_URI1" 0 $((32 * MiB)) "$T/dd" || fail "dimm1's data after the refused formats"
kill "$FWD_PID"
wait "$FWD_PID" 2>/dev/null || true
# those refused within 10 s of a logged one are counted in one line once
# the 10 s are over, not held back until the next refusal
for i in $(seq 1 120); do
	grep -q "more control request(s) refused in the last" "$T/flashd.log" && break
	sleep 0.1
done
grep -q "more control request(s) refused in the last" "$T/flashd.log" ||
	fail "the refusals not logged one by one are never counted in the log"
ok "requests a web page could send are refused; the page's own may act; format needs confirm=yes"

check_flashd_log
stop_flashd
ok "control API and flashctl verbs"

# ---- 7. offline format asks first --------------------------------------------------------
TOOL="$PYTHON $NBD_CHECKS/image_tool.py"
IMG=$T/off.img
"$FLASHCTL" format "$IMG" --preset test-1g </dev/null | grep -q "formatted test-1g" || fail "format of a new image"
sum=$($TOOL "$IMG" sha256)
rc=0
"$FLASHCTL" format "$IMG" --capacity 50% </dev/null 2>"$T/err" || rc=$?
cat "$T/err"
[ $rc = 1 ] && grep -q "it holds a format: 1677720 sectors of 512 bytes" "$T/err" && grep -q "add --yes" "$T/err" ||
	fail "format of a formatted image without a terminal: exit $rc"
[ "$($TOOL "$IMG" sha256)" = "$sum" ] || fail "the refused format changed the image"
echo no | script -qec "$FLASHCTL format $IMG --capacity 50%" /dev/null >"$T/tty.out" 2>&1 || true
cat "$T/tty.out"
grep -q "Type 'yes' to go on" "$T/tty.out" && grep -q "not formatted" "$T/tty.out" || fail "no question on a terminal, or 'no' did not stop it"
[ "$($TOOL "$IMG" sha256)" = "$sum" ] || fail "answering no changed the image"
echo yes | script -qec "$FLASHCTL format $IMG --capacity 50%" /dev/null >"$T/tty.out" 2>&1 || true
grep -q "formatted test-1g: 838856 sectors" "$T/tty.out" || fail "answering yes did not format: $(cat "$T/tty.out")"
# data without a superblock counts as data too
"$FLASHCTL" format "$IMG" --yes </dev/null >/dev/null || fail "format --yes"
$TOOL "$IMG" damage-superblocks >/dev/null || fail "damaging the superblocks"
rc=0
"$FLASHCTL" format "$IMG" </dev/null 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "holds data without a valid superblock" "$T/err" || fail "format of a damaged image: exit $rc, $(cat "$T/err")"
"$FLASHCTL" format "$IMG" --yes </dev/null | grep -q "formatted test-1g: 1677720 sectors" || fail "format --yes of a damaged image"
ok "offline format: asks (or needs --yes) before erasing a format or data"

# ---- 8. every preset formats and opens with its own defaults -----------------------------
# The FTL's own blocks (superblocks, checkpoints, open bands, GC's floor) are
# a count of blocks whatever the size: a preset with few large blocks has
# more than the stock 20 % over-provisioning as its stock format.
presets=$("$FLASHCTL" presets | awk '{print $1}')
[ "$(wc -w <<<"$presets")" -ge 8 ] || fail "flashctl presets lists only: $presets"
: >"$T/presets.conf"
for p in $presets; do
	out=$("$FLASHCTL" format "$T/preset.img" --preset "$p" </dev/null 2>&1) ||
		fail "preset $p: flashctl format with its defaults: $out"
	"$FLASHCTL" info "$T/preset.img" --json >"$T/preset.json" || fail "preset $p: the image does not open"
	"$PYTHON" -c 'import json, sys; f = json.load(open(sys.argv[1]))["format"]; assert f["op_percent"] >= 20, f' \
		"$T/preset.json" || fail "preset $p: less than 20 % over-provisioning"
	echo "    ${out#"$T/"}"
	rm -f "$T/preset.img"
	printf '[dimm %s]\npreset = %s\n' "$p" "$p" >>"$T/presets.conf"
done
# flashd's first start formats each with the same defaults: every ioDimm
# online, its last 4 KiB written and read back
FLASHD_STATE=$T/preset-state FLASHD_PORT=
start_flashd --config "$T/presets.conf" --timing off
"$PYTHON" - "nbd://127.0.0.1:$FLASHD_PORT" $presets <<'PY' || fail "not every preset's ioDimm is online and writable"
import sys, nbd
base, names = sys.argv[1], sys.argv[2:]
for name in names:
    h = nbd.NBD(); h.connect_uri(base + "/" + name)
    end = h.get_size() - 4096
    h.pwrite(b"\xa5" * 4096, end, nbd.CMD_FLAG_FUA)
    assert h.pread(4096, end) == b"\xa5" * 4096, name
    h.shutdown()
PY
flashd_status | "$PYTHON" -c '
import json, sys
st = {d["name"]: d["state"] for d in json.load(sys.stdin)["dimms"]}
print("    flashd:", st)
assert len(st) == len(sys.argv) - 1 and all(st[p] == "online" for p in sys.argv[1:]), st' $presets ||
	fail "flashd's first start did not bring every preset's ioDimm online"
stop_flashd
check_flashd_log
ok "every preset formats with its defaults (flashctl format, flashd's first start) and opens"
