#!/bin/bash
# timeout: 300
# Damaged images never come back as a blank disk or as wrong data
# (tests/nbd/image_tool.py does the damage, on a stopped flashd):
#   1. every superblock page of dimm0 damaged: flashd refuses to start
#      (exit 1) with an error naming `flashctl recover`; with
#      --allow-degraded it starts, says it is degraded (status, log
#      warning, its health -> failed at err), serves dimm1 and refuses
#      dimm0; it writes nothing to the image; `flashctl recover
#      --rebuild-superblock` runs on the image while flashd serves dimm1 (a
#      failed ioDimm's image is not held open), and `flashctl attach dimm0`
#      then serves all the data again
#   1b. two bytes of the block table changed (the write pointer of the
#      superblock's block): detected, rebuilt from the pages, reported (by
#      flashctl info as "flashctl: IMAGE: warning: ...", by flashd at
#      warning, naming dimm0), data intact, no format; then the image's
#      header says version 1: flashd upgrades it, a routine line at info
#   2. bytes flipped in three data pages (where `flashctl locate` says the
#      FTL has them): reads of those units fail with EIO, every other unit
#      reads right, crc_errors counts them, the log says so
#   8. a checkpoint map page damaged: rebuilt from the checkpoint's parity
#      (logged), the checkpoint loads; then page 0 of every map and parity
#      block damaged: flashd warns, status shows it, every write is there
source "$(dirname "$0")/functions.sh"

TOOL="$PYTHON $NBD_CHECKS/image_tool.py"
dimms_conf "$T/flashd.conf" dimm0.sector_size=4096
IMG=$T/state/dimm0.img
DATA=$T/data
random_file "$DATA" 24
write_dimms "$T/flashd.conf" "$DATA"

status_field() { # status_field DIMM KEY...: a field of flashctl status --json
	flashd_status | $PYTHON -c '
import json, sys
st = json.load(sys.stdin)
d = next(x for x in st["dimms"] if x["name"] == sys.argv[1])
for k in sys.argv[2:]:
    d = d[k]
print(json.dumps(d))' "$@"
}

# ---- 1: damaged superblock ---------------------------------------------------
n=$($TOOL "$IMG" damage-superblocks) || fail "damaging the superblocks"
ok "damaged $n superblock pages of dimm0"
before=$($TOOL "$IMG" sha256)
rc=0
timeout 60 "$FLASHD" --foreground --state-dir "$T/state" --config "$T/flashd.conf" --timing off \
	--listen "127.0.0.1:$FLASHD_PORT" --unix "$FLASHD_SOCK" 2>"$T/refused.log" || rc=$?
[ $rc -eq 1 ] || fail "flashd with a damaged ioDimm and no --allow-degraded exits $rc, want 1"
grep -q "flashd\[error\]: dimm0: .*flashctl recover" "$T/refused.log" || fail "the refusal does not name flashctl recover:
$(cat "$T/refused.log")"
grep -q "flashd\[error\]: refusing to start: 1 of 2" "$T/refused.log" || fail "no error saying flashd refuses to start"
ok "damaged superblock, default policy: flashd refuses to start (exit 1)"
log_lines=$(wc -l <"$T/flashd.log")
start_flashd --config "$T/flashd.conf" --timing off --allow-degraded
tail -n +$((log_lines + 1)) "$T/flashd.log" >"$T/start1.log"
grep -q "dimm0: formatting" "$T/start1.log" && fail "flashd formatted an image that holds data"
grep -q "flashctl recover" "$T/start1.log" || fail "the refusal does not name flashctl recover:
$(cat "$T/start1.log")"
grep -q "not blank" "$T/start1.log" || fail "the refusal does not say the media holds data"
grep -q "flashd\[warning\]: flashd .* ready, degraded: serving 1 of 2" "$T/start1.log" ||
	fail "the degraded start is not logged as a warning"
nbd_region_is "$FLASHD_URI1" 0 $((24 << 20)) "$DATA" || fail "dimm1 is not served"
nbdinfo "$FLASHD_URI0" >/dev/null 2>&1 && fail "dimm0 is exported although it did not open"
[ "$(status_field dimm0 state)" = '"failed"' ] || fail "status of dimm0: $(status_field dimm0 state), want failed"
[ "$(flashd_status | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["degraded"])')" = True ] ||
	fail "status does not say degraded"
[ "$($TOOL "$IMG" sha256)" = "$before" ] || fail "flashd wrote to the damaged image"
ok "damaged superblock, --allow-degraded: dimm0 refused with the recovery path, image untouched, dimm1 served"

# recovery while flashd serves dimm1
rc=0
"$FLASHCTL" recover "$IMG" >"$T/recover.out" 2>&1 || rc=$?
cat "$T/recover.out"
[ $rc -eq 1 ] || fail "flashctl recover of a damaged image exits $rc, want 1"
grep -q "NONE VALID" "$T/recover.out" || fail "recover does not report the damaged superblock"
grep -q -- "--rebuild-superblock" "$T/recover.out" || fail "recover does not name the rebuild"
"$FLASHCTL" recover "$IMG" --rebuild-superblock || fail "rebuilding the superblock"
"$FLASHCTL" recover "$IMG" --rebuild-superblock >/dev/null 2>&1 &&
	fail "a second rebuild over a valid superblock was accepted"
"$FLASHCTL" attach dimm0 --control "$FLASHD_CTL" || fail "attach dimm0 after the rebuild"
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after the rebuild"
[ "$(flashd_status | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["degraded"])')" = False ] ||
	fail "status still says degraded after the attach"
# nothing of dimm0 was served: its health line is an error, the way back a
# notice (the health monitor looks once a second)
for _ in $(seq 1 50); do
	grep -q "dimm0: health failed -> ok" "$T/flashd.log" && break
	sleep 0.1
done
grep -q "flashd\[error\]: dimm0: health ok -> failed: did not open" "$T/flashd.log" ||
	fail "dimm0's health -> failed is not logged at err: $(grep 'dimm0: health' "$T/flashd.log")"
grep -q "flashd\[notice\]: dimm0: health failed -> ok" "$T/flashd.log" ||
	fail "dimm0's health failed -> ok is not logged at notice: $(grep 'dimm0: health' "$T/flashd.log")"
stop_flashd
start_flashd --config "$T/flashd.conf" --timing off
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after a restart"
stop_flashd
ok "superblock rebuilt by flashctl recover while flashd ran, attached: all data back"

# ---- 1b: block table entry changed ----------------------------------------------
$TOOL "$IMG" set-wp 0 0 || fail "changing the block table"
# an offline look (read-only: repaired in memory) says it as a warning
"$FLASHCTL" info "$IMG" >/dev/null 2>"$T/info-tbl.err" || fail "flashctl info after a block table change: $(cat "$T/info-tbl.err")"
grep -q "^flashctl: $IMG: warning: block table entry of block 0 fails its checksum" "$T/info-tbl.err" ||
	fail "flashctl info does not say 'flashctl: $IMG: warning: block table entry ...': $(cat "$T/info-tbl.err")"
log_lines=$(wc -l <"$T/flashd.log")
start_flashd --config "$T/flashd.conf" --timing off
tail -n +$((log_lines + 1)) "$T/flashd.log" >"$T/start2.log"
grep -q "dimm0: formatting" "$T/start2.log" && fail "flashd formatted after a block table change"
grep -q "flashd\[warning\]: dimm0: $IMG: block table entry of block 0 fails its checksum" "$T/start2.log" ||
	fail "the damaged block table entry is not reported at warning, naming dimm0:
$(cat "$T/start2.log")"
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after the table damage"
stop_flashd
# an image of an older flashd is upgraded: routine, not a warning
$TOOL "$IMG" set-version 1 >/dev/null || fail "setting the image version"
log_lines=$(wc -l <"$T/flashd.log")
start_flashd --config "$T/flashd.conf" --timing off
tail -n +$((log_lines + 1)) "$T/flashd.log" >"$T/start3.log"
grep -q "flashd\[info\]: dimm0: $IMG: upgraded the image to version 2" "$T/start3.log" ||
	fail "the image upgrade is not logged at info, naming dimm0: $(grep -a "upgraded" "$T/start3.log")"
if grep -E 'flashd\[(warning|error|crit|alert|emerg)\]' "$T/start3.log"; then
	fail "warnings when opening an upgraded image (above)"
fi
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after the upgrade"
stop_flashd
ok "block table damage detected, rebuilt from the pages, reported at warning (flashd and flashctl); an image upgrade at info; data intact"

# ---- 2: flipped data bits ------------------------------------------------------------
# units 10, 500 and 3000 (4 KiB each) of dimm0: flashctl locate says where
# the FTL has them, the tool finds the same pages by their spares
"$FLASHCTL" locate "$IMG" $((10 * 4096)) $((500 * 4096)) $((3000 * 4096)) >"$T/locate.txt" ||
	fail "flashctl locate: $(cat "$T/locate.txt")"
$TOOL "$IMG" flip-units 10 500 3000 >"$T/flip.txt" || fail "flipping data pages"
cat "$T/locate.txt" "$T/flip.txt"
for u in 10 500 3000; do
	a=$(sed -n "s/^$((u * 4096)): unit $u, die [0-9]*, block [0-9]*, page [0-9]*, NAND address \([0-9]*\)$/\1/p" "$T/locate.txt")
	[ -n "$a" ] && grep -qx "unit $u: page $((a / 4096)) flipped" "$T/flip.txt" ||
		fail "unit $u: flashctl locate and the image's spares disagree"
done
rc=0
"$FLASHCTL" locate "$IMG" $((30 << 20)) >"$T/locate.txt" || rc=$?
[ $rc = 1 ] && grep -q "unit 7680 is not mapped" "$T/locate.txt" ||
	fail "flashctl locate of an unwritten unit: exit $rc, $(cat "$T/locate.txt")"
start_flashd --config "$T/flashd.conf" --timing off
"$PYTHON" - "$FLASHD_URI0" "$DATA" <<'PY' || fail "reads of flipped units"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
bad = {10, 500, 3000}
for u in range(len(data) // 4096):
    try:
        got = h.pread(4096, u * 4096)
    except nbd.Error as e:
        if u in bad and e.errno == "EIO":
            continue
        sys.exit("unit %d: %s" % (u, e))
    if u in bad:
        sys.exit("unit %d: flipped page returned data instead of EIO" % u)
    if got != data[u * 4096:(u + 1) * 4096]:
        sys.exit("unit %d: wrong data" % u)
print("ok: 3 flipped units read as EIO, %d others intact" % (len(data) // 4096 - 3))
PY
crc=$(dimm_stat dimm0 crc_errors)
[ "$crc" -ge 3 ] || fail "crc_errors is $crc after reading 3 flipped units"
grep -q "fails its data CRC" "$T/flashd.log" || fail "no log line for the CRC failures"
# rewriting the units heals them
qemu-img convert -n -f raw -O raw "$DATA" "$FLASHD_URI0" || fail "rewriting dimm0"
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 after rewriting"
stop_flashd
ok "flipped data: EIO, counted ($crc), logged, never returned"

# ---- 8: damaged checkpoint --------------------------------------------------------------
$TOOL "$IMG" damage-checkpoint-page || fail "damaging a checkpoint page"
log_lines=$(wc -l <"$T/flashd.log")
start_flashd --config "$T/flashd.conf" --timing off
tail -n +$((log_lines + 1)) "$T/flashd.log" >"$T/start3a.log"
grep -q "checkpoint at block .*: 1 l2p pages unreadable, rebuilt from parity" "$T/start3a.log" ||
	fail "a damaged checkpoint page was not rebuilt from parity:
$(cat "$T/start3a.log")"
[ "$(status_field dimm0 checkpoint_damaged)" = false ] || fail "a checkpoint rebuilt from parity is shown damaged"
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after the checkpoint page rebuild"
stop_flashd
ok "damaged checkpoint page: rebuilt from the checkpoint's parity, logged, data intact"
$TOOL "$IMG" damage-checkpoint || fail "damaging the checkpoint"
log_lines=$(wc -l <"$T/flashd.log")
start_flashd --config "$T/flashd.conf" --timing off
tail -n +$((log_lines + 1)) "$T/flashd.log" >"$T/start3.log"
grep -q "checkpoint at block .* is damaged" "$T/start3.log" || fail "no warning for the damaged checkpoint:
$(cat "$T/start3.log")"
grep -q "warning" "$T/start3.log" || fail "the damaged checkpoint is not logged as a warning"
[ "$(status_field dimm0 checkpoint_damaged)" = true ] || fail "status does not show the damaged checkpoint"
status_field dimm0 notes | grep -q "damaged" || fail "status notes do not explain the damage"
nbd_region_is "$FLASHD_URI0" 0 $((24 << 20)) "$DATA" || fail "dimm0 data after the checkpoint damage"
stop_flashd
start_flashd --config "$T/flashd.conf" --timing off
[ "$(status_field dimm0 checkpoint_damaged)" = false ] || fail "a fresh checkpoint was not written"
stop_flashd
check_flashd_log "$T/start3.log"
ok "damaged checkpoint: warned, shown in status, map rebuilt from the log, data intact"
