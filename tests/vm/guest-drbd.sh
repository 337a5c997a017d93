#!/bin/bash
# guest-drbd.sh - one storage node of the DRBD pair test (tests/vm/test-drbd.sh),
# run inside the VM by flashd-vmtest@drbd.service with systemd as PID 1, on
# the tree `make install DESTDIR=... PREFIX=/usr` installed and with
# deploy/drbd/ in /vmtest/drbd.  The host drives it: it drops a command into
# the run share as /vmtest/cmd.N (N = 1, 2, ... per boot); this script runs
# it and writes its output to /vmtest/out.N, then its exit status to
# /vmtest/rc.N.  /vmtest/ready says the node takes commands.  "poweroff"
# ends it (the unit then powers the VM off); the host may also kill the VM.
#
# The node: ioDimm dimm0 (preset test-64m, timing off; its state lives on
# /var/lib/private, the VM's persistent disk) served by flashd.service,
# attached as /dev/nbd0 by nbd@nbd0.service (Debian's unit reading
# /etc/nbdtab), replicated as DRBD resource r0 (/dev/drbd0) by
# drbd@r0.service; all set up with deploy/drbd's files exactly as
# deploy/drbd/README.md says (c_install).  A second ioDimm, dimm1, only
# gives c_compare the bare export's and LIO loopback's throughput.
# Console markers: "@@ t=<uptime> drbd: ..." (run.sh keeps them).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME=/root

D=/vmtest/drbd            # deploy/drbd of the tree under test
WRITER=/vmtest/drbd-writer.py
MiB=$((1 << 20))
# the throughput runs use 24..40 MiB of the device, the writer the first 24 MiB
TP_OFF_MIB=24
TP_MIB=16

up() { read -r u _ </proc/uptime; echo "$u"; }
log() { echo "@@ t=$(up) drbd: $*" >/dev/console; }
since() { awk -v a="$1" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "$*"; }
die() {
	echo "FAIL: $*"
	exit 1
}

# ---------------------------------------------------------------- state
# /proc/drbd (8.4) line of minor 0: " 0: cs:Connected ro:Primary/Secondary ds:UpToDate/UpToDate C r-----"
drbd_line() { sed -n 's/^ *0: \(cs:.*\)$/\1/p' /proc/drbd 2>/dev/null; }
field() { drbd_line | tr ' ' '\n' | sed -n "s/^$1://p"; } # cs, ro, ds
oos() { sed -n '/^ *0: /,/^ *[1-9]*:/s/.*oos:\([0-9]*\).*/\1/p' /proc/drbd | head -n1; }
wait_for() { # SECS DESCRIPTION CONDITION...: poll every 0.5 s
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		"$@" && return 0
		sleep 0.5
	done
	die "not $what within ${secs}s: $(drbd_line)"
}
is_synced() { [ "$(field cs)" = Connected ] && [ "$(field ds)" = UpToDate/UpToDate ]; }
prop() { systemctl show -P "$2" "$1"; }
# io.ops.flush of dimm0 in flashd's status (FLUSH requests served since start)
flushes() {
	flashctl status --json | python3 -c '
import json, sys
d = [x for x in json.load(sys.stdin)["dimms"] if x["name"] == "dimm0"][0]
print(d["io"]["ops"]["flush"])'
}
mbps() { awk -v b="$1" -v a="$2" -v c="$3" 'BEGIN { printf "%.1f", b / 1048576 / (c - a) }'; }

# ---------------------------------------------------------------- commands

# Install the node as deploy/drbd/README.md says ("Setting up a node").
# NODE_A ADDR_A NODE_B ADDR_B: the two host names and replication addresses.
c_install() {
	[ $# = 4 ] || die "install NODE_A ADDR_A NODE_B ADDR_B"
	# the test's flashd.conf: small ioDimms, timing off (TCG is slow);
	# dimm0 under DRBD, dimm1 only for c_compare's bare and LIO figures
	cat >/etc/flashd/flashd.conf <<-EOF
		[server]
		listen = 127.0.0.1:10809
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
	# README step 2: the attach, the drop-ins, the resource
	grep -v '^#' $D/nbdtab >>/etc/nbdtab || die "nbdtab"
	install -D -m 0644 $D/flashd.service.d/drbd.conf /etc/systemd/system/flashd.service.d/drbd.conf &&
		install -D -m 0644 $D/nbd@nbd0.service.d/flashd.conf /etc/systemd/system/nbd@nbd0.service.d/flashd.conf &&
		install -D -m 0644 $D/drbd@r0.service.d/flashd.conf /etc/systemd/system/drbd@r0.service.d/flashd.conf ||
		die "installing the drop-ins"
	sed -e "s/@NODE_A@/$1/" -e "s/@ADDR_A@/$2/" -e "s/@NODE_B@/$3/" -e "s/@ADDR_B@/$4/" \
		$D/r0.res >/etc/drbd.d/r0.res || die "r0.res"
	systemctl daemon-reload || die "systemctl daemon-reload"
	systemctl enable drbd@r0.target 2>&1 || die "systemctl enable drbd@r0.target"
	# the drop-in is what makes starting nbd@nbd0 start flashd first
	systemctl show -P Wants nbd@nbd0.service | grep -qw flashd.service ||
		die "nbd@nbd0.service does not want flashd.service after the reload: $(unit_deps)"
	drbdadm dump r0 >/dev/null || die "drbdadm dump r0: the resource file does not parse"
	say "node $(uname -n): $(cat /etc/nbdtab | grep -v '^#'); r0 on $(sed -n 's/^[[:space:]]*on \([^ ]*\) {.*/\1/p' /etc/drbd.d/r0.res | paste -sd' ')"
	say "flashd.service: OOMScoreAdjust=$(prop flashd OOMScoreAdjust) MemoryMin=$(prop flashd MemoryMin)"
}

# The attach alone (first boot, before the DRBD metadata exists): starting
# nbd@nbd0 pulls flashd in first.
c_attach() {
	local t i
	t=$(up)
	# nbd-client's "Error: CONNECT failed" is its connect() to flashd's unix
	# socket failing: nothing listened there (an empty unit file, which
	# systemd reports as masked, did that while make install wrote the unit
	# through a file in the tree shared by both nodes' installs).  Say
	# everything systemd knows about both units; start flashd by hand if it
	# is not active (and say how that went), then nbd@nbd0 again; the third
	# failure fails.
	for i in 1 2 3; do
		systemctl start nbd@nbd0.service && break
		say "nbd@nbd0 did not start (attempt $i): $(attach_state)"
		[ "$i" = 3 ] && die "systemctl start nbd@nbd0 failed three times"
		systemctl reset-failed nbd@nbd0.service
		if [ "$(prop flashd ActiveState)" != active ]; then
			say "flashd.service was not active: starting it by hand: $(systemctl start flashd.service 2>&1; echo "exit $?"; journalctl -u flashd -n 5 -o cat | tr '\n' ' ')"
		fi
		sleep "$i"
	done
	[ "$(prop flashd ActiveState)" = active ] || die "flashd.service not active"
	check_order flashd.service nbd@nbd0.service
	[ "$(cat /sys/block/nbd0/size)" -gt 0 ] || die "/dev/nbd0 has no size"
	say "nbd@nbd0: /dev/nbd0 attached, $(($(cat /sys/block/nbd0/size) * 512)) bytes, timeout $(cat /sys/block/nbd0/queue/io_timeout 2>/dev/null) ms ($(since "$t") s)"
}
unit_deps() {
	systemctl show -p LoadState -p Wants -p After -p DropInPaths -p NeedDaemonReload nbd@nbd0.service | tr '\n' ' '
}
attach_state() {
	echo "nbd@nbd0: $(unit_deps)"
	echo "flashd.service: $(systemctl show -p LoadState -p ActiveState -p SubState -p Result -p NeedDaemonReload flashd.service | tr '\n' ' ')"
	echo "/run/flashd: $(ls -l /run/flashd 2>&1 | tr '\n' ' ')"
	echo "jobs: $(systemctl list-jobs --no-pager 2>&1 | tr '\n' ';')"
	echo "journal:"
	journalctl -b -n 40 -o short-monotonic --no-pager 2>&1
	echo "kernel: $(dmesg | grep -i 'nbd' | tail -n 5 | tr '\n' ' ')"
}
# systemd started A (READY) before it began starting B
check_order() {
	local a b
	a=$(prop "$1" ActiveEnterTimestampMonotonic)
	b=$(prop "$2" InactiveExitTimestampMonotonic)
	[ "$a" -gt 0 ] && [ "$b" -ge "$a" ] || die "order: $2 began at $b us, $1 was ready at $a us"
	say "order: $1 ready at $((a / 1000)) ms, $2 started at $((b / 1000)) ms"
}

# TP: "WRITE READ" MB/s of TP_MIB at TP_OFF_MIB of DEV, O_DIRECT 1 MiB
# requests, the write ended by one fdatasync
tp() {
	local dev=$1 t0 t1 w
	dd if=/dev/urandom of=/tmp/tp.dat bs=1M count=$TP_MIB status=none
	t0=$(date +%s.%N)
	dd if=/tmp/tp.dat of="$dev" bs=1M seek=$TP_OFF_MIB count=$TP_MIB oflag=direct conv=notrunc,fdatasync status=none ||
		die "dd to $dev"
	t1=$(date +%s.%N)
	w=$(mbps $((TP_MIB * MiB)) "$t0" "$t1")
	t0=$(date +%s.%N)
	dd if="$dev" of=/dev/null bs=1M skip=$TP_OFF_MIB count=$TP_MIB iflag=direct status=none || die "dd from $dev"
	t1=$(date +%s.%N)
	TP="$w $(mbps $((TP_MIB * MiB)) "$t0" "$t1")"
}
median() { printf '%s\n' "$@" | sort -n | sed -n "$((($# + 1) / 2))p"; }

# The three ways to the same kind of ioDimm in one run, ROUNDS times in
# turn (the medians go to the README): dimm1 through the kernel NBD client
# (/dev/nbd1: the bare export), dimm1 through LIO's loopback fabric and
# tcmu-runner's handler_flashd.so (the other local attach), dimm0
# replicated (/dev/drbd0 on the primary, protocol C to the peer).
c_compare() { # ROUNDS PEER_ADDR
	local rounds=${1:-3} peer=$2 r d sd="" i wwn=naa.5001405f1a5d0001 t0 t1 link=""
	nbd-client -unix /run/flashd/flashd.sock /dev/nbd1 -N dimm1 -timeout 30 >/tmp/nbd1.out 2>&1 ||
		die "nbd-client dimm1: $(cat /tmp/nbd1.out)"
	systemctl start tcmu-runner || die "systemctl start tcmu-runner"
	targetcli "/backstores/user:flashd create name=dimm1 size=48M cfgstring=dimm1" >/tmp/tcmu.out 2>&1 &&
		targetcli "/loopback create $wwn" >>/tmp/tcmu.out 2>&1 &&
		targetcli "/loopback/$wwn/luns create /backstores/user:flashd/dimm1" >>/tmp/tcmu.out 2>&1 ||
		die "targetcli: $(cat /tmp/tcmu.out)"
	for ((i = 0; i < 100; i++)); do
		for d in /sys/block/sd*; do [ -e "$d" ] && sd=/dev/${d##*/}; done
		[ -n "$sd" ] && [ -b "$sd" ] && break
		sleep 0.2
	done
	[ -b "$sd" ] || die "no SCSI disk from the loopback LUN"
	declare -A W R
	for ((r = 1; r <= rounds; r++)); do
		for d in /dev/nbd1 "$sd" /dev/drbd0; do
			tp "$d"
			W[$d]="${W[$d]} ${TP% *}" R[$d]="${R[$d]} ${TP#* }"
			say "round $r $d: write ${TP% *} MB/s, read ${TP#* } MB/s"
		done
		# the replication link alone: TCP to the peer's sink (c_sink)
		t0=$(date +%s.%N)
		head -c $((TP_MIB * MiB)) /tmp/tp.dat | socat -u - "TCP:$peer:5001" || die "socat to $peer:5001"
		t1=$(date +%s.%N)
		link="$link $(mbps $((TP_MIB * MiB)) "$t0" "$t1")"
		say "round $r link to $peer: ${link##* } MB/s"
	done
	# shellcheck disable=SC2086 # the lists are numbers
	say "medians of $rounds ($TP_MIB MiB, 1 MiB O_DIRECT requests): bare export (nbd1) write $(median ${W[/dev/nbd1]}) read $(median ${R[/dev/nbd1]}) MB/s; LIO loopback + tcmu ($sd) write $(median ${W[$sd]}) read $(median ${R[$sd]}) MB/s; replicated (drbd0) write $(median ${W[/dev/drbd0]}) read $(median ${R[/dev/drbd0]}) MB/s; the link alone (TCP) $(median $link) MB/s"
	targetcli "/loopback delete $wwn" >/dev/null 2>&1
	targetcli "/backstores/user:flashd delete dimm1" >/dev/null 2>&1
	systemctl stop tcmu-runner
	nbd-client -d /dev/nbd1 >/dev/null 2>&1
}

# A TCP sink on port 5001 of the replication link, for c_compare's link figure
c_sink() { # start|stop
	if [ "$1" = start ]; then
		setsid socat -u TCP-LISTEN:5001,reuseaddr,fork OPEN:/dev/null </dev/null >/dev/null 2>&1 &
		echo $! >/run/sink.pid
		say "TCP sink on port 5001 (pid $!)"
	else
		kill "$(cat /run/sink.pid)"
	fi
}

c_create_md() {
	drbdadm create-md --force r0 2>&1 || die "drbdadm create-md r0"
}

# drbd@r0.target -> drbd@r0.service (drbdadm adjust r0) -> nbd@nbd0 -> flashd
c_up() {
	local t
	t=$(up)
	systemctl start drbd@r0.target || die "systemctl start drbd@r0.target: $(journalctl -u drbd@r0 -n 10 -o cat)"
	check_order flashd.service nbd@nbd0.service
	check_order nbd@nbd0.service drbd@r0.service
	grep -q . /sys/block/nbd0/holders/drbd0/dev 2>/dev/null || [ -e /sys/block/nbd0/holders/drbd0 ] ||
		die "/dev/nbd0 is not held by drbd0"
	say "drbd@r0: up ($(since "$t") s): $(drbd_line)"
}

c_wait_connected() { # SECS
	wait_for "${1:-60}" connected grep -qE '^ *0: cs:(Connected|SyncSource|SyncTarget|WFBitMap|PausedSync)' /proc/drbd
	say "$(drbd_line)"
}

c_primary_force() { # the initial sync's source (first boot, one node)
	drbdadm primary --force r0 || die "drbdadm primary --force r0"
	say "$(drbd_line)"
}

c_wait_synced() { # SECS
	local t
	t=$(up)
	wait_for "${1:-300}" "in sync (Connected, UpToDate/UpToDate)" is_synced
	say "in sync after $(since "$t") s: $(drbd_line)"
	dmesg | grep -E 'Began resync|Resync done' | tail -n 2 | sed 's/^\[[^]]*\] /resync: /'

}

c_flushes() { say "dimm0 flushes $(flushes)"; }

# N times: one 4 KiB O_DIRECT write + fdatasync on /dev/drbd0 (the primary)
c_fsyncs() {
	local n=$1 i
	for ((i = 0; i < n; i++)); do
		dd if=/dev/urandom of=/dev/drbd0 bs=4k count=1 seek=$(((TP_OFF_MIB * MiB) / 4096 + i)) \
			oflag=direct conv=notrunc,fdatasync status=none || die "dd + fdatasync #$i"
	done
	say "$n x (4 KiB O_DIRECT write + fdatasync) on /dev/drbd0"
}

c_writer_start() { # SEED BLOCKS FIRST_GEN BATCH LOG
	setsid python3 $WRITER write /dev/drbd0 --seed "$1" --blocks "$2" --first-gen "$3" --batch "$4" \
		--log "$5" </dev/null >>/tmp/writer.out 2>&1 &
	echo $! >/run/writer.pid
	echo "$5" >/run/writer.log
	say "writer pid $! on /dev/drbd0: seed $1, $2 blocks, from generation $3, batches of $4, log $5"
}
c_writer_run() { # SEED BLOCKS FIRST_GEN BATCH LOG BATCHES: in the foreground
	python3 $WRITER write /dev/drbd0 --seed "$1" --blocks "$2" --first-gen "$3" --batch "$4" \
		--log "$5" --batches "$6" || die "writer: $(tail -n 3 "$5")"
	say "writer: $(tail -n 1 "$5")"
}
c_writer_stop() {
	local pid i
	pid=$(cat /run/writer.pid) || die "no writer"
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 240; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	kill -0 "$pid" 2>/dev/null && die "writer $pid still running 120 s after SIGTERM"
	say "writer stopped: $(tail -n 1 "$(cat /run/writer.log)") $(cat /tmp/writer.out 2>/dev/null)"
}

c_verify() { # SEED BLOCKS RANGES MAX_GEN
	local t
	t=$(up)
	python3 $WRITER verify /dev/drbd0 --seed "$1" --blocks "$2" --flushed "$3" --max-gen "$4" || die "verify"
	say "verify took $(since "$t") s"
}

# Promote: the peer must be gone (VM killed) or Secondary first; DRBD 8.4
# refuses a second primary while connected to one.
c_promote() {
	local t
	t=$(up)
	wait_for 60 "free of a primary peer" bash -c '! grep -q "ro:[A-Za-z]*/Primary" /proc/drbd'
	drbdadm primary r0 || die "drbdadm primary r0: $(drbd_line)"
	say "promoted after $(since "$t") s: $(drbd_line)"
}
c_demote() {
	drbdadm secondary r0 || die "drbdadm secondary r0: $(drbd_line)"
	say "demoted: $(drbd_line)"
}

c_kill_flashd() {
	local pid
	pid=$(prop flashd MainPID)
	[ "$pid" -gt 0 ] || die "flashd not running"
	kill -KILL "$pid" || die "kill -KILL $pid"
	say "SIGKILL to flashd pid $pid (NRestarts $(prop flashd NRestarts))"
}
c_wait_diskless() {
	local t
	t=$(up)
	wait_for 120 "Diskless" bash -c 'grep -q "ds:Diskless/" /proc/drbd'
	say "local disk detached after $(since "$t") s: $(drbd_line)"
}
# deploy/drbd/README.md, "flashd died on a node": systemd restarts flashd;
# then attach nbd0 again and let DRBD take the disk back (it resyncs).
c_reattach() {
	local t
	t=$(up)
	wait_for 120 "flashd active again" bash -c '[ "$(systemctl show -P ActiveState flashd)" = active ]'
	say "flashd.service active again (NRestarts $(prop flashd NRestarts), pid $(prop flashd MainPID))"
	systemctl restart nbd@nbd0.service || die "systemctl restart nbd@nbd0"
	drbdadm adjust r0 || die "drbdadm adjust r0"
	say "nbd0 attached again, drbdadm adjust r0 ($(since "$t") s): $(drbd_line)"
}

# drbdadm verify r0 (verify-alg in r0.res): compare both disks online
c_online_verify() {
	local t n f
	t=$(up)
	n=$(dmesg | grep -c 'Online verify done')
	f=$(dmesg | grep -c 'Online verify found')
	drbdadm verify r0 || die "drbdadm verify r0"
	wait_for 600 "done verifying" bash -c '[ "$(dmesg | grep -c "Online verify done")" -gt '"$n"' ] &&
		grep -q " cs:Connected " /proc/drbd'
	say "online verify ($(since "$t") s): $(dmesg | grep 'Online verify done' | tail -n 1 | sed 's/^\[[^]]*\] //'), oos:$(oos)"
	# DRBD logs "Online verify found N 4k block out of sync" only for N > 0
	[ "$(dmesg | grep -c 'Online verify found')" = "$f" ] ||
		die "$(dmesg | grep 'Online verify found' | tail -n 1)"
	[ "$(oos)" = 0 ] || die "online verify: $(oos) KiB out of sync"
}

# flashctl status (text and JSON) names the DRBD resource over dimm0 and this node's role
c_status() { # ROLE
	# exit status: 0 ok, 1 a warning (the ioDimm serves; the simulator's
	# temperature may throttle), 2 degraded or failed, 3 no answer
	local rc=0
	flashctl status >/tmp/status.txt 2>&1 || rc=$?
	[ $rc -le 1 ] || die "flashctl status (exit $rc): $(cat /tmp/status.txt)"
	grep '^    DRBD: ' /tmp/status.txt
	grep -q "^    DRBD: /dev/nbd0 -> /dev/drbd0 (resource r0): $1, disk " /tmp/status.txt ||
		die "flashctl status does not show dimm0 under r0 as $1: $(cat /tmp/status.txt)"
	flashctl status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
d = [x for x in s["dimms"] if x["name"] == "dimm0"][0]["drbd"]
print("json dimm0.drbd:", json.dumps(d, sort_keys=True))
assert d["role"] == sys.argv[1], d' "$1" || die "flashctl status --json: no dimm0.drbd with role $1"
}

# dimm0's health as every view shows it (flashd's one model, server/health.c):
# `flashctl status dimm0`'s exit status (0 ok, 1 warning) and text, the
# reasons in --json, flashd_dimm_health{,_reason} in /metrics (the control
# socket's).  REASON: the drbd_* reason dimm0 must have, or "-" for none.
# flashd reads DRBD's state once a second: the views get 10 s to show
# the expected one.  With WANT 0, exit 1 passes only if no reason is
# DRBD's and each is the simulator's temperature (said so).
c_health() { # WANT REASON
	local want=$1 reason=$2 end rc json metrics ok=
	end=$(($(date +%s) + 10))
	while [ -z "$ok" ] && [ "$(date +%s)" -le "$end" ]; do
		rc=0
		flashctl status dimm0 >/tmp/health.txt 2>&1 || rc=$?
		json=$(flashctl status --json dimm0 | python3 -c '
import json, sys
h = json.load(sys.stdin)["health"]
print(h["state"], " ".join(r["reason"] for r in h["reasons"]) or "-")')
		metrics=$(python3 -c '
import http.client, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect("/var/lib/flashd/flashd.ctl")
c = C("localhost")
c.request("GET", "/metrics")
for l in c.getresponse().read().decode().splitlines():
    if l.startswith(("flashd_dimm_health{", "flashd_dimm_health_reason{")) and "dimm=\"dimm0\"" in l and l.endswith(" 1"):
        print(l)')
		if [ "$reason" = - ]; then
			! grep -q 'drbd_' <<<"$json$metrics" && [ "$rc" = "$want" ] && ok=1
			[ "$rc" = 1 ] && [ "$want" = 0 ] && ! grep -q 'drbd_' <<<"$json$metrics" &&
				[ -z "$(tr ' ' '\n' <<<"${json#* }" | grep -Ev '^(temperature_high|thermal_throttled)$')" ] &&
				{ say "exit 1 from the simulator's temperature only: $json"; ok=1; }
		else
			[ "$rc" = "$want" ] && grep -qw "$reason" <<<"$json" &&
				grep -q "reason=\"$reason\",level=\"warning\"} 1" <<<"$metrics" && ok=1
		fi
		[ -n "$ok" ] || sleep 0.5
	done
	sed -n '/Health:/,/^    [A-Za-z]*: /p' /tmp/health.txt | sed '$d'
	grep '^    DRBD: ' /tmp/health.txt
	say "exit $rc; json: $json"
	say "$metrics"
	[ -n "$ok" ] || die "dimm0's health: want exit $want and reason $reason in text, JSON and /metrics (drbd: $(drbd_line))"
	if [ "$reason" != - ]; then
		grep -q "^      DRBD resource r0[ :]" /tmp/health.txt || die "no DRBD reason in the text"
	fi
	true
}

c_state() {
	say "$(drbd_line) oos:$(oos)"
	flashctl status --json | python3 -c '
import json, sys
d = [x for x in json.load(sys.stdin)["dimms"] if x["name"] == "dimm0"][0]
f = d["format"]
print("dimm0: %s, last close clean: %s, pages recovered at open: %d" % (d["state"], f["last_close_clean"], f["recovered_pages"]))'
	say "flashd: $(prop flashd ActiveState) pid $(prop flashd MainPID) NRestarts $(prop flashd NRestarts); nbd@nbd0: $(prop nbd@nbd0 ActiveState); drbd@r0: $(prop drbd@r0 ActiveState)"
}

c_poweroff() {
	journalctl -b --no-pager -o short-monotonic >/vmtest/journal.txt 2>&1
	dmesg >/vmtest/dmesg.txt 2>&1
	POWEROFF=1
}

# ---------------------------------------------------------------- the loop
log "node $(uname -n) up: $(uname -r), $(grep -m1 version /proc/drbd 2>/dev/null)"
modprobe drbd 2>/dev/null
touch /vmtest/ready
n=1 POWEROFF=
while [ -z "$POWEROFF" ]; do
	if [ ! -s /vmtest/cmd.$n ]; then
		sleep 0.2
		continue
	fi
	read -r -a CMD </vmtest/cmd.$n
	log "#$n: ${CMD[*]}"
	t=$(up)
	f=c_${CMD[0]//-/_}
	if declare -F "$f" >/dev/null; then
		# a subshell: die() ends the command, not the agent; except poweroff
		if [ "$f" = c_poweroff ]; then
			c_poweroff >/vmtest/out.$n 2>&1
			rc=0
		else
			("$f" "${CMD[@]:1}") >/vmtest/out.$n 2>&1 </dev/null
			rc=$?
		fi
	else
		echo "unknown command ${CMD[0]}" >/vmtest/out.$n
		rc=2
	fi
	log "#$n: ${CMD[0]} rc=$rc ($(since "$t") s)"
	echo $rc >/vmtest/rc.$n.tmp && mv /vmtest/rc.$n.tmp /vmtest/rc.$n
	n=$((n + 1))
done
echo "@@ t=$(up) RESULT drbd PASS $((n - 1)) commands" >/dev/console
echo "@@ t=$(up) ALL DONE rc=0" >/dev/console
exit 0
