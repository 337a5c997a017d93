#!/bin/bash
# timeout: 300
# quick
# Data written through NBD survives flashd restarts:
#   1. qemu-img convert / nbdcopy of random images into dimm0 (TCP) and dimm1
#      (unix), SIGTERM, restart: both compare equal; nothing of dimm1 in dimm0.
#   2. Writes + FLUSH (same connection, and a FLUSH on another connection
#      covering writes completed on the first: CAN_MULTI_CONN), a FUA write,
#      WRITE_ZEROES + FLUSH, then SIGKILL (crash recovery): all of it is there
#      after the restart; unflushed overwrites read as old or new data per
#      4 KiB unit, never anything else.
#   3. SIGKILL in the middle of a stream of writes: flushed data survives,
#      and flashd recovers again; then a clean stop and start.
#   4. The log of these healthy runs: each crash recovery at notice level
#      (clean opens at info), no line at warning level or above; a
#      read-only ioDimm's close claims no checkpoint written, whether the
#      configuration made it read-only or the FTL did (the newest page's
#      sequence number set near the limit after a crash: served read-only).
#   5. A device of 16 KiB NAND pages (test-16k, four units a page, timing
#      model on): lone 4 KiB writes made durable by FLUSH and by FUA (each
#      in a NAND page nothing else fills), SIGKILL: they are there after the
#      restart, and so are a qemu-img image and its clean restart.
source "$(dirname "$0")/functions.sh"

M=$((1 << 20))
# how the last start of a dimm found it: "clean" or "unclean" (flashd log)
last_open() {
	grep -E "flashd\[(info|notice)\]: $1: .* shutdown, opened" "$T/flashd.log" | tail -n1 | sed -n 's/.*; \([a-z]*\) shutdown, opened.*/\1/p'
}
start_flashd --preset test-1g --timing off

# ---- 1. clean restart ----------------------------------------------------------
random_file "$T/a.img" 96
random_file "$T/b.img" 48
qemu-img convert -n -f raw -O raw "$T/a.img" "$FLASHD_URI0" || fail "qemu-img convert into dimm0"
nbdcopy --flush "$T/b.img" "$FLASHD_UNIX_URI1" || fail "nbdcopy into dimm1"
random_file "$T/h.img" 4
nbdsh_sys -u "$FLASHD_URI1" -c "
h.pwrite(open('$T/h.img', 'rb').read(), 600 << 20)
h.flush()
"
stop_flashd
[ "$(grep -c 'closed cleanly (checkpoint written)' "$T/flashd.log")" = 2 ] || fail "no clean close of both dimms"
restart_flashd
if [ "$(last_open dimm0)" != clean ] || [ "$(last_open dimm1)" != clean ]; then fail "dimms did not open from a clean shutdown"; fi
qemu-img compare -f raw -F raw "$T/a.img" "$FLASHD_URI0" || fail "dimm0 differs after SIGTERM + restart"
nbd_region_is "$FLASHD_UNIX_URI1" 0 $((48 * M)) "$T/b.img" || fail "dimm1 differs after SIGTERM + restart"
nbd_region_is "$FLASHD_URI1" $((600 * M)) $((4 * M)) "$T/h.img" || fail "dimm1 marker lost"
nbd_region_is "$FLASHD_URI1" $((48 * M)) $((552 * M)) zero || fail "dimm1 has data where none was written"
# qemu-img compare above also checked that dimm0 beyond 96 MiB is all zero,
# so none of dimm1's data (at 0..48 MiB and 600 MiB) shows up in dimm0
ok "SIGTERM + restart: dimm0 and dimm1 intact, no data of dimm1 in dimm0"

# ---- 2. SIGKILL after FLUSH / FUA --------------------------------------------------
random_file "$T/c.img" 16
random_file "$T/d.img" 8
random_file "$T/f.img" 1
random_file "$T/g.img" 8
random_file "$T/i.img" 4
nbdsh_sys -c "
import nbd
def conn(uri):
    h = nbd.NBD()
    h.connect_uri(uri)
    return h
a, b, c = conn('$FLASHD_URI0'), conn('$FLASHD_UNIX_URI0'), conn('$FLASHD_URI0')
d1 = conn('$FLASHD_UNIX_URI1')
M = 1 << 20
# flushed on the same connection
a.pwrite(open('$T/c.img', 'rb').read(), 200 * M)
a.flush()
# written on c, flushed on b (CAN_MULTI_CONN: a FLUSH covers writes
# completed on every connection)
assert b.can_multi_conn()
c.pwrite(open('$T/d.img', 'rb').read(), 300 * M)
b.flush()
# FUA, no flush
c.pwrite(open('$T/f.img', 'rb').read(), 400 * M, nbd.CMD_FLAG_FUA)
# zeroes over parts of the first image, flushed
a.zero(8 * M, 16 * M)
a.zero(8 * M, 32 * M, nbd.CMD_FLAG_NO_HOLE)
a.flush()
# dimm1: flushed data at an offset where dimm0 has none
d1.pwrite(open('$T/i.img', 'rb').read(), 500 * M)
d1.flush()
# unflushed overwrite of [48, 56) MiB: old or new per 4 KiB unit after a crash
a.pwrite(open('$T/g.img', 'rb').read(), 48 * M)
" || fail "writing before the crash"
kill_flashd
restart_flashd
[ "$(last_open dimm0)" = unclean ] || fail "dimm0 was not recovered from an unclean shutdown"
nbd_region_is "$FLASHD_URI0" $((200 * M)) $((16 * M)) "$T/c.img" || fail "written + FLUSHed data lost in the crash"
nbd_region_is "$FLASHD_URI0" $((300 * M)) $((8 * M)) "$T/d.img" ||
	fail "data written on one connection and FLUSHed on another lost in the crash"
nbd_region_is "$FLASHD_URI0" $((400 * M)) $M "$T/f.img" || fail "FUA write lost in the crash"
nbd_region_is "$FLASHD_URI0" $((16 * M)) $((8 * M)) zero || fail "WRITE_ZEROES + FLUSH lost in the crash"
nbd_region_is "$FLASHD_URI0" $((32 * M)) $((8 * M)) zero || fail "WRITE_ZEROES(NO_HOLE) + FLUSH lost in the crash"
nbd_region_is "$FLASHD_URI0" 0 $((16 * M)) "$T/a.img" || fail "older data damaged by the crash"
nbd_region_is "$FLASHD_URI0" $((56 * M)) $((40 * M)) "$T/a.img" $((56 * M)) || fail "older data damaged by the crash"
nbd_region_is "$FLASHD_UNIX_URI1" $((500 * M)) $((4 * M)) "$T/i.img" || fail "dimm1: flushed data lost"
nbd_region_is "$FLASHD_URI0" $((500 * M)) $((4 * M)) zero || fail "dimm1's data shows up in dimm0"
nbd_region_is "$FLASHD_URI0" $((600 * M)) $((4 * M)) zero || fail "dimm1's data shows up in dimm0"
nbd_region_is "$FLASHD_URI1" $((200 * M)) $((16 * M)) zero || fail "dimm0's data shows up in dimm1"
"$PYTHON" - "$FLASHD_URI0" "$T/a.img" "$T/g.img" <<'PY' || fail "unflushed overwrite reads as neither old nor new data"
import sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
M = 1 << 20
got = h.pread(8 * M, 48 * M)
old = open(sys.argv[2], "rb").read()[48 * M:56 * M]
new = open(sys.argv[3], "rb").read()
n_old = n_new = 0
for u in range(0, 8 * M, 4096):
    g = got[u:u + 4096]
    if g == new[u:u + 4096]:
        n_new += 1
    elif g == old[u:u + 4096]:
        n_old += 1
    else:
        sys.exit("4 KiB unit at %d MiB + %d is neither the old nor the new data" % (48, u))
print("   unflushed overwrite after the crash: %d units new, %d old" % (n_new, n_old))
PY
ok "SIGKILL: flushed, multi-conn flushed, FUA and zeroed data recovered; dimms isolated"

# ---- 3. SIGKILL during a stream of writes ------------------------------------------------
random_file "$T/j.img" 8
nbdsh_sys -u "$FLASHD_UNIX_URI0" -c "
h.pwrite(open('$T/j.img', 'rb').read(), 700 << 20)
h.flush()
"
"$PYTHON" - "$FLASHD_URI0" >"$T/writer.log" 2>&1 <<'PY' &
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
M = 1 << 20
buf = nbd.Buffer.from_bytearray(bytearray(os.urandom(256 * 1024)))
i = 0
try:
    while True:
        cookies = [h.aio_pwrite(buf, 720 * M + ((i + k) * 256 * 1024) % (64 * M)) for k in range(16)]
        while h.aio_in_flight():
            h.poll(-1)
        i += 16
        print(i, flush=True)
except nbd.Error:
    pass
PY
writer=$!
track_pid "$writer"
for _ in $(seq 1 100); do
	[ -s "$T/writer.log" ] && [ "$(tail -n1 "$T/writer.log")" -ge 160 ] 2>/dev/null && break
	sleep 0.1
done
[ "$(tail -n1 "$T/writer.log")" -ge 16 ] 2>/dev/null || fail "the background writer did not get going"
kill_flashd
wait "$writer" || true
echo "   killed flashd after $(tail -n1 "$T/writer.log") writes in flight or done"
restart_flashd
[ "$(last_open dimm0)" = unclean ] || fail "dimm0 was not recovered from an unclean shutdown"
nbd_region_is "$FLASHD_URI0" $((700 * M)) $((8 * M)) "$T/j.img" || fail "flushed data lost in a crash during writes"
nbd_region_is "$FLASHD_URI0" $((200 * M)) $((16 * M)) "$T/c.img" || fail "data lost in the second crash"
nbdsh_sys -u "$FLASHD_URI0" -c "[h.pread(8 << 20, (720 << 20) + (k << 23)) for k in range(8)]" || fail "the region being written when flashd died is unreadable"
ok "SIGKILL during writes: flushed data recovered"

# clean stop after recovery, start again, still all there
stop_flashd
restart_flashd
[ "$(last_open dimm0)" = clean ] || fail "dimm0 not clean after recovery and SIGTERM"
nbd_region_is "$FLASHD_URI0" $((700 * M)) $((8 * M)) "$T/j.img" || fail "data lost after recovery + clean restart"
nbd_region_is "$FLASHD_URI0" $((300 * M)) $((8 * M)) "$T/d.img" || fail "data lost after recovery + clean restart"
nbd_region_is "$FLASHD_UNIX_URI1" 0 $((48 * M)) "$T/b.img" || fail "dimm1 data lost after the restarts"
stop_flashd
check_flashd_log

# ---- 4. the log --------------------------------------------------------------------
# an admin filtering the journal for notices sees each crash recovery, one
# filtering for warnings sees nothing: these runs were healthy
L=$T/flashd.log
n_unclean=$(grep -c 'dimm0: .*; unclean shutdown, opened' "$L" || true)
n_notice=$(grep -cE 'flashd\[notice\]: dimm0: .*; unclean shutdown, opened' "$L" || true)
[ "$n_unclean" = 2 ] && [ "$n_notice" = 2 ] ||
	fail "crash recoveries of dimm0: $n_unclean, $n_notice of them logged at notice level (want 2 and 2)"
if grep -qE 'flashd\[[a-z]+\]: dimm[01]: .*; clean shutdown, opened' "$L" &&
	grep -E 'flashd\[[a-z]+\]: dimm[01]: .*; clean shutdown, opened' "$L" | grep -qv 'flashd\[info\]'; then
	fail "a clean open logged above info level"
fi
bad=$(grep -E 'flashd\[(warning|error|crit|alert|emerg)\]' "$L" || true)
[ -z "$bad" ] || fail "a healthy run with crashes logged at warning level or above:
$bad"
# a read-only ioDimm writes nothing, so its close names no checkpoint
printf '[dimm dimm0]\npreset = test-1g\n[dimm dimm1]\npreset = test-1g\nreadonly = yes\n' >"$T/ro.conf"
: >"$L"
start_flashd --config "$T/ro.conf" --timing off
nbd_region_is "$FLASHD_UNIX_URI1" 0 $((48 * M)) "$T/b.img" || fail "dimm1 data lost, read-only"
stop_flashd
grep -q 'dimm1: closed cleanly (read-only: nothing written)' "$L" &&
	! grep -q 'dimm1: .*checkpoint written' "$L" ||
	fail "the read-only dimm1's close: $(grep 'dimm1: closed' "$L")"
grep -q 'dimm0: closed cleanly (checkpoint written)' "$L" || fail "dimm0 did not close cleanly"
check_flashd_log
# the FTL serves dimm0 read-only on its own (numbers near their limit,
# found by the replay after a crash): its close writes nothing either
start_flashd --config "$T/ro.conf" --timing off
nbdsh_sys -u "$FLASHD_URI0" -c "h.pwrite(b'x' * 65536, 760 << 20); h.flush()" || fail "writing dimm0"
kill_flashd
"$PYTHON" "$NBD_CHECKS/image_tool.py" "$FLASHD_STATE/dimm0.img" set-newest-seq $(((1 << 62) - 1)) >/dev/null ||
	fail "setting the sequence number of dimm0's newest page"
: >"$L"
start_flashd --config "$T/ro.conf" --timing off
grep -q 'flashd\[error\]: dimm0: sequence numbers near their limit .*served read-only' "$L" ||
	fail "dimm0 is not served read-only: $(grep 'dimm0: ' "$L" | head -n 5)"
stop_flashd
grep -q 'dimm0: closed cleanly (read-only: nothing written)' "$L" &&
	! grep -q 'dimm0: .*checkpoint written' "$L" ||
	fail "the close of dimm0, read-only since its open: $(grep 'dimm0: closed' "$L")"
ok "log: 2 crash recoveries at notice, nothing at warning or above; read-only dimm1, and dimm0 read-only since its open, closed without a checkpoint"
# ---- 5. NAND pages of four units ---------------------------------------------------
# a flush or a FUA write of one unit waits for its NAND page: the FTL pads
# the page (ftl/upage.c); without that the wait never ends
: >"$L"
rm -f "$FLASHD_STATE"/dimm*.img
start_flashd --preset test-16k
random_file "$T/p.img" 8
qemu-img convert -n -f raw -O raw "$T/p.img" "$FLASHD_URI0" || fail "qemu-img convert into a test-16k dimm"
nbdsh_sys -c "
import nbd, signal
signal.alarm(60)
h = nbd.NBD()
h.connect_uri('$FLASHD_URI0')
h.pwrite(b'F' * 4096, 20 << 20)
h.flush()
h.pwrite(b'U' * 4096, 21 << 20, nbd.CMD_FLAG_FUA)
h.pwrite(b'V' * 4096, (21 << 20) + 65536, nbd.CMD_FLAG_FUA)
" || fail "a lone 4 KiB FLUSH or FUA write on 16 KiB pages did not complete"
kill_flashd
restart_flashd
nbdsh_sys -u "$FLASHD_URI0" -c "
assert h.pread(4096, 20 << 20) == b'F' * 4096, 'flushed unit'
assert h.pread(4096, 21 << 20) == b'U' * 4096, 'FUA unit'
assert h.pread(4096, (21 << 20) + 65536) == b'V' * 4096, 'second FUA unit'
" || fail "a flushed or FUA 4 KiB write on 16 KiB pages lost in the crash"
nbd_region_is "$FLASHD_URI0" 0 $((8 * M)) "$T/p.img" || fail "test-16k: image lost in the crash"
stop_flashd
restart_flashd
nbd_region_is "$FLASHD_URI0" 0 $((8 * M)) "$T/p.img" || fail "test-16k: image lost across a clean restart"
stop_flashd
ok "16 KiB NAND pages: lone flushed and FUA units and an image survive SIGKILL and a clean restart"
ok "persistence checks passed"
