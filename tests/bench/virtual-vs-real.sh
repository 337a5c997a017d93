#!/bin/bash
# tests/bench/virtual-vs-real.sh - does flashctl bench's virtual clock tell
# the truth?  The same preset, format and protocol twice:
#   1. `flashctl bench` on the virtual clock (the FTL and the simulator's
#      timing model, no server, no wall clock);
#   2. flashd serving that preset over NBD with the timing model on, in real
#      time, driven by fio (ioengine=nbd): sequential fill, one pass of 4K
#      random writes, then DURATION s of 4K random writes at QD128.
# Prints both steady-state figures and their ratio.  Takes a few minutes of
# wall time for test-4g (the real-time run is paced by the NAND model);
# run it on a quiet machine: a starved ioDimm thread runs late.
#
#   tests/bench/virtual-vs-real.sh [PRESET] [OP] [DURATION]
#   (defaults: test-4g 20 30)
source "$(dirname "$0")/../functions.sh"

preset=${1:-test-4g}
op=${2:-20}
dur=${3:-30}

command -v fio >/dev/null || fail "fio is needed (scripts/deps.sh bench)"

echo "== virtual clock: flashctl bench --preset $preset --op $op --duration $dur --precondition 1"
"$FLASHCTL" bench --preset "$preset" --op "$op" --duration "$dur" --precondition 1 \
	--json >"$T/virtual.json"
virt=$($PYTHON -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j.get("result", j); print(r["iops"], r["lat_mean_ms"], r["lat_sd_ms"])' "$T/virtual.json")
read -r v_iops v_mean v_sd <<<"$virt"
echo "virtual: $v_iops IOPS, latency mean $v_mean ms, sd $v_sd ms"

cat >"$T/flashd.conf" <<EOF
[server]
timing = on
[dimm dimm0]
preset = $preset
image = dimm0.img
export = dimm0
sector_size = 4096
op = $op
EOF
start_flashd --config "$T/flashd.conf"

bytes=$($PYTHON -c 'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.get_size())' "$FLASHD_URI0")
common=(--ioengine=nbd --uri="$FLASHD_URI0" --name=vr --direct=1 --group_reporting)
echo "== real time: flashd over NBD, $((bytes >> 20)) MiB; sequential fill"
fio "${common[@]}" --rw=write --bs=1M --iodepth=8 --size="$bytes" >"$T/fill.txt"
echo "== real time: one pass of 4K random writes (QD128)"
fio "${common[@]}" --rw=randwrite --bs=4k --iodepth=128 --size="$bytes" --norandommap \
	--randrepeat=0 >"$T/pass.txt"
echo "== real time: $dur s of 4K random writes (QD128)"
fio "${common[@]}" --rw=randwrite --bs=4k --iodepth=128 --size="$bytes" --norandommap \
	--randrepeat=0 --time_based --runtime="$dur" --output-format=json --output="$T/measure.json" >/dev/null
real=$($PYTHON -c '
import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0]["write"]
print(round(j["iops"]), round(j["clat_ns"]["mean"]/1e6,3), round(j["clat_ns"]["stddev"]/1e6,3))' "$T/measure.json")
read -r r_iops r_mean r_sd <<<"$real"
echo "real: $r_iops IOPS, latency mean $r_mean ms, sd $r_sd ms"
stop_flashd
$PYTHON -c 'import sys; v,r=float(sys.argv[1]),float(sys.argv[2]); print("real / virtual IOPS: %.3f (%+.1f %%)" % (r/v, (r/v-1)*100))' "$v_iops" "$r_iops"
