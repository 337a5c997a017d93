# guest-lib.sh - shell functions of the VM guests' iSCSI checks, sourced by
# guest-test.sh (flashd on the host, restarted by the host agent) and
# guest-systemd.sh (flashd.service in the guest, `systemctl restart`).
# run.sh puts it in every run share (/vmtest).  Needs bash, fio, python3.

# lun_dev LUN -> /dev/sdX of LUN in the logged-in iSCSI session(s)
lun_dev() {
	local b
	for b in /sys/class/iscsi_session/session*/device/target*/*:*:*:"$1"/block/*; do
		[ -e "$b" ] && { echo "/dev/${b##*/}"; return 0; }
	done
	return 1
}

# stats_line BACKSTORE KIND -> the handler's "stats ok:" / "stats:" line for
# that backstore (it logs them when tcmu-runner closes the device)
stats_line() {
	grep -a "flashd/$1: $2:" /var/log/tcmu-runner.log | tail -n1 | sed "s/.*flashd\/$1: //"
}

# writes_done DEV: writes the block layer completed on DEV
writes_done() { awk '{print $5}' "/sys/block/${1#/dev/}/stat"; }

# fio_job DEV NAME OFF_MIB MIB [fio options]: fio on DEV, MIB MiB at
# OFF_MIB: random 64k writes (libaio, O_DIRECT + O_SYNC: each write is FUA,
# so a completed write must survive even a SIGKILL of the server), 8 in
# flight, each block written once and carrying a crc32c header that fio
# reads back and checks once the writes are done (verify_fatal: the first
# mismatch ends the job).  The same NAME, offsets and seed with
# --verify_only check the blocks again later.  Output and a one-line
# summary (fio_summary) in /tmp/fio-NAME.{json,log}.
fio_job() {
	local dev=$1 name=$2 off=$3 n=$4
	shift 4
	fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 --sync=1 \
		--rw=randwrite --bs=64k --iodepth=8 --offset=$((off << 20)) --size=$((n << 20)) \
		--randrepeat=1 --randseed=$((off + 36)) --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--output-format=json --output="/tmp/fio-$name.json" "$@" >"/tmp/fio-$name.log" 2>&1
}
fio_summary() { # NAME -> "errors E, W writes, R blocks verified"; exit 1 on an error
	python3 - "/tmp/fio-$1.json" <<'PY'
import json, sys
try:
    text = open(sys.argv[1]).read()  # fio may put notes before the JSON
    jobs = json.loads(text[text.index("{"):])["jobs"]
except Exception as e:
    sys.exit("no fio JSON output (%s)" % e)
err = sum(j["error"] for j in jobs)
w = sum(j["write"]["total_ios"] for j in jobs)
r = sum(j["read"]["total_ios"] for j in jobs)
print("errors %d, %d writes, %d blocks verified" % (err, w, r))
sys.exit(1 if err or r == 0 else 0)
PY
}
fio_failed() { # NAME -> fio's error lines, short
	{ grep -a -i -E 'error|verify|bad|crc|fail' "/tmp/fio-$1.log"; fio_summary "$1" 2>&1; } |
		head -n 4 | tr '\n' ' ' | cut -c1-400
}

# fio_restart DEV NAME OFF_MIB MIB CMD...: fio_job NAME on DEV at 1 MiB/s
# and, once its first writes have completed (fio takes seconds to start
# under TCG: a fixed delay may restart the server before fio wrote
# anything), CMD, which restarts the server; the writes after that meet the
# restart.  fio must then end without error and read back every block.
# 0: FIO_SUM holds fio_summary's line.  1: FIO_ERR says what went wrong.
# shellcheck disable=SC2034 # FIO_SUM, FIO_ERR: read by the callers
fio_restart() {
	local dev=$1 name=$2 off=$3 n=$4 w w0 i
	shift 4
	FIO_SUM='' FIO_ERR=''
	w0=$(writes_done "$dev")
	fio_job "$dev" "$name" "$off" "$n" --rate=,1m &
	w=$!
	for ((i = 0; i < 600; i++)); do
		[ "$(writes_done "$dev")" -ge $((w0 + 2)) ] && break
		kill -0 "$w" 2>/dev/null || break
		sleep 0.1
	done
	if [ "$i" -ge 600 ] || ! kill -0 "$w" 2>/dev/null; then
		kill "$w" 2>/dev/null
		wait "$w"
		FIO_ERR="fio wrote nothing to $dev within 60 s, or ended before the restart: $(fio_failed "$name")"
		return 1
	fi
	if ! "$@"; then
		kill "$w" 2>/dev/null
		wait "$w"
		FIO_ERR="the restart ($*) failed"
		return 1
	fi
	if ! wait "$w"; then
		FIO_ERR="fio failed across the server restart: $(fio_failed "$name")"
		return 1
	fi
	FIO_SUM=$(fio_summary "$name" 2>&1) || { FIO_ERR="fio across the server restart: $FIO_SUM"; return 1; }
}

# kernel_io_errors: the kernel log's I/O error and SCSI sense lines (since
# the last dmesg -C); status 1 when there are none
kernel_io_errors() { dmesg | grep -E -i 'I/O error|critical (target|medium|space)|Sense Key'; }
