#!/bin/bash
# timeout: 900
# Write amplification of uniform random 4 KiB overwrites after a full fill
# must match greedy garbage collection's analytic value (brief.md section 4:
# 2.69 at 20 % over-provisioning, 1.61 at 36 %) within 10 %.
# On test-4g (16 dies: 2 rows of 8-die bands): GC collects whole bands, and
# on a device as small as test-1g (2 rows of 4 dies, 512 bands) the band
# granularity and the fixed reserves (open bands, checkpoint room) cost
# more than 10 % (3.03 at 20 %), which says nothing about a real card.
# Also flashctl bench's starts (make bench-timing compares a fresh flashd
# with them): --fresh writes on a freshly formatted device (no fill, no
# preconditioning: no garbage collection, write amplification 1), --span
# fills only what the reads then read (so they reach the NAND), and --fresh
# with a read workload is refused.
source "$(dirname "$0")/functions.sh"

check_wa() {
	local op=$1 expect=$2
	"$FLASHCTL" simulate --preset test-4g --op "$op" --workload uniform --passes 10 --ram --json \
		>"$T/wa$op.json"
	$PYTHON - "$T/wa$op.json" "$expect" "$op" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
expect, op = float(sys.argv[2]), sys.argv[3]
wa = r["write_amplification"]
dev = abs(wa - expect) / expect
print(f"OP {op}%: write amplification {wa:.3f}, analytic greedy {expect} "
      f"(deviation {dev*100:.1f}%), {r['ops_per_sec']:.0f} writes/s")
if r["host_pages_written"] < 10 * r["capacity_bytes"] // 4096 * 0.99:
    sys.exit("too few host writes")
if dev > 0.10:
    sys.exit(f"write amplification {wa:.3f} is not within 10% of {expect}")
PY
}

check_wa 20 2.69
check_wa 36 1.61
ok "write amplification within 10 % of the greedy model"

"$FLASHCTL" bench --preset test-1g --workload randwrite --qd 32 --fresh --duration 3 --json \
	>"$T/fresh.json"
"$FLASHCTL" bench --preset test-1g --workload randread --qd 1 --span 64M --precondition 0 \
	--duration 1 --json >"$T/span.json"
$PYTHON - "$T/fresh.json" "$T/span.json" <<'PY'
import json, sys
f, s = (json.load(open(p)) for p in sys.argv[1:])
print(f"bench --fresh: {f['iops']} IOPS, write amplification {f['write_amplification']}; "
      f"--span 64M: {s['iops']} reads/s, mean {s['lat_mean_ms']} ms")
if not f["fresh"] or f["precondition_passes"] != 0 or f["span_bytes"] != f["capacity_bytes"]:
    sys.exit("--fresh: not a fresh run of the whole capacity")
if f["failed"] or f["iops"] <= 0 or not 0.8 < f["write_amplification"] < 1.2:
    sys.exit("--fresh: write amplification %.3f: not the first pass" % f["write_amplification"])
if s["fresh"] or s["span_bytes"] != 64 << 20 or s["failed"] or s["iops"] <= 0:
    sys.exit("--span 64M: span %d" % s["span_bytes"])
# a read that reaches the NAND takes at least tR (60 us): unfilled, 0
if s["lat_mean_ms"] < 0.060:
    sys.exit("--span 64M: reads of %.3f ms did not reach the NAND" % s["lat_mean_ms"])
PY
rc=0
"$FLASHCTL" bench --preset test-1g --workload randread --fresh --duration 1 2>"$T/err" || rc=$?
[ $rc -eq 1 ] && grep -q -- "--fresh needs a write workload" "$T/err" ||
	fail "bench --fresh --workload randread: status $rc, $(cat "$T/err")"
ok "flashctl bench --fresh and --span"
