#!/bin/bash
# tests/bench/start-and-checkpoint.sh - flashd's start, restart and
# checkpoints in real time, over NBD, with the NAND timing model on: the
# default simulated ioDrive Duo (two 320 GiB iodimm-mlc-320 ioDimms).
#   1. first start (formats both images) and a clean restart: seconds until
#      flashd is ready (both exports open, pidfile written);
#   2. DURATION s of 4K random writes on dimm0 at 128 in flight (fio,
#      ioengine=nbd, 8 connections x QD16, the reviewers' 16 x 16 over two
#      ioDimms): the automatic checkpoints that commit meanwhile (sampled from
#      the status every 0.5 s) and fio's latency: max, p99.9, and the largest
#      per-250-ms maximum in the windows around each checkpoint; flashd's own
#      view: the longest write from parsed to answered, the longest FTL turn;
#   3. `flashctl checkpoint dimm0`, GIB GiB of 1 MiB sequential writes, SIGKILL:
#      seconds until a restart is ready, and the pages it replayed;
#   4. a clean stop (both checkpoints) and a clean start.
# Run it on a quiet machine: a starved ioDimm thread runs late.  The sparse images
# in $TMPDIR grow by what is programmed: ~4 KiB per write of step 2 plus GIB
# (60-70k IOPS for 240 s: ~75 GiB; RATE_IOPS=37000: ~45 GiB); a full disk
# fails the ioDimm (ENOSPC) and the run.  KEEP_LOGS=DIR keeps fio's
# per-250-ms latency logs, the checkpoint samples and flashd's log.
#
# RATE_IOPS=N caps step 2's writes at N IOPS in all (fio's rate_iops), so
# that flashd and fio leave CPU to spare and what remains of a write's
# latency is flashd's, not a starved virtual machine's.
#
#   [FLASHD_CONF=FILE] [FLASHD_STATE=DIR] [KEEP_LOGS=DIR] [RATE_IOPS=N] \
#   tests/bench/start-and-checkpoint.sh [DURATION] [GIB]     (defaults 240, 7)
source "$(dirname "$0")/../functions.sh"

dur=${1:-240}
gib=${2:-7}
command -v fio >/dev/null || fail "fio is needed (scripts/deps.sh bench)"

secs() { $PYTHON -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$@"; }
ready_time() { # start flashd again; $ready: seconds until it is ready
	local t0 t1
	t0=$(date +%s.%N)
	restart_flashd
	t1=$(date +%s.%N)
	ready=$(secs "$t0" "$t1")
	grep 'opened in' "$T/flashd.log" | tail -2 | sed 's/.*\(dimm[0-9]\): .*\(opened in .*\))$/  \1: \2)/'
}

# FLASHD_CONF=FILE: that configuration instead of the embedded Duo (e.g. a
# smaller checkpoint_interval, images on tmpfs with FLASHD_STATE=DIR)
t0=$(date +%s.%N)
if [ -n "${FLASHD_CONF:-}" ]; then start_flashd --config "$FLASHD_CONF"; else start_flashd; fi
echo "first start (format of both 320 GiB images): ready in $(secs "$t0" "$(date +%s.%N)") s"
t0=$(date +%s.%N)
stop_flashd
echo "clean stop of the empty Duo: $(secs "$t0" "$(date +%s.%N)") s"
ready_time
echo "clean start of the empty Duo: ready in $ready s"

# ---- 2. random writes across automatic checkpoints --------------------------
# one process samples dimm0's checkpoint count every 0.5 s (a Python start
# per sample took ~10 % of a core from the two that flashd and fio share)
$PYTHON -u - "$FLASHCTL" "$FLASHD_CTL" >"$T/cp.log" <<'EOF' &
import json, subprocess, sys, time
while True:
    try:
        out = subprocess.run([sys.argv[1], "status", "--control", sys.argv[2], "--json"],
                             capture_output=True, timeout=5).stdout
        n = [d for d in json.loads(out)["dimms"] if d["name"] == "dimm0"][0]["stats"]["checkpoints"]
    except Exception:
        n = -1
    print("%.6f %d" % (time.time(), n))
    time.sleep(0.5)
EOF
sampler=$!
track_pid "$sampler"
rate=()
[ -z "${RATE_IOPS:-}" ] || rate=(--rate_iops=$((RATE_IOPS / 8)) --rate_process=poisson)
fio_t0=$(date +%s.%N)
fio "${rate[@]}" --name=cp --ioengine=nbd --uri="$FLASHD_URI0" --direct=1 --rw=randwrite --bs=4k \
	--iodepth=16 --numjobs=8 --group_reporting --norandommap --randrepeat=0 \
	--time_based --runtime="$dur" --write_lat_log="$T/lat" --log_avg_msec=250 \
	--log_max_value=1 --output-format=json --output="$T/fio.json" >/dev/null || fail "fio failed"
kill "$sampler" 2>/dev/null || true
flashd_status >"$T/status.json"
[ -z "${KEEP_LOGS:-}" ] || cp "$T"/lat_lat.*.log "$T/cp.log" "$T/fio.json" "$T/status.json" "$KEEP_LOGS"/
wait "$sampler" 2>/dev/null || true
$PYTHON - "$T/fio.json" "$T/cp.log" "$fio_t0" "$T" "$T/status.json" <<'EOF'
import glob, json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["write"]
t0 = float(sys.argv[3])
pct = j["clat_ns"].get("percentile", {})
p999 = pct.get("99.900000", 0) / 1e6
print("random 4K writes, 128 in flight: %d IOPS, latency mean %.2f ms, sd %.2f ms, p99.9 %.1f ms, max %.1f ms"
      % (j["iops"], j["lat_ns"]["mean"] / 1e6, j["lat_ns"]["stddev"] / 1e6, p999, j["lat_ns"]["max"] / 1e6))
# checkpoint commits: when the counter moved (relative to fio's start)
commits, prev = [], None
for line in open(sys.argv[2]):
    t, n = line.split()
    n = int(n)
    if n < 0:
        continue
    if prev is not None and n > prev:
        commits.append(float(t) - t0)
    prev = n
# per-250-ms maxima of every job (ms since each job's start), merged
win = {}
for f in glob.glob(sys.argv[4] + "/lat_lat.*.log"):
    for line in open(f):
        ms, ns = line.split(",")[:2]
        k = int(ms) // 250
        win[k] = max(win.get(k, 0), int(ns) / 1e6)
print("automatic checkpoints committed during the run: %d (at %s s)"
      % (len(commits), ", ".join("%.1f" % c for c in commits) or "-"))
near = set()
for c in commits:
    # a checkpoint of a full map programs ~82k pages: look 10 s back
    ks = [k for k in win if c - 10 <= k * 0.25 <= c + 0.75]
    near.update(ks)
    m = max((win[k] for k in ks), default=0)
    print("  checkpoint at %.1f s: max write latency in [-10 s, +0.75 s]: %.1f ms" % (c, m))
far = sorted((win[k] for k in win if k not in near and k >= 8), reverse=True)
if far:
    print("  elsewhere (after the first 2 s): max %.1f ms; 250-ms windows with a write over 50 ms: "
          "%d of %d" % (far[0], sum(1 for v in far if v > 50), len(far)))
if not commits:
    print("  no checkpoint committed: run longer (an automatic one follows ~16 GiB of NAND writes)")
# flashd's own view since this start (the run's writes only): a write's
# time from parsed to answered, and the longest FTL turn on the ioDimm's
# thread (no socket is read or written meanwhile)
io = [d for d in json.load(open(sys.argv[5]))["dimms"] if d["name"] == "dimm0"][0]["io"]
lat, bounds = io["latency"]["write"]["buckets"], io["latency"]["bucket_bounds_ns"]
top = max((i for i, n in enumerate(lat) if n), default=0)
print("  in flashd: every write answered within %s ms of being parsed (%d over 10 ms); "
      "longest FTL turn %.1f ms (%d over 10 ms)"
      % ("%g" % (bounds[top] / 1e6) if top < len(bounds) else "> %g" % (bounds[-1] / 1e6),
         sum(n for i, n in enumerate(lat) if i and bounds[i - 1] >= 10e6),
         io["ftl_turn"]["max_ns"] / 1e6, io["ftl_turn"]["over_10ms"]))
EOF

# ---- 3. restart after SIGKILL with GIB GiB since the last checkpoint --------
"$FLASHCTL" checkpoint --control "$FLASHD_CTL" dimm0 >/dev/null
fio --name=seq --ioengine=nbd --uri="$FLASHD_URI0" --direct=1 --rw=write --bs=1M --iodepth=8 \
	--size="${gib}g" --output-format=json --output="$T/seq.json" >/dev/null
kill_flashd
ready_time
r=$ready
rep=$(grep 'dimm0:.*unclean shutdown' "$T/flashd.log" | tail -1 | sed -n 's/.*(\([0-9]*\) pages replayed[;)].*/\1/p')
echo "restart after SIGKILL with $gib GiB written since the last checkpoint: ready in $r s ($rep pages replayed on dimm0)"

# ---- 4. clean stop and start with data ---------------------------------------
t0=$(date +%s.%N)
stop_flashd
echo "clean stop: $(secs "$t0" "$(date +%s.%N)") s"
ready_time
echo "clean start: ready in $ready s"
stop_flashd
[ -z "${KEEP_LOGS:-}" ] || cp "$T/flashd.log" "$KEEP_LOGS"/
