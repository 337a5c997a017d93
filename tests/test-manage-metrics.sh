#!/bin/bash
# timeout: 300
# exclusive: answers within 0.5 s while a load runs
# Monitoring a running flashd (issue 13): Prometheus /metrics, flashctl
# stats --live, and control requests that must not wait on a busy ioDimm.
#   1. /metrics passes a strict parser of the text exposition format
#      (tests/nbd/promcheck.py; it first shows it refuses 13 kinds of broken
#      text) and `promtool check metrics` (lint too), with the right
#      Content-Type; its figures equal the JSON status
#      taken with it (lifetime host bytes, request counters, capacity), the
#      state gauges have exactly one 1 per ioDimm, the latency histogram
#      counts every request; health (server and ioDimm), each reason and the
#      thermal state are one series per value, 1 for the status's; the
#      kinds of blocks add up to all of them (no "total" beside its parts);
#      the standard process_* metrics are there; after a detach it is still
#      valid, says state="detached" and drops that ioDimm's FTL figures.
#   2. flashctl stats --live --json: 16 MiB written in 8 requests during the
#      samples add up to exactly that; the text form prints a header and a
#      row per ioDimm; flashctl stats (since start) matches the JSON.
#   3. busy ioDimm (tests/nbd/manage_busy.py, FLASHD_TEST_HOOKS=1): while
#      dimm0's thread sleeps 12 s, handshakes to both exports, a read on
#      dimm1, /v1/version, dimm1's status and flashctl status dimm1 answer
#      within 0.5 s; the full status and /metrics answer after their 5 s
#      limit with dimm1's figures and a note for dimm0; the stall's own
#      reply comes after 12 s.  Then under a real load (fio, 64 x 64 KiB
#      writes in flight on dimm0) status, metrics and handshakes stay prompt.
#      SIGTERM while a stall and a status wait: both are answered, then
#      flashd exits 0.
#   4. a crash (SIGKILL) after a checkpoint and 8 MiB more: no counter
#      comes back lower than the last scrape unless it holds only what the
#      new process counted since (a reset, as Prometheus reads it); the
#      FTL's lifetime figures, which come back as of the checkpoint, are
#      gauges.
source "$(dirname "$0")/functions.sh"

MiB=$((1 << 20))
cat >"$T/flashd.conf" <<EOF
[card duo0]
model = ioDrive Duo (simulated)
[dimm dimm0]
card = duo0
preset = test-1g
[dimm dimm1]
card = duo0
preset = test-1g
EOF
export FLASHD_TEST_HOOKS=1
start_flashd --config "$T/flashd.conf" --timing off

# ---- 1. /metrics -------------------------------------------------------------------------
run_check "promcheck refuses broken expositions" "$PYTHON" "$NBD_CHECKS/promcheck.py" --self-test
"$PYTHON" - "$FLASHD_URI0" <<'PY' || fail "writing to dimm0"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
for i in range(6):
    h.pwrite(os.urandom(1 << 20), i << 20)
h.flush()
h.pread(1 << 20, 0)
h.trim(1 << 20, 8 << 20)
h.shutdown()
PY

# metrics_check WHAT: fetch /metrics and the JSON status; parse strictly; compare
metrics_check() {
	"$PYTHON" - "$NBD_CHECKS" "$FLASHD_CTL" "$1" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
import ctlclient, promcheck
sock, what = sys.argv[2], sys.argv[3]
code, headers, body = ctlclient.request(sock, "GET", "/metrics")
st = ctlclient.get_json(sock, "/v1/status")
assert code == 200, code
ct = headers.get("content-type")
assert ct == "text/plain; version=0.0.4; charset=utf-8", ct
fams = promcheck.parse(body.decode())
n = sum(len(f["samples"]) for f in fams.values())
print("%s: %d families, %d samples, valid" % (what, len(fams), n))
def series(fam, sample=None, **want):
    out = {}
    for name, labels, v in fams[fam]["samples"]:
        if (sample is None or name == sample) and all(labels.get(k) == w for k, w in want.items()):
            out.setdefault(labels["dimm"], []).append((name, labels, v))
    return out
for d in st["dimms"]:
    name = d["name"]
    states = [(l["state"], v) for _, l, v in series("flashd_dimm_state")[name]]
    ones = [s for s, v in states if v == 1]
    assert len(ones) == 1 and sum(v for _, v in states) == 1, states
    assert ones[0] == d["state"], (ones, d["state"])
    att = series("flashd_dimm_attached")[name][0][2]
    assert att == (1 if d["attached"] else 0), (name, att)
    req = {l["op"]: v for _, l, v in series("flashd_dimm_requests_total")[name]}
    for op, v in d["io"]["ops"].items():
        assert req[op] == v, (name, op, req[op], v)
    byt = {l["op"]: v for _, l, v in series("flashd_dimm_request_bytes_total")[name]}
    assert byt["write"] == d["io"]["bytes"]["write"] and byt["read"] == d["io"]["bytes"]["read"], byt
    assert byt["trim"] == d["io"]["bytes"]["trim"], byt
    hist = series("flashd_dimm_request_duration_seconds", "flashd_dimm_request_duration_seconds_count",
                  op="write")[name][0][2]
    assert hist == d["io"]["ops"]["write"], (hist, d["io"]["ops"]["write"])
    if d["attached"]:
        host = {l["dir"]: v for _, l, v in series("flashd_dimm_lifetime_host_bytes")[name]}
        assert host["write"] == d["lifetime"]["host_write_bytes"], host
        assert host["read"] == d["lifetime"]["host_read_bytes"], host
        nand = {l["dir"]: v for _, l, v in series("flashd_dimm_lifetime_nand_bytes")[name]}
        assert nand["write"] == d["lifetime"]["nand_write_bytes"], nand
        cap = series("flashd_dimm_capacity_bytes")[name][0][2]
        assert cap == d["format"]["capacity_bytes"], cap
        wa = series("flashd_dimm_write_amplification")[name][0][2]
        assert abs(wa - d["stats"]["write_amplification"]) < 1e-3, wa
        free = {l["kind"]: v for _, l, v in series("flashd_dimm_blocks")[name]}
        assert free["free"] == d["stats"]["blocks_free"], free
        res = series("flashd_dimm_reserves_ratio")[name][0][2]
        assert abs(res * 100 - d["stats"]["reserve_percent"]) < 1e-3, res
        # no "total" beside its parts: the kinds of blocks add up to all of them
        assert "total" not in free and sum(free.values()) == d["stats"]["blocks_total"], free
        assert free["bad_grown"] + free["bad_factory"] == d["stats"]["blocks_bad"], free
        # the thermal state as one series per state
        th = {l["state"]: v for _, l, v in series("flashd_dimm_thermal_state")[name]}
        assert sorted(th) == ["ok", "stopped", "throttled"] and sum(th.values()) == 1, th
        assert th[d["thermal"]] == 1, (th, d["thermal"])
        print("  %s: %s, host written %d, read %d, %d write requests, WA %.3f, %d free blocks" % (
            name, ones[0], host["write"], host["read"], req["write"], wa, free["free"]))
    else:
        assert name not in series("flashd_dimm_capacity_bytes"), "FTL figures of a detached ioDimm"
        print("  %s: %s, no FTL figures" % (name, ones[0]))
    conn = series("flashd_dimm_connections")[name][0][2]
    assert conn == d["connections"], conn
    # health: one series per state, 1 for the status's; a reason series per reason
    hs = {l["state"]: v for _, l, v in series("flashd_dimm_health")[name]}
    assert sorted(hs) == ["degraded", "failed", "ok", "warning"] and sum(hs.values()) == 1, hs
    assert hs[d["health"]["state"]] == 1, (hs, d["health"])
    reasons = sorted(l["reason"] for _, l, v in series("flashd_dimm_health_reason").get(name, []) if v == 1)
    assert reasons == sorted(r["reason"] for r in d["health"]["reasons"]), (reasons, d["health"])
server = {l["state"]: v for _, l, v in fams["flashd_health"]["samples"]}
assert server[st["health"]["state"]] == 1 and sum(server.values()) == 1, (server, st["health"])
# the standard process metrics
proc = {n: v for n, l, v in sum((fams[f]["samples"] for f in fams if f.startswith("process_")), [])}
for m in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
          "process_open_fds", "process_max_fds", "process_start_time_seconds"):
    assert m in proc, (m, sorted(proc))
start = fams["flashd_start_time_seconds"]["samples"][0][2]
assert abs(proc["process_start_time_seconds"] - start) < 2, (proc, start)
assert 0 < proc["process_open_fds"] < proc["process_max_fds"] and proc["process_resident_memory_bytes"] > 1 << 20, proc
d0 = ctlclient.dimm(st, "dimm0")
if what == "attached":
    assert d0["io"]["ops"]["write"] == 6 and d0["io"]["bytes"]["write"] == 6 << 20, d0["io"]
    assert d0["io"]["bytes"]["trim"] == 1 << 20, d0["io"]
    assert d0["lifetime"]["host_write_bytes"] == 6 << 20, d0["lifetime"]
PY
}
run_check "/metrics against the status (attached)" metrics_check attached
"$FLASHCTL" detach dimm1 --control "$FLASHD_CTL" >/dev/null || fail "detach dimm1"
run_check "/metrics against the status (dimm1 detached)" metrics_check detached
"$FLASHCTL" attach dimm1 --control "$FLASHD_CTL" >/dev/null || fail "attach dimm1"
curl -sf --unix-socket "$FLASHD_CTL" http://localhost/metrics >"$T/metrics.txt" || fail "curl /metrics"
run_check "curl /metrics | promcheck" "$PYTHON" "$NBD_CHECKS/promcheck.py" "$T/metrics.txt"
# Prometheus' own checker too (from Debian's prometheus package, put in
# build/tools by scripts/deps.sh check), lint warnings included: exit 0 only
# for a clean exposition.  Without it the test ends as a skip (under make
# check: fails)
PATH=$top/build/tools:$PATH
if part_requires "promtool check metrics" promtool; then
	run_check "promtool check metrics" sh -c 'promtool check metrics <"$1"' sh "$T/metrics.txt"
	# and it can fail: a counter without _total is a lint problem
	printf '# HELP x_bytes b\n# TYPE x_bytes counter\nx_bytes 1\n' >"$T/bad-metrics.txt"
	promtool check metrics <"$T/bad-metrics.txt" >/dev/null 2>&1 && fail "promtool accepts a counter without _total"
fi
checks_passed || fail "/metrics"
ok "/metrics: valid exposition, figures equal the status"

# ---- 2. stats --live -----------------------------------------------------------------
"$FLASHCTL" stats --live --interval 1 --count 4 --json --control "$FLASHD_CTL" dimm0 >"$T/live.json" &
live=$!
track_pid $live
sleep 1.3
"$PYTHON" - "$FLASHD_URI0" <<'PY' || fail "writing during stats --live"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
for i in range(8):
    h.pwrite(os.urandom(2 << 20), (32 << 20) + (i << 21))
h.flush()
h.shutdown()
PY
wait $live || fail "flashctl stats --live failed"
cat "$T/live.json"
"$PYTHON" - "$T/live.json" <<'PY' || fail "stats --live figures"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4 and all(r["dimm"] == "dimm0" for r in rows), rows
wb = sum(r["write_bytes"] for r in rows)
w = sum(r["writes"] for r in rows)
assert wb == 16 << 20 and w == 8, (wb, w)
busy = [r for r in rows if r["writes"]]
assert all(r["write_p50_s"] and 0 < r["write_p50_s"] <= r["write_p99_s"] < 10 for r in busy), busy
assert all(abs(r["write_bytes_per_s"] * r["interval"] - r["write_bytes"]) <= 2e-3 * r["write_bytes"] + 1 for r in rows), rows
assert all(0.9 < r["interval"] < 2 for r in rows), rows
print("ok: 4 samples add up to %d bytes in %d writes" % (wb, w))
PY
"$FLASHCTL" stats --live --interval 0.5 --count 2 --control "$FLASHD_CTL" >"$T/live.txt" || fail "stats --live (text)"
cat "$T/live.txt"
head -n1 "$T/live.txt" | grep -q "r/s.*w/s.*rMB/s.*wMB/s.*r p50.*w p99.*gcpg/s" || fail "stats --live header"
[ "$(grep -c '^[0-9:]* *dimm[01] ' "$T/live.txt")" = 4 ] || fail "stats --live: want 2 rows per sample"
"$FLASHCTL" stats --json --control "$FLASHD_CTL" dimm0 >"$T/since.json" || fail "flashctl stats"
"$PYTHON" -c "
import json, sys
sys.path.insert(0, '$NBD_CHECKS'); import ctlclient
s = json.load(open('$T/since.json'))
d = ctlclient.get_json('$FLASHD_CTL', '/v1/dimms/dimm0')
assert s['writes'] == d['io']['ops']['write'] and s['write_bytes'] == d['io']['bytes']['write'], (s, d['io'])
assert s['writes'] == 14 and s['write_bytes'] == 22 << 20, s
" || fail "flashctl stats (since start)"
rc=0
"$FLASHCTL" stats --live --count 1 --control "$FLASHD_CTL" nosuch 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "no ioDimm 'nosuch'" "$T/err" || fail "stats of an unknown ioDimm"
ok "stats --live: per-interval figures add up to the workload"

# ---- 3. busy ioDimm ------------------------------------------------------------------------
run_check "status waiting on a stalled ioDimm holds up nothing else" timeout 60 \
	"$PYTHON" "$NBD_CHECKS/manage_busy.py" stall --ctl "$FLASHD_CTL" --busy "$FLASHD_URI0" \
	--other "$FLASHD_URI1" --flashctl "$FLASHCTL"
grep -q "flashd\[warning\]: dimm0: no answer to a status request within 5 s" "$T/flashd.log" ||
	summary_add "no warning about dimm0 not answering"
cat >"$T/load.fio" <<EOF
[load]
ioengine=nbd
uri=$FLASHD_URI0
rw=randwrite
bs=64k
iodepth=64
size=256m
time_based=1
runtime=10
EOF
(cd "$T" && timeout 60 fio --output="$T/load.out" "$T/load.fio") >"$T/load.err" 2>&1 &
fio_pid=$!
track_pid $fio_pid
sleep 1
run_check "status, metrics, handshakes under a write load" timeout 60 \
	"$PYTHON" "$NBD_CHECKS/manage_busy.py" load --ctl "$FLASHD_CTL" --busy "$FLASHD_URI0" \
	--other "$FLASHD_URI1" --seconds 6
wait $fio_pid || summary_add "fio failed: $(tail -n 3 "$T/load.err")"
grep -E 'WRITE:' "$T/load.out" || true
checks_passed || fail "busy ioDimm"
check_flashd_log

# SIGTERM while control requests wait on a busy ioDimm: each gets its answer
curl -s -o "$T/stall.out" -w '%{http_code}' -X POST -H "X-Flashd-Action: 1" --unix-socket "$FLASHD_CTL" \
	"http://localhost/v1/dimms/dimm0/test-stall?ms=3000" >"$T/stall.code" &
c1=$!
sleep 0.3
curl -s -o "$T/wait.out" -w '%{http_code}' --unix-socket "$FLASHD_CTL" http://localhost/v1/status >"$T/wait.code" &
c2=$!
sleep 0.3
t0=$SECONDS
stop_flashd
wait $c1 $c2 || true
echo "after SIGTERM: stall HTTP $(cat "$T/stall.code"), status HTTP $(cat "$T/wait.code"); exit after $((SECONDS - t0)) s"
[ "$(cat "$T/stall.code")" = 200 ] && grep -q '"ok": true' "$T/stall.out" || fail "the stall got no answer at shutdown"
[ "$(cat "$T/wait.code")" = 200 ] && "$PYTHON" -c "import json; json.load(open('$T/wait.out'))" ||
	fail "the waiting status got no answer at shutdown"
ok "monitoring: metrics, live stats, nothing waits on a busy ioDimm; shutdown answers what waits"

# ---- 4. counters across a crash ---------------------------------------------------
# The FTL's lifetime figures come back after a crash as of its last
# checkpoint: lower than the last scrape saw.  A counter may not do that
# (Prometheus takes any drop for a reset to 0 and counts the whole new value
# as an increase: a spike of the lifetime's bytes), so after a crash every
# counter that went back must hold no more than the new process did since.
restart_flashd
"$FLASHCTL" checkpoint --control "$FLASHD_CTL" dimm0 >/dev/null || fail "checkpoint dimm0"
"$PYTHON" - "$FLASHD_URI0" <<'PY' || fail "writing 8 MiB to dimm0"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(os.urandom(8 << 20), 16 << 20)
h.flush()
h.shutdown()
PY
curl -sf --unix-socket "$FLASHD_CTL" http://localhost/metrics >"$T/before-crash.txt" || fail "curl /metrics"
kill_flashd
restart_flashd
"$PYTHON" - "$FLASHD_URI0" <<'PY' || fail "writing 1 MiB to dimm0 after the crash"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(os.urandom(1 << 20), 0)
h.flush()
h.shutdown()
PY
curl -sf --unix-socket "$FLASHD_CTL" http://localhost/metrics >"$T/after-crash.txt" || fail "curl /metrics"
"$PYTHON" - "$NBD_CHECKS" "$T/before-crash.txt" "$T/after-crash.txt" <<'PY' || fail "a counter went back after the crash"
import sys
sys.path.insert(0, sys.argv[1])
import promcheck
a = promcheck.parse(open(sys.argv[2]).read())
b = promcheck.parse(open(sys.argv[3]).read())
def counters(fams):
    out = {}
    for f in fams.values():
        if f["type"] != "counter":
            continue
        for name, labels, v in f["samples"]:
            out[(name, tuple(sorted(labels.items())))] = v
    return out
ca, cb = counters(a), counters(b)
checked = resets = 0
bad = []
for k, v in cb.items():
    if k not in ca:
        continue
    checked += 1
    if v >= ca[k]:
        continue
    resets += 1
    # a reset: the new value is what this process counted since it started
    # (1 MiB written; a few requests, erases and reads of its own)
    limit = (2 << 20) if k[0].endswith("bytes_total") else 20000
    if v > limit:
        bad.append("%s%s: %g before the crash, %g after" % (k[0], dict(k[1]), ca[k], v))
assert not bad, "counters back to a value they did not count since the restart:\n  " + "\n  ".join(bad)
life = [f for f in b if f.startswith("flashd_dimm_lifetime_")]
assert life and all(b[f]["type"] == "gauge" for f in life), [(f, b[f]["type"]) for f in life]
print("ok: %d counter series compared across the crash, %d reset to what the new process counted; "
      "lifetime figures are gauges (%s)" % (checked, resets, ", ".join(sorted(life))))
PY
ok "counters across a crash: none comes back to a value it did not count since the restart"
stop_flashd
check_flashd_log
