#!/bin/bash
# timeout: 600
# Flashback parity and run-time faults over NBD (issue 11):
#   1. flashctl inject is refused while [server] fault_injection is off, and
#      with bad arguments;
#   2. dimm0 (parity_width = 1): fio with verify=crc32c writes and verifies
#      while `flashctl inject dimm0 die-fail 5` kills a die mid-run: no
#      verify error; status shows the dead die and the rebuild completing;
#      everything fio wrote verifies again, and again after a restart;
#   3. dimm1 (parity_width = 1): a file written, then two dies of one row
#      fail at once: every 4 KiB unit reads back its data or fails with EIO,
#      never other data; once GC has been through, status counts exactly
#      the units that read EIO as lost and names a range holding them all;
#   3b. dimm2 (no parity): a file written, one die fails: every unit reads
#      its data or EIO, never other data; writes go on; after GC status
#      counts exactly the EIO units as lost and says the die failed;
#   4. temperature: 80 C -> status says writes are throttled; 90 C ->
#      stopped: a write waits until the device has cooled below 75 C, then
#      completes, with its data; idle (no I/O) at 80 C, status alone
#      sees the device cool and leave the throttle; bad-block and bit-errors injections are
#      taken and the data still verifies;
#   5. at 150 C with a write held (the device needs a minute to cool),
#      `flashctl detach` and SIGTERM finish within shutdown_timeout (2 s)
#      plus a little, giving the held write up; data flushed before reads
#      back after attach, and after a restart (fio's data verifies).
#   6. the log: every FTL line, and every line at notice level or above
#      but the server's own, names its ioDimm; each fault's line is at its
#      priority (a die rebuilt from parity and a thermal stop warnings,
#      lost data errors saying what to do, a retired bad block a
#      notice), and the error-level lines are only the faults'
#      consequences; the healthy run of 1. logged no warning at all.
# (The exact set of units a second die failure loses is checked in
# tests/unit/t_ftl_parity.c two_dies, where the units' places are known.)
source "$(dirname "$0")/functions.sh"

cat >"$T/off.conf" <<EOF
[dimm dimm0]
preset = test-1g
parity_width = 1
op = 36
EOF
cat >"$T/on.conf" <<EOF
[server]
fault_injection = yes
shutdown_timeout = 2
[dimm dimm0]
preset = test-1g
parity_width = 1
op = 36
[dimm dimm1]
preset = test-1g
parity_width = 1
op = 60
[dimm dimm2]
preset = test-1g
parity_width = 0
op = 36
EOF

# st DIMM KEY: a number from the dimm's status JSON (stats, or top level)
st() {
	flashd_status | $PYTHON -c '
import json, sys
for d in json.load(sys.stdin)["dimms"]:
    if d["name"] == sys.argv[1]:
        v = d.get("stats", {}).get(sys.argv[2], d.get(sys.argv[2]))
        print(v)
        break
' "$1" "$2"
}

# gc_through DIMM URI DIES STRICT: 1 MiB writes past the test data until
# status shows DIES dead dies and GC through their bands (60 s at most);
# STRICT=yes: every write must succeed
gc_through() {
	local dimm=$1 uri=$2 dies=$3 strict=$4
	for _ in $(seq 1 600); do
		if ! qemu-io -f raw -c "write -P 9 $((mib + 2))m 1m" "$uri" >/dev/null 2>&1; then
			[ "$strict" != yes ] || fail "a write to $dimm after its die failed"
		fi
		[ "$(st "$dimm" dies_failed)" = "$dies" ] && [ "$(st "$dimm" rebuild_bands_left)" = 0 ] && break
		sleep 0.1
	done
	[ "$(st "$dimm" dies_failed)" = "$dies" ] ||
		fail "status shows $(st "$dimm" dies_failed) dead dies on $dimm, want $dies"
	[ "$(st "$dimm" rebuild_bands_left)" = 0 ] || fail "GC did not get through the dead dies' bands on $dimm"
}

# ---- 1. refused -------------------------------------------------------------------------
start_flashd --config "$T/off.conf" --timing off
rc=0
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 die-fail 5 >"$T/inj.out" 2>&1 || rc=$?
cat "$T/inj.out"
[ $rc -ne 0 ] || fail "inject succeeded with fault_injection off"
grep -q "fault_injection = yes" "$T/inj.out" || fail "the refusal does not say how to turn it on"
[ "$(st dimm0 dies_failed)" = 0 ] || fail "a refused injection changed something"
[ "$(flashd_status | $PYTHON -c 'import json,sys; print(json.load(sys.stdin)["dimms"][0]["format"]["parity_width"])')" = 1 ] ||
	fail "dimm0 was not formatted with parity (parity_width = 1)"
stop_flashd
ok "inject refused while [server] fault_injection is off; parity_width = 1 formats with parity"
# a healthy run (a fresh image formatted, opened, closed) logs nothing that
# asks for attention (no superblock or checkpoint complaint on a fresh image)
bad=$(grep -E 'flashd\[(warning|error|crit|alert|emerg)\]' "$T/flashd.log" || true)
[ -z "$bad" ] || fail "a healthy run logged at warning level or above:
$bad"
ok "the healthy run logged nothing at warning level or above"

start_flashd --config "$T/on.conf" --timing off
for bad in "dimm0 die-fail 8" "dimm0 bad-block 99999" "dimm0 temperature hot" "dimm0 melt 1" "nosuch die-fail 1"; do
	rc=0
	# shellcheck disable=SC2086
	"$FLASHCTL" inject --control "$FLASHD_CTL" $bad >"$T/bad.out" 2>&1 || rc=$?
	[ $rc -ne 0 ] || fail "'inject $bad' succeeded"
	grep -q . "$T/bad.out" || fail "'inject $bad' failed without a word"
done
ok "bad injections refused with a message ($(head -c 120 "$T/bad.out"))"

# ---- 2. a die fails under fio --------------------------------------------------------------
fio_job() {
	local name=$1
	shift
	cat >"$T/$name.fio" <<EOF
[global]
ioengine=nbd
uri=$FLASHD_URI0
numjobs=4
size=64m
offset_increment=64m
bs=4k
verify=crc32c
verify_fatal=1
verify_dump=0
verify_state_save=0
randseed=1234
[$name]
EOF
	printf '%s\n' "$@" >>"$T/$name.fio"
}
# the writes are rate-limited (4 x 16 MiB/s: at least 8 s of writing) so that the die
# fails mid-run on any machine; the reads that verify are not limited
fio_job write rw=randwrite iodepth=16 do_verify=1 loops=2 rate=,16m
fio_job reverify rw=randwrite iodepth=16 verify_only=1
(cd "$T" && exec fio --output-format=json --output="$T/write.json" "$T/write.fio") >"$T/write.out" 2>&1 &
FIO=$!
track_pid $FIO
sleep 2
kill -0 $FIO 2>/dev/null || { cat "$T/write.out"; fail "fio finished before the die could fail (too fast?)"; }
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 die-fail 5 || fail "inject die-fail 5"
rc=0
timeout 300 tail --pid=$FIO -f /dev/null || fail "fio did not finish within 300 s"
wait $FIO || rc=$?
[ $rc = 0 ] || { cat "$T/write.out"; fail "fio with a die failing mid-run: exit $rc (a verify error?)"; }
"$PYTHON" - "$T/write.json" <<'PY' || fail "fio: bad result"
import json, sys
for j in json.load(open(sys.argv[1]))["jobs"]:
    assert j["error"] == 0, "job %s: error %d" % (j["jobname"], j["error"])
    assert j["read"]["io_bytes"] > 0, "job %s verified nothing" % j["jobname"]
PY
grep -q "fault injected: die 5 failed" "$T/flashd.log" || fail "the injection is not in the log"
for _ in $(seq 1 600); do
	[ "$(st dimm0 dies_failed)" = 1 ] && [ "$(st dimm0 rebuild_bands_left)" = 0 ] && break
	# GC moves data when writes need room or bands are marked: keep it busy
	qemu-io -f raw -c "write -P 7 300m 1m" "$FLASHD_URI0" >/dev/null || fail "a write during the rebuild"
	sleep 0.1
done
[ "$(st dimm0 dies_failed)" = 1 ] || fail "status does not show the dead die"
[ "$(st dimm0 rebuild_bands_left)" = 0 ] || fail "the rebuild did not complete: $(st dimm0 rebuild_bands_left) bands left"
total=$(st dimm0 rebuild_bands_total)
rebuilt=$(st dimm0 parity_rebuilds)
[ "$(st dimm0 lost_units)" = 0 ] || fail "units lost to one dead die: $(st dimm0 lost_units)"
flashd_status_text --all >"$T/status.txt"
grep -q "Flashback: 1 die(s) failed; rebuild complete" "$T/status.txt" || { cat "$T/status.txt"; fail "flashctl status does not show the rebuild"; }
(cd "$T" && fio "$T/reverify.fio") >"$T/reverify.out" 2>&1 || { cat "$T/reverify.out"; fail "the data fio wrote does not verify after the rebuild"; }
ok "die 5 failed under fio (4 jobs, verify=crc32c): no verify error; rebuild of $total bands complete, $rebuilt pages rebuilt from parity, nothing lost; fio's data verifies again"
stop_flashd
start_flashd --config "$T/on.conf" --timing off
(cd "$T" && fio "$T/reverify.fio") >"$T/reverify2.out" 2>&1 || { cat "$T/reverify2.out"; fail "the data does not verify after a restart"; }
ok "after a restart with the die still dead: fio's data verifies"

# ---- 3. two dies of one row ---------------------------------------------------------------
cap=$(flashd_status | $PYTHON -c 'import json,sys; print([d for d in json.load(sys.stdin)["dimms"] if d["name"] == "dimm1"][0]["format"]["capacity_bytes"])')
mib=$((cap / 1048576 - 8))
random_file "$T/data1" "$mib"
qemu-img convert -n -f raw -O raw "$T/data1" "$FLASHD_URI1" || fail "writing dimm1"
# dies 2 and 4: channels 1 and 2 of row 0 (test-1g: 4 channels x 2 dies)
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm1 die-fail 2 || fail "inject die-fail 2"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm1 die-fail 4 || fail "inject die-fail 4"
cat >"$T/units.py" <<'PY'
import sys, nbd
uri, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(path, "rb").read()
h = nbd.NBD()
h.connect_uri(uri)
eio = []
for u in range(len(data) // 4096):
    try:
        b = h.pread(4096, u * 4096)
    except nbd.Error as e:
        if e.errnum != 5:
            sys.exit("unit %d: %s" % (u, e))
        eio.append(u)
        continue
    if b != data[u * 4096:(u + 1) * 4096]:
        sys.exit("unit %d holds other data" % u)
open(out, "w").write("\n".join(map(str, eio)) + "\n")
print(len(eio))
PY
n1=$("$PYTHON" "$T/units.py" "$FLASHD_URI1" "$T/data1" "$T/eio1") || fail "reading dimm1 after two dies failed: $n1"
[ "$n1" -gt 0 ] || fail "two dead dies in one row lost nothing (were they in one row?)"
# writes make the FTL find the dead dies and GC move (or give up) their data
gc_through dimm1 "$FLASHD_URI1" 2 no
n2=$("$PYTHON" "$T/units.py" "$FLASHD_URI1" "$T/data1" "$T/eio2") || fail "reading dimm1 after GC: $n2"
lost=$(st dimm1 lost_units)
first=$(st dimm1 lost_first_unit)
last=$(st dimm1 lost_last_unit)
cmp -s "$T/eio1" "$T/eio2" || fail "the units that read EIO changed between the reads ($n1 then $n2)"
[ "$lost" = "$n2" ] || fail "status counts $lost units lost, $n2 read EIO"
[ "$first" = "$(head -1 "$T/eio2")" ] && [ "$last" = "$(tail -1 "$T/eio2")" ] ||
	fail "status names units $first-$last as lost, the EIOs are $(head -1 "$T/eio2")-$(tail -1 "$T/eio2")"
flashd_status_text --all >"$T/status1.txt"
grep -q "Lost data: $lost units" "$T/status1.txt" || { cat "$T/status1.txt"; fail "flashctl status does not name the lost data"; }
ok "two dies of a row: $n1 of $((mib * 256)) units read EIO, none wrong; after GC status counts $lost lost, units $first-$last, exactly the EIOs"

# ---- 3b. no parity: one die -----------------------------------------------------------------
URI2=nbd://127.0.0.1:$FLASHD_PORT/dimm2
random_file "$T/data2" "$mib"
qemu-img convert -n -f raw -O raw "$T/data2" "$URI2" || fail "writing dimm2"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm2 die-fail 3 || fail "inject die-fail 3 on dimm2"
n1=$("$PYTHON" "$T/units.py" "$URI2" "$T/data2" "$T/eio1") || fail "reading dimm2 after a die failed: $n1"
[ "$n1" -gt 0 ] || fail "a dead die without parity lost nothing"
gc_through dimm2 "$URI2" 1 yes
n2=$("$PYTHON" "$T/units.py" "$URI2" "$T/data2" "$T/eio2") || fail "reading dimm2 after GC: $n2"
cmp -s "$T/eio1" "$T/eio2" || fail "the units that read EIO changed between the reads ($n1 then $n2)"
[ "$(st dimm2 lost_units)" = "$n2" ] || fail "status counts $(st dimm2 lost_units) units lost, $n2 read EIO"
flashd_status_text dimm2 >"$T/status2.txt"
grep -q "Dies failed: 1; no parity" "$T/status2.txt" || { cat "$T/status2.txt"; fail "flashctl status does not show the failed die"; }
qemu-io -f raw -c "write -P 7 0 1m" -c "read -P 7 0 1m" "$URI2" >/dev/null || fail "write and read back on dimm2 after GC"
ok "no parity, die 3 failed: $n1 of $((mib * 256)) units read EIO, none wrong; writes go on; status counts exactly those as lost"

# ---- 4. temperature, bad blocks, bit errors ------------------------------------------------------
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 temperature 80 || fail "inject temperature 80"
qemu-io -f raw -c "write -P 3 0 64k" "$FLASHD_URI0" >/dev/null || fail "a write at 80 C"
[ "$(st dimm0 thermal)" = throttled ] || fail "at 80 C the thermal state is $(st dimm0 thermal)"
t=$(st dimm0 temperature_celsius)
awk -v t="$t" 'BEGIN { exit !(t > 77 && t < 81) }' || fail "status says $t C after 80 C was injected"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 temperature 90 || fail "inject temperature 90"
t0=$EPOCHREALTIME
qemu-io -f raw -c "write -P 4 0 64k" "$FLASHD_URI0" >"$T/hot.out" 2>&1 &
W=$!
track_pid $W
sleep 2
kill -0 $W 2>/dev/null || fail "a write at 90 C completed at once (not held)"
[ "$(st dimm0 thermal)" = stopped ] || fail "at 90 C the thermal state is $(st dimm0 thermal)"
flashd_status_text | grep -q "STOPPED: too hot" || fail "flashctl status does not say it is stopped"
timeout 120 tail --pid=$W -f /dev/null || fail "the held write did not complete within 120 s"
wait $W || { cat "$T/hot.out"; fail "the held write failed"; }
held=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
qemu-io -f raw -c "read -P 4 0 64k" "$FLASHD_URI0" >/dev/null || fail "the held write's data"
grep -q "thermal state throttled -> stopped" "$T/flashd.log" || fail "no log line for the stop"
grep -q "thermal state stopped -> ok" "$T/flashd.log" || fail "no log line for the resume"
ok "temperature: 80 C throttled, 90 C stopped; a write held $held s until below 75 C, then done with its data"
# idle: no I/O at all, status alone sees it cool and leave the throttle
# (status reads the sensor itself: an idle ioDimm must not show 80.0 C and
# "throttled" until some FTL housekeeping runs)
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 temperature 80 || fail "inject temperature 80 (idle)"
[ "$(st dimm0 thermal)" = throttled ] || fail "idle at 80 C the thermal state is $(st dimm0 thermal)"
for _ in $(seq 1 100); do
	[ "$(st dimm0 thermal)" = ok ] && break
	sleep 0.1
done
[ "$(st dimm0 thermal)" = ok ] || fail "an idle ioDimm stays '$(st dimm0 thermal)' at $(st dimm0 temperature_celsius) C 10 s after 80 C"
ok "idle at 80 C: status follows the cooling, $(st dimm0 temperature_celsius) C and back to ok within 10 s with no I/O"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 bad-block 1000 || fail "inject bad-block"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 bit-errors 2000 || fail "inject bit-errors"
(cd "$T" && fio "$T/write.fio") >"$T/write3.out" 2>&1 || { cat "$T/write3.out"; fail "fio with a bad block and bit errors"; }
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 bit-errors 0 || fail "inject bit-errors 0"
grep -q "fault injected: block 1000 gone bad" "$T/flashd.log" || fail "the bad block is not in the log"
ok "bad block and 2000 uncorrectable reads per million: fio writes and verifies; $(st dimm0 parity_rebuilds) pages rebuilt from parity"

# ---- 5. a hot ioDimm does not hold up a detach or a stop -----------------------------------------
# shutdown_timeout = 2 (on.conf); at 150 C the simulated device takes about a minute to
# cool below 75 C, and the write held meanwhile must not hold the detach or the stop with it
held_write() { # a write that the hot dimm0 holds: its qemu-io's pid in HELD
	"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 temperature 150 >/dev/null || fail "inject temperature 150"
	qemu-io -f raw -c "write -P 6 $((300 * 1048576 + 65536)) 64k" "$FLASHD_URI0" >"$T/held.out" 2>&1 &
	HELD=$!
	track_pid $HELD
	sleep 1
	kill -0 $HELD 2>/dev/null || fail "a write at 150 C completed at once (not held): $(cat "$T/held.out")"
}
secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
qemu-io -f raw -c "write -P 5 300m 64k" -c flush "$FLASHD_URI0" >/dev/null || fail "a flushed write before the heat"
held_write
t0=$EPOCHREALTIME
timeout 20 "$FLASHCTL" detach --force --control "$FLASHD_CTL" dimm0 >"$T/detach.out" 2>&1 ||
	fail "detach of the hot dimm0 did not finish within 20 s: $(cat "$T/detach.out")"
took=$(secs_since "$t0")
awk -v t="$took" 'BEGIN { exit !(t < 6) }' || fail "detach of the hot dimm0 took $took s (shutdown_timeout = 2)"
grep -q "dimm0: detach: 1 request(s) held until the device cools given up" "$T/flashd.log" ||
	fail "the log does not say the held request was given up"
"$FLASHCTL" attach --control "$FLASHD_CTL" dimm0 >/dev/null || fail "attach after the hot detach"
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm0 temperature 25 >/dev/null || fail "inject temperature 25"
qemu-io -f raw -c "read -P 5 300m 64k" "$FLASHD_URI0" >/dev/null || fail "the flushed write after the hot detach"
ok "detach at 150 C with a write held: done in $took s, the held write given up, the flushed one there after attach"
held_write
t0=$EPOCHREALTIME
kill -TERM "$FLASHD_PID"
for _ in $(seq 1 200); do
	kill -0 "$FLASHD_PID" 2>/dev/null || break
	sleep 0.1
done
took=$(secs_since "$t0")
kill -0 "$FLASHD_PID" 2>/dev/null && fail "flashd still runs $took s after SIGTERM at 150 C (shutdown_timeout = 2)"
rc=0
wait "$FLASHD_PID" || rc=$?
[ $rc -eq 0 ] || fail "flashd exited with status $rc after SIGTERM at 150 C"
awk -v t="$took" 'BEGIN { exit !(t < 6) }' || fail "the stop at 150 C took $took s (shutdown_timeout = 2)"
grep -q "dimm0: stop: 1 request(s) held until the device cools given up" "$T/flashd.log" ||
	fail "the log does not say the held request was given up at the stop"
grep -q "dimm0: closed cleanly (checkpoint written)" "$T/flashd.log" || fail "dimm0 did not close cleanly"
start_flashd --config "$T/on.conf" --timing off
qemu-io -f raw -c "read -P 5 300m 64k" "$FLASHD_URI0" >/dev/null || fail "the flushed write after the hot stop"
(cd "$T" && fio "$T/reverify.fio") >"$T/reverify3.out" 2>&1 || { cat "$T/reverify3.out"; fail "fio's data does not verify after the hot stop"; }
ok "SIGTERM at 150 C with a write held: flashd exited 0 in $took s; after a restart the flushed data and fio's verify"
stop_flashd

# ---- 6. the log of all this ------------------------------------------------------------------
# every line about an ioDimm's work names it, at whatever level: the FTL's
# lines said "ftl: ..." (or nothing) on a server of three ioDimms.  Lines
# at notice level or above are all about an ioDimm but the server's own
# warning about fault_injection; lines of the FTL's vocabulary (a block,
# die, band, page or unit by number, checkpoints, parity, temperature) at
# any level (the server's "writing checkpoints" at a stop is about them
# all).  The error-level ones are exactly the consequences the faults
# were meant to have (data lost on dimm1 and dimm2), each saying what to
# do; the die rebuilt from parity on dimm0 and the thermal stop, which
# the FTL handles (I/O resumes once it cools), are warnings.
L=$T/flashd.log
named='flashd\[[a-z]+\]: dimm[0-2]: '
unnamed=$({
	grep -E 'flashd\[(notice|warning|error|crit|alert|emerg)\]: ' "$L" | grep -v 'flashd\[warning\]: \[server\] fault_injection = yes'
	grep -E 'flashd\[[a-z]+\]: .*((block|die|band|page|unit)s? [0-9]|checkpoint (at|header)|parity|temperature)' "$L"
} | grep -vE "$named" || true)
[ -z "$unnamed" ] || fail "lines that do not name their ioDimm:
$(echo "$unnamed" | head -n 20)"
for want in 'flashd\[warning\]: dimm0: die 5 failed .*replace the card' \
	'flashd\[error\]: dimm2: die 3 failed .*the data on it is lost.*replace the card' \
	'flashd\[error\]: dimm1: unit [0-9]+ lost: .*restore it' \
	'flashd\[warning\]: dimm0: temperature .* -> stopped .*check the cooling' \
	'flashd\[warning\]: dimm0: temperature .* -> throttled .*check the cooling' \
	'flashd\[notice\]: dimm[0-2]: block [0-9]+: program failed, retiring it .*the reserves take it'; do
	grep -qE "$want" "$L" || fail "no line in the log matches '$want'"
done
expected='flashd\[error\]: (dimm1|dimm2): (unit [0-9]+ lost|[0-9]+ units lost so far|die [0-9]+ failed .*the data on it is lost)'
grep -vE "$expected" "$L" >"$T/unexpected.log" || true
check_flashd_log "$T/unexpected.log"
ok "the log names the ioDimm on every line of the FTL and at notice or above; $(grep -cE "$expected" "$L") error lines, each a consequence of a fault"
