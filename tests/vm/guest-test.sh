#!/bin/bash
# guest-test.sh - stage 2 of the test VM, inside the Debian rootfs (chroot).
#
#   guest-test.sh nbd,iscsi     run the listed steps in order, each under a timeout
#   guest-test.sh --one STEP    (internal) run one step
#
# Settings come from /vmtest/config (written by run.sh).  The host's
# 127.0.0.1 is 10.0.2.2 here.  Console markers, read by run.sh:
#   "@@ t=<uptime> RESULT <step> PASS|FAIL"
#
# Host requests: a step that needs the host to act (stop / start / restart
# the server) writes /vmtest/req.<n> holding the verb and waits for
# /vmtest/ack.<n> ("ok ..." or "fail ...") written by the host agent in
# tests/vm/test-kernel-clients.sh.  Without an agent (HOST_AGENT=0, e.g. a
# bare run.sh) those sub-steps are skipped, and say so.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME=/root

HOST=10.0.2.2
NBD_PORT=10809
EXPORT0=dimm0
EXPORT1=dimm1
EXPORT1_SIZE=
HOST_AGENT=0
TEST_TIMEOUT=420
HOSTREQ_TIMEOUT=180
SERVER_KIND=flashd
[ -r /vmtest/config ] && . /vmtest/config

IQN=iqn.2024-01.org.flashd:vmtest
CHAP_USER=flashd-vmtest CHAP_PW=vmtest-secret-42
MiB=$((1 << 20))

up() { read -r u _ </proc/uptime; echo "$u"; }
log() { echo "@@ t=$(up) $*"; }
since() { awk -v a="$1" -v b="$(up)" 'BEGIN { printf "%.1f", b - a }'; }
fail() {
	log "$CUR: FAIL: $*"
	exit 1
}
# indent detail output; the extra echo ends a last line without newline
indent() { { cat; echo; } | sed -e 's/\x1b\[[0-9;]*m//g' -e '/^[[:space:]]*$/d' -e 's/^/   | /'; }

# ---------------------------------------------------------------- helpers

# Ask the host agent to do VERB; 0 when it answered "ok ...".
host_request() {
	local verb=$1 n ack="" i t
	[ "$HOST_AGENT" = 1 ] || return 2
	n=$(($(cat /tmp/hostreq.seq 2>/dev/null || echo 0) + 1))
	echo "$n" >/tmp/hostreq.seq
	t=$(up)
	{ echo "$verb" >/vmtest/req.$n.tmp && mv /vmtest/req.$n.tmp /vmtest/req.$n; } ||
		{ log "$CUR: cannot write host request $n"; return 1; }
	log "$CUR: host request #$n: $verb"
	for ((i = 0; i < HOSTREQ_TIMEOUT * 5; i++)); do
		if [ -s /vmtest/ack.$n ]; then
			read -r ack </vmtest/ack.$n
			break
		fi
		sleep 0.2
	done
	if [ -z "$ack" ]; then
		log "$CUR: host request #$n ($verb): no answer within ${HOSTREQ_TIMEOUT}s"
		return 1
	fi
	log "$CUR: host answered #$n: $ack ($(since "$t")s)"
	[[ $ack == ok* ]]
}

# MiB of random data -> DEV at offset OFF_MIB with O_DIRECT + fsync, drop
# caches, read back with O_DIRECT and compare.  Leaves the data in /tmp/pat.
raw_check() { # DEV MIB [OFF_MIB]
	local dev=$1 n=$2 off=${3:-0}
	dd if=/dev/urandom of=/tmp/pat bs=1M count="$n" status=none || return 1
	dd if=/tmp/pat of="$dev" bs=1M seek="$off" oflag=direct conv=notrunc,fsync status=none || return 1
	blockdev --flushbufs "$dev"
	echo 3 >/proc/sys/vm/drop_caches
	read_cmp "$dev" $((off * MiB)) $((n * MiB)) /tmp/pat
}
read_cmp() { # DEV OFF LEN FILE: LEN bytes at byte offset OFF equal FILE
	dd if="$1" iflag=direct,skip_bytes,count_bytes skip="$2" count="$3" bs=1M status=none |
		cmp -s - "$4"
}
is_zero() { # DEV OFF LEN
	dd if="$1" iflag=direct,skip_bytes,count_bytes skip="$2" count="$3" bs=1M status=none |
		cmp -s -n "$3" - /dev/zero
}

# A tree of files with known checksums under DIR/tree; manifest to FILE.
make_tree() { # DIR MANIFEST
	local m=$1 i d
	mkdir -p "$m/tree/a/b/c" "$m/tree/d" "$m/tree/empty-dir" || return 1
	dd if=/dev/urandom of="$m/tree/big.bin" bs=1M count=8 status=none || return 1
	: >"$m/tree/empty"
	for i in $(seq 1 48); do
		case $((i % 4)) in 0) d=a ;; 1) d=a/b ;; 2) d=a/b/c ;; 3) d=d ;; esac
		head -c $(((i * 7919) % 200000 + 1)) /dev/urandom >"$m/tree/$d/f$i" || return 1
	done
	(cd "$m" && find tree -type f -print0 | sort -z | xargs -0 sha256sum) >"$2"
}
check_tree() { # DIR MANIFEST
	local n
	(cd "$1" && sha256sum --quiet -c "$2") 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || return 1
	n=$(cd "$1" && find tree -type f | wc -l)
	[ "$n" = "$(wc -l <"$2")" ] || { log "$CUR: $n files on disk, $(wc -l <"$2") in the manifest"; return 1; }
}

# ---------------------------------------------------------------- step 1: nbd
# The kernel NBD client (nbd-client 3.24 + nbd.ko) against the host's
# server: nbd-client HOST PORT DEV -N EXPORT (fixed newstyle; -N is needed).
nbd_attach() { # DEV EXPORT
	local rc
	# no pipe: in ioctl mode nbd-client forks a child that keeps stdout open
	nbd-client "$HOST" "$NBD_PORT" "$1" -N "$2" >/tmp/nbd-client.out 2>&1
	rc=$?
	indent </tmp/nbd-client.out
	return $rc
}

t_nbd() {
	local d0=/dev/nbd0 d1=/dev/nbd1 M=/mnt/nbd t sz nf
	[ -b $d0 ] || fail "no $d0 (nbd module not loaded?)"
	t=$(up)
	nbd_attach $d0 "$EXPORT0" ||
		fail "nbd-client $HOST $NBD_PORT $d0 -N $EXPORT0 failed (server on host 127.0.0.1:$NBD_PORT?)"
	sz=$(blockdev --getsize64 $d0)
	log "nbd: attached export $EXPORT0 on $d0, size $sz ($(since "$t")s)"
	[ "$sz" -ge $((256 * MiB)) ] || fail "export $EXPORT0 too small ($sz bytes)"

	t=$(up)
	raw_check $d0 16 || fail "raw 16 MiB O_DIRECT write/read-back mismatch"
	log "nbd: raw 16 MiB O_DIRECT write + read-back compare OK ($(since "$t")s)"

	t=$(up)
	mkfs.ext4 -q -F -L flashd-nbd $d0 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "mkfs.ext4 $d0"
	mkdir -p $M
	mount -t ext4 $d0 $M || fail "mount ext4"
	make_tree $M /tmp/nbd.sha256 || fail "writing the file tree"
	nf=$(wc -l </tmp/nbd.sha256)
	sync
	umount $M || fail "umount"
	fsck.ext4 -fn $d0 >/tmp/fsck.out 2>&1 || { indent </tmp/fsck.out; fail "fsck.ext4 -fn reported problems"; }
	echo 3 >/proc/sys/vm/drop_caches
	mount -t ext4 $d0 $M || fail "remount"
	check_tree $M /tmp/nbd.sha256 || fail "checksums differ after remount"
	umount $M || fail "umount after verify"
	nbd-client -d $d0 >/dev/null 2>&1 || fail "nbd-client -d $d0"
	log "nbd: mkfs.ext4 + $nf files + umount + fsck -n + remount + verify OK, detached ($(since "$t")s)"

	if host_request restart-server; then
		log "nbd: the host restarted the server (same state dir and port)"
	elif [ "$HOST_AGENT" = 1 ]; then
		fail "host could not restart the server"
	else
		log "nbd: SKIP server restart (no host agent); re-attaching to the same server"
	fi

	# a new attachment on another device: everything must come from the server
	t=$(up)
	echo 3 >/proc/sys/vm/drop_caches
	nbd_attach $d1 "$EXPORT0" || fail "re-attach $EXPORT0 on $d1"
	fsck.ext4 -fn $d1 >/tmp/fsck.out 2>&1 || { indent </tmp/fsck.out; fail "fsck.ext4 -fn after re-attach"; }
	mount -t ext4 -o ro $d1 $M || fail "mount after re-attach"
	check_tree $M /tmp/nbd.sha256 || fail "checksums differ after server restart + re-attach"
	umount $M || fail "umount $d1"
	nbd-client -d $d1 >/dev/null 2>&1 || fail "nbd-client -d $d1"
	log "nbd: re-attach on $d1 + fsck -n + verify $nf checksums OK, detached ($(since "$t")s)"
}

# ---------------------------------------------------------------- step 2: iscsi
# tcmu-runner + handler_flashd.so; deploy/iscsi-lun.sh (the documented
# commands) creates the user:flashd backstores and the target; open-iscsi
# logs in over loopback.
#   LUN 0: cfgstring EXPORT1 -> the handler's default unix socket
#          /run/flashd/flashd.sock, which socat bridges to HOST:NBD_PORT
#   LUN 1: cfgstring EXPORT1@HOST/NBD_PORT;grace=5 (the handler's TCP form;
#          rtslib refuses ':' in a cfgstring, hence host/port; commands are
#          held 5 s while flashd is down, LUN 0 has the default 20 s), 64 MiB
# lun_dev, stats_line, fio_job, fio_restart ...: guest-lib.sh

# restart_under_load VERB HOW OFF_MIB MIB: host request VERB under a fio
# verify job (fio_restart) writing MIB MiB to LUN0 ($d0) at OFF_MIB, while
# the first 16 MiB (/tmp/pat) are read and compared in a loop; every command
# must succeed, fio's read-back after the restart must find every completed
# write, and the kernel log must stay clean
restart_under_load() {
	local verb=$1 how=$2 off=$3 n=$4 t r rc
	t=$(up)
	dmesg -C
	(for i in $(seq 1 200); do
		read_cmp "$d0" 0 $((16 * MiB)) /tmp/pat || exit 1
	done) 2>/tmp/r0.err &
	r=$!
	fio_restart "$d0" "restart-$how" "$off" "$n" host_request "$verb" || fail "$how: $FIO_ERR"
	kill "$r" 2>/dev/null
	wait "$r"
	rc=$?
	[ $rc = 1 ] && fail "a read across the server restart ($how) differs or failed: $(head -c 300 /tmp/r0.err)"
	kernel_io_errors >/tmp/dmesg.err &&
		fail "kernel log across the server restart ($how): $(head -n 3 /tmp/dmesg.err | tr '\n' ' ')"
	log "iscsi: server restarted ($how) under a fio verify job ($n MiB of O_SYNC 64k writes + reads): no I/O error, fio: $FIO_SUM ($(since "$t")s; handler: $(grep -a "flashd/$EXPORT1: .*reconnected" /var/log/tcmu-runner.log | tail -n1 | sed 's/.*reconnected/reconnected/'))"
}

t_iscsi() {
	local cfs=/sys/kernel/config/target t i b d0="" d1="" rc sz lun_size c0 c1 pids
	local cfg0=$EXPORT1 cfg1="$EXPORT1@$HOST/$NBD_PORT;grace=5"
	[ -n "$EXPORT1_SIZE" ] || fail "EXPORT1_SIZE not set (run.sh config)"
	lun_size=$((EXPORT1_SIZE / 4096 * 4096))

	t=$(up)
	mkdir -p /run/dbus /run/flashd /run/tcmu-handlers /run/lock/iscsi
	dbus-daemon --system --fork || fail "dbus-daemon"
	# the handler's default socket, bridged to the host's TCP port
	socat UNIX-LISTEN:/run/flashd/flashd.sock,fork,unlink-early TCP:"$HOST:$NBD_PORT" \
		>/var/log/socat.out 2>&1 &
	SOCAT=$!
	# a private copy: dlopen from the overlay's tmpfs, not from 9p
	install -m 0644 /vmtest/handlers/handler_flashd.so /run/tcmu-handlers/ || fail "no handler_flashd.so"
	tcmu-runner --handler-path /run/tcmu-handlers -l /var/log >/var/log/tcmu-runner.out 2>&1 &
	RUNNER=$!
	# Wait until OUR tcmu-runner owns the bus name: NameHasOwner activates
	# nothing, and targetcli lists user:* backstores only once it has one.
	for i in $(seq 1 150); do
		dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
			org.freedesktop.DBus.NameHasOwner string:org.kernel.TCMUService1 2>/dev/null |
			grep -q 'boolean true' && break
		kill -0 $RUNNER 2>/dev/null || { indent </var/log/tcmu-runner.out; fail "tcmu-runner exited"; }
		sleep 0.2
	done
	[ "$i" -lt 150 ] || fail "tcmu-runner did not claim org.kernel.TCMUService1 within 30s"
	grep -q "Handler flashd is registered" /var/log/tcmu-runner.log ||
		fail "handler flashd not registered: $(grep -o 'Handler [^ ]* is registered' /var/log/tcmu-runner.log | tr '\n' ' ')"
	[ -S /run/flashd/flashd.sock ] || fail "socat bridge did not create /run/flashd/flashd.sock"
	log "iscsi: dbus, socat bridge, tcmu-runner up, handler flashd registered ($(since "$t")s)"

	# A backstore larger than the export must be refused by the handler
	# (and iscsi-lun.sh must clean up after the failed create).
	t=$(up)
	iscsi-lun.sh --iqn "$IQN-toobig" --open-access create "$cfg0" $((lun_size + 4 * MiB)) >/tmp/toobig.out 2>&1
	rc=$?
	indent </tmp/toobig.out
	[ $rc != 0 ] || fail "a backstore 4 MiB larger than export $EXPORT1 was accepted"
	grep -a "refusing to open" /var/log/tcmu-runner.log | grep -q "larger than export" ||
		fail "no 'refusing to open ... larger than' message from the handler in tcmu-runner.log"
	[ -e "$cfs/iscsi/$IQN-toobig" ] && fail "iscsi-lun.sh left the target of the failed create behind"
	ls -d "$cfs"/core/user_*/"$EXPORT1" >/dev/null 2>&1 && fail "iscsi-lun.sh left the backstore of the failed create behind"
	log "iscsi: oversized backstore refused: $(grep -a 'refusing to open' /var/log/tcmu-runner.log | tail -n1 | sed 's/.*refusing to open: //' | cut -c1-160) ($(since "$t")s)"

	t=$(up)
	# LUN0 without a size: iscsi-lun.sh asks the export's; CHAP required
	CHAP_PASSWORD=$CHAP_PW iscsi-lun.sh --iqn "$IQN" --open-access --chap "$CHAP_USER" \
		create "$cfg0" "$cfg1" 64M 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "iscsi-lun.sh create failed"
	log "iscsi: iscsi-lun.sh create: LUN0 cfgstring=$cfg0 (size from the export), LUN1 cfgstring=$cfg1 size=64M, CHAP user $CHAP_USER ($(since "$t")s)"

	t=$(up)
	iscsid || fail "iscsid"
	for i in $(seq 1 50); do
		grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix && break
		sleep 0.1
	done
	iscsiadm -m discovery -t sendtargets -p 127.0.0.1 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "iscsiadm discovery"
	iscsiadm -m node -T "$IQN" -p 127.0.0.1 --login >/tmp/nochap.out 2>&1 &&
		fail "a login without CHAP credentials was admitted"
	grep -q -i "auth" /tmp/nochap.out || { indent </tmp/nochap.out; fail "login without CHAP: no authorization failure"; }
	log "iscsi: a login without CHAP is refused: $(grep -i -m1 auth /tmp/nochap.out)"
	iscsiadm -m node -T "$IQN" -p 127.0.0.1 -o update -n node.session.auth.authmethod -v CHAP &&
		iscsiadm -m node -T "$IQN" -p 127.0.0.1 -o update -n node.session.auth.username -v "$CHAP_USER" &&
		iscsiadm -m node -T "$IQN" -p 127.0.0.1 -o update -n node.session.auth.password -v "$CHAP_PW" ||
		fail "iscsiadm: setting the CHAP credentials"
	iscsiadm -m node -T "$IQN" -p 127.0.0.1 --login 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "iscsiadm login with CHAP"
	for i in $(seq 1 150); do
		d0=$(lun_dev 0) && d1=$(lun_dev 1) && [ -b "$d0" ] && [ -b "$d1" ] && break
		sleep 0.1
	done
	[ -b "$d0" ] && [ -b "$d1" ] || fail "LUN disks did not appear after login (LUN0='$d0' LUN1='$d1')"
	sz=$(blockdev --getsize64 "$d0")
	[ "$sz" = "$lun_size" ] || fail "LUN0 $d0 has $sz bytes, want $lun_size"
	[ "$(blockdev --getsize64 "$d1")" = $((64 * MiB)) ] || fail "LUN1 $d1 is not 64 MiB"
	log "iscsi: login OK: LUN0=$d0 ($sz bytes, '$(tr -s ' ' <"/sys/block/${d0#/dev/}/device/model")'), LUN1=$d1; discard_granularity=$(cat "/sys/block/${d0#/dev/}/queue/discard_granularity") discard_max_bytes=$(cat "/sys/block/${d0#/dev/}/queue/discard_max_bytes") ($(since "$t")s)"

	t=$(up)
	raw_check "$d0" 16 || fail "16 MiB write/read-back mismatch on LUN0"
	read_cmp "$d1" 0 $((16 * MiB)) /tmp/pat || fail "LUN1 (TCP form) does not see what LUN0 wrote"
	log "iscsi: 16 MiB O_DIRECT write+compare on LUN0; same data read through LUN1 (TCP) ($(since "$t")s)"

	# many commands in flight: 4 parallel O_DIRECT writers, then compare
	t=$(up)
	dd if=/dev/urandom of=/tmp/par bs=1M count=16 status=none
	pids=()
	for i in 0 1 2 3; do
		dd if=/tmp/par of="$d0" bs=64k skip=$((i * 64)) seek=$((512 + i * 64)) count=64 \
			oflag=direct conv=notrunc status=none &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || fail "a parallel writer failed"; done
	read_cmp "$d0" $((32 * MiB)) $((16 * MiB)) /tmp/par || fail "parallel writers: read-back mismatch"
	log "iscsi: 4 parallel O_DIRECT writers (16 MiB) + compare OK ($(since "$t")s)"

	# flashd restarts under a fio verify job (O_SYNC: each write FUA) and
	# reads, as systemctl restart does (SIGTERM, exit, start), then killed
	# (SIGKILL) and started: the handler holds the commands and sends them
	# again; no I/O error, no lost write (fio reads every block back)
	if [ "$HOST_AGENT" = 1 ]; then
		restart_under_load restart-server SIGTERM 128 8
		restart_under_load kill-restart-server SIGKILL 136 4
		# both jobs' blocks once more, after both restarts: nothing lost later
		t=$(up)
		fio_job "$d0" restart-SIGTERM 128 8 --verify_only || fail "fio verify-only after both restarts: $(fio_failed restart-SIGTERM)"
		fio_summary restart-SIGTERM >/tmp/fio.sum || fail "fio verify-only (SIGTERM's blocks): $(cat /tmp/fio.sum)"
		fio_job "$d0" restart-SIGKILL 136 4 --verify_only || fail "fio verify-only after both restarts: $(fio_failed restart-SIGKILL)"
		fio_summary restart-SIGKILL >>/tmp/fio.sum || fail "fio verify-only (SIGKILL's blocks): $(tail -n1 /tmp/fio.sum)"
		log "iscsi: fio verify-only pass over both jobs' blocks: $(paste -sd';' /tmp/fio.sum) ($(since "$t")s)"
	fi

	# flashd goes away: LUN1 (grace=5) holds commands 5 s, then fails them
	if host_request stop-server; then
		t=$(up)
		timeout 90 dd if="$d1" of=/dev/null bs=4k count=1 skip=100 iflag=direct status=none 2>/tmp/dd.err
		rc=$?
		[ $rc = 124 ] && fail "a read hung (> 90 s) while the server was down"
		[ $rc = 0 ] && fail "a read succeeded while the server was down"
		grep -a -q "flashd/$EXPORT1-2: .*down for 5 s (grace): failing [1-9]" /var/log/tcmu-runner.log ||
			fail "LUN1's handler did not hold the read for its grace of 5 s"
		timeout 90 dd if=/dev/zero of="$d1" bs=4k count=1 seek=100 oflag=direct conv=notrunc status=none 2>>/tmp/dd.err
		rc=$?
		[ $rc = 124 ] && fail "a write hung (> 90 s) while the server was down"
		[ $rc = 0 ] && fail "a write succeeded while the server was down"
		log "iscsi: server down: read and write failed in $(since "$t")s ($(head -n1 /tmp/dd.err))"
		host_request start-server || fail "host could not start the server again"
		t=$(up)
		for i in $(seq 1 60); do
			dd if="$d0" of=/dev/null bs=4k count=1 iflag=direct status=none 2>/dev/null &&
				dd if="$d1" of=/dev/null bs=4k count=1 iflag=direct status=none 2>/dev/null && break
			sleep 1
		done
		[ "$i" -lt 60 ] || fail "LUNs did not work again within 60 s of the server's restart"
		read_cmp "$d0" 0 $((16 * MiB)) /tmp/pat || fail "LUN0 data differs after the server restart"
		read_cmp "$d1" 0 $((16 * MiB)) /tmp/pat || fail "LUN1 data differs after the server restart"
		log "iscsi: handler reconnected; both LUNs serve the same data again ($(since "$t")s)"
	elif [ "$HOST_AGENT" = 1 ]; then
		fail "host could not stop the server"
	else
		log "iscsi: SKIP server stop/start (no host agent)"
	fi

	t=$(up)
	mkfs.ext4 -q -F -L flashd-iscsi "$d0" 2>&1 | indent # discards the whole LUN first
	[ "${PIPESTATUS[0]}" = 0 ] || fail "mkfs.ext4 $d0"
	mkdir -p /mnt/iscsi
	mount -t ext4 "$d0" /mnt/iscsi || fail "mount ext4 on $d0"
	make_tree /mnt/iscsi /tmp/iscsi.sha256 || fail "writing the file tree"
	nf=$(wc -l </tmp/iscsi.sha256)
	sync
	umount /mnt/iscsi || fail "umount"
	fsck.ext4 -fn "$d0" >/tmp/fsck.out 2>&1 || { indent </tmp/fsck.out; fail "fsck.ext4 -fn reported problems"; }
	echo 3 >/proc/sys/vm/drop_caches
	mount -t ext4 "$d0" /mnt/iscsi || fail "remount"
	check_tree /mnt/iscsi /tmp/iscsi.sha256 || fail "checksums differ after remount"
	umount /mnt/iscsi || fail "umount after verify"
	log "iscsi: mkfs.ext4 + $nf files + umount + fsck -n + remount + verify OK ($(since "$t")s)"

	# discard (SCSI UNMAP -> NBD trim) and zero-out (WRITE SAME -> NBD write
	# zeroes): the ranges held data and must read back as zeros
	t=$(up)
	raw_check "$d0" 4 64 || fail "write before discard"
	is_zero "$d0" $((64 * MiB)) $((4 * MiB)) && fail "random data reads as zeros?"
	blkdiscard -f -o $((64 * MiB)) -l $((4 * MiB)) "$d0" || fail "blkdiscard"
	is_zero "$d0" $((64 * MiB)) $((4 * MiB)) || fail "the discarded 4 MiB does not read back as zeros"
	raw_check "$d0" 1 72 || fail "write before zero-out"
	blkdiscard -f -z -o $((72 * MiB)) -l $((1 * MiB)) "$d0" || fail "blkdiscard -z"
	is_zero "$d0" $((72 * MiB)) $((1 * MiB)) || fail "the zeroed 1 MiB does not read back as zeros"
	log "iscsi: blkdiscard 4 MiB and blkdiscard -z 1 MiB read back as zeros ($(since "$t")s)"

	t=$(up)
	sync
	iscsiadm -m node -T "$IQN" -p 127.0.0.1 --logout 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "iscsiadm logout"
	iscsi-lun.sh --iqn "$IQN" delete "$cfg0" "$cfg1" 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "iscsi-lun.sh delete failed"
	[ -e "$cfs/iscsi/$IQN" ] && fail "target still configured after delete"
	for b in "$cfs"/core/user_*/*; do
		[ -d "$b" ] && fail "backstore left after delete: $b"
	done
	log "iscsi: logout + iscsi-lun.sh delete OK, configfs clean ($(since "$t")s)"

	# the handler's own counters, logged when tcmu-runner closed the devices
	# (backstore names: LUN0 = $EXPORT1, LUN1 = $EXPORT1-2)
	c0=$(stats_line "$EXPORT1" "stats ok")
	c1=$(stats_line "$EXPORT1" stats)
	log "iscsi: LUN0 handler $c0"
	log "iscsi: LUN0 handler $c1"
	log "iscsi: LUN1 handler $(stats_line "$EXPORT1-2" "stats ok")"
	log "iscsi: LUN1 handler $(stats_line "$EXPORT1-2" stats)"
	[[ $c0 =~ trim\ ([0-9]+)\ ([0-9]+) ]] || fail "no trim counters from the handler in tcmu-runner.log"
	[ "${BASH_REMATCH[2]}" -ge $((4 * MiB)) ] || fail "the handler trimmed only ${BASH_REMATCH[2]} bytes"
	[[ $c1 =~ max_inflight\ ([0-9]+) ]] || fail "no max_inflight from the handler in tcmu-runner.log"
	[ "${BASH_REMATCH[1]}" -ge 2 ] || fail "never more than ${BASH_REMATCH[1]} NBD request in flight"
	if [ "$HOST_AGENT" = 1 ]; then
		[[ $c1 =~ reconnects\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] || fail "LUN0 handler reports no reconnect"
		[[ $c1 =~ held\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] ||
			fail "LUN0 handler held no command: the restart did not happen under load"
		c1=$(stats_line "$EXPORT1-2" stats)
		[[ $c1 =~ expired\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] ||
			fail "LUN1 handler failed no held command after its grace while flashd was down"
		[[ $c1 =~ rejected\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] ||
			fail "LUN1 handler rejected no command after its grace while flashd was down"
	fi
	kill $RUNNER
	wait $RUNNER
	rc=$?
	kill $SOCAT 2>/dev/null
	log "iscsi: tcmu-runner stopped (rc=$rc)"
	# everything the runner logged as an error, for the record
	grep -a -E '\[ERROR\]|\[WARN' /var/log/tcmu-runner.log | sed 's/^[^ ]* [^ ]* //' | cut -c1-220 |
		sort | uniq -c | sort -rn | head -n 20 | indent
}

# ---------------------------------------------------------------- driver
save_logs() { # STEP: runner log and kernel log into the share, for the host
	mkdir -p /vmtest/logs
	[ -f /var/log/tcmu-runner.log ] && cp -f /var/log/tcmu-runner.log /vmtest/logs/
	dmesg >/vmtest/logs/dmesg-$1.txt 2>/dev/null
	true
}
if [ "${1:-}" = --one ]; then
	CUR=$2
	PATH=/vmtest:$PATH # iscsi-lun.sh
	. /vmtest/guest-lib.sh
	stop_daemons() {
		[ -n "${RUNNER:-}" ] && kill "$RUNNER" 2>/dev/null
		[ -n "${SOCAT:-}" ] && kill "$SOCAT" 2>/dev/null
		true
	}
	trap stop_daemons EXIT
	trap 'log "$CUR: killed (timeout?)"; exit 124' TERM
	[ "$2" = nandsim ] && . /vmtest/guest-nandsim.sh # t_nandsim
	"t_$2"
	exit $?
fi

RC=0
log "stage2: steps=${1:-none} server=$SERVER_KIND port=$NBD_PORT host-agent=$HOST_AGENT"
IFS=, read -r -a LIST <<<"${1:-}"
[ ${#LIST[@]} -gt 0 ] || {
	log "RESULT none FAIL (no steps requested)"
	exit 1
}
for s in "${LIST[@]}"; do
	case $s in
	nbd | iscsi | nandsim) ;;
	*)
		log "RESULT $s FAIL (unknown step)"
		RC=1
		continue
		;;
	esac
	t0=$(up)
	log "$s: start"
	# keep copies of the logs in the share while the step runs: a step
	# stuck in the kernel cannot save them itself
	(while sleep 15; do save_logs "$s"; done) &
	saver=$!
	timeout -k 5 "$TEST_TIMEOUT" bash "$0" --one "$s"
	r=$?
	kill $saver 2>/dev/null
	wait $saver 2>/dev/null
	save_logs "$s"
	if [ $r = 0 ]; then
		log "RESULT $s PASS ($(since "$t0")s)"
	else
		[ $r = 124 ] && log "$s: timed out after ${TEST_TIMEOUT}s"
		log "RESULT $s FAIL ($(since "$t0")s)"
		RC=1
	fi
done
exit $RC
