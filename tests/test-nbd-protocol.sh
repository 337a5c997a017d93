#!/bin/bash
# timeout: 420
# quick
# The NBD protocol checks of tests/nbd/ against flashd (doc/proto.md of
# NetworkBlockDevice/nbd):
#   1. 512-byte sectors (--preset test-1g): libnbd checks of every option and
#      command over TCP (protocol_libnbd.py), the handshake byte by byte
#      (raw_handshake.py, TCP), the transmission phase byte by byte
#      (raw_transmission.py, unix socket).  WRITE_ZEROES and CACHE over the
#      32 MiB maximum block size succeed (--long-payloadless); clients that
#      did not negotiate block sizes are served unaligned
#      (raw_handshake.py; more in test-nbd-align.sh).
#   2. A config with dimm0 formatted with 4096-byte sectors and dimm1
#      read-only: the same checks with --sector-size 4096 (unaligned requests
#      -> EINVAL) and the read-only export (EPERM; its image is unchanged).
# Every check runs even if an earlier one failed; the test fails if any did.
source "$(dirname "$0")/functions.sh"

SIZE=858992640

# ---- 1. 512-byte sectors --------------------------------------------------------
start_flashd --preset test-1g --timing off
run_check "libnbd checks, 512-byte sectors, TCP" \
	timeout 240 "$PYTHON" "$NBD_CHECKS/protocol_libnbd.py" --uri "$FLASHD_URI0" --sector-size 512 \
	--size "$SIZE" --fresh --list-uri "$FLASHD_URI1" --exports dimm0,dimm1 --descriptions \
	--long-payloadless
trimmed=$(dimm_stat dimm0 host_bytes_trimmed)
zeroed=$(dimm_stat dimm0 host_bytes_zeroed)
echo "dimm0: host_bytes_trimmed $trimmed, host_bytes_zeroed $zeroed"
[ "$trimmed" -gt 0 ] || summary_add "trim counter of dimm0 did not move"
run_check "raw handshake, TCP" \
	timeout 120 "$PYTHON" "$NBD_CHECKS/raw_handshake.py" --uri "$FLASHD_URI0" --other-export dimm1 \
	--exports dimm0,dimm1 --sector-size 512
run_check "raw transmission, unix socket" \
	timeout 180 "$PYTHON" "$NBD_CHECKS/raw_transmission.py" --uri "$FLASHD_UNIX_URI1" --sector-size 512
flashd_running
stop_flashd
check_flashd_log
ok "512-byte sector exports"

# ---- 2. 4096-byte sectors and a read-only export --------------------------------------
mv "$T/flashd.log" "$T/flashd-512.log"
rm -rf "$FLASHD_STATE"
dimms_conf "$T/format.conf" dimm0.sector_size=4096
sed '/^\[dimm dimm1\]/a readonly = yes' "$T/format.conf" >"$T/readonly.conf"
start_flashd --config "$T/format.conf" --timing off
# something to find on the read-only export later
nbdsh_sys -u "$FLASHD_URI1" -c "
h.pwrite(b'\x5a' * (1 << 20), 0)
h.pwrite(b'\xa5' * 4096, h.get_size() - 4096)
h.flush()
"
stop_flashd
sum_before=$(sha256sum <"$FLASHD_STATE/dimm1.img")
start_flashd --config "$T/readonly.conf" --timing off
nbdinfo --json "$FLASHD_UNIX_URI1" | $PYTHON -c '
import json, sys
e = json.load(sys.stdin)["exports"][0]
assert e["is_read_only"] and not e["can_trim"] and not e["can_zero"], e
' || summary_add "nbdinfo: dimm1 is not advertised read-only"
run_check "libnbd checks, 4096-byte sectors + read-only export, unix socket" \
	timeout 240 "$PYTHON" "$NBD_CHECKS/protocol_libnbd.py" --uri "$FLASHD_UNIX_URI0" --sector-size 4096 \
	--size "$SIZE" --fresh --readonly-uri "$FLASHD_UNIX_URI1" --exports dimm0,dimm1 --descriptions \
	--long-payloadless
run_check "raw handshake, 4096-byte sectors, unix socket" \
	timeout 120 "$PYTHON" "$NBD_CHECKS/raw_handshake.py" --uri "$FLASHD_UNIX_URI0" --other-export dimm1 \
	--exports dimm0,dimm1 --sector-size 4096
run_check "raw transmission, 4096-byte sectors + read-only export, TCP" \
	timeout 180 "$PYTHON" "$NBD_CHECKS/raw_transmission.py" --uri "$FLASHD_URI0" --sector-size 4096 \
	--readonly-uri "$FLASHD_URI1"
nbdsh_sys -u "$FLASHD_URI1" -c "
assert h.pread(1 << 20, 0) == b'\x5a' * (1 << 20), 'read-only data changed'
assert h.pread(4096, h.get_size() - 4096) == b'\xa5' * 4096, 'read-only data changed'
" || summary_add "data on the read-only export changed"
flashd_running
stop_flashd
check_flashd_log
[ "$(sha256sum <"$FLASHD_STATE/dimm1.img")" = "$sum_before" ] ||
	summary_add "the read-only export's image file changed"

checks_passed || fail "some NBD protocol checks failed"
ok "NBD protocol checks passed"
