#!/bin/bash
# timeout: 600
# Hostile clients (issue 12, "Why"), each finding with its regression check
# (tests/nbd/raw_hostile.py): option size and count limits, a client flooding
# options without reading the replies, META_CONTEXT on an export the access
# rules deny, the per-address connection cap and its rate-limited log, 40
# clients pipelining 32 MiB READs and never reading (memory bound: about
# buffer_limit; a well-behaved client on the same export is served
# meanwhile), an idle connection giving its buffers back, buffer_limit
# (reloaded to 64M, idle_timeout 3: a request waiting for the budget is not
# closed as idle and is woken when it comes free, a refused request does
# not wait, busy clients give their kept buffers back to a waiting one, the
# queue's head paused by its own unread replies holds up no one; the
# budget in use in the status), the control
# socket's header and body limits (and NBD handshakes while an endless
# header line arrives), idle_timeout_busy (reloaded to 2 s: 40 idle clients
# are kept, over 48 of the 64 slots open drops them), and 64 idle clients after the
# handshake locking out a new one until idle_timeout (switched on by a
# reload) drops them.
# Loopback only: the clients use source addresses 127.0.0.1 to 127.0.0.9.
# Then flashd is still running, its log shows no crash and it stops cleanly.
source "$(dirname "$0")/functions.sh"

cat >"$T/flashd.conf" <<EOF2
[server]
handshake_timeout = 30
max_connections = 64
max_connections_per_address = 8
buffer_limit = 128M
idle_timeout = 0
idle_timeout_busy = 0
[dimm dimm0]
preset = test-1g
[dimm secret]
preset = test-1g
allow = 192.0.2.0/24
EOF2
start_flashd --config "$T/flashd.conf" --timing off

run_check "hostile clients" \
	timeout 540 "$PYTHON" "$NBD_CHECKS/raw_hostile.py" --port "$FLASHD_PORT" --unix-sock "$FLASHD_SOCK" \
	--control "$FLASHD_CTL" --pid "$FLASHD_PID" --log "$T/flashd.log" --config "$T/flashd.conf"
flashd_running
check_flashd_log
stop_flashd
check_flashd_log
ok "flashd survived and stopped cleanly"
checks_passed || fail "some hostile-client checks failed"
ok "hostile-client checks passed"
