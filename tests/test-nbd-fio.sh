#!/bin/bash
# timeout: 400
# fio's nbd engine (one NBD connection per job) with verify=crc32c against
# both exports, over TCP and the unix socket: 4 jobs each at iodepth 1, 8
# and 32, random writes then verification, random read/write mixes with
# verification, mixed block sizes; then once more with the simulated NAND
# timing on (800 us programs: completions come late and out of order).
# Every job must finish without errors or verify failures, within a time
# limit (a stalled connection fails the test).
source "$(dirname "$0")/functions.sh"

# run_fio NAME URI JOBOPTIONS...: 4 jobs on disjoint 48 MiB areas
run_fio() {
	local name=$1 uri=$2 rc=0
	shift 2
	{
		cat <<EOF
[global]
ioengine=nbd
uri=$uri
numjobs=4
size=48m
offset_increment=48m
verify=crc32c
verify_fatal=1
verify_dump=0
do_verify=1
verify_state_save=0
group_reporting=0
EOF
		echo "[$name]"
		printf '%s\n' "$@"
	} >"$T/$name.fio"
	local t0=$EPOCHREALTIME
	# (in $T: fio drops state files into its working directory)
	(cd "$T" && timeout 150 fio --output-format=json --output="$T/$name.json" "$T/$name.fio") \
		>"$T/$name.out" 2>&1 || rc=$?
	if [ $rc -ne 0 ]; then
		cat "$T/$name.fio" "$T/$name.out"
		[ $rc -eq 124 ] && fail "fio $name did not finish within 150 s (stalled NBD connection?)"
		fail "fio $name failed (exit $rc)"
	fi
	"$PYTHON" - "$T/$name.json" "$name" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" <<'PY' ||
import json, sys
d = json.load(open(sys.argv[1]))
jobs = d["jobs"]
assert len(jobs) == 4, "%d jobs reported" % len(jobs)
w = r = 0
for j in jobs:
    assert j["error"] == 0, "job %s: error %d" % (j["jobname"], j["error"])
    w += j["write"]["io_bytes"]
    r += j["read"]["io_bytes"]
    assert j["read"]["io_bytes"] > 0, "job %s read (verified) nothing" % j["jobname"]
if "verify_only" in open(sys.argv[1].replace(".json", ".fio")).read():
    print("ok: fio %-24s %4d MiB verified again (no writes), %.1f s" % (sys.argv[2], r >> 20, float(sys.argv[3])))
else:
    print("ok: fio %-24s %4d MiB written, %4d MiB read+verified, %.1f s" % (
        sys.argv[2], w >> 20, r >> 20, float(sys.argv[3])))
PY
		fail "fio $name: bad result"
}

start_flashd --preset test-1g --timing off

for qd in 1 8 32; do
	run_fio "randwrite-qd$qd-tcp" "$FLASHD_URI0" rw=randwrite bs=4k iodepth=$qd
done
run_fio "randwrite-qd32-unix" "$FLASHD_UNIX_URI1" rw=randwrite bs=4k iodepth=32
run_fio "randwrite-bs-mix-unix" "$FLASHD_UNIX_URI0" rw=randwrite bsrange=4k-128k iodepth=8
run_fio "randrw-qd8-tcp" "$FLASHD_URI1" rw=randrw rwmixread=50 bs=4k iodepth=8 verify_backlog=256
run_fio "randrw-qd32-unix" "$FLASHD_UNIX_URI0" rw=randrw rwmixread=30 bsrange=4k-64k iodepth=32
run_fio "write-seq-1m-tcp" "$FLASHD_URI1" rw=write bs=1m iodepth=4
# the overwrites above live on: both dimms still read back what fio wrote last
# (a job on each verifies its own area again, read-only)
run_fio "reverify-tcp" "$FLASHD_URI1" rw=write bs=1m iodepth=4 verify_only=1
flashd_running
stop_flashd
check_flashd_log

# the same with the NAND timing model on
mv "$T/flashd.log" "$T/flashd-untimed.log"
rm -rf "$FLASHD_STATE"
start_flashd --preset test-1g --timing on
run_fio "timed-randwrite-qd32" "$FLASHD_URI0" rw=randwrite bs=4k iodepth=32 size=8m
run_fio "timed-randrw-qd8-unix" "$FLASHD_UNIX_URI1" rw=randrw bsrange=4k-64k iodepth=8 size=8m

# Latency as clients see it: flashd's mean (/metrics, and stats --live for
# an interval inside the run) against fio's mean completion latency, at QD1
# and QD32 over TCP with the timing model on.  Same order of magnitude:
# within 2x either way (flashd counts from the request's arrival in the
# socket to its reply handed to the kernel; fio adds the network and its
# own turns, which a loaded machine stretches: a check outside the bound is
# measured once more before it fails).
lat_metrics() {
	curl -s --unix-socket "$FLASHD_CTL" http://localhost/metrics >"$1"
}
# lat_measure NAME QD RW: one fio run; exits 1 if a mean is off by over 2x
lat_measure() {
	local name=$1 qd=$2 rw=$3 rc=0
	lat_metrics "$T/$name.m0"
	(cd "$T" && timeout 60 fio --output-format=json --output="$T/$name.json" --name="$name" \
		--ioengine=nbd --uri="$FLASHD_URI0" --rw="$rw" --bs=4k --iodepth="$qd" --size=32m \
		--time_based --runtime=3 --ramp_time=0.5) >"$T/$name.out" 2>&1 &
	local fio_pid=$!
	track_pid $fio_pid
	sleep 1
	"$FLASHCTL" stats --control "$FLASHD_CTL" --live --interval 1.5 --count 1 --json dimm0 \
		>"$T/$name.live"
	wait $fio_pid || rc=$?
	[ $rc -eq 0 ] || { cat "$T/$name.out"; fail "fio $name failed (exit $rc)"; }
	lat_metrics "$T/$name.m1"
	"$PYTHON" - "$T/$name" "${rw#rand}" <<'PY'
import json, re, sys
base, op = sys.argv[1], sys.argv[2]
t = open(base + ".json").read()
job = json.loads(t[t.index("{"):])["jobs"][0]
def metric(path, what):
    pat = re.compile(r'^flashd_dimm_request_duration_seconds_%s\{dimm="dimm0",[^}]*op="%s"\} (\S+)$' % (what, op))
    for line in open(path):
        m = pat.match(line.strip())
        if m:
            return float(m.group(1))
    sys.exit("no request_duration_seconds_%s op=%s in %s" % (what, op, path))
fio_us = job[op]["clat_ns"]["mean"] / 1e3
n = metric(base + ".m1", "count") - metric(base + ".m0", "count")
mean_us = (metric(base + ".m1", "sum") - metric(base + ".m0", "sum")) / n * 1e6
live = json.loads(open(base + ".live").read())
live_us = (live[op + "_mean_s"] or 0) * 1e6
print("%s: fio clat mean %.0f us; flashd /metrics mean %.0f us (x%.2f) over %d, stats --live %.0f us (x%.2f)" % (
    base.rsplit("/", 1)[1], fio_us, mean_us, mean_us / fio_us, n, live_us, live_us / fio_us))
sys.exit(0 if all(fio_us / 2 <= v <= fio_us * 2 for v in (mean_us, live_us)) else 1)
PY
}
lat_check() {
	lat_measure "$@" || lat_measure "$1-again" "$2" "$3" ||
		fail "latency $1: flashd's mean is not within 2x of fio's (twice)"
}
lat_check lat-qd1-write 1 randwrite
lat_check lat-qd32-write 32 randwrite
lat_check lat-qd32-read 32 randread
flashd_running
stop_flashd
check_flashd_log
ok "fio with verify=crc32c passed on both exports"
