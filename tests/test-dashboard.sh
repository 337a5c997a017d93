#!/bin/bash
# timeout: 300
# The live dashboard (issue 13) in Debian's headless Chromium against a
# flashd under load: the page is served on the control socket (/ and
# /dashboard/...), polls /v1/status every second and shows per-ioDimm IOPS,
# bandwidth, latency and temperature charts and the status table.
#   1. GET / is the page (text/html, a Content-Security-Policy allowing only
#      this origin), its script and style are served, nothing in them comes
#      from another host; an unknown dashboard file is 404, POST / is 405.
#   2. Chromium (reaching the unix socket through a small TCP forwarder,
#      started and killed by pid) loads it while fio writes to dimm0 through
#      fio's nbd engine: two DOM dumps a few seconds apart have taken several
#      samples each; dimm0's request count grows between them and lies
#      between what /v1/status said before and after; its IOPS, MB/s and
#      latency are above 0 while dimm1's IOPS is 0; the temperature is shown
#      in degrees (the simulator's sensor); the status table has a row per
#      ioDimm.  A screenshot is
#      taken (UPDATE_SCREENSHOT=1 copies it to doc/dashboard.png).
#   3. Once fio is stopped, a third dump shows dimm0's IOPS back at 0.
#   4. Pages of other sites in the same Chromium: a form POST and fetches
#      (no-cors, and with X-Flashd-Action, which needs a CORS preflight) from
#      another origin to the forwarder change nothing (dimm1's beacon stays
#      off; flashd logs the refusal); a name resolved to 127.0.0.1 (DNS
#      rebinding, by --host-resolver-rules) gets 403 instead of the status.
# Chromium's --virtual-time-budget stops the page's clock while a fetch is
# pending, so the forwarder passes a /v1/status request on only PACE (1) s
# after the previous one: the page's 1 s is then 1 s of real time between
# two snapshots, and its rates are true rates.
# Skips (exit 77, with the reason) when chromium cannot start here; without
# chromium it skips, or fails under make check (scripts/deps.sh check
# installs it).
source "$(dirname "$0")/functions.sh"

[ -n "${CHROMIUM:-}" ] || requires chromium
CHROMIUM=${CHROMIUM:-$(command -v chromium)}
# a new profile each time; crash reports and caches in $T, not in $HOME
chromium() {
	local prof
	prof=$(mktemp -d "$T/chromium.XXXXXX")
	HOME=$T/home XDG_CONFIG_HOME=$T/home/.config XDG_CACHE_HOME=$T/home/.cache \
	timeout 60 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$prof" --disable-dev-shm-usage --hide-scrollbars "$@" 2>>"$T/chromium.log"
}
if ! chromium --dump-dom 'data:text/html,<p id="x">chromium-works</p>' | grep -q chromium-works; then
	tail -n 5 "$T/chromium.log"
	skip "chromium does not start here (its last lines above)"
fi

cat >"$T/flashd.conf" <<EOF
[card duo0]
model = ioDrive Duo (simulated)
[dimm dimm0]
card = duo0
preset = test-1g
[dimm dimm1]
card = duo0
preset = test-1g
EOF
start_flashd --config "$T/flashd.conf" --timing off

# ---- 1. the page and its files ----------------------------------------------------------
ctl() { curl -sS --max-time 20 --unix-socket "$FLASHD_CTL" "$@"; }
ctl -D "$T/h" -o "$T/index.html" http://localhost/
grep -q '^HTTP/1.1 200' "$T/h" || fail "GET /: $(head -1 "$T/h")"
grep -qi '^Content-Type: text/html' "$T/h" || fail "GET /: no text/html Content-Type"
grep -qi "^Content-Security-Policy: default-src 'self'" "$T/h" || fail "GET /: no Content-Security-Policy"
for f in dashboard.js dashboard.css; do
	code=$(ctl -o "$T/$f" -w '%{http_code}' "http://localhost/dashboard/$f")
	[ "$code" = 200 ] || fail "GET /dashboard/$f: $code"
	cmp -s "$T/$f" "$top/server/dashboard/$f" || fail "/dashboard/$f is not server/dashboard/$f"
done
cmp -s "$T/index.html" "$top/server/dashboard/index.html" || fail "/ is not server/dashboard/index.html"
[ "$(ctl -o /dev/null -w '%{http_code}' http://localhost/dashboard)" = 200 ] || fail "GET /dashboard"
if grep -Eno '(https?:)?//[a-z0-9.-]+\.[a-z]{2,}' "$T/index.html" "$T/dashboard.js" "$T/dashboard.css"; then
	fail "the dashboard refers to another host"
fi
[ "$(ctl -o /dev/null -w '%{http_code}' http://localhost/dashboard/nope.js)" = 404 ] || fail "unknown file not 404"
[ "$(ctl -o /dev/null -w '%{http_code}' -X POST http://localhost/)" = 405 ] || fail "POST / not 405"
ok "the page, its script and style are served from the control socket, nothing from elsewhere"

# ---- 2. in Chromium, under load --------------------------------------------------------
PACE=1
FWD_PORT=$(free_port)
cat >"$T/fwd.py" <<'PY'
# TCP (127.0.0.1:PORT) -> flashd's control socket, one request per
# connection (Connection: close).  A /v1/status request is passed on PACE s
# after the previous one was (never earlier): the snapshots are PACE s apart
# in real time, while the page's virtual clock counts its own 1 s.
import socket, socketserver, sys, threading, time
port, ctl, pace = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
lock, last = threading.Lock(), [0.0]
class H(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        if not line:
            return
        hdrs, n = [], 0
        while True:
            h = self.rfile.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k = h.split(b":", 1)[0].strip().lower()
            if k == b"content-length":
                n = int(h.split(b":", 1)[1])
            if k not in (b"connection", b"keep-alive"):
                hdrs.append(h)
        body = self.rfile.read(n) if n else b""
        if line.split()[1].startswith(b"/v1/status"):
            with lock:
                time.sleep(max(0.0, last[0] + pace - time.monotonic()))
                last[0] = time.monotonic()
        u = socket.socket(socket.AF_UNIX)
        u.connect(ctl)
        u.sendall(line + b"".join(hdrs) + b"Connection: close\r\n\r\n" + body)
        resp = b""
        while True:
            b = u.recv(65536)
            if not b:
                break
            resp += b
        u.close()
        self.wfile.write(resp)
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S(("127.0.0.1", port), H).serve_forever()
PY
"$PYTHON" "$T/fwd.py" "$FWD_PORT" "$FLASHD_CTL" "$PACE" 2>>"$T/fwd.log" &
FWD_PID=$!
track_pid "$FWD_PID"
for i in $(seq 1 50); do
	curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$FWD_PORT/v1/version" && break
	sleep 0.1
done
URL=http://127.0.0.1:$FWD_PORT/

(cd "$T" && exec fio --name=load --ioengine=nbd --uri="$FLASHD_URI0" --rw=randrw --rwmixread=30 \
	--bs=4k --iodepth=8 --size=128m --time_based --runtime=300 --output="$T/fio.out") >/dev/null 2>&1 &
FIO_PID=$!
track_pid "$FIO_PID"
sleep 2

# status_ops NAME: requests since start on that ioDimm, from /v1/status
status_ops() {
	ctl http://localhost/v1/status | "$PYTHON" -c '
import json, sys
for d in json.load(sys.stdin)["dimms"]:
    if d["name"] == sys.argv[1]:
        print(sum(d["io"]["ops"].values()))' "$1"
}
# dump FILE: the page after 5 s of (paced) virtual time
dump() {
	chromium --virtual-time-budget=5000 --window-size=1200,800 --dump-dom "$URL" >"$1" ||
		fail "chromium --dump-dom failed: $(grep -v dbus "$T/chromium.log" | tail -n 5)"
}
# fig FILE ID: data-value of element ID
fig() {
	"$PYTHON" - "$1" "$2" <<'PY'
import re, sys
m = re.search(r'id="%s"[^>]*data-value="([^"]*)"' % re.escape(sys.argv[2]), open(sys.argv[1]).read())
if not m:
    sys.exit("no element with id %s in the page" % sys.argv[2])
print(m.group(1))
PY
}
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }

t0=$EPOCHREALTIME
before=$(status_ops dimm0)
dump "$T/dom1.html"
sleep 2
dump "$T/dom2.html"
after=$(status_ops dimm0)
echo "two dumps in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
kill -0 "$FIO_PID" 2>/dev/null || fail "fio ended before the second dump (runtime too short here?)"
for d in 1 2; do
	s=$(fig "$T/dom$d.html" samples)
	[ "$s" -ge 3 ] || fail "dump $d: the page took $s samples, want >= 3: $(grep -o 'id="error"[^<]*' "$T/dom$d.html")"
	for id in iops mbps lat ops temp; do
		echo "dump $d: dimm0 $id = $(fig "$T/dom$d.html" d-dimm0-$id), dimm1 $id = $(fig "$T/dom$d.html" d-dimm1-$id)"
	done
done
o1=$(fig "$T/dom1.html" d-dimm0-ops)
o2=$(fig "$T/dom2.html" d-dimm0-ops)
gt "$o2" "$o1" || fail "dimm0's request count did not move between the dumps: $o1, $o2"
gt "$o1" "$before" || [ "$o1" = "$before" ] || fail "dump 1's count $o1 is below /v1/status's before it ($before)"
gt "$after" "$o2" || [ "$o2" = "$after" ] || fail "dump 2's count $o2 is above /v1/status's after it ($after)"
ok "dimm0's request count moves: $before (status) <= $o1 (dump 1) < $o2 (dump 2) <= $after (status)"
for id in iops mbps lat; do
	v=$(fig "$T/dom2.html" d-dimm0-$id)
	gt "$v" 0 || fail "dimm0's $id under load is $v"
done
[ "$(fig "$T/dom2.html" d-dimm1-iops)" = 0.0 ] || fail "dimm1 (no load) shows IOPS $(fig "$T/dom2.html" d-dimm1-iops)"
ok "under load dimm0 shows $(fig "$T/dom2.html" d-dimm0-iops) IOPS, $(fig "$T/dom2.html" d-dimm0-mbps) MB/s, latency $(fig "$T/dom2.html" d-dimm0-lat) ns; idle dimm1 0 IOPS"
for n in dimm0 dimm1; do
	t=$(fig "$T/dom2.html" d-$n-temp)
	gt "$t" 0 && gt 100 "$t" || fail "$n's temperature is '$t' (the simulator's sensor: ambient 25 C and up)"
	grep -q "id=\"d-$n-temp\"[^>]*>[0-9][0-9.]* [^<]*C<" "$T/dom2.html" || fail "$n's temperature is not shown in degrees"
	grep -q "<tr id=\"row-$n\"><td>$n</td>.*online" "$T/dom2.html" || fail "no online status row for $n"
	grep -q "id=\"c-$n-iops\"" "$T/dom2.html" || fail "no IOPS chart for $n"
done
ok "temperature: $(fig "$T/dom2.html" d-dimm0-temp) C and $(fig "$T/dom2.html" d-dimm1-temp) C; the status table has both ioDimms online"

# (UPDATE_SCREENSHOT=1: 30 s of history in the charts).  While every
# chromium run shared one profile, the screenshot hung until the timeout in
# 3 of 5 runs on a busy 2-core machine (the DOM dumps never did; cause not
# found); with a new profile each time it has not, but a second try stays.
shot() {
	chromium --virtual-time-budget="$([ "${UPDATE_SCREENSHOT:-}" = 1 ] && echo 30000 || echo 5000)" \
		--run-all-compositor-stages-before-draw --window-size=1200,800 \
		--screenshot="$T/dashboard.png" "$URL" >/dev/null
}
if ! shot; then
	echo "chromium --screenshot failed or hung, once: trying again"
	shot || fail "chromium --screenshot failed: $(grep -v dbus "$T/chromium.log" | tail -n 5)"
fi
[ "$(head -c 8 "$T/dashboard.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || fail "the screenshot is not a PNG"
[ "$(stat -c %s "$T/dashboard.png")" -gt 10000 ] || fail "the screenshot is suspiciously small"
if [ "${UPDATE_SCREENSHOT:-}" = 1 ]; then
	cp "$T/dashboard.png" "$top/doc/dashboard.png"
	echo "doc/dashboard.png updated"
fi
ok "screenshot taken ($(stat -c %s "$T/dashboard.png") bytes)"

# ---- 3. after the load ------------------------------------------------------------------
kill -0 "$FIO_PID" 2>/dev/null || fail "fio ended early: $(tail -n 5 "$T/fio.out")"
kill "$FIO_PID"
wait "$FIO_PID" || true
dump "$T/dom3.html"
[ "$(fig "$T/dom3.html" d-dimm0-iops)" = 0.0 ] || fail "dimm0 still shows IOPS $(fig "$T/dom3.html" d-dimm0-iops) after the load"
[ "$(fig "$T/dom3.html" d-dimm0-ops)" = "$(status_ops dimm0)" ] || fail "after the load the page's count differs from /v1/status"
ok "after the load dimm0's IOPS is back at 0 and its count equals /v1/status's"

# ---- 4. pages of other sites in the same browser ---------------------------------------
# A page of another origin (a Python http.server on another port) posts a form to the
# forwarder and sends fetches (no-cors; with X-Flashd-Action, which needs a CORS
# preflight); a page whose name resolves to the forwarder (DNS rebinding, by
# --host-resolver-rules) reads /v1/status.  dimm1's beacon must stay off and the
# rebound page must get no status.
beacon1() { ctl http://localhost/v1/dimms/dimm1 | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["beacon"])'; }
[ "$(beacon1)" = False ] || fail "dimm1's beacon is on before the pages ran"
mkdir "$T/evil"
U="$URL"v1/dimms/dimm1/beacon?state=on
cat >"$T/evil/form.html" <<EOF
<form id="f" method="POST" action="$U"><input name="a" value="1"></form>
<script>document.getElementById("f").submit();</script>
EOF
cat >"$T/evil/fetch.html" <<EOF
<p id="r">pending</p>
<script>
(async () => {
	const out = [];
	try { await fetch("$U", { method: "POST", mode: "no-cors", body: "x" }); out.push("no-cors:sent"); }
	catch (e) { out.push("no-cors:" + e.name); }
	try { const r = await fetch("$U", { method: "POST", headers: { "X-Flashd-Action": "1" } }); out.push("cors:" + r.status); }
	catch (e) { out.push("cors:" + e.name); }
	document.getElementById("r").textContent = out.join(" ");
})();
</script>
EOF
EVIL_PORT=$(free_port)
(cd "$T/evil" && exec "$PYTHON" -m http.server --bind 127.0.0.1 "$EVIL_PORT") >/dev/null 2>&1 &
EVIL_PID=$!
track_pid "$EVIL_PID"
for i in $(seq 1 50); do
	curl -s -o /dev/null --max-time 5 "http://127.0.0.1:$EVIL_PORT/form.html" && break
	sleep 0.1
done
chromium --virtual-time-budget=5000 --dump-dom "http://127.0.0.1:$EVIL_PORT/form.html" >"$T/evil-form.html" ||
	fail "chromium on the form page: $(tail -n 5 "$T/chromium.log")"
chromium --virtual-time-budget=5000 --dump-dom "http://127.0.0.1:$EVIL_PORT/fetch.html" >"$T/evil-fetch.html" ||
	fail "chromium on the fetch page: $(tail -n 5 "$T/chromium.log")"
echo "the form page's result: $(grep -o '"error": "[^"]*"' "$T/evil-form.html" || cat "$T/evil-form.html")"
echo "the fetch page's result: $(grep -o '<p id="r">[^<]*' "$T/evil-fetch.html")"
[ "$(beacon1)" = False ] || fail "a page of another site turned dimm1's beacon on"
grep -q "control socket: /v1/dimms/dimm1/beacon refused: an action needs the header X-Flashd-Action" "$T/flashd.log" ||
	fail "the form's POST did not reach flashd or was not refused"
grep -q '<p id="r">no-cors:sent cors:TypeError</p>' "$T/evil-fetch.html" ||
	fail "the fetches of another site: $(grep -o '<p id="r">[^<]*' "$T/evil-fetch.html")"
chromium --virtual-time-budget=3000 --host-resolver-rules="MAP rebound.test 127.0.0.1" \
	--dump-dom "http://rebound.test:$FWD_PORT/v1/status" >"$T/rebound.html" ||
	fail "chromium on the rebound name: $(tail -n 5 "$T/chromium.log")"
grep -q "is not localhost, 127.x.y.z or \[::1\]" "$T/rebound.html" && ! grep -q '"dimms"' "$T/rebound.html" ||
	fail "a rebound name read /v1/status: $(head -c 300 "$T/rebound.html")"
kill "$EVIL_PID"
wait "$EVIL_PID" 2>/dev/null || true
ok "pages of other sites: the form and fetches are refused (beacon still off), a rebound name reads nothing"

kill "$FWD_PID" 2>/dev/null || true
wait "$FWD_PID" 2>/dev/null || true
stop_flashd
check_flashd_log
echo "test-dashboard: all checks passed"
