#!/bin/bash
# timeout: 600
# Clients with and without block size constraints (issue 15; doc/proto.md
# of NetworkBlockDevice/nbd, "Block size constraints"), raw protocol
# (tests/nbd/raw_align.py), every data check against a byte-exact model:
#   1. dimm0 (512-byte sectors) and dimm1 (4096-byte sectors), each: for
#      clients that asked for NBD_INFO_BLOCK_SIZE in NBD_OPT_GO and clients
#      that did not (GO without it, NBD_OPT_EXPORT_NAME), structured and
#      simple replies: byte-granular I/O and READ/WRITE up to 64 MiB for
#      the latter, EINVAL in sync for the former when they break the
#      constraints, over-limit requests refused cleanly (hard disconnect
#      only for WRITEs over 128 MiB), TRIM/WRITE_ZEROES/CACHE/BLOCK_STATUS
#      of any length, concurrent writes to different bytes of one sector,
#      and the memory one connection's 64 MiB READs may pin.
#   2. The issue's trace on both: random 1 KiB-aligned READs and WRITEs of
#      up to 50 MB over a 50 MiB region, all read back; the region is saved
#      and must read the same after a clean restart.
#   3. An export of 5 GiB: TRIM, WRITE_ZEROES, CACHE and BLOCK_STATUS of
#      2^32 - 1 bytes.
source "$(dirname "$0")/functions.sh"

cat >"$T/align.conf" <<EOF
[dimm dimm0]
preset = test-1g
[dimm dimm1]
preset = test-1g
sector_size = 4096
[dimm big]
preset = iodimm-slc-160
capacity = 5G
EOF
start_flashd --config "$T/align.conf" --timing off
BIG_URI=nbd://127.0.0.1:$FLASHD_PORT/big

# ---- 1. both kinds of client, both sector sizes ---------------------------------------
run_check "512-byte sectors, TCP" \
	timeout 420 "$PYTHON" "$NBD_CHECKS/raw_align.py" checks --uri "$FLASHD_URI0" --sector-size 512 \
	--pid "$FLASHD_PID"
run_check "4096-byte sectors, unix socket" \
	timeout 420 "$PYTHON" "$NBD_CHECKS/raw_align.py" checks --uri "$FLASHD_UNIX_URI1" --sector-size 4096 \
	--pid "$FLASHD_PID"

# ---- 2. the issue's 50 MB trace -------------------------------------------------------
run_check "50 MB trace, 512-byte sectors" \
	timeout 420 "$PYTHON" "$NBD_CHECKS/raw_align.py" trace --uri "$FLASHD_UNIX_URI0" --seed 1 \
	--save "$T/trace0"
run_check "50 MB trace, 4096-byte sectors" \
	timeout 420 "$PYTHON" "$NBD_CHECKS/raw_align.py" trace --uri "$FLASHD_URI1" --seed 2 \
	--save "$T/trace1"

# ---- 3. lengths of 2^32 - 1 -------------------------------------------------------------
run_check "2^32 - 1 byte TRIM/WRITE_ZEROES/CACHE/BLOCK_STATUS, 5 GiB export" \
	timeout 300 "$PYTHON" "$NBD_CHECKS/raw_align.py" huge --uri "$BIG_URI" --sector-size 512

flashd_running
check_flashd_log
grep -q 'no block size constraints' "$T/flashd.log" ||
	summary_add "the log does not tell clients without block size constraints apart"
stop_flashd
mv "$T/flashd.log" "$T/flashd-1.log"

# what the traces wrote survives a clean restart
restart_flashd
for i in 0 1; do
	[ -f "$T/trace$i" ] || continue
	uri=$FLASHD_URI0
	[ $i = 1 ] && uri=$FLASHD_UNIX_URI1
	run_check "dimm$i: the trace region after a restart" \
		timeout 120 "$PYTHON" "$NBD_CHECKS/raw_align.py" verify --uri "$uri" --file "$T/trace$i"
done
check_flashd_log
stop_flashd

checks_passed || fail "some alignment checks failed"
ok "clients with and without block size constraints served"
