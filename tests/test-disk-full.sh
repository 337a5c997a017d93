#!/bin/bash
# timeout: 300
# A full filesystem under the images is not dying NAND (issue point 6).
# dimm0's image lives on a 64 MiB tmpfs, in a mount namespace this test
# makes (unshare -m; nothing outside it sees the mount).  Flushed data
# first; then more writes than the tmpfs holds.  flashd must: answer the
# writes with an error within seconds (no hang), retire no block, show the
# ioDimm failed with "No space left on device", keep serving dimm1, stop on
# SIGTERM promptly; and after the tmpfs grows, a restart serves everything
# that was flushed and takes writes again.
source "$(dirname "$0")/functions.sh"

command -v unshare >/dev/null && command -v nsenter >/dev/null || fail "unshare/nsenter missing (util-linux)"
SMALL=$T/small
mkdir -p "$SMALL"
# a process that holds the mount namespace with the tmpfs
if [ "$(id -u)" = 0 ]; then ns_flags=(-m); enter_flags=(-m); else ns_flags=(-r -m); enter_flags=(-U -m --preserve-credentials); fi
unshare "${ns_flags[@]}" --propagation private sh -c "mount -t tmpfs -o size=64m tmpfs '$SMALL' && echo ready && exec sleep 100000" >"$T/holder.out" 2>&1 &
HOLDER=$!
track_pid "$HOLDER"
for _ in $(seq 50); do grep -q ready "$T/holder.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$T/holder.out" || fail "cannot make a tmpfs in a mount namespace: $(cat "$T/holder.out")"
in_ns() { nsenter -t "$HOLDER" "${enter_flags[@]}" -- "$@"; }

# flashd runs inside the namespace: a wrapper in place of the binary
cat >"$T/flashd-ns" <<EOF
#!/bin/sh
exec nsenter -t $HOLDER ${enter_flags[*]} -- $FLASHD "\$@"
EOF
chmod +x "$T/flashd-ns"
FLASHD=$T/flashd-ns

dimms_conf "$T/flashd.conf" dimm0.image="$SMALL/dimm0.img"
DATA=$T/data
random_file "$DATA" 16
start_flashd --config "$T/flashd.conf" --timing off
qemu-img convert -n -f raw -O raw "$DATA" "$FLASHD_URI0" || fail "writing the first 16 MiB"
ok "16 MiB written and flushed on a 64 MiB tmpfs ($(in_ns df -h "$SMALL" | tail -1))"

# more than the tmpfs holds, after the flushed 16 MiB: must fail, quickly,
# with an error (a client that reports what the server answers)
t0=$SECONDS
rc=0
timeout 60 "$PYTHON" - "$FLASHD_URI0" >"$T/fill.out" 2>&1 <<'PY' || rc=$?
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
chunk = os.urandom(1 << 20)
for i in range(96):
    try:
        h.pwrite(chunk, (32 << 20) + i * len(chunk))
    except nbd.Error as e:
        print("write %d MiB past 32 MiB failed: %s (%s)" % (i, e.string, e.errno))
        sys.exit(3)
print("all 96 MiB written")
PY
cat "$T/fill.out"
[ $rc -eq 124 ] && fail "writing past the full filesystem hangs (no answer in 60 s)"
[ $rc -eq 3 ] || fail "96 MiB of writes onto a 64 MiB tmpfs did not fail as expected (exit $rc)"
grep -q ENOSPC "$T/fill.out" || fail "the writes failed, but not with ENOSPC"
ok "writes past the full filesystem failed with ENOSPC after $((SECONDS - t0)) s"
flashd_running
flashd_status >"$T/status.json"
"$PYTHON" - "$T/status.json" <<'PY' || fail "status after the disk filled"
import json, sys
st = json.load(open(sys.argv[1]))
d = {x["name"]: x for x in st["dimms"]}
d0 = d["dimm0"]
if d0["state"] != "failed":
    sys.exit("dimm0 state %s, want failed" % d0["state"])
if "No space left on device" not in json.dumps(d0):
    sys.exit("dimm0 status does not say 'No space left on device': %s" % json.dumps(d0)[:400])
if d0["stats"]["blocks_bad_grown"] or d0["stats"]["program_failures"]:
    sys.exit("blocks retired for a full filesystem: %s" % d0["stats"])
if d["dimm1"]["state"] != "online":
    sys.exit("dimm1 is %s" % d["dimm1"]["state"])
print("ok: dimm0 failed with ENOSPC, nothing retired; dimm1 online")
PY
grep -q "retiring" "$T/flashd.log" && fail "flashd retired blocks for a full filesystem"
nbd_region_is "$FLASHD_URI1" 0 4096 zero || fail "dimm1 is not served"
# a new request fails at once
t0=$EPOCHREALTIME
nbdsh_sys -u "$FLASHD_URI0" -c 'h.pwrite(b"x" * 4096, 0)' >/dev/null 2>&1 && fail "a write after the failure succeeded"
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
ok "a write after the failure is answered with an error in $secs s"
t0=$SECONDS
stop_flashd
ok "SIGTERM with the filesystem full: stopped in $((SECONDS - t0)) s"

# space freed: everything flushed is there, writes work again
in_ns mount -o remount,size=1200m "$SMALL" || fail "growing the tmpfs"
start_flashd --config "$T/flashd.conf" --timing off
nbd_region_is "$FLASHD_URI0" 0 $((16 << 20)) "$DATA" || fail "flushed data after freeing space"
nbdsh_sys -u "$FLASHD_URI0" -c '
h.pwrite(b"y" * 65536, 32 << 20)
h.flush()
assert h.pread(65536, 32 << 20) == b"y" * 65536' || fail "writes after freeing space"
[ "$(dimm_stat dimm0 blocks_bad_grown)" = 0 ] || fail "grown bad blocks after the restart"
stop_flashd
ok "after freeing space: flushed data intact, writes work, no block retired"
