#!/bin/bash
# timeout: 300
# flashd's FTL inside nbdkit (build/nbdkit-flashd-plugin.so), driven by the
# same real clients as flashd itself: nbdinfo, qemu-img, nbdcopy and the
# libnbd protocol checks; the image lock against a second opener; data kept
# across a clean stop and across SIGKILL after a flush; a damaged
# superblock refused (never formatted) and recovered with flashctl.
source "$(dirname "$0")/functions.sh"

PLUGIN=$top/build/nbdkit-flashd-plugin.so
IMG=$T/dimm.img
SOCK=$T/nbdkit.sock
URI="nbd+unix:///?socket=$SOCK"

start_nbdkit() {
	rm -f "$SOCK"
	nbdkit -f -U "$SOCK" "$PLUGIN" image="$IMG" "$@" </dev/null >>"$T/nbdkit.log" 2>&1 &
	NBDKIT_PID=$!
	track_pid $NBDKIT_PID
	for _ in $(seq 1 200); do
		[ -S "$SOCK" ] && return 0
		kill -0 $NBDKIT_PID 2>/dev/null || { cat "$T/nbdkit.log"; fail "nbdkit exited"; }
		sleep 0.1
	done
	fail "nbdkit did not start"
}
stop_nbdkit() {
	kill -${1:-TERM} $NBDKIT_PID
	wait $NBDKIT_PID 2>/dev/null || true
}

start_nbdkit preset=test-1g
nbdinfo --json "$URI" >"$T/info.json" || fail "nbdinfo"
$PYTHON - "$T/info.json" <<'PY' || fail "nbdinfo shows the wrong export"
import json, sys
e = json.load(open(sys.argv[1]))["exports"][0]
assert e["export-size"] == 858992640, e["export-size"]
assert "flashd" in e.get("description", ""), e
assert e["can_multi_conn"] and e["can_fua"] and e["can_trim"] and e["can_zero"], e
assert e["block_size_minimum"] == 512 and e["block_size_preferred"] == 4096, e
assert "base:allocation" in e.get("contexts", []), e
PY
ok "nbdinfo: size, description, flags, block sizes, base:allocation"

# a second opener of the same image gets a clear error
if nbdkit -U "$T/second.sock" "$PLUGIN" image="$IMG" </dev/null >"$T/second.log" 2>&1; then
	fail "a second nbdkit opened a locked image"
fi
grep -q "in use" "$T/second.log" || { cat "$T/second.log"; fail "no clear 'in use' error"; }
"$FLASHCTL" info "$IMG" >"$T/info.txt" 2>&1 && fail "flashctl info opened a locked image"
grep -q "in use" "$T/info.txt" || { cat "$T/info.txt"; fail "flashctl: no clear 'in use' error"; }
ok "the image is locked against a second opener"

run_check "protocol checks (libnbd)" nbd_py protocol_libnbd.py --uri "$URI" --fresh \
	--no-read-holes --any-export-name --lenient-limits --size 858992640
checks_passed || fail "protocol checks against the nbdkit plugin"

random_file "$T/rnd.img" 64
qemu-img convert -n -f raw -O raw "$T/rnd.img" "$URI" || fail "qemu-img convert"
qemu-img compare -f raw -F raw "$T/rnd.img" "$URI" >/dev/null 2>&1 ||
	nbd_region_is "$URI" 0 $((64 << 20)) "$T/rnd.img" || fail "qemu-img compare"
ok "qemu-img convert and compare"
nbdcopy "$URI" "$T/back.img" --flush || fail "nbdcopy export -> file"
cmp -n $((64 << 20)) "$T/rnd.img" "$T/back.img" || fail "nbdcopy round trip differs"
ok "nbdcopy round trip"
nbdinfo --map --json "$URI" >"$T/map.json"
$PYTHON - "$T/map.json" <<'PY' || fail "nbdinfo --map"
import json, sys
m = json.load(open(sys.argv[1]))
data = [e for e in m if e["type"] == 0]
assert data and data[0]["offset"] == 0 and data[0]["length"] >= 64 << 20, m[:3]
assert any(e["type"] == 3 for e in m), "no hole,zero extent after the written range"
PY
ok "nbdinfo --map: data where written, hole+zero elsewhere"

# clean stop keeps the data
stop_nbdkit TERM
start_nbdkit
nbd_region_is "$URI" 0 $((64 << 20)) "$T/rnd.img" || fail "data lost across a clean stop"
ok "data kept across SIGTERM and restart"

# flushed data survives SIGKILL
random_file "$T/rnd2.img" 8
$PYTHON - "$URI" "$T/rnd2.img" <<'PY' || fail "write + flush"
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(open(sys.argv[2], "rb").read(), 100 << 20)
h.flush(); h.shutdown()
PY
stop_nbdkit KILL
start_nbdkit
nbd_region_is "$URI" $((100 << 20)) $((8 << 20)) "$T/rnd2.img" || fail "flushed data lost after SIGKILL"
nbd_region_is "$URI" 0 $((64 << 20)) "$T/rnd.img" || fail "older data lost after SIGKILL"
ok "flushed data survives SIGKILL of nbdkit"
stop_nbdkit TERM

# a damaged superblock: the plugin refuses the image, never formats it,
# and after flashctl recover it serves the data again
"$PYTHON" "$NBD_CHECKS/image_tool.py" "$IMG" damage-superblocks >/dev/null || fail "damaging the superblocks"
before=$("$PYTHON" "$NBD_CHECKS/image_tool.py" "$IMG" sha256)
if nbdkit -U "$T/damaged.sock" "$PLUGIN" image="$IMG" </dev/null >"$T/damaged.log" 2>&1; then
	fail "nbdkit started on an image with a damaged superblock"
fi
grep -q "flashctl recover" "$T/damaged.log" || { cat "$T/damaged.log"; fail "no recovery hint from the plugin"; }
[ "$("$PYTHON" "$NBD_CHECKS/image_tool.py" "$IMG" sha256)" = "$before" ] || fail "the plugin wrote to the damaged image"
"$FLASHCTL" recover "$IMG" --rebuild-superblock >/dev/null || fail "flashctl recover --rebuild-superblock"
start_nbdkit
nbd_region_is "$URI" 0 $((64 << 20)) "$T/rnd.img" || fail "data after rebuilding the superblock"
ok "damaged superblock: refused with the recovery path, rebuilt, data back"
stop_nbdkit TERM
