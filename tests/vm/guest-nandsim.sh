# guest-nandsim.sh - the nandsim step of the test VM: flashd on raw NAND
# driven by the real kernel (nandsim behind MTD, its ECC and bad-block code),
# inside the guest.  Sourced by guest-test.sh --one nandsim (its helpers:
# log, fail, indent, since, raw_check, make_tree, check_tree); run.sh puts
# flashd, flashctl and t_nand_conformance in /vmtest/bin, and prepare.sh's
# nandsim/ in /vmtest/mod (the modules) and /vmtest/root (mtd-utils, libraries).
#
#   1. nandsim: a 64 MiB chip of 4 KiB pages, 256 KiB blocks, 128 OOB bytes
#      (software Hamming ECC, 78 free), blocks 5 and 100 marked bad, one
#      random bit flip in about one read of 1024; mtdinfo and sysfs agree.
#   2. the shared backend conformance test on /dev/mtd0 (mtd backend).
#   3. flashctl format /dev/mtd0, flashctl info.
#   4. flashd ([dimm nand0] backend = mtd, device = /dev/mtd0) serves it:
#      nbd-client, 16 MiB O_DIRECT write and compare, ext4 with a file tree;
#      a clean restart, the tree again; then the whole export written.
#   5. SIGKILL under a writer, NANDSIM_ROUNDS times, the FTL collecting
#      garbage (the export is full): after each restart the FTL recovered
#      (unclean open) and every unit holds its last flushed write or a
#      newer one (nandsim_crash.py).
#   6. flashctl recover scans the device (valid superblock, 2 bad blocks);
#      mtd-utils cross-check: flashctl locate says where units are;
#      nanddump of those pages holds their data, and in the OOB the FTL's
#      spare (unit number) with the backend's CRC.
#   7. bit flips: the whole export read back; the FTL counted corrected
#      reads, none uncorrectable; the kernel corrected bits too.

NANDSIM_ROUNDS=${NANDSIM_ROUNDS:-4}
NS=/tmp/nandsim
FPID=

nandsim_cleanup() {
	umount /mnt/nand 2>/dev/null
	nbd-client -d /dev/nbd0 >/dev/null 2>&1
	[ -n "$FPID" ] && kill -9 "$FPID" 2>/dev/null
	cp -f $NS/flashd.log /vmtest/logs/flashd-nandsim.log 2>/dev/null
	true
}

# flashd in the background on the config; wait until it listens and has
# opened nand0 (it binds its listeners first).
opens() { grep -c 'nand0: .*opened in' $NS/flashd.log 2>/dev/null; }
flashd_start() {
	local i n0
	n0=$(opens)
	/vmtest/bin/flashd --foreground --config $NS/flashd.conf >>$NS/flashd.log 2>&1 &
	FPID=$!
	for i in $(seq 1 600); do
		kill -0 $FPID 2>/dev/null || { FPID=; return 1; }
		ss -Hltn 'sport = :10809' | grep -q . && [ "$(opens)" -gt "${n0:-0}" ] && return 0
		sleep 0.2
	done
	return 1
}
flashd_stop() { # SIGTERM, wait for the exit; 0 if it exited 0
	kill -TERM $FPID
	wait $FPID
	local rc=$?
	FPID=
	return $rc
}
flashd_kill() {
	kill -9 $FPID
	wait $FPID 2>/dev/null
	FPID=
}
ctl() { /vmtest/bin/flashctl --control $NS/state/flashd.ctl "$@"; }
# one number of nand0's stats from flashctl status --json
stat_of() {
	ctl status --json | python3 -c '
import json, sys
def walk(o):
    if isinstance(o, dict):
        if o.get("name") == "nand0" and isinstance(o.get("stats"), dict):
            yield o["stats"]
        for v in o.values():
            yield from walk(v)
    elif isinstance(o, list):
        for v in o:
            yield from walk(v)
s = list(walk(json.load(sys.stdin)))
print(s[0][sys.argv[1]])' "$1"
}

t_nandsim() {
	local t k i n addr gen line
	trap nandsim_cleanup EXIT
	rm -rf $NS && mkdir -p $NS/state /mnt/nand
	export PYTHONPATH=/vmtest

	# ---- 1. the chip
	t=$(up)
	# prepare.sh's nandsim/: mtd-utils and flashd's libraries over the
	# overlay's /, then nandsim's modules in dependency order
	cp -a /vmtest/root/. / && ldconfig || fail "installing /vmtest/root"
	while read -r k; do
		[ "$k" = nandsim.ko ] || insmod /vmtest/mod/$k 2>&1 | grep -v 'File exists' | indent
	done </vmtest/mod/modules.order
	insmod /vmtest/mod/nandsim.ko id_bytes=0x20,0xf1,0x00,0x26 overridesize=8 badblocks=5,100 bitflips=1 2>&1 | indent
	[ -c /dev/mtd0 ] || fail "no /dev/mtd0 after modprobe nandsim"
	mtdinfo /dev/mtd0 >$NS/mtdinfo.txt 2>&1 || fail "mtdinfo /dev/mtd0: $(cat $NS/mtdinfo.txt)"
	indent <$NS/mtdinfo.txt
	grep -q 'Minimum input/output unit size: *4096 bytes' $NS/mtdinfo.txt || fail "mtdinfo: not 4 KiB pages"
	grep -q 'OOB size: *128 bytes' $NS/mtdinfo.txt || fail "mtdinfo: OOB not 128 bytes"
	grep -q 'Bad blocks are allowed: *true' $NS/mtdinfo.txt || fail "mtdinfo: no bad-block support"
	local oobfree ecc
	oobfree=$(cat /sys/class/mtd/mtd0/oobavail)
	ecc=$(cat /sys/class/mtd/mtd0/ecc_strength)
	[ "$oobfree" = 78 ] || fail "oobavail $oobfree, want 78 (Hamming ECC on 4 KiB pages)"
	log "nandsim: $(sed -n 's/^Amount of eraseblocks: *//p' $NS/mtdinfo.txt), $oobfree free OOB bytes, ECC $ecc bit(s) per $(cat /sys/class/mtd/mtd0/ecc_step_size) bytes, $(cat /sys/class/mtd/mtd0/bad_blocks) bad blocks ($(since "$t")s)"

	# ---- 2. the NAND rules, as on the simulator
	t=$(up)
	FLASHD_TEST_NAND=/dev/mtd0 FLASHD_TEST_NAND_BAD=1 /vmtest/bin/t_nand_conformance >$NS/conf.txt 2>&1 ||
		{ indent <$NS/conf.txt; fail "backend conformance test on /dev/mtd0"; }
	grep '/dev/mtd0' $NS/conf.txt | indent
	log "nandsim: backend conformance test passed on /dev/mtd0 ($(since "$t")s)"

	# ---- 3. format
	t=$(up)
	/vmtest/bin/flashctl format /dev/mtd0 --sector-size 4096 --yes 2>&1 | indent
	[ "${PIPESTATUS[0]}" = 0 ] || fail "flashctl format /dev/mtd0"
	/vmtest/bin/flashctl info /dev/mtd0 >$NS/info.txt 2>&1 || { indent <$NS/info.txt; fail "flashctl info /dev/mtd0"; }
	indent <$NS/info.txt
	grep -q 'raw NAND (mtd backend)' $NS/info.txt || fail "flashctl info: not the mtd backend"
	log "nandsim: formatted ($(since "$t")s)"

	# ---- 4. flashd serves it
	cat >$NS/flashd.conf <<EOF
[server]
listen = 127.0.0.1:10809
state_dir = $NS/state
[dimm nand0]
backend = mtd
device = /dev/mtd0
EOF
	t=$(up)
	flashd_start || { indent <$NS/flashd.log; fail "flashd did not start on /dev/mtd0"; }
	grep 'nand0' $NS/flashd.log | tail -n 3 | indent
	ctl status nand0 >$NS/status.txt 2>&1
	grep -q "nand0: raw NAND (MTD), device /dev/mtd0" $NS/status.txt ||
		{ indent <$NS/status.txt; fail "flashctl status does not show nand0 as raw NAND on /dev/mtd0"; }
	! grep -q "Model:" $NS/status.txt ||
		fail "flashctl status names a simulated card's model for raw NAND: $(grep Model: $NS/status.txt)"
	log "nandsim: flashd serves /dev/mtd0 ($(since "$t")s)"
	t=$(up)
	nbd-client 127.0.0.1 10809 /dev/nbd0 -N nand0 >$NS/nbd.txt 2>&1 || { indent <$NS/nbd.txt; fail "nbd-client"; }
	raw_check /dev/nbd0 16 || fail "16 MiB O_DIRECT write + read-back mismatch"
	mkfs.ext4 -q -F /dev/nbd0 2>&1 | indent
	mount -t ext4 /dev/nbd0 /mnt/nand || fail "mount ext4"
	make_tree /mnt/nand $NS/tree.sha256 || fail "writing the file tree"
	umount /mnt/nand || fail "umount"
	nbd-client -d /dev/nbd0 >/dev/null 2>&1
	flashd_stop || fail "flashd did not exit 0 on SIGTERM"
	flashd_start || { tail -n 20 $NS/flashd.log | indent; fail "flashd did not start again"; }
	nbd-client 127.0.0.1 10809 /dev/nbd0 -N nand0 >$NS/nbd.txt 2>&1 || { indent <$NS/nbd.txt; fail "nbd-client again"; }
	fsck.ext4 -n -f /dev/nbd0 >$NS/fsck.txt 2>&1 || { indent <$NS/fsck.txt; fail "fsck.ext4 after a clean restart"; }
	mount -t ext4 /dev/nbd0 /mnt/nand || fail "mount ext4 again"
	check_tree /mnt/nand $NS/tree.sha256 || fail "file tree differs after a clean restart"
	umount /mnt/nand
	log "nandsim: nbd-client: 16 MiB raw and ext4 with $(wc -l <$NS/tree.sha256) files, intact across a clean restart ($(since "$t")s)"
	# full: the writer's units (the first 16 MiB) once, the rest at random,
	# so every write below makes the FTL collect garbage (and move data)
	local uri=nbd://127.0.0.1:10809/nand0 units=4096 wpid gc=0
	t=$(up)
	python3 /vmtest/nandsim_crash.py init $uri $NS/journal $units || fail "writing the writer's units"
	n=$(($(blockdev --getsize64 /dev/nbd0) >> 20))
	dd if=/dev/urandom of=/dev/nbd0 bs=1M seek=16 count=$((n - 16)) oflag=direct status=none ||
		fail "filling the export"
	nbd-client -d /dev/nbd0 >/dev/null 2>&1
	log "nandsim: the whole export written, $n MiB ($(since "$t")s)"

	# ---- 5. SIGKILL under a writer
	for ((i = 1; i <= NANDSIM_ROUNDS; i++)); do
		t=$(up)
		python3 /vmtest/nandsim_crash.py write $uri $NS/journal $units $i >$NS/writer.$i.txt 2>&1 &
		wpid=$!
		# a few flushes in, then a kill at a point that differs per round
		for k in $(seq 1 600); do
			n=$(grep -c '^F' $NS/journal 2>/dev/null)
			[ "${n:-0}" -ge $((2 + i)) ] && break
			kill -0 $wpid 2>/dev/null || break
			sleep 0.1
		done
		sleep "0.$((i * 3))"
		gc=$((gc + $(stat_of gc_pages_relocated)))
		flashd_kill
		wait $wpid
		[ "${n:-0}" -ge 2 ] || { indent <$NS/writer.$i.txt; fail "round $i: the writer did not get going"; }
		flashd_start || { tail -n 20 $NS/flashd.log | indent; fail "round $i: flashd did not start after SIGKILL"; }
		line=$(grep 'nand0: .*shutdown, opened' $NS/flashd.log | tail -n 1)
		[[ $line == *"unclean shutdown"* ]] || fail "round $i: not recovered as unclean: $line"
		python3 /vmtest/nandsim_crash.py check $uri $NS/journal >$NS/check.$i.txt 2>&1 ||
			{ indent <$NS/check.$i.txt; fail "round $i: data after SIGKILL"; }
		log "nandsim: SIGKILL round $i: $(tail -n 1 $NS/writer.$i.txt); recovered: $(tail -n 1 $NS/check.$i.txt) ($(since "$t")s)"
	done
	[ "$gc" -gt 0 ] || fail "the FTL relocated no page in the SIGKILL rounds: they did not run with GC"
	log "nandsim: GC relocated $gc pages in the SIGKILL rounds"

	# ---- 6. where the FTL says, by mtd-utils
	t=$(up)
	flashd_stop || fail "flashd did not exit 0 on SIGTERM after the SIGKILL rounds"
	# flashctl recover scans the device as it scans an image
	/vmtest/bin/flashctl recover /dev/mtd0 >$NS/recover.txt 2>&1 ||
		{ indent <$NS/recover.txt; fail "flashctl recover /dev/mtd0"; }
	indent <$NS/recover.txt
	grep -q 'superblock: valid' $NS/recover.txt && grep -q ' 2 bad, 0 unreadable' $NS/recover.txt ||
		fail "flashctl recover /dev/mtd0: not a valid superblock with the 2 bad blocks"
	# six units the last check read (unit:generation), where the FTL has them
	head -n 1 $NS/journal | tr ' ' '\n' | grep : | awk -F: '$2 > 0' |
		shuf -n 6 --random-source=/dev/zero >$NS/pick.txt
	/vmtest/bin/flashctl locate /dev/mtd0 $(awk -F: '{ print $1 * 4096 }' $NS/pick.txt) >$NS/locate.txt 2>&1 ||
		{ indent <$NS/locate.txt; fail "flashctl locate /dev/mtd0"; }
	indent <$NS/locate.txt
	n=0
	while IFS=: read -r k gen; do
		line=$(grep "^$((k * 4096)): " $NS/locate.txt) || fail "flashctl locate said nothing of unit $k"
		addr=${line##*NAND address }
		nanddump -q -o -s "$addr" -l 4096 -f $NS/page.bin /dev/mtd0 2>&1 | indent
		python3 /vmtest/nandsim_crash.py page $NS/page.bin "$k" "$gen" "$oobfree" >$NS/page.txt 2>&1 ||
			{ indent <$NS/page.txt; fail "nanddump at $addr ($line)"; }
		n=$((n + 1))
	done <$NS/pick.txt
	[ $n -ge 6 ] || fail "only $n units to look up"
	log "nandsim: flashctl recover: $(head -n 1 $NS/recover.txt | sed 's/^[^:]*: //'); nanddump: $n units are where flashctl locate says, data and OOB spare (with its CRC) ($(since "$t")s)"

	# ---- 7. bit flips: corrected and counted
	t=$(up)
	local kbits0 kbits1 corr0 corr unc crc flips
	kbits0=$(cat /sys/class/mtd/mtd0/corrected_bits)
	flashd_start || fail "flashd did not start for the read pass"
	nbd-client 127.0.0.1 10809 /dev/nbd0 -N nand0 >$NS/nbd.txt 2>&1 || fail "nbd-client for the read pass"
	corr0=$(stat_of read_errors_corrected) || fail "flashctl status --json"
	# about one page read in 1024 has a flip; a pass reads ~6000 pages:
	# until the kernel's ECC and flashd have corrected at least one, at
	# most 6 passes (all 6 without one: e^-36)
	for ((i = 1; i <= 6; i++)); do
		dd if=/dev/nbd0 of=/dev/null bs=1M iflag=direct status=none || fail "reading the whole export"
		corr=$(stat_of read_errors_corrected) && unc=$(stat_of read_errors_uncorrectable) &&
			crc=$(stat_of crc_errors) || fail "flashctl status --json"
		corr=$((corr - corr0))
		kbits1=$(cat /sys/class/mtd/mtd0/corrected_bits)
		[ "$corr" -gt 0 ] && [ "$kbits1" -gt "$kbits0" ] && break
	done
	nbd-client -d /dev/nbd0 >/dev/null 2>&1
	flips=$(dmesg | grep -c 'flipping bit')
	log "nandsim: bit flips: nandsim flipped $flips bits in all; in $((i > 6 ? 6 : i)) read pass(es) of the export the kernel's ECC corrected $((kbits1 - kbits0)) and flashd counted $corr corrected reads, $unc uncorrectable, $crc CRC errors ($(since "$t")s)"
	[ "$flips" -gt 0 ] && [ $((kbits1 - kbits0)) -gt 0 ] && [ "$corr" -gt 0 ] ||
		fail "injected bit flips were not seen corrected"
	[ "$unc" = 0 ] && [ "$crc" = 0 ] || fail "uncorrectable reads or CRC errors on a chip whose flips are all correctable"
	flashd_stop || fail "flashd did not exit 0 on SIGTERM at the end"
}
