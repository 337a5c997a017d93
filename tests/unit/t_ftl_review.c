/*
 * t_ftl_review - regressions for the bugs a code review of the FTL found,
 * each checked where it showed:
 *   inflight    a block with hundreds of programs in flight (512-page
 *               blocks, completions arriving later) stays OPEN until the
 *               last one lands (the counter was 8 bits and wrapped)
 *   cp_nomem    a checkpoint taken while allocations fail still lists the
 *               open blocks, so writes after it survive a power cut (the
 *               bug: an empty list)
 *   refused     a backend that refuses a submit stops the FTL cleanly:
 *               every request completes, close returns, nothing hangs
 *               (the bug: nand_op_sync loops forever), flushed data survives
 *   version     a page whose spare has another media version is not data
 *   trim_crc    GC checks a trim record's data CRC before re-logging it
 *   zero_length a zero-length request inside a unit touches nothing (the
 *               bug: a read-modify-write, and memset(NULL, 0, 0);
 *               the -san build of this test fails on such UB)
 *   cp_scan     a checkpoint lists a block that filled and closed with log
 *               pages newer than cp_seq while an older page was still in
 *               flight on a busy die, so recovery scans it: a trim record
 *               replayed from an open block does not unmap the flushed
 *               rewrite in that closed block (blk_max_seq)
 *   close_trim  a trim still pending at a clean close survives the restart:
 *               the clean checkpoint is fuzzy, and replay from its cp_seq
 *               mapped a unit written before the trim again (the trim was
 *               only in the checkpoint's l2p, in no trim record)
 * The binary is linked with --wrap=malloc,--wrap=aligned_alloc so the test
 * can make allocations fail.  An alarm turns a hang into a failure.
 */
#include <signal.h>
#include <unistd.h>

#include "ftl/ftl_int.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

/* ---- allocation failure injection (linked with --wrap) ------------------ */

void *__real_malloc(size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
static bool alloc_fail;

void *__wrap_malloc(size_t n)
{
	return alloc_fail ? NULL : __real_malloc(n);
}

void *__wrap_aligned_alloc(size_t a, size_t n)
{
	return alloc_fail ? NULL : __real_aligned_alloc(a, n);
}

/* ---- helpers ------------------------------------------------------------ */

static bool cp_done(struct ftl *f, void *arg)
{
	return !f->cp.requested && f->cp.phase == CP_IDLE;
}

/* ---- inflight ------------------------------------------------------------ */

static void t_inflight(void)
{
	struct nand_dev *d = dev_new("test-128m-512p", true);
	format(d, 35);
	struct ftl *f = open_ok(d);
	uint8_t b[4096];
	/* 600 units buffered at once: the first block gets all its 512 pages
	 * handed out before any program completes */
	struct ftl_io io[600];
	for (uint64_t u = 0; u < 600; u++) {
		fill(b, u, 1);
		io[u] = (struct ftl_io){ .type = FTL_IO_WRITE, .offset = u * 4096, .length = 4096,
					 .buf = b };
		CHECK_EQ(ftl_io_sync(f, &io[u]), 0);
	}
	uint32_t first = ppa_block(f, f->stream[STREAM_USER].ring.slots[0].ppa);
	CHECK_EQ(f->blk[first].wp, 512);
	CHECK_EQ(f->blk[first].state, BLK_OPEN);
	CHECK_EQ(f->blk[first].inflight, 512);
	/* land the programs one completion time at a time: the block closes
	 * only once nothing is in flight on it */
	uint64_t guard = 0;
	while (f->blk[first].state == BLK_OPEN) {
		CHECK(guard++ < 100000);
		ftl_poll(f);
		uint32_t pending = 0;
		struct ring *r = &f->stream[STREAM_USER].ring;
		for (uint64_t pos = r->done; pos < r->fill; pos++) {
			struct slot *sl = ring_slot(r, pos);
			if (ppa_block(f, sl->ppa) == first && sl->state != SLOT_DONE)
				pending++;
		}
		/* and its footer pages, until they are programmed */
		if (f->footer_of[first]) {
			struct footer *fo = &f->footers[f->footer_of[first] - 1];
			pending += fo->pending ? fo->pending : f->footer_pages;
		}
		CHECK_EQ(f->blk[first].inflight, pending);
		uint64_t due = nand_next_due(d);
		if (due != UINT64_MAX)
			nand_wait_until(d, due);
	}
	CHECK_EQ(f->blk[first].state, BLK_CLOSED);
	CHECK_EQ(f->blk[first].inflight, 0);
	for (uint64_t u = 0; u < 600; u += 37)
		check_unit(f, u, 1);
	close_ok(f, d);
	printf("ok: inflight: a 512-page block stays open with 512 programs in flight\n");
}

/* ---- checkpoint while allocations fail ----------------------------------- */

static void t_cp_nomem(void)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", false, NULL);
	/* a few units, so every die has an open user block */
	for (uint64_t u = 0; u < 8; u++)
		write_unit(f, u, 1);
	CHECK_RC(ftl_flush_sync(f));
	alloc_fail = true;
	cp_request(f, false);
	int rc = ftl_run_until(f, cp_done, NULL);
	alloc_fail = false;
	CHECK_RC(rc);
	CHECK_EQ(f->st.checkpoints, 1);
	/* writes after the checkpoint land in the blocks that were open at it */
	for (uint64_t u = 0; u < 8; u++)
		write_unit(f, u, 2);
	CHECK_RC(ftl_flush_sync(f));
	ftl_abandon(f); /* power cut: nothing more reaches the media */
	f = open_ok(d);
	for (uint64_t u = 0; u < 8; u++)
		check_unit(f, u, 2);
	close_ok(f, d);
	printf("ok: cp_nomem: a checkpoint under allocation failure keeps the open-block list\n");
}

/* ---- refused submits ------------------------------------------------------ */

static void t_refused(void)
{
	uint64_t seed = 77;
	for (int round = 0; round < 40; round++) {
		bool timed = round % 2;
		struct fx fx = fx_start("test-16m", timed, 0, 0);
		uint32_t *durable = calloc(fx.units, sizeof *durable);
		uint8_t b[4096];
		struct nand_sim_faults ft = { .refuse_submit_after = 1 + t_rand(&seed) % 3000 };
		nand_sim_set_faults(fx.d, &ft);
		bool failed = false;
		for (int i = 0; i < 6000 && !failed; i++) {
			uint64_t u = t_rand(&seed) % fx.units;
			int rc;
			if (i % 97 == 96) {
				rc = ftl_flush_sync(fx.f);
				if (!rc)
					memcpy(durable, fx.ver, fx.units * sizeof *fx.ver);
			} else if (i % 3 == 0) {
				rc = ftl_read_sync(fx.f, b, u * 4096, 4096);
			} else {
				fill(b, u, fx.ver[u] + 1);
				rc = ftl_write_sync(fx.f, b, u * 4096, 4096, 0);
				if (!rc)
					fx.ver[u]++;
			}
			if (rc) {
				CHECK_EQ(rc, -EIO);
				failed = true;
			}
		}
		if (failed) {
			ftl_get_info(fx.f, &fx.info);
			CHECK_EQ(fx.info.state, FTL_STATE_FAILED);
			CHECK_EQ(ftl_write_sync(fx.f, b, 0, 4096, 0), -EIO);
			CHECK_EQ(ftl_close(fx.f), -EIO);
		} else {
			CHECK_RC(ftl_close(fx.f));
			memcpy(durable, fx.ver, fx.units * sizeof *fx.ver);
		}
		/* refuse again during the next open: it fails, never hangs */
		struct nand_sim_faults open_ft = { .refuse_submit_after = 1 + t_rand(&seed) % 20 };
		nand_sim_set_faults(fx.d, &open_ft);
		char err[256];
		struct ftl *f2 = NULL;
		if (ftl_open(fx.d, NULL, &f2, err, sizeof err) == 0)
			ftl_close(f2); /* the refusal may land after open: fine either way */
		struct nand_sim_faults off = { 0 };
		nand_sim_set_faults(fx.d, &off);
		fx.f = open_ok(fx.d);
		/* what was flushed is there; the rest is old or new */
		for (uint64_t u = 0; u < fx.units; u++) {
			uint8_t e[4096];
			CHECK_RC(ftl_read_sync(fx.f, b, u * 4096, 4096));
			bool ok = false;
			for (uint32_t v = durable[u]; v <= fx.ver[u] && !ok; v++) {
				if (v)
					fill(e, u, v);
				else
					memset(e, 0, sizeof e);
				ok = memcmp(b, e, sizeof b) == 0;
			}
			if (!ok) {
				fprintf(stderr, "round %d unit %" PRIu64 ": not a version in [%u, %u]\n",
					round, u, durable[u], fx.ver[u]);
				exit(1);
			}
		}
		free(durable);
		fx_end(&fx);
	}
	printf("ok: refused: 40 rounds of a refused submit, every request answered, no hang\n");
}

/* ---- spare version -------------------------------------------------------- */

static void t_version(void)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", false, NULL);
	uint8_t b[4096];
	write_unit(f, 5, 1);
	uint64_t format_id = f->format_id, seq = f->next_seq + 1000;
	CHECK_RC(ftl_close(f));
	/* a page claiming to be unit 5, newer than everything, but of media
	 * version 99, in an erased block */
	uint32_t blk = 0;
	for (uint32_t k = nand_blocks(&d->geo) - 1; k > 0 && !blk; k--) {
		uint8_t sp[128];
		struct nand_op rd = { .type = NAND_OP_READ, .block = k, .spare = sp };
		CHECK_EQ(nand_op_sync(d, &rd), NAND_OK);
		if (sp[0] == 0xFF && sp[4] == 0xFF)
			blk = k;
	}
	CHECK(blk);
	uint8_t spare[128];
	memset(spare, 0xFF, sizeof spare);
	fill(b, 5, 2);
	struct ftl_spare s = { .magic = FTL_SPARE_MAGIC, .type = FTL_PG_DATA, .version = 99,
			       .lba = 5, .data_crc = crc32c(0, b, 4096), .seq = seq,
			       .format_id = format_id };
	s.crc = crc32c(0, &s, offsetof(struct ftl_spare, crc));
	memcpy(spare, &s, sizeof s);
	struct nand_op pg = { .type = NAND_OP_PROGRAM, .block = blk, .page = 0, .data = b,
			      .spare = spare };
	CHECK_EQ(nand_op_sync(d, &pg), NAND_OK);
	/* an unclean open scans the log: the foreign-version page is not data */
	f = open_ok(d);
	check_unit(f, 5, 1);
	close_ok(f, d);
	printf("ok: version: a spare of another media version is not taken as data\n");
}

/* ---- GC and a damaged trim record ---------------------------------------- */

/* no checkpoint but the ones asked for and a clean close's */
static const struct ftl_open_params no_periodic_cp = { .checkpoint_interval = UINT64_MAX / 2 };


static void t_trim_crc(void)
{
	/* no checkpoints: GC must re-log every trim record it meets */
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-16m", false, &no_periodic_cp);
	uint64_t units = f->units, seed = 5;
	for (uint64_t u = 0; u < units; u++)
		write_unit(f, u, 1);
	CHECK_RC(ftl_trim_sync(f, 40 * 4096, 8 * 4096, 0));
	CHECK_RC(ftl_flush_sync(f)); /* closes the trim record */
	/* find the record and damage its data */
	uint32_t rec = FTL_NO_BLOCK;
	for (uint32_t ppa = 0; ppa < nand_pages(&d->geo) && rec == FTL_NO_BLOCK; ppa++) {
		uint8_t sp[128];
		struct nand_op rd = { .type = NAND_OP_READ, .block = ppa / f->ppb,
				      .page = ppa % f->ppb, .spare = sp };
		struct ftl_spare s;
		if (nand_op_sync(d, &rd) == NAND_OK && spare_parse(f, sp, &s) == 0 &&
		    s.type == FTL_PG_TRIM)
			rec = ppa;
	}
	CHECK(rec != FTL_NO_BLOCK);
	CHECK_RC(nand_sim_flip_bytes(d, rec, 100, 4));
	CHECK_EQ(f->st.crc_errors, 0);
	/* overwrite everything else until GC has collected the record's block */
	uint32_t rb = rec / f->ppb;
	uint64_t erased0 = nand_erase_count(d, rb);
	for (uint64_t i = 0; nand_erase_count(d, rb) == erased0; i++) {
		CHECK(i < 40 * units);
		uint64_t u = t_rand(&seed) % units;
		if (u >= 40 && u < 48)
			continue;
		write_unit(f, u, 2);
	}
	CHECK(f->st.crc_errors >= 1);
	/* the trimmed units still read as zeros: the unmapping is in the l2p */
	for (uint64_t u = 40; u < 48; u++)
		check_unit(f, u, 0);
	close_ok(f, d);
	printf("ok: trim_crc: GC notices a trim record that fails its CRC\n");
}

/* ---- zero-length requests ------------------------------------------------ */

static void t_zero_length(void)
{
	struct nand_dev *d = dev_new("test-16m", false);
	format_with(d, 512, 0, 0);
	struct ftl *f = open_ok(d);
	write_unit(f, 3, 1);
	uint64_t written = f->st.host_pages_written;
	/* no buffer, inside a unit: touches nothing (no read-modify-write) */
	CHECK_EQ(ftl_read_sync(f, NULL, 3 * 4096 + 512, 0), 0);
	CHECK_EQ(ftl_write_sync(f, NULL, 3 * 4096 + 512, 0, 0), 0);
	CHECK_EQ(ftl_trim_sync(f, 3 * 4096 + 512, 0, 0), 0);
	CHECK_EQ(ftl_write_zeroes_sync(f, 3 * 4096 + 1024, 0, 0), 0);
	CHECK_EQ(f->st.host_pages_written, written);
	check_unit(f, 3, 1);
	close_ok(f, d);
	printf("ok: zero_length: zero-length requests touch no unit\n");
}

/* ---- cp_scan: closed blocks holding pages newer than cp_seq ------------- */

/*
 * Deterministic (no seed): the race is built with the simulator's timing
 * model on virtual time, by making one die busy with raw NAND reads the test
 * queues itself (operations on one die complete in submission order).
 *
 * test-16m has two rows of one die each, so user pages alternate between
 * die S and die F.  With die S stuck behind the reads:
 *   P   a fresh unit, on die S: the oldest page in flight from now on
 *   T   a trim record for unit A (written and flushed before), on die S
 *   A'  the rewrite of A, in block Y on die F, whose page 0 was handed out
 *       before P (so its first page is not newer than the checkpoint and
 *       recovery does not scan it on its own)
 * then fillers until Y is full; die F drains, Y closes while P is still in
 * flight.  A checkpoint taken now has cp_seq = seq(P) - 1 < seq(T) <
 * seq(A').  T's block is open (listed); Y is closed and must be listed
 * too: without it recovery replays T and not A', and A (flushed!) reads as
 * zeros after a power cut.  The test checks each step of that construction
 * (so it cannot pass vacuously), then flushes, cuts power, reopens and
 * checks every acknowledged write.
 */
#define CPS_READS 2000 /* ~63 us each (sense + spare transfer): ~126 ms of die
			* time, several times what filling Y takes on die F */

static struct nand_op cps_reads[CPS_READS];
static uint8_t cps_spare[128];
static uint32_t cps_reads_out;

static void cps_read_done(struct nand_op *op)
{
	cps_reads_out--;
}

/* the user slot of the last unit written, and its die */
static struct slot *last_slot(struct ftl *f)
{
	struct ring *r = &f->stream[STREAM_USER].ring;
	return ring_slot(r, r->fill - 1);
}

static uint32_t slot_die(struct ftl *f, const struct slot *sl)
{
	return block_die(f, ppa_block(f, sl->ppa));
}

/* the device cp_scan and close_trim build on: test-16m (*D) on the
 * virtual clock, no periodic checkpoint, two rows of one die (consecutive
 * user pages alternate dies) */
static struct ftl *two_rows_16m(struct nand_dev **d)
{
	struct ftl *f = dev_ftl(d, "test-16m", true, &no_periodic_cp);
	CHECK_EQ(f->nrows, 2);
	CHECK_EQ(f->row_width, 1);
	return f;
}

static void t_cp_scan(void)
{
	struct nand_dev *d;
	struct ftl *f = two_rows_16m(&d);
	struct open_set *us = &f->stream[STREAM_USER].set[SET_FIRST];
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint64_t units = f->units;
	uint32_t *ver = calloc(units, sizeof *ver);
	uint8_t b[4096];
	const uint64_t A = 0;
	uint64_t next_unit = 1;
#define CPS_WRITE(u)                                                                   \
	do {                                                                           \
		uint64_t _u = (u);                                                     \
		fill(b, _u, ver[_u] + 1);                                              \
		CHECK_RC(ftl_write_sync(f, b, _u * 4096, 4096, 0));                    \
		ver[_u]++;                                                             \
	} while (0)

	/* A, durable; then fresh units (new units and a trimmed one go to
	 * the user stream's first set) until both rows have an open band */
	CPS_WRITE(A);
	CHECK_RC(ftl_flush_sync(f));
	for (int i = 0; i < 3; i++)
		CPS_WRITE(next_unit++);
	ftl_poll(f);
	CHECK_EQ(r->submit, r->fill);
	/* S: the row (and die) the next user page goes to; F: the other */
	uint32_t S = us->next_row, F = S ^ 1;
	CHECK(us->row[F].band != FTL_NO_BLOCK);
	uint32_t Y = band_block(f, us->row[F].band, 0), dieS = S, dieF = F;
	CHECK_EQ(block_die(f, Y), dieF);
	CHECK_EQ(f->blk[Y].state, BLK_OPEN);
	CHECK(f->blk[Y].wp >= 1 && (uint32_t)f->blk[Y].wp + 4 < f->data_pages);

	/* die S busy for a long while */
	uint32_t rb = dieS * f->blocks_per_die + f->blocks_per_die - 1;
	for (uint32_t i = 0; i < CPS_READS; i++) {
		cps_reads[i] = (struct nand_op){ .type = NAND_OP_READ, .block = rb, .page = 0,
						 .spare = cps_spare, .done = cps_read_done };
		CHECK_RC(nand_submit(d, &cps_reads[i]));
		cps_reads_out++;
	}

	/* P on die S, a filler on die F (in Y), then T on S and A' in Y */
	uint64_t P = next_unit++;
	CPS_WRITE(P);
	struct slot *ps = last_slot(f);
	uint64_t p_pos = r->fill - 1, p_seq = ps->seq;
	CHECK_EQ(slot_die(f, ps), dieS);
	CPS_WRITE(next_unit++);
	CHECK_EQ(ppa_block(f, last_slot(f)->ppa), Y);
	CHECK_RC(ftl_trim_sync(f, A * 4096, 4096, 0));
	CPS_WRITE(A); /* closes the pending trim record first */
	struct slot *ts = ring_slot(r, r->fill - 2), *as = last_slot(f);
	CHECK_EQ(ts->type, FTL_PG_TRIM);
	CHECK_EQ(slot_die(f, ts), dieS);
	CHECK_EQ(as->lba, A);
	CHECK_EQ(ppa_block(f, as->ppa), Y);
	uint64_t t_seq = ts->seq, a_seq = as->seq;
	CHECK(p_seq < t_seq && t_seq < a_seq);
	/* fill Y */
	while (f->blk[Y].wp < f->ppb)
		CPS_WRITE(next_unit++);

	/* let die F drain: Y closes while P is still in flight on die S */
	for (uint32_t guard = 0; f->blk[Y].state != BLK_CLOSED; guard++) {
		CHECK(guard < 100000);
		uint64_t due = nand_next_due(d);
		CHECK(due != UINT64_MAX);
		nand_wait_until(d, due);
		ftl_poll(f);
	}
	CHECK(cps_reads_out > 0);
	CHECK_EQ(ring_slot(r, p_pos)->state, SLOT_SUBMITTED);

	/* a checkpoint now: its cp_seq is just below P */
	uint64_t cps = f->st.checkpoints;
	cp_request(f, false);
	for (int i = 0; i < 16 && (f->cp.phase == CP_IDLE || f->cp.phase == CP_QUIESCE); i++)
		ftl_poll(f);
	CHECK_EQ(f->cp.phase, CP_WRITE);
	CHECK_EQ(f->cp.cp_seq + 1, p_seq);
	CHECK(f->cp.cp_seq < t_seq);
	CHECK_EQ(f->blk[Y].state, BLK_CLOSED); /* and holds A', newer than cp_seq */
	CHECK_RC(ftl_run_until(f, cp_done, NULL));
	CHECK_EQ(f->st.checkpoints, cps + 1);
	CHECK_EQ(f->cp.cur_seq + 1, p_seq);

	/* everything acknowledged is flushed; then the power fails */
	CHECK_RC(ftl_flush_sync(f));
	CHECK_EQ(cps_reads_out, 0);
	struct nand_sim_faults cut = { .power_cut_after = 1 };
	nand_sim_set_faults(d, &cut);
	fill(b, next_unit, 1);
	CHECK_EQ(ftl_write_sync(f, b, next_unit * 4096, 4096, FTL_IO_FUA), -EIO);
	ftl_abandon(f);
	nand_sim_power_on(d);

	f = open_with(d, &no_periodic_cp);
	uint8_t e[4096];
	CHECK_RC(ftl_read_sync(f, b, A * 4096, 4096));
	fill(e, A, ver[A]);
	if (memcmp(b, e, sizeof b) != 0) {
		bool zero = true;
		for (size_t i = 0; i < sizeof b && zero; i++)
			zero = b[i] == 0;
		fprintf(stderr,
			"cp_scan: unit %" PRIu64 " (flushed rewrite in closed block %u) reads %s "
			"after a power cut: the checkpoint (cp_seq %" PRIu64 ") did not list "
			"block %u, so recovery replayed the trim record (seq %" PRIu64 ") "
			"without the rewrite (seq %" PRIu64 ")\n",
			A, Y, zero ? "zeros" : "wrong data", p_seq - 1, Y, t_seq, a_seq);
		exit(1);
	}
	/* every acknowledged, flushed write (durability contract, rule 1) */
	for (uint64_t u = 0; u < next_unit; u++)
		check_unit(f, u, ver[u]);
	close_free(f, d, ver);
#undef CPS_WRITE
	printf("ok: cp_scan: a block closed with pages newer than cp_seq is scanned after a power cut\n");
}

/* ---- close_trim: trims pending at a clean close -------------------------- */

/*
 * Deterministic, built like cp_scan: die S busy with raw reads, so
 *   P   a fresh unit, on die S: the oldest page in flight
 *   U   a fresh unit, on die F: programmed while P waits
 * then U is trimmed (pending: no record yet) and the FTL closed cleanly.
 * The clean checkpoint is taken while P is in flight: cp_seq = seq(P) - 1
 * < seq(U).  Its l2p says U is unmapped, but recovery replays U's page
 * (newer than cp_seq), so a trim record must follow it: without one U
 * reads its old data after the clean restart.
 */
static void t_close_trim(void)
{
	struct nand_dev *d;
	struct ftl *f = two_rows_16m(&d);
	struct open_set *us = &f->stream[STREAM_USER].set[SET_FIRST];
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint8_t b[4096];
	uint64_t next_unit = 0;

	/* both rows get an open band */
	for (int i = 0; i < 3; i++) {
		fill(b, next_unit, 1);
		CHECK_RC(ftl_write_sync(f, b, next_unit++ * 4096, 4096, 0));
	}
	ftl_poll(f);
	CHECK_EQ(r->submit, r->fill);
	uint32_t S = us->next_row, dieS = S, dieF = S ^ 1;

	/* die S busy for a long while */
	uint32_t rb = dieS * f->blocks_per_die + f->blocks_per_die - 1;
	CHECK_EQ(cps_reads_out, 0);
	for (uint32_t i = 0; i < CPS_READS; i++) {
		cps_reads[i] = (struct nand_op){ .type = NAND_OP_READ, .block = rb, .page = 0,
						 .spare = cps_spare, .done = cps_read_done };
		CHECK_RC(nand_submit(d, &cps_reads[i]));
		cps_reads_out++;
	}

	uint64_t P = next_unit++, U = next_unit++;
	write_unit(f, P, 1);
	uint64_t p_pos = r->fill - 1, p_seq = last_slot(f)->seq;
	CHECK_EQ(slot_die(f, last_slot(f)), dieS);
	write_unit(f, U, 1);
	uint64_t u_pos = r->fill - 1, u_seq = last_slot(f)->seq;
	CHECK_EQ(slot_die(f, last_slot(f)), dieF);
	CHECK(p_seq < u_seq);
	/* U is programmed on die F while P waits on die S */
	for (uint32_t guard = 0; ring_slot(r, u_pos)->state != SLOT_DONE; guard++) {
		CHECK(guard < 100000);
		uint64_t due = nand_next_due(d);
		CHECK(due != UINT64_MAX);
		nand_wait_until(d, due);
		ftl_poll(f);
	}
	CHECK(l2p_is_ppa(f->l2p[U]) && f->l2p[U] != L2P_UNMAPPED);
	CHECK_EQ(ring_slot(r, p_pos)->state, SLOT_SUBMITTED);

	/* U trimmed: pending, in no record yet; then a clean close */
	CHECK_RC(ftl_trim_sync(f, U * 4096, 4096, 0));
	CHECK_EQ(f->l2p[U], L2P_UNMAPPED);
	CHECK(f->ntrim_pend > 0);
	CHECK(cps_reads_out > 0);
	CHECK_RC(ftl_close(f));
	CHECK_EQ(cps_reads_out, 0);

	f = open_with(d, &no_periodic_cp);
	/* the construction held: the clean checkpoint is below U's write */
	CHECK_EQ(f->cp.cur_seq + 1, p_seq);
	uint8_t z[4096];
	memset(z, 0, sizeof z);
	CHECK_RC(ftl_read_sync(f, b, U * 4096, 4096));
	if (memcmp(b, z, sizeof b) != 0) {
		fprintf(stderr,
			"close_trim: unit %" PRIu64 " (trimmed before a clean close) reads its old "
			"data after the restart: the clean checkpoint (cp_seq %" PRIu64 ") held the "
			"trim only in its l2p, and replay mapped the write (seq %" PRIu64 ") again\n",
			U, f->cp.cur_seq, u_seq);
		exit(1);
	}
	for (uint64_t u = 0; u < next_unit; u++)
		check_unit(f, u, u == U ? 0 : 1);
	close_ok(f, d);
	printf("ok: close_trim: a trim pending at a clean close survives the restart\n");
}

int main(void)
{
	watchdog(300);
	ftl_set_logger(quiet_log, NULL);
	t_inflight();
	t_cp_nomem();
	t_refused();
	t_version();
	t_trim_crc();
	t_zero_length();
	t_cp_scan();
	t_close_trim();
	printf("ok\n");
	return 0;
}
