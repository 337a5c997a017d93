#!/bin/bash
# timeout: 600
# quick
# Every request answered, every slot freed, no stall, no crash, bounded
# shutdown (tests/nbd/raw_integrity.py):
#   1. Large pipelined requests: two 32 MiB READs and one 32 MiB WRITE on one
#      connection, and other mixes of 32 MiB requests (the advertised
#      maximum), structured and simple replies, TCP and unix socket; then
#      fio bs=32M iodepth=4 randrw with verify.  Nothing may stall.
#   2. Rejected zero-length WRITEs (DF flag, past the end, read-only export)
#      each get an error reply; 300 connections send them and leave: the
#      connection count returns to its baseline, a new client is served,
#      SIGTERM exits at once (well before the shutdown deadline).
#   3. A client sends 2000 READs and never reads a reply: SIGTERM still
#      ends flashd within the shutdown deadline (10 s) plus a margin, with
#      status 0, a warning about the connection closed by force, and a
#      clean FTL close; the restart serves the data written before.
#   4. A descriptor limit (ulimit -n 200) below max_connections (1024): a
#      flood of 600 TCP connections makes accept fail with EMFILE; flashd
#      backs off (one warning, not one per attempt), stays up, and serves a
#      normal client once the flood is gone.
source "$(dirname "$0")/functions.sh"

M=$((1 << 20))
dimms_conf "$T/rw.conf"
sed '/^\[dimm dimm1\]/a readonly = yes' "$T/rw.conf" >"$T/ro.conf"
# the flood (section 4) is to run out of descriptors, not into the handshake budget
printf '[server]\nmax_handshakes = 1024\nmax_handshakes_per_address = 0\n' | cat - "$T/rw.conf" >"$T/flood.conf"

# term_within SECS WHAT: SIGTERM flashd; it must exit with status 0 within
# SECS (else: summary entry, SIGKILL).  Prints the time it took; TERM_OK=1
# if it passed.
term_within() {
	local secs=$1 what=$2 t0=$EPOCHREALTIME rc=0 dt
	TERM_OK=0
	kill -TERM "$FLASHD_PID"
	if ! timeout "$secs" tail --pid="$FLASHD_PID" -f /dev/null; then
		echo "FAIL: $what: flashd did not exit within ${secs}s of SIGTERM"
		summary_add "$what: flashd did not exit within ${secs}s of SIGTERM"
		kill_flashd
		return 0
	fi
	wait "$FLASHD_PID" || rc=$?
	dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	echo "$what: flashd exited with status $rc after ${dt}s"
	if [ $rc -ne 0 ]; then
		summary_add "$what: flashd exited with status $rc"
		return 0
	fi
	TERM_OK=1
}

# log_has PATTERN WHAT: the current flashd log has a line matching PATTERN
log_has() {
	grep -qE "$1" "$T/flashd.log" || summary_add "flashd log: no $2 (/$1/)"
}

# next_log NAME: keep the log of the phase that ended
next_log() {
	mv "$T/flashd.log" "$T/flashd-$1.log"
}

# ---- 1. large pipelined requests --------------------------------------------------
start_flashd --config "$T/rw.conf" --timing off
run_check "32 MiB requests pipelined" \
	timeout 300 "$PYTHON" "$NBD_CHECKS/raw_integrity.py" big --uri "$FLASHD_URI0" \
	--unix-uri "$FLASHD_UNIX_URI0"
cat >"$T/big.fio" <<EOF
[big]
ioengine=nbd
uri=$FLASHD_URI1
rw=randrw
rwmixread=50
bs=32m
iodepth=4
size=384m
verify=crc32c
verify_fatal=1
verify_dump=0
do_verify=1
verify_state_save=0
EOF
echo "=== fio bs=32M iodepth=4 randrw"
if (cd "$T" && timeout 90 fio --output="$T/big.out" "$T/big.fio") >"$T/big.err" 2>&1; then
	grep -E 'READ:|WRITE:' "$T/big.out" || true
	echo "=== fio bs=32M iodepth=4: passed"
else
	cat "$T/big.err"
	summary_add "fio bs=32M iodepth=4 randrw failed or stalled (90 s limit)"
fi
flashd_running
check_flashd_log
term_within 30 "SIGTERM after the large requests"
next_log big

# ---- 2. rejected zero-length WRITEs ---------------------------------------------------
start_flashd --config "$T/ro.conf" --timing off
base=$(flashd_connections)
run_check "rejected zero-length WRITEs" \
	timeout 240 "$PYTHON" "$NBD_CHECKS/raw_integrity.py" zero-writes --uri "$FLASHD_URI0" \
	--readonly-uri "$FLASHD_UNIX_URI1" --connections 300 --flashctl "$FLASHCTL" --control "$FLASHD_CTL"
n=$(flashd_connections)
echo "connections: $n (baseline $base)"
[ "$n" = "$base" ] || summary_add "after the zero-length WRITEs flashd counts $n connections, baseline $base"
nbdsh_sys -u "$FLASHD_UNIX_URI0" -c "
d = b'\x3c' * 65536
h.pwrite(d, 1 << 20)
assert h.pread(65536, 1 << 20) == d
" || summary_add "a new client is not served after the zero-length WRITEs"
flashd_running
check_flashd_log
# nothing is left in flight: the exit must not wait for the shutdown deadline
term_within 5 "SIGTERM after the zero-length WRITEs"
if grep -q 'shutdown deadline' "$T/flashd.log"; then
	summary_add "SIGTERM after the zero-length WRITEs needed the shutdown deadline (connections left behind)"
fi
next_log zero

# ---- 3. SIGTERM with a client that reads no replies ------------------------------------
start_flashd --config "$T/rw.conf" --timing off
"$PYTHON" "$NBD_CHECKS/raw_integrity.py" stall --uri "$FLASHD_URI0" --offset $((64 * M)) \
	--data-out "$T/stall.data" --mark "$T/stalled" --wait 60 >"$T/stall.out" 2>&1 &
stall_pid=$!
track_pid $stall_pid
for _ in $(seq 1 300); do
	[ -e "$T/stalled" ] && break
	kill -0 $stall_pid 2>/dev/null || break
	sleep 0.1
done
cat "$T/stall.out"
[ -e "$T/stalled" ] || summary_add "the stalling client did not get going"
sleep 1
flashd_running
# deadline 10 s (the default) + 10 s margin
term_within 20 "SIGTERM with a stalled client"
[ $TERM_OK = 1 ] && log_has 'flashd\[warning\]: .*force-closed' "warning about the force-closed connection"
log_has 'dimm0: closed cleanly \(checkpoint written\)' "clean close of dimm0"
rc=0
timeout 30 tail --pid=$stall_pid -f /dev/null || true
wait $stall_pid || rc=$?
cat "$T/stall.out"
[ $rc -eq 0 ] || summary_add "the stalled client was not dropped (exit $rc)"
next_log stall
restart_flashd
grep -q 'dimm0: .*; clean shutdown, opened' "$T/flashd.log" || summary_add "dimm0 did not reopen from a clean shutdown"
nbd_region_is "$FLASHD_URI0" $((64 * M)) $((8 * M)) "$T/stall.data" ||
	summary_add "data written before the SIGTERM is not served after the restart"
check_flashd_log
term_within 30 "SIGTERM after the restart"
next_log restart

# ---- 4. descriptor limit below max_connections ---------------------------------------
cat >"$T/flashd-lowfd" <<EOF
#!/bin/bash
ulimit -n 200
exec "$top/build/flashd" "\$@"
EOF
chmod +x "$T/flashd-lowfd"
FLASHD=$T/flashd-lowfd
start_flashd --config "$T/flood.conf" --timing off
log_has 'flashd\[warning\]: .*max_connections' "warning that max_connections exceeds the descriptor limit"
run_check "600 connections against 200 descriptors" \
	timeout 120 "$PYTHON" "$NBD_CHECKS/raw_integrity.py" flood --uri "$FLASHD_URI0" --count 600 --hold 3
if kill -0 "$FLASHD_PID" 2>/dev/null; then
	n=$(grep -c 'flashd\[warning\]: .*accept.*paus' "$T/flashd.log" || true)
	echo "back-off warnings: $n"
	[ "$n" -ge 1 ] || summary_add "no back-off warning in the log after the flood"
	[ "$n" -le 2 ] || summary_add "$n back-off warnings: one per attempt instead of one per back-off"
	# the episode ends after a quiet second of accepting
	for _ in $(seq 1 100); do
		grep -q 'flashd\[info\]: .*accepting again' "$T/flashd.log" && break
		sleep 0.1
	done
	log_has 'flashd\[info\]: .*accepting again' "message that accepting resumed"
	wait_connections 0 20
	nbdsh_sys -u "$FLASHD_URI1" -c "
d = b'\x77' * 65536
h.pwrite(d, 0)
assert h.pread(65536, 0) == d
" || summary_add "a normal client is not served after the flood"
	check_flashd_log
	term_within 30 "SIGTERM after the flood"
else
	wait "$FLASHD_PID" || echo "flashd exited with status $?"
	summary_add "flashd died during the connection flood"
fi
next_log flood

checks_passed || fail "some integrity checks failed"
ok "integrity checks passed"
