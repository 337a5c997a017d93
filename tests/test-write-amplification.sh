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
# And the bench's steady-state verdict (the SNIA PTS-E rule over the last
# five rounds, each host I/O of a fifth of the span): reached after the
# default two passes of preconditioning (uniform random writes on a quarter
# of test-1g, 5 rounds measured), not reached on a fresh device whose
# rounds fall when garbage collection starts, and not with fewer than five.
# --precondition steady writes rounds until the rule holds (after the
# fill's fast first round, 6 on that quarter of test-1g), and gives up at
# --max-rounds saying so, and still measures.
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

small=(--preset test-1g --blocks-per-die 64)
"$FLASHCTL" bench "${small[@]}" --duration 45 --json >"$T/steady.json"
"$FLASHCTL" bench "${small[@]}" --duration 45 >"$T/steady.txt"
"$FLASHCTL" bench "${small[@]}" --fresh --qd 32 --duration 20 --json >"$T/falling.json"
"$FLASHCTL" bench "${small[@]}" --fresh --qd 32 --duration 20 >"$T/falling.txt"
"$FLASHCTL" bench --preset test-1g --workload randwrite --qd 32 --fresh --duration 3 \
	>"$T/fresh.txt"
$PYTHON - "$T" <<'PY'
import json, re, sys
d = sys.argv[1]
def load(name):
    r = json.load(open(f"{d}/{name}.json"))
    last = open(f"{d}/{name}.txt").read().rstrip("\n").split("\n")[-1]
    print(f"{name}: {last.strip()}")
    return r, last
def rule(y):
    # the PTS-E rule, written out again: excursion and slope x 4 over the mean
    m = sum(y) / 5
    slope = sum((x - 2) * v for x, v in enumerate(y)) / 10
    return 100 * (max(y) - min(y)) / m, 100 * slope * 4 / m
s, line = load("steady")
if not s["steady_state"] or s["steady_rounds"] < 5:
    sys.exit(f"steady: not reached after two passes: {s}")
exc, slope = rule(s["steady_round_iops"])
if abs(exc - s["steady_excursion_pct"]) > 0.5 or abs(slope - s["steady_slope_pct"]) > 0.5:
    sys.exit(f"steady: excursion {s['steady_excursion_pct']} %, slope {s['steady_slope_pct']} % "
             f"are not those of {s['steady_round_iops']}: {exc:.2f} %, {slope:.2f} %")
if exc > 20 or abs(slope) > 10:
    sys.exit(f"steady: reached with excursion {exc:.1f} %, slope {slope:.1f} %")
a, b = s["steady_first_round"], s["steady_rounds"]
want = (f"  steady state: reached (rounds {a}-{b}: mean {s['steady_mean_iops']} IOPS, "
        f"excursion {s['steady_excursion_pct']:.1f} %, slope {s['steady_slope_pct']:.1f} %)")
if line != want:
    sys.exit(f"steady: the text's last line is\n{line}\nnot\n{want}")
if s["round_bytes"] != s["span_bytes"] // 5:
    sys.exit(f"steady: a round of {s['round_bytes']} bytes, not a fifth of the span")
f, line = load("falling")
y = f["steady_round_iops"]
if f["steady_state"] or f["steady_rounds"] < 5 or not y or y[-1] > 0.8 * y[0]:
    sys.exit(f"falling: the first pass's end on a fresh device judged steady or not falling: {f}")
exc, slope = rule(y)
if exc <= 20 or slope >= -10 or abs(slope - f["steady_slope_pct"]) > 0.5:
    sys.exit(f"falling: excursion {exc:.1f} %, slope {slope:.1f} % of {y}, bench's {f}")
if not re.fullmatch(r"  steady state: NOT reached \(rounds %d-%d: %s IOPS, mean %d, excursion "
                    r"[0-9.]+ %%, slope -[0-9.]+ %%: excursion above 20 %%, slope beyond 10 %%\)"
                    % (f["steady_first_round"], f["steady_rounds"], " ".join(map(str, y)),
                       f["steady_mean_iops"]), line):
    sys.exit(f"falling: the text's last line: {line}")
f = json.load(open(f"{d}/fresh.json"))
line = open(f"{d}/fresh.txt").read().rstrip("\n").split("\n")[-1]
print(f"fresh, 3 s: {line.strip()}")
if f["steady_state"] or f["steady_rounds"] >= 5 or f["steady_excursion_pct"] is not None:
    sys.exit(f"fresh, 3 s: {f['steady_rounds']} rounds judged")
if not re.fullmatch(r"  steady state: NOT reached \(%d rounds?, the rule needs 5; .*\)"
                    % f["steady_rounds"], line):
    sys.exit(f"fresh, 3 s: the text's last line: {line}")
PY
ok "flashctl bench judges steady state by the SNIA PTS-E rule"

"$FLASHCTL" bench "${small[@]}" --precondition steady --duration 45 --json >"$T/pre.json"
"$FLASHCTL" bench "${small[@]}" --precondition steady --max-rounds 5 --duration 1 --json \
	>"$T/cap.json"
"$FLASHCTL" bench "${small[@]}" --precondition steady --max-rounds 5 --duration 1 >"$T/cap.txt"
$PYTHON - "$T" <<'PY'
import json, re, sys
d = sys.argv[1]
p, c, n = (json.load(open(f"{d}/{x}.json")) for x in ("pre", "cap", "steady"))
line = [l for l in open(f"{d}/cap.txt") if "preconditioning" in l]
print(f"--precondition steady: {p['precondition_steady_rounds']} rounds, "
      f"{p['precondition_passes']} passes, {p['precondition_steady_round_iops']} IOPS; "
      f"--max-rounds 5: {''.join(line).strip()}")
if n["precondition_until_steady"] or n["precondition_steady_state"] is not None:
    sys.exit(f"--precondition 2: preconditioned until steady? {n}")
if not p["precondition_until_steady"] or not p["precondition_steady_state"]:
    sys.exit(f"--precondition steady: not reached: {p}")
y, rounds = p["precondition_steady_round_iops"], p["precondition_steady_rounds"]
m = sum(y) / 5
exc = 100 * (max(y) - min(y)) / m
slope = 100 * 4 * sum((x - 2) * v for x, v in enumerate(y)) / 10 / m
if not 5 <= rounds < 25 or exc > 20 or abs(slope) > 10 or p["precondition_steady_first_round"] != rounds - 4:
    sys.exit(f"--precondition steady: {rounds} rounds, {y}: excursion {exc:.1f} %, slope {slope:.1f} %")
if not rounds / 5 <= p["precondition_passes"] < rounds / 5 + 0.02:
    sys.exit(f"--precondition steady: {p['precondition_passes']} passes for {rounds} rounds")
if not p["steady_state"] or p["failed"]:
    sys.exit(f"--precondition steady: the measurement after it: {p}")
if c["precondition_steady_state"] or c["precondition_steady_rounds"] != 5 or c["iops"] <= 0:
    sys.exit(f"--max-rounds 5: {c}")
if not (len(line) == 1 and re.fullmatch(
        r"  preconditioning to steady state: 5 rounds \(the cap\), 1\.00 passes: NOT reached "
        r"\(rounds 1-5: %s IOPS, mean %d, .*\)\n" % (" ".join(map(str, c["precondition_steady_round_iops"])),
                                                   c["precondition_steady_mean_iops"]), line[0])):
    sys.exit(f"--max-rounds 5: the text says {line}")
PY
rc=0
"$FLASHCTL" bench "${small[@]}" --precondition steady --fresh --duration 1 2>"$T/err" || rc=$?
[ $rc -eq 1 ] && grep -q -- "--fresh skips the preconditioning" "$T/err" ||
	fail "bench --precondition steady --fresh: status $rc, $(cat "$T/err")"
ok "flashctl bench --precondition steady"
