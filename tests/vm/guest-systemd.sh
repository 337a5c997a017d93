#!/bin/bash
# guest-systemd.sh - the checks of the systemd VM test (tests/vm/test-systemd.sh),
# run inside the VM by flashd-vmtest@systemd.service with systemd as PID 1, on the
# tree `make install DESTDIR=... PREFIX=/usr` installed (deploy/flashd.service
# as /lib/systemd/system/flashd.service, /usr/sbin/flashd, /usr/bin/flashctl,
# handler_flashd.so where tcmu-runner loads handlers, the example
# iscsi-lun.sh); the iSCSI check uses guest-lib.sh's fio functions.
#
# Console markers, read by run.sh (written to /dev/console, and to
# /vmtest/logs/systemd.log):
#   "@@ t=<uptime> systemd: PASS|FAIL <check>"   one per check
#   "@@ t=<uptime> RESULT systemd PASS|FAIL ..."  the verdict
#   "@@ t=<uptime> ALL DONE rc=N"                 the end (the unit then powers off)
# The journal of the boot is saved as /vmtest/logs/journal.txt, tcmu-runner's
# log as /vmtest/logs/tcmu-runner.log.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME=/root

CONF=/etc/flashd/flashd.conf
STATE=/var/lib/flashd
CTL=$STATE/flashd.ctl
PORT=10809 # inside the VM: nothing else listens there
MiB=$((1 << 20))
mkdir -p /vmtest/logs
OUT=/vmtest/logs/systemd.log

up() { read -r u _ </proc/uptime; echo "$u"; }
log() {
	local l
	l="@@ t=$(up) $*"
	echo "$l"
	echo "$l" >>"$OUT"
	echo "$l" >/dev/console
}
indent() { { cat; echo; } | sed -e '/^[[:space:]]*$/d' -e 's/^/   | /' | tee -a "$OUT" >/dev/console; }
NFAIL=0 NPASS=0 FAILED=
pass() {
	NPASS=$((NPASS + 1))
	log "systemd: PASS $*"
}
fail() {
	NFAIL=$((NFAIL + 1))
	FAILED="$FAILED; $*"
	log "systemd: FAIL $*"
}
prop() { systemctl show -P "$1" flashd; } # one property of flashd.service
state() { echo "ActiveState=$(prop ActiveState) SubState=$(prop SubState) Result=$(prop Result) ExecMainStatus=$(prop ExecMainStatus) MainPID=$(prop MainPID) NRestarts=$(prop NRestarts) StatusText='$(prop StatusText)'"; }
journal_tail() { journalctl -u flashd --no-pager -n "${1:-15}" -o cat 2>&1 | indent; }
finish() {
	if [ $NFAIL = 0 ]; then
		log "RESULT systemd PASS $NPASS checks"
	else
		log "RESULT systemd FAIL $NFAIL of $((NPASS + NFAIL)) checks failed:${FAILED#;}"
	fi
	journalctl -b --no-pager -o short-monotonic >/vmtest/logs/journal.txt 2>&1
	cp -f /var/log/tcmu-runner.log /vmtest/logs/ 2>/dev/null
	log "ALL DONE rc=$NFAIL"
	sync
	exit "$NFAIL"
}

# wait_active OLD_PID SECS: flashd.service active with a main PID other than OLD_PID
wait_active() {
	local old=$1 i
	for ((i = 0; i < $2 * 5; i++)); do
		[ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" != 0 ] && [ "$(prop MainPID)" != "$old" ] && return 0
		sleep 0.2
	done
	return 1
}
nbd_attach() {
	nbd-client 127.0.0.1 "$PORT" /dev/nbd0 -N dimm0 >/tmp/nbd-client.out 2>&1 ||
		{ indent </tmp/nbd-client.out; return 1; }
}
nbd_detach() { nbd-client -d /dev/nbd0 >/dev/null 2>&1; }
read_back() { # the pattern at 1 MiB into dimm0
	dd if=/dev/nbd0 iflag=direct,skip_bytes,count_bytes skip=$MiB count=$((8 * MiB)) bs=1M status=none |
		cmp -s - /tmp/pat
}

log "systemd: $(systemctl --version | head -n1), PID 1 is $(cat /proc/1/comm), system $(systemctl is-system-running 2>&1)"
[ "$(cat /proc/1/comm)" = systemd ] && pass "PID 1 is systemd" || fail "PID 1 is $(cat /proc/1/comm), not systemd"

# ---- the installed tree
for f in /usr/sbin/flashd /usr/bin/flashctl /lib/systemd/system/flashd.service; do
	[ -e "$f" ] || fail "make install: $f missing"
done
/usr/sbin/flashd --check-config --config "$CONF" >/tmp/check.out 2>&1 &&
	pass "flashd --check-config of the installed example $CONF: $(grep -m1 'is good' /tmp/check.out)" ||
	{ indent </tmp/check.out; fail "flashd --check-config of the installed example $CONF"; }
# --man=no: the VM has no man(1) for Documentation=; tests/test-install.sh
# checks that the pages exist
systemd-analyze verify --man=no flashd.service >/tmp/verify.out 2>&1 &&
	pass "systemd-analyze verify --man=no flashd.service" ||
	{ indent </tmp/verify.out; fail "systemd-analyze verify flashd.service"; }

# a small configuration: two test-64m ioDimms, timing off (TCG is slow)
cat >"$CONF" <<EOF
[server]
listen = 127.0.0.1:$PORT
timing = off
[dimm dimm0]
preset = test-64m
image = dimm0.img
export = dimm0
[dimm dimm1]
preset = test-64m
image = dimm1.img
export = dimm1
EOF

# ---- 1. start: Type=notify, active only after READY=1
t=$(up)
if timeout 300 systemctl start flashd; then
	pass "systemctl start flashd: $(prop ActiveState) (Type=$(prop Type), READY after $(awk -v a="$t" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s), StatusText='$(prop StatusText)'"
else
	fail "systemctl start flashd: $(state)"
	journal_tail 30
	finish
fi
[ "$(prop Type)" = notify ] || fail "Type=$(prop Type), want notify"
[[ $(prop StatusText) == "serving 2 of 2"* ]] || fail "StatusText '$(prop StatusText)', want 'serving 2 of 2 ...'"
[ -S /run/flashd/flashd.sock ] && [ -S "$CTL" ] &&
	pass "sockets /run/flashd/flashd.sock and $CTL ($(stat -c '%U:%G %a' "$CTL"))" ||
	fail "sockets: $(ls -la /run/flashd "$STATE"/ 2>&1 | tr '\n' ' ')"
u=$(ps -o user= -p "$(prop MainPID)")
[ -n "$u" ] && [ "$u" != root ] && pass "flashd runs as the dynamic user '$u'" || fail "flashd runs as '$u'"

# ---- 2. flashctl status, /metrics
if flashctl status >/tmp/status.out 2>&1 && grep -q dimm1 /tmp/status.out; then
	pass "flashctl status (default control socket): $(grep -m1 -i serving /tmp/status.out)"
else
	indent </tmp/status.out
	fail "flashctl status"
fi
if curl -sf --unix-socket "$CTL" http://localhost/metrics >/tmp/metrics.txt &&
	grep -q '^# TYPE flashd_' /tmp/metrics.txt; then
	pass "curl --unix-socket $CTL /metrics: $(grep -c '^flashd_' /tmp/metrics.txt) samples"
else
	head -c 600 /tmp/metrics.txt | indent
	fail "curl --unix-socket $CTL http://localhost/metrics"
fi

# ---- 3. data through the kernel NBD client, kill -9, Restart=on-failure, data back
dd if=/dev/urandom of=/tmp/pat bs=1M count=8 status=none
if nbd_attach && dd if=/tmp/pat of=/dev/nbd0 bs=1M seek=1 oflag=direct conv=notrunc,fsync status=none &&
	blockdev --flushbufs /dev/nbd0 && read_back; then
	pass "nbd-client: 8 MiB written to dimm0, flushed, read back"
else
	fail "nbd-client: writing 8 MiB to dimm0"
fi
nbd_detach
pid=$(prop MainPID)
nr=$(prop NRestarts)
systemctl kill -s KILL flashd
t=$(up)
if wait_active "$pid" 120; then
	pass "systemctl kill -s KILL flashd: restarted by systemd (pid $pid -> $(prop MainPID), NRestarts $nr -> $(prop NRestarts), active again after $(awk -v a="$t" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s)"
	[ "$(prop NRestarts)" = $((nr + 1)) ] || fail "NRestarts $nr -> $(prop NRestarts), want +1"
else
	fail "no restart after SIGKILL: $(state)"
	journal_tail 30
fi
if nbd_attach && read_back; then
	pass "the 8 MiB read back after the SIGKILL and the restart"
else
	fail "data after the SIGKILL and the restart"
fi
nbd_detach

# ---- 4. reload (ExecReload: SIGHUP)
pid=$(prop MainPID)
# flashd's own line (not systemd's "Reloading flashd.service"): "SIGHUP: reloading CONF"
reloads() { journalctl -u flashd -o cat --no-pager | grep -c "reloading $CONF"; }
n0=$(reloads)
if timeout 60 systemctl reload flashd; then
	sleep 1
	n1=$(reloads)
	if [ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" = "$pid" ] && [ "$n1" -gt "$n0" ]; then
		pass "systemctl reload flashd: still active, same pid, flashd says: $(journalctl -u flashd -o cat --no-pager | grep -A1 "reloading $CONF" | tail -n2 | paste -sd' ')"
	else
		fail "systemctl reload flashd: $(state), reload lines in the journal $n0 -> $n1"
		journal_tail
	fi
else
	fail "systemctl reload flashd: $(state)"
	journal_tail
fi

# ---- 5. iSCSI: `systemctl restart flashd` under an initiator's fio verify job
# Set up as an admin does: tcmu-runner.service (enabled; make install put
# handler_flashd.so where it loads handlers), the installed iscsi-lun.sh
# makes LUN0 = dimm1 over flashd's default socket /run/flashd/flashd.sock
# (the handler holds commands up to 20 s while flashd is unreachable),
# open-iscsi logs in over 127.0.0.1 (iscsid.socket).  fio (guest-lib.sh:
# O_SYNC 64k writes with crc32c headers, read back) runs across `systemctl
# restart flashd`: no error, every block read back, again by a verify-only
# pass, no I/O error in the kernel log, and the handler held commands.
ISCSI_LUN=/usr/share/doc/flashd/examples/iscsi-lun.sh
IQN=iqn.2024-01.org.flashd:vmsystemd
LUN_CFG=dimm1
# at fio_restart's 1 MiB/s: 12 s of writes, so I/O is still being issued
# while a slow `systemctl restart` (a loaded host) has flashd down
RESTART_MIB=12
# restart_flashd: what the admin types; the old flashd must exit cleanly
# (systemd: "Deactivated successfully"; a manual restart resets NRestarts,
# so that cannot tell) and the unit be active again with a new main PID
# (RESTARTED = "pid A -> B in S s")
restart_flashd() {
	local pid t s i
	pid=$(prop MainPID)
	t=$(up)
	s=$(date +%s)
	timeout 150 systemctl restart flashd && [ "$(prop ActiveState)" = active ] &&
		[ "$(prop MainPID)" != "$pid" ] && [ "$(prop MainPID)" != 0 ] || return 1
	RESTARTED="pid $pid -> $(prop MainPID) in $(awk -v a="$t" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s"
	for i in $(seq 1 25); do
		journalctl -u flashd --since "@$s" -o cat --no-pager | grep -q 'Deactivated successfully' && return 0
		sleep 0.2
	done
	echo "systemctl restart flashd: the old flashd (pid $pid) did not exit cleanly:" >/dev/console
	journal_tail 10
	return 1
}
iscsi_restart() {
	local d='' i t v
	systemctl start tcmu-runner # enabled: normally up since the boot
	if ! systemctl is-active -q tcmu-runner || ! grep -q 'Handler flashd is registered' /var/log/tcmu-runner.log; then
		fail "tcmu-runner.service $(systemctl show -P ActiveState tcmu-runner) with handler flashd: $(grep -o 'Handler [^ ]* is registered' /var/log/tcmu-runner.log | tr '\n' ' ')"
		return 1
	fi
	if ! "$ISCSI_LUN" --iqn "$IQN" --portal 127.0.0.1:3260 --open-access create "$LUN_CFG" >/tmp/lun.out 2>&1; then
		indent </tmp/lun.out
		fail "$ISCSI_LUN create $LUN_CFG"
		return 1
	fi
	if ! { iscsiadm -m discovery -t sendtargets -p 127.0.0.1 &&
		iscsiadm -m node -T "$IQN" -p 127.0.0.1 --login; } >/tmp/iscsiadm.out 2>&1; then
		indent </tmp/iscsiadm.out
		fail "iscsiadm discovery and login on 127.0.0.1"
		return 1
	fi
	for i in $(seq 1 150); do
		d=$(lun_dev 0) && [ -b "$d" ] && break
		sleep 0.1
	done
	[ -b "$d" ] || { fail "no disk for LUN0 after the login"; return 1; }
	pass "tcmu-runner.service + iscsi-lun.sh create '$LUN_CFG' + iscsiadm login: LUN0 $d, $(blockdev --getsize64 "$d") bytes"

	dmesg -C
	t=$(up)
	if ! fio_restart "$d" sysrestart 0 "$RESTART_MIB" restart_flashd; then
		fail "systemctl restart flashd under fio: $FIO_ERR"
		journal_tail 20
		return 1
	fi
	[[ $FIO_SUM == *", $((RESTART_MIB * 16)) writes, $((RESTART_MIB * 16)) blocks verified" ]] ||
		fail "fio across the restart: $FIO_SUM, want $((RESTART_MIB * 16)) writes and as many blocks verified"
	pass "systemctl restart flashd ($RESTARTED, the old one deactivated successfully) under a fio verify job ($RESTART_MIB MiB of O_SYNC 64k writes): fio: $FIO_SUM ($(awk -v a="$t" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }') s; handler: $(grep -a "flashd/dimm1: .*reconnected" /var/log/tcmu-runner.log | tail -n1 | sed 's/.*reconnected/reconnected/'))"
	# every block once more, read by a fresh fio
	fio_job "$d" sysrestart 0 "$RESTART_MIB" --verify_only && v=$(fio_summary sysrestart 2>&1) &&
		[[ $v == *" $((RESTART_MIB * 16)) blocks verified" ]] &&
		pass "fio verify-only pass after the restart: $v" ||
		fail "fio verify-only pass after the restart: $(fio_failed sysrestart), want $((RESTART_MIB * 16)) blocks verified"
	if kernel_io_errors >/tmp/dmesg.err; then
		fail "kernel log across the restart: $(head -n 3 /tmp/dmesg.err | tr '\n' ' ')"
	else
		pass "no I/O error in the kernel log across the restart"
	fi
}
. /vmtest/guest-lib.sh
iscsi_restart
# logout and delete: the handler logs its counters when the LUN closes
iscsiadm -m node -T "$IQN" -p 127.0.0.1 --logout >/tmp/iscsiadm.out 2>&1
"$ISCSI_LUN" --iqn "$IQN" delete "$LUN_CFG" >>/tmp/iscsiadm.out 2>&1 ||
	{ indent </tmp/iscsiadm.out; fail "iscsiadm logout + $ISCSI_LUN delete $LUN_CFG"; }
for i in $(seq 1 50); do # tcmu-runner closes the device after the delete
	c=$(stats_line dimm1 stats)
	[ -n "$c" ] && break
	sleep 0.2
done
if [[ $c =~ failed\ ([0-9]+)\ rejected\ ([0-9]+).*held\ ([0-9]+)\ expired\ ([0-9]+) ]] &&
	[ "${BASH_REMATCH[1]}${BASH_REMATCH[2]}" = 00 ] && [ "${BASH_REMATCH[3]}" -ge 1 ] && [ "${BASH_REMATCH[4]}" = 0 ]; then
	pass "the handler held commands across the restart, failed none: $c"
else
	fail "the handler's counters, want failed 0, rejected 0, held >= 1, expired 0: '$c'"
fi

# ---- 6. clean stop
if timeout 150 systemctl stop flashd && [ "$(prop ActiveState)" = inactive ] &&
	[ "$(prop ExecMainStatus)" = 0 ] && [ "$(prop Result)" = success ]; then
	pass "systemctl stop flashd: inactive, ExecMainStatus=0, Result=success"
else
	fail "systemctl stop flashd: $(state)"
	journal_tail
fi

# ---- 7. degraded start: dimm1's image unreadable for the service's user
img=$(readlink -f "$STATE")/dimm1.img
if [ -f "$img" ] && chmod 000 "$img"; then
	if timeout 120 systemctl start flashd; then
		fail "start with dimm1's image unreadable succeeded: $(state)"
	else
		st=$(prop ExecMainStatus)
		[ "$st" = 1 ] && pass "start with dimm1's image unreadable (mode 000) refused: ExecMainStatus=1, $(prop ActiveState)/$(prop SubState)" ||
			fail "refused start: ExecMainStatus=$st, want 1 ($(state))"
	fi
	# Restart=on-failure retries it every RestartSec; stop that
	systemctl stop flashd
	systemctl reset-failed flashd
	if journalctl -p err -u flashd -o cat --no-pager >/tmp/err.out 2>&1 && grep -q 'refusing to start' /tmp/err.out; then
		pass "journalctl -p err -u flashd: $(grep -m1 'refusing to start' /tmp/err.out)"
		grep -m1 dimm1 /tmp/err.out | indent
	else
		indent </tmp/err.out
		fail "journalctl -p err -u flashd does not show the refusal"
	fi
	sed -i 's/^\[server\]$/[server]\nallow_degraded = yes/' "$CONF"
	if timeout 120 systemctl start flashd && [ "$(prop ActiveState)" = active ] &&
		[[ $(prop StatusText) == "failed: serving 1 of 2 ioDimm(s); dimm1 failed: "* ]]; then
		pass "allow_degraded = yes: active, StatusText='$(prop StatusText)'"
	else
		fail "allow_degraded = yes: $(state)"
		journal_tail
	fi
	rc=0
	flashctl status >/tmp/status.out 2>&1 || rc=$?
	grep -q "health: FAILED (dimm1 failed)" /tmp/status.out && [ $rc = 2 ] &&
		pass "flashctl status says (exit $rc): $(grep -m1 'health: FAILED' /tmp/status.out)" ||
		{ indent </tmp/status.out; fail "flashctl status does not say health FAILED with exit status 2 (exit $rc)"; }
	if timeout 150 systemctl stop flashd && [ "$(prop ExecMainStatus)" = 0 ]; then
		pass "systemctl stop of the degraded flashd: ExecMainStatus=0"
	else
		fail "stop of the degraded flashd: $(state)"
	fi
else
	fail "no $img to make unreadable"
fi
finish
