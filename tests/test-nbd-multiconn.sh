#!/bin/bash
# timeout: 600
# Several connections on one ioDimm with large replies: the send threads
# (server/conn_tx.c, struct tx).  A batch of replies of 256 KiB or more on an
# ioDimm with two connections or more leaves through the connection's own
# send thread.  Checked through real clients:
#   1. nbdcopy with 4 connections and 4 MiB requests writes and reads back a
#      file, byte for byte, three times;
#   2. three connections that queue 16 reads of 4 MiB each and never read
#      the replies: their send threads block, and the ioDimm still serves
#      another client at once; killing that client frees its connections
#      and their send threads;
#   3. nbdcopy readers killed mid-transfer (SIGKILL), five times: flashd
#      stays up and the data still reads back whole;
#   4. stalled clients at shutdown: flashd force-closes them at the
#      deadline (shutdown_timeout) and exits cleanly.
source "$(dirname "$0")/functions.sh"

cat >"$T/flashd.conf" <<EOF
[server]
shutdown_timeout = 3
[dimm dimm0]
preset = test-1g
EOF
start_flashd --config "$T/flashd.conf" --timing off

tx_threads() {
	ps -L -o comm= -p "$FLASHD_PID" | grep -c '^flashd-tx$' || true
}

# start_stall OUT: the stalling client (stall.py, below) in the background
# ($S), until it has queued its reads and a send thread exists (or 10 s)
start_stall() {
	"$PYTHON" "$T/stall.py" "$FLASHD_URI0" >"$1" 2>&1 &
	S=$!
	track_pid $S
	for _ in $(seq 1 100); do
		grep -q issued "$1" && [ "$(tx_threads)" -ge 1 ] && break
		sleep 0.1
	done
}

# ---- 1. four connections, byte for byte ----------------------------------------------------
random_file "$T/src" 512
for i in 1 2 3; do
	rm -f "$T/out"
	nbdcopy --connections 4 --requests 8 --request-size 1048576 "$T/src" "$FLASHD_URI0" ||
		fail "nbdcopy write, round $i"
	nbdcopy --connections 4 --requests 16 --request-size 4194304 "$FLASHD_URI0" "$T/out" ||
		fail "nbdcopy read, round $i"
	cmp -n $((512 << 20)) "$T/src" "$T/out" || fail "round $i: the data read back differs"
done
ok "nbdcopy, 4 connections, 1 MiB writes and 4 MiB reads: 512 MiB back byte for byte, 3 rounds"

# ---- 2. clients that do not read their replies ----------------------------------------------
cat >"$T/stall.py" <<'PY'
import nbd, sys, time
hs = []
for i in range(3):
    h = nbd.NBD()
    h.connect_uri(sys.argv[1])
    hs.append(h)
bufs = []
for h in hs:
    for k in range(16):
        b = nbd.Buffer(4 << 20)
        bufs.append(b)
        h.aio_pread(b, k * (4 << 20))
print("issued", flush=True)
time.sleep(600)
PY
start_stall "$T/stall.out"
grep -q issued "$T/stall.out" || { cat "$T/stall.out"; fail "the stalling client did not start"; }
n=$(tx_threads)
[ "$n" -ge 1 ] || fail "no send thread while three connections have 4 MiB replies queued"
t0=$EPOCHREALTIME
timeout 20 qemu-io -f raw -c "read -P 0 600m 1m" "$FLASHD_URI0" >/dev/null ||
	fail "another client is not served while three connections stall"
took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
kill -KILL $S
wait $S 2>/dev/null || true
for _ in $(seq 1 100); do
	[ "$(tx_threads)" = 0 ] && [ "$(flashd_connections)" = 0 ] && break
	sleep 0.1
done
[ "$(tx_threads)" = 0 ] || fail "$(tx_threads) send thread(s) left after the stalled client died"
[ "$(flashd_connections)" = 0 ] || fail "$(flashd_connections) connection(s) left after the stalled client died"
ok "three stalled connections ($n send thread(s) blocked): another client served in $took s; all freed when the client died"

# ---- 3. readers killed mid-transfer ---------------------------------------------------------------
for i in 1 2 3 4 5; do
	nbdcopy --connections 4 --requests 16 --request-size 4194304 "$FLASHD_URI0" null: &
	P=$!
	track_pid $P
	sleep "0.$((i * 2 - 1))"
	kill -KILL $P 2>/dev/null || true
	wait $P 2>/dev/null || true
done
flashd_running
rm -f "$T/out"
nbdcopy --connections 4 --requests 16 --request-size 4194304 "$FLASHD_URI0" "$T/out" || fail "nbdcopy read after the kills"
cmp -n $((512 << 20)) "$T/src" "$T/out" || fail "the data read back differs after readers were killed"
wait_connections 0 10
ok "5 readers killed mid-transfer: flashd up, data whole, every connection freed"

# ---- 4. stalled clients at shutdown --------------------------------------------------------------
start_stall "$T/stall2.out"
[ "$(tx_threads)" -ge 1 ] || fail "no send thread for the second stalled client"
t0=$EPOCHREALTIME
stop_flashd
took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
grep -q "force-closed at the shutdown deadline" "$T/flashd.log" || fail "the stalled connections were not force-closed"
awk -v t="$took" 'BEGIN { exit !(t < 30) }' || fail "flashd took $took s to stop with shutdown_timeout = 3"
ok "stalled clients at shutdown: force-closed at the 3 s deadline, flashd exited in $took s"
kill -KILL $S 2>/dev/null || true
wait $S 2>/dev/null || true
check_flashd_log
