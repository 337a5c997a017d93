#!/bin/bash
# timeout: 300
# exclusive: a round must check 5,000 reads a second
# Reads while GC moves the same data (tests/nbd/gc_reads.py): a reply must
# never carry another unit's data, an older version or garbage.
#   1. Every 4 KiB block of a test-1g ioDimm (parity 1) written with a
#      header naming block and version; then for SECONDS one connection
#      rewrites random odd blocks, so every band holds live even blocks
#      among dead odd ones and GC relocates them the whole time, while three
#      connections read 64 KiB ranges (QD 8: 512 KiB of replies queue,
#      deep enough for the send threads) and single blocks; every block read is checked
#      unless a write to it raced the read.  GC must have relocated at
#      least a capacity's worth of pages during the run (else the test
#      proved nothing; the run, 10 s, is repeated, up to 8 times, until it
#      has).
#   2. The whole export read back, then again after a clean restart.
#   3. The same on an ioDimm without parity, 4 KiB reads over the unix
#      socket.
#   4. Stalled replies: 64 reads of 1 MiB whose replies the client leaves
#      unread (most wait in flashd, beyond the socket buffers) for 10 s of
#      rewrites, so GC erases and reuses the blocks they were read from
#      meanwhile; then every even block of them must be right.
source "$(dirname "$0")/functions.sh"

SECONDS_RUN=${GC_READS_SECONDS:-10}
dimms_conf "$T/gc.conf" dimm0.op=10 dimm0.parity_width=1 dimm1.op=10

# gc_reads DIMM URI: fill, run, verify; checks GC's relocations during the run
gc_reads() {
	local dimm=$1 uri=$2 before after cap pages
	nbd_py gc_reads.py fill "$uri" "$T/$dimm.ver" || fail "$dimm: fill"
	before=$(dimm_stat "$dimm" gc_pages_relocated)
	cap=$(flashd_status | $PYTHON -c 'import json,sys; print([d for d in json.load(sys.stdin)["dimms"] if d["name"] == sys.argv[1]][0]["format"]["capacity_bytes"])' "$dimm")
	# rounds of SECONDS_RUN until GC moved a capacity's worth (the client's
	# rate depends on the machine: one to three rounds here, more on a slow
	# one); short rounds: the run stops soon after that
	pages=0 rounds=0
	while [ "$pages" -lt $((cap / 4096)) ] && [ "$rounds" -lt 8 ]; do
		nbd_py gc_reads.py run "$uri" "$T/$dimm.ver" "$SECONDS_RUN" | tee "$T/$dimm.run" ||
			fail "$dimm: wrong data read while GC ran"
		after=$(dimm_stat "$dimm" gc_pages_relocated)
		pages=$((after - before)) rounds=$((rounds + 1))
	done
	[ "$pages" -ge $((cap / 4096)) ] ||
		fail "$dimm: GC relocated only $pages pages in $rounds runs of ${SECONDS_RUN} s (want at least $((cap / 4096)), a capacity's worth): the run proved nothing"
	nbd_py gc_reads.py verify "$uri" "$T/$dimm.ver" || fail "$dimm: the data read back after the run is wrong"
	GC_PAGES=$pages
	GC_RUN="$(tail -n 1 "$T/$dimm.run") (last of $rounds runs)"
}

start_flashd --config "$T/gc.conf" --timing off
gc_reads dimm0 "$FLASHD_URI0"
ok "parity 1: $GC_RUN; GC relocated $GC_PAGES pages meanwhile; the whole export reads back right"
stop_flashd
restart_flashd
nbd_py gc_reads.py verify "$FLASHD_URI0" "$T/dimm0.ver" || fail "dimm0: wrong data after a clean restart"
ok "after a clean restart: the whole export reads back right"
gc_reads dimm1 "$FLASHD_UNIX_URI1"
ok "no parity, unix socket: $GC_RUN; GC relocated $GC_PAGES pages meanwhile; the whole export reads back right"
# replies held in the server (the client reads none) while GC reuses the
# blocks they were read from
before=$(dimm_stat dimm1 gc_blocks_collected)
nbd_py gc_reads.py stalled "$FLASHD_UNIX_URI1" "$T/dimm1.ver" 10 | tee "$T/stalled.run" ||
	fail "dimm1: a reply held while GC ran carried other data"
collected=$(($(dimm_stat dimm1 gc_blocks_collected) - before))
[ "$collected" -gt 0 ] || fail "dimm1: GC collected no block while the replies waited: the run proved nothing"
nbd_py gc_reads.py verify "$FLASHD_UNIX_URI1" "$T/dimm1.ver" || fail "dimm1: wrong data after the stalled reads"
ok "$(tail -n 1 "$T/stalled.run"); GC collected $collected blocks meanwhile"
stop_flashd
check_flashd_log
