#!/bin/bash
# test-drbd.sh - two storage nodes, each a qemu VM running flashd with one
# ioDimm attached by the kernel NBD client, replicated with DRBD (Debian 12's
# drbd.ko 8.4, protocol C), set up with deploy/drbd/'s files; failover
# without losing a flushed write, with the primary VM killed hard and with
# flashd SIGKILLed on the primary.
# timeout: 1800
# long: yes (11-14 min: make check-drbd, not make check)
# exclusive: two TCG guests with real-time timeouts
#
#   tests/vm/test-drbd.sh
#
# 1. tests/vm/prepare.sh --systemd (the cache of tests/vm/test-systemd.sh; its
#    kernel has drbd.ko, its rootfs-systemd drbd-utils).
# 2. Two VMs from tests/vm/run.sh drbd (systemd as PID 1, `make install` of
#    this tree, guest-drbd.sh taking the host's commands through the run
#    share), flashd-a and flashd-b, joined by a virtual wire (qemu UDP socket
#    netdevs on 127.0.0.1, 10.213.40.1 and .2 inside), each with a persistent
#    disk (a raw ext4 image on the host) for flashd's state.
# 3. Both nodes: deploy/drbd/README.md's setup (nbdtab, drop-ins, r0.res);
#    nbd@nbd0 (pulls flashd in first: checked); create-md; up
#    (drbd@r0.target pulls flashd, then nbd@nbd0, then drbd@r0: checked);
#    initial sync from flashd-a.  Throughput on flashd-a, 3 rounds in turn,
#    medians: the bare export (dimm1 by the kernel NBD client), the same
#    through LIO's loopback fabric and tcmu-runner, the replicated
#    /dev/drbd0, and TCP alone over the link to flashd-b.  20 fdatasyncs
#    on /dev/drbd0 must raise the FLUSH count of flashd on both nodes;
#    flashctl status shows the DRBD resource and the role on each node
#    (also after each promotion and switch-back below).  The health (its
#    exit status, text, --json, /metrics) is a warning with the DRBD
#    reason on the promoted survivor (drbd_disconnected) and beside a
#    Diskless peer (drbd_peer_disk), ok again after each resync.
# 4. VM kill: tests/vm/drbd-writer.py writes a pattern on flashd-a
#    (fdatasync every batch, the next batch already unflushed) until the
#    host kills flashd-a's qemu by pid (SIGKILL); flashd-b is promoted and
#    every flushed block verified; flashd-b writes more (flushed); flashd-a
#    boots again from its disk, comes up as secondary and resyncs; switch
#    back (b secondary, a primary), every flushed block verified on
#    flashd-a, DRBD's online verify finds no block out of sync.
# 5. flashd SIGKILL: the writer again on flashd-a; flashd is SIGKILLed
#    there; DRBD detaches flashd-a's disk and the writer goes on (its writes
#    now reach flashd-b only); then the writer stops, flashd-a is demoted,
#    flashd-b promoted and every flushed block verified; flashd-a's disk is
#    attached again as the README says (systemd restarted flashd), resyncs;
#    switch back, verify, online verify.
# A step that fails ends the test (the pair is then in no known state).
# Prints PASS/FAIL per step and the counts; exits 0 only if every step passed.
# SKIP (exit 77, "SKIP: ..." on the last line, as tests/functions.sh's skip
# does; tests/run.sh counts it as skipped, and make check-drbd, which runs
# only this test, then fails): not root, no TCG, or no cache and no Debian
# mirror.
# Logs: build/test-logs/vm-drbd/ (consoles, command outputs, writer logs,
# journals and kernel logs of the nodes).
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 2
LOGDIR=$PWD/build/test-logs/vm-drbd
. tests/vm/host-lib.sh
SEED=$((RANDOM * 32768 + RANDOM))
BLOCKS=6144 # the writer's region: the first 24 MiB of /dev/drbd0
BATCH=32    # writes per flush
NODE_A=flashd-a ADDR_A=10.213.40.1
NODE_B=flashd-b ADDR_B=10.213.40.2

declare -A RUN RUNPID SEQ BOOT
BOOT[a]=0 BOOT[b]=0
cleanup() {
	local n p
	for n in a b; do
		p=${RUNPID[$n]:-}
		if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
			kill "$p" 2>/dev/null # run.sh's trap kills its qemu by pid
			wait "$p" 2>/dev/null
		fi
	done
	if [ -n "$WORK" ]; then
		mkdir -p "$LOGDIR"
		for d in "$WORK"/vm-*; do
			[ -d "$d" ] || continue
			n=${d##*/}
			mkdir -p "$LOGDIR/$n"
			cp -f "$d/console.log" "$d/make-install.log" "$LOGDIR/$n/" 2>/dev/null
			cp -f "$d"/share/out.* "$d"/share/cmd.* "$d"/share/*.log "$d"/share/*.txt "$LOGDIR/$n/" 2>/dev/null
		done
		cp -f "$WORK"/run-*.log "$LOGDIR/" 2>/dev/null
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

vm_host_ok "chroot + apt-get for the VM rootfs, qemu with the root-owned rootfs"

# ---------------------------------------------------------------- 1. cache
vm_prepare --systemd
vm_built build/flashd build/flashctl build/handler_flashd.so


# ---------------------------------------------------------------- 2. the nodes
WORK=$(mktemp -d "${TMPDIR:-/tmp}/flashd-vmdrbd.XXXXXX") || exit 2
for n in a b; do
	truncate -s 192M "$WORK/disk-$n.img" && mkfs.ext4 -q -F "$WORK/disk-$n.img" ||
		{ fail "making the persistent disk of node $n"; finish; }
done
# two free UDP ports on 127.0.0.1 for the wire between the nodes
PORTS=()
for _ in $(seq 1 200); do
	p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
	[ -z "$(ss -Hlun "sport = :$p" 2>/dev/null)" ] && [[ " ${PORTS[*]} " != *" $p "* ]] && PORTS+=("$p")
	[ ${#PORTS[@]} = 2 ] && break
done
[ ${#PORTS[@]} = 2 ] || { fail "no two free UDP ports"; finish; }
declare -A PEER=([a]="${PORTS[0]}:${PORTS[1]}:$ADDR_A/24" [b]="${PORTS[1]}:${PORTS[0]}:$ADDR_B/24")
declare -A HOSTNAME_OF=([a]=$NODE_A [b]=$NODE_B)

# boot NODE: start its VM (a new run dir per boot) and wait for its agent
boot() {
	local n=$1 i k
	k=$((BOOT[$n] + 1))
	BOOT[$n]=$k
	RUN[$n]=$WORK/vm-$n$k
	SEQ[$n]=0
	VM_RUN_DIR=${RUN[$n]} VM_HOSTNAME=${HOSTNAME_OF[$n]} VM_PEER=${PEER[$n]} VM_DISK=$WORK/disk-$n.img \
		VM_TIMEOUT=1200 setpriv --pdeathsig TERM -- tests/vm/run.sh drbd \
		>"$WORK/run-$n$k.log" 2>&1 &
	RUNPID[$n]=$!
}
wait_ready() { # NODE...
	local n i t
	t=$(date +%s)
	for n in "$@"; do
		for ((i = 0; i < 1500; i++)); do
			[ -e "${RUN[$n]}/share/ready" ] && break
			kill -0 "${RUNPID[$n]}" 2>/dev/null || break
			sleep 0.2
		done
		if [ ! -e "${RUN[$n]}/share/ready" ]; then
			tail -n 30 "$WORK/run-$n${BOOT[$n]}.log" | sed 's/^/    | /'
			fail "node $n (boot ${BOOT[$n]}) did not come up"
			finish
		fi
	done
	pass "node(s) $* booted (boot ${BOOT[$1]}; $(($(date +%s) - t)) s)"
}

# cmd NODE SECS COMMAND ARGS...: run it in the node's agent; OUT = its output
cmd() {
	local n=$1 secs=$2 k share i rc
	shift 2
	k=$((SEQ[$n] + 1))
	SEQ[$n]=$k
	share=${RUN[$n]}/share
	echo "$*" >"$share/cmd.$k.tmp" && mv "$share/cmd.$k.tmp" "$share/cmd.$k"
	for ((i = 0; i < secs * 5; i++)); do
		[ -s "$share/rc.$k" ] && break
		kill -0 "${RUNPID[$n]}" 2>/dev/null || break
		sleep 0.2
	done
	OUT=$(cat "$share/out.$k" 2>/dev/null)
	[ -n "$OUT" ] && sed "s/^/    [$n] /" <<<"$OUT"
	if [ -s "$share/rc.$k" ]; then
		rc=$(cat "$share/rc.$k")
	elif kill -0 "${RUNPID[$n]}" 2>/dev/null; then
		rc="timeout (${secs}s)"
	else
		rc="VM gone"
	fi
	[ "$rc" = 0 ] && return 0
	CMD_ERR="node $n: '$*' failed: $rc"
	return 1
}
# must NODE SECS COMMAND...: cmd, and a failure ends the test
must() {
	if cmd "$@"; then
		return 0
	fi
	fail "$CMD_ERR"
	finish
}
# the writer's log lines (in the share of the node's boot it ran on)
last_gen() { # LOG KIND -> the generation of the last "KIND G" line
	sed -n "s/^$2 \([0-9]*\) .*/\1/p" "$1" | tail -n1
}
count_lines() { # LOG KIND -> how many "KIND ..." lines
	local c
	c=$(grep -c "^$2 " "$1" 2>/dev/null)
	echo "${c:-0}"
}
wait_flushed() { # LOG N SECS: until the log has N "flushed" lines
	local i
	for ((i = 0; i < $3 * 5; i++)); do
		[ "$(count_lines "$1" flushed)" -ge "$2" ] && return 0
		grep -q '^error' "$1" 2>/dev/null && return 1
		sleep 0.2
	done
	return 1
}
kill_vm() { # NODE: SIGKILL its qemu (no shutdown), wait for run.sh
	local n=$1 pid
	pid=$(cat "${RUN[$n]}/qemu.pid")
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == qemu-system-x86* ]] || { fail "no qemu for node $n"; finish; }
	kill -KILL "$pid"
	wait "${RUNPID[$n]}" 2>/dev/null
	RUNPID[$n]=
	note "node $n: qemu pid $pid killed (SIGKILL)"
}
flushes() { # NODE: FL = FLUSH count of its flashd (dimm0); not in $(): SEQ must stay
	must "$1" 60 flushes
	FL=$(sed -n 's/^dimm0 flushes \([0-9]*\)$/\1/p' <<<"$OUT")
}

note "seed $SEED, writer region $BLOCKS blocks of 4 KiB, batches of $BATCH writes per flush"
boot a
boot b
wait_ready a b

# ---------------------------------------------------------------- 3. set up the pair
for n in a b; do
	must $n 120 install $NODE_A $ADDR_A $NODE_B $ADDR_B
	must $n 300 attach
done
pass "both nodes: deploy/drbd installed, nbd@nbd0 attached flashd's dimm0 (after flashd was ready)"
for n in a b; do must $n 120 create-md; done
for n in a b; do must $n 300 up; done
must a 120 wait-connected 120
pass "drbd@r0 up on both nodes (order checked: flashd ready, then nbd@nbd0, then drbd@r0), connected"
t=$(date +%s)
must a 60 primary-force
must a 900 wait-synced 900
must b 60 wait-synced 60
pass "initial sync from $NODE_A done ($(($(date +%s) - t)) s): UpToDate/UpToDate"
must b 60 sink start
must a 600 compare 3 $ADDR_B
COMPARED=$(grep '^medians' <<<"$OUT")
must b 60 sink stop
pass "throughput on $NODE_A, $COMPARED"

flushes a && fa0=$FL
flushes b && fb0=$FL
must a 300 fsyncs 20
flushes a && fa1=$FL
flushes b && fb1=$FL
if [ $((fa1 - fa0)) -ge 20 ] && [ $((fb1 - fb0)) -ge 20 ]; then
	pass "20 fdatasyncs on /dev/drbd0 reach flashd's FLUSH on both nodes: $NODE_A flushes $fa0 -> $fa1, $NODE_B $fb0 -> $fb1"
else
	fail "20 fdatasyncs on /dev/drbd0: $NODE_A flushes $fa0 -> $fa1, $NODE_B $fb0 -> $fb1 (want +20 on each)"
fi
cmd a 60 status Primary && cmd b 60 status Secondary &&
	pass "flashctl status names the DRBD resource over dimm0 and the role on each node" ||
	fail "flashctl status: $CMD_ERR"

# ---------------------------------------------------------------- 4. kill the primary VM
LOG1=${RUN[a]}/share/writer-1.log
must a 60 writer-start $SEED $BLOCKS 1 $BATCH /vmtest/writer-1.log
wait_flushed "$LOG1" 40 600 || { fail "writer on $NODE_A: $(tail -n 2 "$LOG1")"; finish; }
kill_vm a
G1F=$(last_gen "$LOG1" flushed)
G1MAX=$(($(last_gen "$LOG1" wrote) + BATCH))
note "writer 1 on $NODE_A: $(count_lines "$LOG1" flushed) batches flushed, last flushed generation $G1F, at most $G1MAX written"
must b 120 promote
must b 300 verify $SEED $BLOCKS 1-$G1F $G1MAX
pass "VM kill: $NODE_B promoted; $(head -n 1 <<<"$OUT")"
cmd b 60 status Primary || fail "flashctl status on the promoted $NODE_B: $CMD_ERR"
cmd b 120 health 1 drbd_disconnected &&
	pass "VM kill: $NODE_B's health is a warning, drbd_disconnected, in flashctl status (exit 1), --json and /metrics" ||
	fail "health of the promoted $NODE_B: $CMD_ERR"
G2S=$((G1MAX + 1))
must b 600 writer-run $SEED $BLOCKS $G2S $BATCH /vmtest/writer-2.log 40
LOG2=${RUN[b]}/share/writer-2.log
G2F=$(last_gen "$LOG2" flushed)
RANGES=1-$G1F,$G2S-$G2F
note "writer 2 on $NODE_B: generations $G2S-$G2F, all flushed"

boot a
wait_ready a
must a 120 install $NODE_A $ADDR_A $NODE_B $ADDR_B
must a 300 up
must a 120 wait-connected 120
must a 900 wait-synced 900
SYNCED=$OUT
must a 60 state
pass "VM kill: $NODE_A back from its disk ($(grep '^dimm0:' <<<"$OUT")), secondary, resynced from $NODE_B: $(grep -E '^(in sync|resync)' <<<"$SYNCED" | paste -sd ';' | sed 's/;/; /g')"
cmd a 120 health 0 - && cmd b 120 health 0 - &&
	pass "VM kill: after the resync the health is ok again on both nodes (exit 0, no DRBD reason)" ||
	fail "health after the resync: $CMD_ERR"
must b 60 demote
must a 120 promote
must a 300 verify $SEED $BLOCKS $RANGES $G2F
pass "VM kill: switched back to $NODE_A; $(head -n 1 <<<"$OUT")"
must a 900 online-verify
pass "VM kill: online verify ${OUT#online verify }"
cmd a 60 status Primary && cmd b 60 status Secondary ||
	fail "flashctl status after the switch-back: $CMD_ERR"

# ---------------------------------------------------------------- 5. SIGKILL flashd on the primary
G3S=$((G2F + 1))
must a 60 writer-start $SEED $BLOCKS $G3S $BATCH /vmtest/writer-3.log
LOG3=${RUN[a]}/share/writer-3.log
wait_flushed "$LOG3" 20 600 || { fail "writer 3 on $NODE_A: $(tail -n 2 "$LOG3")"; finish; }
must a 60 kill-flashd
n3=$(count_lines "$LOG3" flushed)
must a 180 wait-diskless
cmd b 120 health 1 drbd_peer_disk &&
	pass "flashd SIGKILL: $NODE_B's health is a warning, drbd_peer_disk (the peer is Diskless)" ||
	fail "health of $NODE_B with $NODE_A's disk detached: $CMD_ERR"
if wait_flushed "$LOG3" $((n3 + 10)) 600; then
	# the longest wait between two flushed batches: the stall while nbd0's
	# requests waited for nbdtab's timeout before DRBD detached the disk
	stall=$(awk '/^flushed / { t = substr($3, 3); if (p != "" && t - p > m) m = t - p; p = t } END { printf "%.1f", m }' "$LOG3")
	pass "flashd SIGKILL: $NODE_A's disk detached, the writer went on ($(($(count_lines "$LOG3" flushed) - n3)) more batches flushed, through $NODE_B's disk; longest gap between two flushed batches $stall s)"
else
	fail "flashd SIGKILL: the writer did not go on after the kill: $(tail -n 2 "$LOG3")"
	finish
fi
must a 180 writer-stop
G3F=$(last_gen "$LOG3" flushed)
grep -q "^stopped $G3F " "$LOG3" || { fail "writer 3 did not stop after a flush: $(tail -n 2 "$LOG3")"; finish; }
RANGES=$RANGES,$G3S-$G3F
must a 60 demote
must b 120 promote
must b 300 verify $SEED $BLOCKS $RANGES $G3F
pass "flashd SIGKILL: $NODE_B promoted; $(head -n 1 <<<"$OUT")"
cmd b 60 status Primary || fail "flashctl status on the promoted $NODE_B: $CMD_ERR"
must a 300 reattach
must a 900 wait-synced 900
pass "flashd SIGKILL: $NODE_A's disk attached again, resynced from $NODE_B: $(grep -E '^(in sync|resync)' <<<"$OUT" | paste -sd ';' | sed 's/;/; /g')"
cmd a 120 health 0 - && cmd b 120 health 0 - &&
	pass "flashd SIGKILL: after the resync the health is ok again on both nodes" ||
	fail "health after the second resync: $CMD_ERR"
must b 60 demote
must a 120 promote
must a 300 verify $SEED $BLOCKS $RANGES $G3F
pass "flashd SIGKILL: switched back to $NODE_A; $(head -n 1 <<<"$OUT")"
must a 900 online-verify
pass "flashd SIGKILL: online verify ${OUT#online verify }"
cmd a 60 status Primary && cmd b 60 status Secondary ||
	fail "flashctl status after the second switch-back: $CMD_ERR"

# ---------------------------------------------------------------- the end
for n in a b; do
	cmd $n 120 poweroff
	cp -f "${RUN[$n]}/share/journal.txt" "$LOGDIR/journal-$n.txt" 2>/dev/null
done
for n in a b; do
	[ -n "${RUNPID[$n]}" ] && wait "${RUNPID[$n]}"
	RUNPID[$n]=
done
finish
