#!/bin/bash
# timeout: 240
# Prometheus scrapes flashd as shipped (issue 36):
#   1. deploy/prometheus: `promtool check config` of prometheus.yml (with
#      its rule file), `promtool check rules` of flashd-alerts.yml and
#      `promtool test rules` of flashd-alerts.test.yml (each alert fires for
#      the series that should make it, after its "for", not before).
#   2. metrics_listen (read-only HTTP): GET /metrics (the control socket's
#      families), /v1/status, /v1/history and the dashboard answer; every
#      other path (actions, reload, one ioDimm) is 404 and POST is refused;
#      a Host that is not an IP, localhost or a metrics_host_names name is
#      403 (DNS rebinding), and a name added by `flashctl reload` is then
#      served; metrics_allow without the client's address (set by a reload)
#      is 403, logged; the reload back serves it again.
#   3. Debian's Prometheus (build/tools/prometheus, from the package, by
#      scripts/deps.sh check) with deploy/prometheus as shipped (its target
#      and intervals set for the test) scrapes the listener: up == 1 and
#      flashd_dimm_health; dimm1 at 90 C (a thermal stop) fires
#      FlashdThermalStop and FlashdDimmDegraded for dimm1 alone; cooled,
#      both resolve.
source "$(dirname "$0")/functions.sh"

PATH=$top/build/tools:$PATH
requires promtool prometheus # scripts/deps.sh check puts them in build/tools
P=$top/deploy/prometheus

# ---- 1. the shipped files ----------------------------------------------------------------
promtool check config "$P/prometheus.yml" || fail "promtool check config deploy/prometheus/prometheus.yml"
promtool check rules "$P/flashd-alerts.yml" || fail "promtool check rules deploy/prometheus/flashd-alerts.yml"
promtool test rules "$P/flashd-alerts.test.yml" || fail "promtool test rules deploy/prometheus/flashd-alerts.test.yml"
n=$(grep -c '^      - alert:' "$P/flashd-alerts.yml")
for a in $(sed -n 's/^      - alert: //p' "$P/flashd-alerts.yml"); do
	grep -q "alertname: $a\$" "$P/flashd-alerts.test.yml" || fail "alert $a has no test in flashd-alerts.test.yml"
done
ok "deploy/prometheus: config and $n alert rules check, each alert tested and passing"

# ---- 2. the read-only listener ------------------------------------------------------------
MPORT=$(free_port)
write_conf() { # write_conf ALLOW [HOST NAMES]
	cat >"$T/flashd.conf" <<EOF
[server]
fault_injection = yes
metrics_listen = 127.0.0.1:$MPORT
metrics_allow = $1
${2:+metrics_host_names = $2}
[dimm dimm0]
preset = test-64m
[dimm dimm1]
preset = test-64m
EOF
}
write_conf "127.0.0.0/8 ::1"
start_flashd --config "$T/flashd.conf" --timing off
M=http://127.0.0.1:$MPORT
code() { curl -s -o "$T/body" -w '%{http_code}' --max-time 20 "$@"; }
for path in /metrics /v1/status /v1/history / /dashboard /dashboard/dashboard.js; do
	[ "$(code "$M$path")" = 200 ] || fail "GET $path on the metrics listener: $(cat "$T/body")"
done
curl -sf "$M/metrics" | grep '^# TYPE' | sort >"$T/fam-m"
curl -sf --unix-socket "$FLASHD_CTL" http://localhost/metrics | grep '^# TYPE' | sort >"$T/fam-c"
cmp -s "$T/fam-m" "$T/fam-c" || fail "the listener's /metrics families differ from the control socket's: $(diff "$T/fam-c" "$T/fam-m" | head -5)"
for path in /v1/dimms/dimm0 /v1/version /v1/reload /v1/dimms/dimm0/detach /nope; do
	[ "$(code "$M$path")" = 404 ] || fail "GET $path on the metrics listener is not 404"
done
for path in /v1/reload /v1/dimms/dimm0/detach /metrics; do
	c=$(code -X POST -H 'X-Flashd-Action: 1' "$M$path")
	[ "$c" = 405 ] || [ "$c" = 501 ] || fail "POST $path on the metrics listener: $c"
done
"$FLASHCTL" status --control "$FLASHD_CTL" dimm0 | grep -q "State: online" || fail "dimm0 is not online after the POSTs"
ok "metrics listener: GET of /metrics ($(wc -l <"$T/fam-m") families, as the control socket's), /v1/status, /v1/history, the dashboard; 404 elsewhere, POST refused, nothing acted"

[ "$(code -H 'Host: rebound.example' "$M/v1/status")" = 403 ] || fail "a rebound Host read the status"
grep -q "metrics_host_names" "$T/body" || fail "the 403 does not say which key to set: $(cat "$T/body")"
for h in "127.0.0.1:$MPORT" "localhost:$MPORT" "[::1]:$MPORT" "$(hostname)"; do
	[ "$(code -H "Host: $h" "$M/metrics")" = 200 ] || fail "Host $h refused"
done
write_conf "127.0.0.0/8 ::1" "scrape.example node1.example"
"$FLASHCTL" reload --control "$FLASHD_CTL" >"$T/reload.out" || fail "reload with metrics_host_names"
grep -q "applied: \[server\] metrics_host_names" "$T/reload.out" || fail "reload does not apply metrics_host_names: $(cat "$T/reload.out")"
[ "$(code -H "Host: node1.example:$MPORT" "$M/metrics")" = 200 ] || fail "a metrics_host_names name refused after the reload"
ok "Host: a rebound name is 403 naming metrics_host_names; IPs, localhost, $(hostname) and, after a reload, the names given are served"

write_conf "10.0.0.0/8" "scrape.example node1.example"
"$FLASHCTL" reload --control "$FLASHD_CTL" >"$T/reload.out" || fail "reload with metrics_allow 10.0.0.0/8"
grep -q "applied: \[server\] metrics_allow" "$T/reload.out" || fail "reload does not apply metrics_allow: $(cat "$T/reload.out")"
[ "$(code "$M/metrics")" = 403 ] || fail "127.0.0.1 outside metrics_allow got the metrics"
grep -q "metrics listener: request refused: 127.0.0.1 is not in \[server\] metrics_allow" "$T/flashd.log" ||
	fail "the refusal is not logged"
write_conf "127.0.0.1" "scrape.example node1.example"
"$FLASHCTL" reload --control "$FLASHD_CTL" >/dev/null || fail "reload with metrics_allow 127.0.0.1"
[ "$(code "$M/metrics")" = 200 ] || fail "127.0.0.1 refused after metrics_allow = 127.0.0.1"
ok "metrics_allow: a client outside it gets 403 (logged); reload applies it both ways"

# ---- 3. Prometheus scrapes it ---------------------------------------------------------------
PPORT=$(free_port)
sed -e "s/localhost:9410/127.0.0.1:$MPORT/" -e 's/interval: 15s/interval: 1s/' \
	-e "s|^  - flashd-alerts.yml|  - $P/flashd-alerts.yml|" "$P/prometheus.yml" >"$T/prometheus.yml"
grep -q "127.0.0.1:$MPORT" "$T/prometheus.yml" && grep -q "$P/flashd-alerts.yml" "$T/prometheus.yml" ||
	fail "could not point deploy/prometheus/prometheus.yml at the test's listener"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
	--web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$T/prometheus.log" 2>&1 &
PROM_PID=$!
track_pid "$PROM_PID"
PROM=http://127.0.0.1:$PPORT
for _ in $(seq 1 300); do
	curl -sf -o /dev/null "$PROM/-/ready" && break
	kill -0 "$PROM_PID" 2>/dev/null || { cat "$T/prometheus.log"; fail "prometheus exited"; }
	sleep 0.1
done
curl -sf -o /dev/null "$PROM/-/ready" || fail "prometheus not ready after 30 s"
# query EXPR: the instant vector as "labels value" lines
query() {
	curl -sf --get --data-urlencode "query=$1" "$PROM/api/v1/query" | "$PYTHON" -c '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    m = r["metric"]
    print(",".join("%s=%s" % (k, m[k]) for k in sorted(m) if k != "__name__"), r["value"][1])'
}
# firing: the alerts firing now, "NAME DIMM" per line
firing() {
	curl -sf "$PROM/api/v1/alerts" | "$PYTHON" -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["state"] == "firing":
        print(a["labels"]["alertname"], a["labels"].get("dimm", "-"))' | sort
}
for _ in $(seq 1 300); do
	[ "$(query 'up{job="flashd"}')" = "instance=127.0.0.1:$MPORT,job=flashd 1" ] && break
	sleep 0.1
done
[ "$(query 'up{job="flashd"}')" = "instance=127.0.0.1:$MPORT,job=flashd 1" ] ||
	fail "prometheus does not scrape the listener: up = '$(query 'up{job="flashd"}')'; $(tail -n 5 "$T/prometheus.log")"
[ "$(query 'flashd_dimm_health{state="ok"}' | wc -l)" = 2 ] || fail "flashd_dimm_health: $(query 'flashd_dimm_health{state="ok"}')"
[ -z "$(firing)" ] || fail "alerts fire before any fault: $(firing)"
ok "prometheus scrapes metrics_listen with deploy/prometheus: up 1, both ioDimms' health ok, no alert"

t0=$EPOCHREALTIME
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm1 temperature 90 >/dev/null || fail "inject temperature 90"
for _ in $(seq 1 300); do
	[ "$(firing | tr '\n' ' ')" = "FlashdDimmDegraded dimm1 FlashdThermalStop dimm1 " ] && break
	sleep 0.1
done
[ "$(firing | tr '\n' ' ')" = "FlashdDimmDegraded dimm1 FlashdThermalStop dimm1 " ] ||
	fail "after a thermal stop on dimm1 the alerts firing are: '$(firing | tr '\n' ' ')'"
took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
"$FLASHCTL" inject --control "$FLASHD_CTL" dimm1 temperature 35 >/dev/null || fail "cooling dimm1"
for _ in $(seq 1 300); do
	[ -z "$(firing)" ] && break
	sleep 0.1
done
[ -z "$(firing)" ] || fail "after cooling still firing: $(firing | tr '\n' ' ')"
ok "dimm1 at 90 C: FlashdThermalStop and FlashdDimmDegraded fire for dimm1 within $took s; cooled, they resolve"

kill "$PROM_PID"
wait "$PROM_PID" 2>/dev/null || true
stop_flashd
check_flashd_log
