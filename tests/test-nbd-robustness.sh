#!/bin/bash
# timeout: 300
# Hostile and broken NBD clients against flashd (tests/nbd/raw_abuse.py),
# over TCP and the unix socket: truncated handshakes at every stage, clients
# leaving in the middle of a WRITE payload, huge option lengths, bad magics,
# unknown client flags, oversize requests, 60 resets with reads queued, 200
# clients that never negotiate, 16 raw connections from each of
# 127.0.0.2-33 reopened as they are closed (the default limits: a libnbd
# client from 127.0.0.1 and one over the unix socket must still get in,
# ten times out of ten), a burst of 64 libnbd clients at once (all
# served), long-lived connections with mixed request sizes.  After each: a normal client is served correctly and the
# connection count returns to where it was.  Then: an idle client is
# dropped after handshake_timeout, flashd is still running, its log shows
# no crash or error, and it stops cleanly on SIGTERM.
source "$(dirname "$0")/functions.sh"

HS_TIMEOUT=8
dimms_conf "$T/flashd.conf" server.handshake_timeout=$HS_TIMEOUT
start_flashd --config "$T/flashd.conf" --timing off

run_check "abusive clients" \
	timeout 240 "$PYTHON" "$NBD_CHECKS/raw_abuse.py" --uri "$FLASHD_URI0" --unix-uri "$FLASHD_UNIX_URI0" \
	--flashctl "$FLASHCTL" --control "$FLASHD_CTL" --idle-clients 200 --resets 60 --spread-clients 16 \
	--spread-addrs 32 --burst 64
flashd_running
echo "connections now: $(flashd_connections)"

# the server drops a client that never finishes the handshake
"$PYTHON" - "$FLASHD_URI1" "$HS_TIMEOUT" "$NBD_CHECKS" <<'PY' || summary_add "idle client not dropped after handshake_timeout"
import sys, time
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[3])
from nbdraw import Conn
limit = int(sys.argv[2])
c = Conn.open(sys.argv[1])
c.greeting()
t0 = time.monotonic()
closed = c.wait_closed(limit + 3)
dt = time.monotonic() - t0
if not closed:
    sys.exit("FAIL: a client idle in the handshake is still connected after %.0f s "
             "(handshake_timeout = %d)" % (dt, limit))
print("ok: idle client dropped after %.1f s (handshake_timeout = %d)" % (dt, limit))
PY

# plain clients still work
nbdinfo --list "nbd://127.0.0.1:$FLASHD_PORT" >/dev/null || fail "nbdinfo --list after the abuse"
nbdsh_sys -u "$FLASHD_UNIX_URI1" -c "
import os
d = os.urandom(1 << 20)
h.pwrite(d, 0)
assert h.pread(1 << 20, 0) == d
" || fail "read/write after the abuse"
flashd_running
check_flashd_log
stop_flashd
check_flashd_log
ok "flashd survived and stopped cleanly"
checks_passed || fail "some robustness checks failed"
ok "robustness checks passed"
