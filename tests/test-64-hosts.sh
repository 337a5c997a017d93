#!/bin/bash
# test-64-hosts.sh - 64 hosts at once, each in its own network namespace.
#
# The test makes a hub namespace with a bridge (10.213.64.1/24, an address
# of the test's own, inside its namespaces only) and runs flashd in it,
# listening on that address (and on the hub's own loopback, for the
# helpers); 64 client namespaces (10.213.64.10 to .73) and 4 more outside
# the allowed network (10.213.64.200 to .203) are joined to the bridge by
# veth pairs.  Nothing is reachable from the host's namespace; every
# namespace (and with it every veth and the bridge) is deleted at exit,
# also on failure.
#
# flashd serves the two ioDimms of a Duo (preset test-1g each, NAND timing
# model on unless TIMING=off) with STARTTLS allowed (PSK) and, on both
# exports, allow = 10.213.64.0/25.  Clients (python3-libnbd, one process
# per namespace; half on dimm0, half on dimm1; every 8th over TLS with a
# PSK): all connect first, then start together and for DURATION seconds
# (default 20) write their own 4 MiB region in 128 KiB requests and read
# each round back, then verify the whole region once more.
#
# Checks: all 64 complete with every byte verified and no error; the 4
# outside clients are refused (NBD_REP_ERR_POLICY: their connect fails) and
# the export is not theirs; flashd is still serving afterwards (a fresh
# client reads a region back) and its log has no error.  Reported, not
# asserted: each client's throughput, Jain's fairness index and the
# min/max ratio over the 64, flashd's peak RSS (VmHWM) and its RSS after.
#
# Skips (exit 77, with the reason) only when network namespaces cannot be
# made (not root, or no CONFIG_NET_NS).
# exclusive: 64 clients and a timed flashd load both cores
# timeout: 400
source "$(dirname "$0")/functions.sh"

NCLIENTS=64
NDENIED=4
DURATION=${DURATION:-20}
REGION_MIB=4
NET=10.213.64
HUB_IP=$NET.1
PORT=10809
pfx=fl64-$$
HUB=$pfx-hub

# ---- namespaces, removed at exit ------------------------------------------
_ns_cleanup() {
	local ns
	# processes first: a namespace with processes in it outlives its name
	for p in "${_pids[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^$pfx-" || true); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
		ip netns delete "$ns" 2>/dev/null || true
	done
}
_test_exit() {
	local rc=$?
	_ns_cleanup
	(
		set +e
		(exit $rc)
		_cleanup
	) || true
	exit $rc
}
trap _test_exit EXIT
trap 'exit 143' TERM INT

# namespaces a killed run of this test left behind (its pid is gone)
for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^fl64-[0-9]+-' || true); do
	p=${ns#fl64-}
	p=${p%%-*}
	if ! kill -0 "$p" 2>/dev/null; then
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
		ip netns delete "$ns" 2>/dev/null || true
	fi
done

[ "$(id -u)" = 0 ] || skip "network namespaces need root (uid $(id -u))"
requires ip
ip netns add "$pfx-probe" 2>"$T/netns.err" ||
	skip "cannot create a network namespace here: $(cat "$T/netns.err")"
ip netns delete "$pfx-probe"

t0=$EPOCHREALTIME
ip netns add "$HUB"
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" addr add "$HUB_IP/24" dev br0
ip -n "$HUB" link set br0 up
# client i: namespace $pfx-cI, eth0 there, hI in the hub on br0
add_host() {
	local i=$1 ip=$2 ns=$pfx-c$1
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	ip -n "$HUB" link add "h$i" type veth peer name eth0 netns "$ns"
	ip -n "$HUB" link set "h$i" master br0 up
	ip -n "$ns" addr add "$ip/24" dev eth0
	ip -n "$ns" link set eth0 up
}
for i in $(seq 1 $NCLIENTS); do
	add_host "$i" "$NET.$((9 + i))"
done
for j in $(seq 1 $NDENIED); do
	add_host "$((NCLIENTS + j))" "$NET.$((199 + j))"
done
ok "$((NCLIENTS + NDENIED + 1)) namespaces and $((NCLIENTS + NDENIED)) veth pairs on a bridge in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
# ---- flashd in the hub -----------------------------------------------------
tls_psk_line fl64 >"$T/keys.psk"
cat >"$T/flashd.conf" <<EOF
[server]
tls = allowed
tls_psk = $T/keys.psk
max_connections = 256

[card duo0]
timing = ${TIMING:-on}

[dimm dimm0]
card = duo0
preset = test-1g
allow = $NET.0/25

[dimm dimm1]
card = duo0
preset = test-1g
allow = $NET.0/25
EOF
# start_flashd (functions.sh) runs $FLASHD: here, flashd inside the hub
# namespace (ip netns exec execs it: $! is flashd's pid)
cat >"$T/flashd-in-hub" <<EOF
#!/bin/sh
exec ip netns exec $HUB $FLASHD "\$@"
EOF
chmod +x "$T/flashd-in-hub"
FLASHD=$T/flashd-in-hub
start_flashd --config "$T/flashd.conf" --listen "$HUB_IP:$PORT"
ok "flashd (pid $FLASHD_PID) listening on $HUB_IP:$PORT in namespace $HUB"
# flashd answers in a client namespace, not in the host's (where this
# machine's network may accept any TCP connection: the probe waits for
# flashd's greeting, NBDMAGIC)
cat >"$T/probe.py" <<'PY'
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    s.settimeout(2)
    got = b""
    while len(got) < 8:
        b = s.recv(8 - len(got))
        if not b:
            break
        got += b
    sys.exit(0 if got == b"NBDMAGIC" else 1)
except OSError:
    sys.exit(1)
PY
ip netns exec "$pfx-c1" "$PYTHON" "$T/probe.py" "$HUB_IP" "$PORT" || fail "no NBD greeting at $HUB_IP:$PORT from client namespace 1"
if "$PYTHON" "$T/probe.py" "$HUB_IP" "$PORT"; then
	fail "flashd at $HUB_IP:$PORT answers in the host's namespace"
fi
ok "$HUB_IP:$PORT reachable from the client namespaces only"

rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$FLASHD_PID/status")

# ---- the clients -----------------------------------------------------------
cat >"$T/client.py" <<'PY'
import json, os, sys, time
import nbd

idx, uri, base, region_mib, go, dur, out = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                            int(sys.argv[4]), sys.argv[5], float(sys.argv[6]),
                                            sys.argv[7])
psk = sys.argv[8] if len(sys.argv) > 8 else None
CH = 128 << 10
n = (region_mib << 20) // CH
res = {"idx": idx, "uri": uri, "tls": bool(psk), "bytes": 0, "secs": 0.0, "rounds": 0, "error": None}
try:
    h = nbd.NBD()
    if psk:
        h.set_tls(nbd.TLS_REQUIRE)
        h.set_tls_psk_file(psk)
        h.set_tls_username("fl64")
    h.connect_uri(uri)
    open(out + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    seed = os.urandom(CH)
    expect = [None] * n
    t0 = time.monotonic()
    r = 0
    end = t0 + dur
    # rounds: write the region, read it back; the clock is looked at after
    # every request, so each client's load stops at the same moment
    while time.monotonic() < end:
        r += 1
        for k in range(n):
            data = b"%08d:%08d:%08d:" % (idx, r, k) + seed[27:]
            h.pwrite(data, base + k * CH)
            expect[k] = data
            res["bytes"] += CH
            if time.monotonic() >= end:
                break
        else:
            for k in range(n):
                got = h.pread(CH, base + k * CH)
                res["bytes"] += CH
                if got != expect[k]:
                    raise RuntimeError("round %d chunk %d: data differs" % (r, k))
                if time.monotonic() >= end:
                    break
    res["secs"] = time.monotonic() - t0
    res["rounds"] = r
    h.flush()
    for k in range(n):
        if expect[k] is not None and h.pread(CH, base + k * CH) != expect[k]:
            raise RuntimeError("final check: chunk %d differs" % k)
    h.shutdown()
except Exception as e:
    res["error"] = "%s: %s" % (type(e).__name__, e)
with open(out, "w") as f:
    json.dump(res, f)
PY

cat >"$T/denied.py" <<'PY'
import sys
import nbd
h = nbd.NBD()
try:
    h.connect_uri(sys.argv[1])
except nbd.Error as e:
    print("refused: %s" % e)
    sys.exit(0)
print("connected to %s: should have been refused" % sys.argv[1])
sys.exit(1)
PY

mkdir -p "$T/res"
for i in $(seq 1 $NCLIENTS); do
	dimm=$(((i - 1) % 2))
	region=$(((i - 1) / 2 + 1)) # each export: regions 1..32
	if [ $((i % 8)) -eq 0 ]; then
		uri="nbds://fl64@$HUB_IP:$PORT/dimm$dimm"
		extra=("$T/keys.psk")
	else
		uri="nbd://$HUB_IP:$PORT/dimm$dimm"
		extra=()
	fi
	ip netns exec "$pfx-c$i" "$PYTHON" "$T/client.py" "$i" "$uri" "$(((region - 1) * REGION_MIB << 20))" \
		"$REGION_MIB" "$T/go" \
		"$DURATION" "$T/res/$i.json" "${extra[@]}" >"$T/res/$i.out" 2>&1 &
	track_pid $!
	cpids[$i]=$!
done
# every client has its connection (or has given up) before the start
for _ in $(seq 1 600); do
	ready=$(find "$T/res" -name '*.ready' | wc -l)
	gone=$(find "$T/res" -name '*.json' | wc -l)
	[ $((ready + gone)) -ge $NCLIENTS ] && break
	sleep 0.1
done
ok "$ready of $NCLIENTS clients connected ($(flashd_connections) connections in flashd)"
touch "$T/go"
t_go=$EPOCHREALTIME
# flashd's anonymous memory (RssAnon: buffers, not the mapped images),
# sampled while the clients run
(
	peak=0
	while kill -0 "$FLASHD_PID" 2>/dev/null && [ ! -e "$T/stop-sampler" ]; do
		a=$(awk '/^RssAnon/ { print $2 }' "/proc/$FLASHD_PID/status" 2>/dev/null || echo 0)
		[ "${a:-0}" -gt "$peak" ] && peak=$a && echo "$peak" >"$T/anon-peak"
		sleep 0.5
	done
) &
track_pid $!

# the outside hosts, while the 64 run
denied_ok=0
for j in $(seq 1 $NDENIED); do
	i=$((NCLIENTS + j))
	if ip netns exec "$pfx-c$i" "$PYTHON" "$T/denied.py" "nbd://$HUB_IP:$PORT/dimm$((j % 2))" \
		>"$T/res/denied$j.out" 2>&1; then
		denied_ok=$((denied_ok + 1))
	else
		echo "outside host $j: $(cat "$T/res/denied$j.out")"
	fi
done
sed 's/^/  outside host: /' "$T/res/denied1.out"

failed=0
for i in $(seq 1 $NCLIENTS); do
	wait "${cpids[$i]}" || true
done
t_all=$(awk -v a="$t_go" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
touch "$T/stop-sampler"
anon_peak=$(cat "$T/anon-peak" 2>/dev/null || echo 0)
flashd_running

# ---- results ---------------------------------------------------------------
rc=0
"$PYTHON" - "$T/res" "$NCLIENTS" >"$T/summary" 2>&1 <<'PY' || rc=$?
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
rows, bad = [], []
for i in range(1, n + 1):
    p = os.path.join(d, "%d.json" % i)
    if not os.path.exists(p):
        bad.append("client %d: no result (%s)" % (i, open(os.path.join(d, "%d.out" % i)).read().strip()[-300:]))
        continue
    r = json.load(open(p))
    if r["error"]:
        bad.append("client %d (%s): %s" % (i, r["uri"], r["error"]))
        continue
    rows.append(r)
print("per-client throughput (MiB/s, writes + verified reads; * = TLS):")
line = []
for r in rows:
    r["mibs"] = r["bytes"] / r["secs"] / 2**20
    line.append("%2d%s %5.2f" % (r["idx"], "*" if r["tls"] else " ", r["mibs"]))
    if len(line) == 8:
        print("  " + "   ".join(line))
        line = []
if line:
    print("  " + "   ".join(line))
if rows:
    x = [r["mibs"] for r in rows]
    jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    print("clients done: %d of %d; total %.1f MiB/s; per client min %.2f, max %.2f, mean %.2f MiB/s"
          % (len(rows), n, sum(x), min(x), max(x), sum(x) / len(x)))
    print("fairness: Jain's index %.3f, min/max %.3f (target >= 0.5 under equal load; reported, not asserted)"
          % (jain, min(x) / max(x)))
    for tls in (False, True):
        y = [r["mibs"] for r in rows if r["tls"] == tls]
        if y:
            print("  %s clients: %d, mean %.2f MiB/s" % ("TLS" if tls else "plain", len(y), sum(y) / len(y)))
for b in bad:
    print("FAILED " + b)
sys.exit(1 if bad or len(rows) != n else 0)
PY
cat "$T/summary"
[ $rc -eq 0 ] || fail "not every client completed with its data verified (see above)"
ok "all $NCLIENTS clients completed, every region verified (wall time ${t_all} s for ${DURATION} s of load)"
[ "$denied_ok" -eq "$NDENIED" ] || fail "only $denied_ok of $NDENIED outside hosts were refused"
ok "$NDENIED hosts outside $NET.0/25 were refused"

hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$FLASHD_PID/status")
rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$FLASHD_PID/status")
anon=$(awk '/^RssAnon/ { print $2 }' "/proc/$FLASHD_PID/status")
file=$(awk '/^RssFile/ { print $2 }' "/proc/$FLASHD_PID/status")
echo "flashd memory: RSS $((rss0 / 1024)) MiB before the clients, peak (VmHWM) $((hwm / 1024)) MiB" \
	"($(((hwm - rss0) / NCLIENTS)) KiB a client above it), $((rss / 1024)) MiB after they left:" \
	"$((anon / 1024)) MiB anonymous, $((file / 1024)) MiB file pages (the NAND images are mapped)"
echo "flashd anonymous memory peak, sampled every 0.5 s while the clients ran: $((anon_peak / 1024)) MiB"

# still serving: a fresh client in namespace 1 reads client 1's region
# back (dimm0, offset 0)
ip netns exec "$pfx-c1" "$PYTHON" -c '
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
b = h.pread(128 << 10, 0)
assert b.startswith(b"%08d:" % 1), b[:40]
h.shutdown()
' "nbd://$HUB_IP:$PORT/dimm0" || fail "flashd does not serve a new client after the 64"
ok "flashd still serves a new client"
check_flashd_log
stop_flashd
ok "flashd stopped cleanly"
