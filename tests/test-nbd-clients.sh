#!/bin/bash
# timeout: 300
# quick
# flashd driven by real NBD clients, over TCP (127.0.0.1) and the unix socket:
#   nbdinfo --list (both exports, sizes, descriptions, block sizes)
#   nbdinfo --map  (hole,zero when fresh and after TRIM; data after writes)
#   qemu-img convert / compare of a random image, and of a sparse one
#   qemu-io reads/writes/discards/write_zeroes with pattern checks, edges
#   nbdcopy file -> export -> file (TCP and unix), export -> export
#   (nbdcopy's WRITE_ZEROES of up to 128 MiB over data: zeroed, compared)
source "$(dirname "$0")/functions.sh"

SIZE=858992640
start_flashd --preset test-1g --timing off
TCP=nbd://127.0.0.1:$FLASHD_PORT
UNIX="nbd+unix:///?socket=$FLASHD_SOCK"

# ---- nbdinfo --list ------------------------------------------------------------
for srv in "$TCP" "$UNIX"; do
	nbdinfo --list --json "$srv" >"$T/list.json" || fail "nbdinfo --list $srv"
	$PYTHON - "$T/list.json" "$SIZE" <<'PY' || fail "nbdinfo --list $srv"
import json, sys
d = json.load(open(sys.argv[1]))
size = int(sys.argv[2])
ex = {e["export-name"]: e for e in d["exports"]}
assert sorted(ex) == ["dimm0", "dimm1"], "exports listed: %s" % sorted(ex)
assert d["protocol"] == "newstyle-fixed" and d["structured"], d
for name, e in ex.items():
    assert e["export-size"] == size, "%s: size %s" % (name, e["export-size"])
    assert e.get("description"), "%s: no description" % name
    assert name in e["description"], "%s: description %r" % (name, e["description"])
    assert "base:allocation" in e.get("contexts", []), "%s: contexts %s" % (name, e.get("contexts"))
    assert e["block_size_minimum"] == 512 and e["block_size_preferred"] == 4096, e
    assert e["block_size_maximum"] == 32 << 20, e
    assert not e["is_read_only"] and e["can_trim"] and e["can_zero"] and e["can_flush"], e
    print("   %s: %d bytes, %r" % (name, e["export-size"], e["description"]))
PY
done
ok "nbdinfo --list shows dimm0 and dimm1 with sizes and descriptions (TCP and unix)"
[ "$(nbdinfo --size "$FLASHD_URI1")" = "$SIZE" ] || fail "nbdinfo --size dimm1"
[ "$(nbdinfo --size "$FLASHD_UNIX_URI0")" = "$SIZE" ] || fail "nbdinfo --size dimm0 (unix)"

# ---- nbdinfo --map ----------------------------------------------------------------
# map_check URI "START LEN TYPE" ...: every listed range has exactly that type
map_check() {
	local uri=$1
	shift
	nbdinfo --map --json "$uri" >"$T/map.json" || fail "nbdinfo --map $uri"
	$PYTHON - "$T/map.json" "$@" <<'PY' || { nbdinfo --map "$uri" | head -20; fail "nbdinfo --map $uri"; }
import json, sys
m = json.load(open(sys.argv[1]))
pos = 0
for e in m:   # contiguous, from 0
    assert e["offset"] == pos, "map not contiguous at %d" % pos
    pos += e["length"]
for spec in sys.argv[2:]:
    start, length, want = spec.split()
    start, length, want = int(start), int(length), int(want)
    for e in m:
        a, b = e["offset"], e["offset"] + e["length"]
        if a < start + length and start < b and e["type"] != want:
            sys.exit("[%d,+%d) has type %d (%s) in the map, want %d" % (a, b - a, e["type"], e.get("description"), want))
PY
}
M=$((1 << 20))
map_check "$FLASHD_URI0" "0 $SIZE 3"
ok "nbdinfo --map: a fresh export is all hole,zero"
nbdsh_sys -u "$FLASHD_URI0" -c "
h.pwrite(b'\xa5' * (4 << 20), 0)
h.pwrite(b'\x5a' * (1 << 20), 64 << 20)
h.flush()
"
map_check "$FLASHD_URI0" "0 $((4 * M)) 0" "$((4 * M)) $((60 * M)) 3" "$((64 * M)) $M 0" "$((65 * M)) $((SIZE - 65 * M)) 3"
trimmed0=$(dimm_stat dimm0 host_bytes_trimmed)
nbdsh_sys -u "$FLASHD_UNIX_URI0" -c "h.trim(2 << 20, 1 << 20); h.trim(1 << 20, 64 << 20); h.flush()"
map_check "$FLASHD_URI0" "0 $M 0" "$M $((2 * M)) 3" "$((3 * M)) $M 0" "$((4 * M)) $((SIZE - 4 * M)) 3"
trimmed1=$(dimm_stat dimm0 host_bytes_trimmed)
[ "$((trimmed1 - trimmed0))" -ge $((3 * M)) ] || fail "host_bytes_trimmed grew by $((trimmed1 - trimmed0)), want >= 3 MiB"
nbdsh_sys -u "$FLASHD_URI0" -c "
assert h.pread(2 << 20, 1 << 20) == bytes(2 << 20), 'trimmed range does not read as zeroes'
assert h.pread(1 << 20, 0) == b'\xa5' * (1 << 20)
"
ok "nbdinfo --map: data after writes, holes after TRIM (trim counter +$((trimmed1 - trimmed0)))"

# ---- qemu-img convert / compare ------------------------------------------------------
random_file "$T/rand.img" 96
qemu-img convert -p -n -f raw -O raw "$T/rand.img" "$FLASHD_URI0" >/dev/null || fail "qemu-img convert into dimm0"
qemu-img compare -f raw -F raw "$T/rand.img" "$FLASHD_URI0" || fail "qemu-img compare over TCP"
qemu-img compare -f raw -F raw "$T/rand.img" "$FLASHD_UNIX_URI0" || fail "qemu-img compare over unix"
ok "qemu-img convert of a 96 MiB random image, compare over TCP and unix"
# a sparse image: data islands in zeroes; qemu-img writes zeroes as zeroes
$PYTHON - "$T/sparse.img" <<'PY'
import os, sys
with open(sys.argv[1], "wb") as f:
    f.truncate(64 << 20)
    for i in range(0, 64, 8):
        f.seek(i << 20)
        f.write(os.urandom(1 << 20))
PY
qemu-img convert -n -f raw -O raw "$T/sparse.img" "$FLASHD_UNIX_URI1" || fail "qemu-img convert sparse into dimm1"
qemu-img compare -f raw -F raw "$T/sparse.img" "$FLASHD_URI1" || fail "qemu-img compare sparse"
qemu-img map --output=json -f raw "$FLASHD_URI1" >"$T/qmap.json" || fail "qemu-img map"
$PYTHON - "$T/qmap.json" <<'PY' || fail "qemu-img map of dimm1"
import json, sys
m = json.load(open(sys.argv[1]))
M = 1 << 20
for e in m:
    a, b = e["start"], e["start"] + e["length"]
    for i in range(0, 64, 8):
        if a < (i + 1) * M and i * M < b:
            assert e["data"] and not e["zero"], "data island %d MiB mapped as %s" % (i, e)
    if e["zero"]:
        continue
    # everything else must be zero
    for i in range(0, 64):
        if i % 8 and a < (i + 1) * M and i * M < b:
            raise SystemExit("zero MiB %d is mapped as data: %s" % (i, e))
print("   qemu-img map: %d extents" % len(m))
PY
ok "qemu-img convert of a sparse image: compare, and zero ranges map as zero"

# ---- qemu-io ---------------------------------------------------------------------------
qio() {
	local out
	out=$(qemu-io -f raw -d unmap "$@" 2>&1) || { echo "$out"; return 1; }
	if grep -qiE 'fail|error' <<<"$out"; then
		echo "$out"
		return 1
	fi
}
B=$((128 * M))
qio "$FLASHD_URI1" -c "write -P 0xab $B 1M" -c "read -P 0xab $B 1M" \
	-c "write -P 0xcd $((B + M)) 64k" -c "read -P 0xcd $((B + M)) 64k" \
	-c "write -f -P 0x11 $((B + 2 * M)) 4k" -c "read -P 0x11 $((B + 2 * M)) 4k" \
	-c "write -z $((B + 3 * M)) 1M" -c "read -P 0 $((B + 3 * M)) 1M" \
	-c "write -P 0x22 $((B + 4 * M)) 1M" -c "write -z -u $((B + 4 * M)) 512k" \
	-c "read -P 0 $((B + 4 * M)) 512k" -c "read -P 0x22 $((B + 4 * M + 512 * 1024)) 512k" \
	-c "write -P 0x33 $((B + 5 * M)) 1M" -c "discard $((B + 5 * M)) 1M" -c "read -P 0 $((B + 5 * M)) 1M" \
	-c "aio_write -P 0x44 $((B + 6 * M)) 256k" -c "aio_write -P 0x45 $((B + 6 * M + 256 * 1024)) 256k" -c "aio_flush" \
	-c "read -P 0x44 $((B + 6 * M)) 256k" -c "read -P 0x45 $((B + 6 * M + 256 * 1024)) 256k" \
	-c "writev -P 0x55 $((B + 7 * M)) 4k 8k 512" -c "readv -P 0x55 $((B + 7 * M)) 512 12k" \
	-c "write -P 0x66 $((B + 8 * M + 512)) 512" -c "read -P 0 $((B + 8 * M)) 512" \
	-c "read -P 0x66 $((B + 8 * M + 512)) 512" -c "read -P 0 $((B + 8 * M + 1024)) 3k" \
	-c "flush" ||
	fail "qemu-io pattern checks on dimm1"
qio "$FLASHD_UNIX_URI1" -c "read -P 0xab $B 1M" -c "read -P 0 $((B + 3 * M)) 1M" -c "read -P 0x11 $((B + 2 * M)) 4k" ||
	fail "qemu-io pattern checks over unix"
qio "$FLASHD_URI1" -c "write -P 0x77 $((SIZE - 512)) 512" -c "read -P 0x77 $((SIZE - 512)) 512" \
	-c "write -P 0x78 $((SIZE - M)) 1M" -c "read -P 0x78 $((SIZE - M)) 1M" ||
	fail "qemu-io at the last sector"
if qemu-io -f raw "$FLASHD_URI1" -c "write -P 0x11 $SIZE 512" >"$T/qio.out" 2>&1 &&
	! grep -qiE 'fail|error' "$T/qio.out"; then
	fail "qemu-io: a write past the end succeeded"
fi
if qemu-io -f raw "$FLASHD_URI1" -c "read $SIZE 512" >"$T/qio.out" 2>&1 &&
	! grep -qiE 'fail|error' "$T/qio.out"; then
	fail "qemu-io: a read past the end succeeded"
fi
ok "qemu-io: write/read/aio/writev/write_zeroes/discard with patterns, last sector, past the end"

# ---- nbdcopy ---------------------------------------------------------------------------------
random_file "$T/copy.img" 80
nbdcopy --flush "$T/copy.img" "$FLASHD_URI0" || fail "nbdcopy file -> dimm0 (TCP)"
nbdcopy "$FLASHD_URI0" "$T/back-tcp.img" || fail "nbdcopy dimm0 (TCP) -> file"
cmp -n $((80 * M)) "$T/back-tcp.img" "$T/copy.img" || fail "nbdcopy round trip over TCP differs"
[ "$(stat -c %s "$T/back-tcp.img")" = "$SIZE" ] || fail "copied export has the wrong size"
cmp -s -i $((96 * M)):0 -n $((SIZE - 96 * M)) "$T/back-tcp.img" /dev/zero ||
	fail "dimm0 beyond what was written (96 MiB) is not zero"
rm -f "$T/back-tcp.img"
nbdcopy --flush --connections=2 --requests=32 --request-size=1048576 "$T/copy.img" "$FLASHD_UNIX_URI1" ||
	fail "nbdcopy file -> dimm1 (unix)"
nbdcopy "$FLASHD_UNIX_URI1" "$T/back-unix.img" || fail "nbdcopy dimm1 (unix) -> file"
cmp -n $((80 * M)) "$T/back-unix.img" "$T/copy.img" || fail "nbdcopy round trip over unix differs"
rm -f "$T/back-unix.img"
ok "nbdcopy file -> export -> file over TCP and unix"
# nbdcopy 1.14 zeroes what are holes in the source with WRITE_ZEROES of up
# to 128 MiB, beyond the advertised 32 MiB maximum block size; flashd takes
# any length for payload-less commands (doc/attaching.md, "Limits a client sees").
# dimm1 holds data where dimm0 has holes (the qemu-io patterns, its last
# MiB), so the compare below shows those long zeroes landed
! qemu-img compare -q -f raw -F raw "$FLASHD_URI0" "$FLASHD_UNIX_URI1" ||
	fail "dimm1 equals dimm0 before nbdcopy: nothing would show the zeroes"
zeroed=$(dimm_stat dimm1 host_bytes_zeroed)
nbdcopy --flush "$FLASHD_UNIX_URI0" "$FLASHD_URI1" || fail "nbdcopy dimm0 -> dimm1"
zeroed=$(($(dimm_stat dimm1 host_bytes_zeroed) - zeroed))
echo "nbdcopy zeroed $((zeroed / M)) MiB of dimm1"
[ "$zeroed" -gt $((32 * M)) ] || fail "nbdcopy zeroed only $zeroed bytes of dimm1"
qemu-img compare -f raw -F raw "$FLASHD_URI0" "$FLASHD_UNIX_URI1" || fail "dimm1 differs from dimm0 after nbdcopy"
ok "nbdcopy export -> export, compared with qemu-img"

wait_connections 0 10
flashd_running
stop_flashd
check_flashd_log
ok "flashd stopped cleanly"
