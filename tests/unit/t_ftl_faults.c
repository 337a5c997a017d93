/*
 * t_ftl_faults - the FTL under media faults: grown bad blocks, bit errors,
 * a failed die (also die 0 or 1, each holding a superblock block, right
 * after the first checkpoint), running out of spare blocks, a damaged
 * checkpoint, an unformatted or read-only device.  Errors must be errors (EIO, ENOSPC,
 * EROFS), never wrong data.
 */
#include "ftl/ftl.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

static void grown_bad_blocks(void)
{
	struct fx fx = fx_start("test-64m", false, 20, 0);
	uint64_t seed = 7;
	churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
	/* blocks fail while in use: programs on some, erases on others */
	for (uint32_t b = 20; b < 200; b += 37)
		nand_sim_fail_block(fx.d, b, b % 2, true);
	churn(fx.f, fx.ver, fx.units, fx.units * 3, &seed);
	verify(fx.f, fx.ver, fx.units, false);
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	printf("grown bad: %" PRIu64 " blocks retired, %" PRIu64 " program and %" PRIu64
	       " erase failures\n",
	       st.blocks_bad_grown, st.program_failures, st.erase_failures);
	CHECK(st.blocks_bad_grown >= 3);
	fx_reopen(&fx);
	verify(fx.f, fx.ver, fx.units, false);
	ftl_get_stats(fx.f, &st);
	CHECK(st.blocks_bad_grown >= 3); /* remembered by the checkpoint */
	fx_end(&fx);
}

static void bit_errors(void)
{
	struct fx fx = fx_start("test-64m", false, 20, 0);
	uint64_t seed = 9;
	churn(fx.f, fx.ver, fx.units, fx.units, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	/* corrected errors everywhere: nothing visible */
	struct nand_sim_faults ft = { .corrected_ppm = 200000 };
	nand_sim_set_faults(fx.d, &ft);
	verify(fx.f, fx.ver, fx.units, false);
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	CHECK(st.read_errors_corrected > 0);
	/* one unreadable page: that unit reads EIO, a rewrite heals it */
	ft.corrected_ppm = 0;
	nand_sim_set_faults(fx.d, &ft);
	uint8_t b[4096];
	/* find unit 100's page by reading every page of the device? use the
	 * allocation map instead: make the whole device unreadable for a moment */
	ft.uncorrectable_ppm = 1000000;
	nand_sim_set_faults(fx.d, &ft);
	CHECK_EQ(ftl_read_sync(fx.f, b, 100 * 4096, 4096), -EIO);
	ft.uncorrectable_ppm = 0;
	nand_sim_set_faults(fx.d, &ft);
	verify(fx.f, fx.ver, fx.units, false);
	fx_end(&fx);
}

/*
 * A die fails for good, no parity.  The FTL declares it dead (a run of
 * failed reads and programs), retires its free blocks and goes on: every
 * unit reads its data or EIO, never other data; GC turns the units the
 * dead die held into lost units (counted, their range named).  On test-1g
 * (8 dies, 20 % OP) the other dies have room: writes go on.  On test-64m
 * (4 dies, 25 % OP) a quarter of the NAND is too much: read-only.
 */
static void die_failure(const char *preset, double op, uint32_t die, bool writable)
{
	struct fx fx = fx_start(preset, false, op, 0);
	uint64_t seed = 11;
	churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 2, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	nand_sim_fail_die(fx.d, die);
	/* reads: data on the die fails with EIO, the rest is intact */
	uint64_t eio = verify(fx.f, fx.ver, fx.units, true);
	printf("die failure (%s, no parity): %" PRIu64 " of %" PRIu64 " units unreadable\n",
	       preset, eio, fx.units);
	CHECK(eio > 0 && eio < fx.units / 2);
	/* writes: to the other dies, or refused once the reserves are gone */
	uint8_t b[4096];
	uint64_t nw = writable ? fx.units / 2 : 2000; /* writable: some lost units stay lost */
	for (uint64_t i = 0; i < nw; i++) {
		uint64_t u = (i * 7919) % fx.units;
		fill(b, u, fx.ver[u] + 1);
		int rc = ftl_write_sync(fx.f, b, u * 4096, 4096, 0);
		if (!writable && rc == -EROFS)
			break;
		CHECK_RC(rc);
		fx.ver[u]++;
	}
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	CHECK_EQ(st.dies_failed, 1);
	if (!writable) {
		CHECK_EQ(ftl_write_sync(fx.f, b, 0, 4096, 0), -EROFS);
	} else {
		/* the die's data moved: every unit it held is lost, named
		 * by the stats' range */
		CHECK_RC(ftl_flush_sync(fx.f));
		ftl_get_stats(fx.f, &st);
		printf("  after GC: %" PRIu64 " units lost (%" PRIu64 "..%" PRIu64 "), "
		       "%u rebuild bands left\n",
		       st.lost_units, st.lost_first, st.lost_last, st.rebuild_bands_left);
		CHECK(st.lost_units > 0 && st.lost_first <= st.lost_last);
	}
	/* never wrong data, before and after a reopen (the die stays dead) */
	uint64_t eio2 = verify(fx.f, fx.ver, fx.units, true);
	fx_reopen(&fx);
	ftl_get_stats(fx.f, &st);
	CHECK_EQ(st.dies_failed, 1);
	CHECK_EQ(verify(fx.f, fx.ver, fx.units, true), eio2);
	if (writable) {
		/* the units still lost are counted after the reopen, within
		 * their range (it went back to none) */
		printf("  reopened: %" PRIu64 " units lost (%" PRIu64 "..%" PRIu64 "), %" PRIu64
		       " read EIO\n", st.lost_units, st.lost_first, st.lost_last, eio2);
		CHECK(st.lost_units > 0 && st.lost_units <= eio2);
		CHECK(st.lost_first <= st.lost_last && st.lost_last < fx.units);
		CHECK_EQ(ftl_read_sync(fx.f, b, st.lost_first * 4096, 4096), -EIO);
		CHECK_EQ(ftl_read_sync(fx.f, b, st.lost_last * 4096, 4096), -EIO);
	}
	if (writable) {
		/* and writes still go on after the reopen */
		for (uint64_t u = 0; u < fx.units; u += 3) {
			write_unit(fx.f, u, ++fx.ver[u]);
		}
		verify(fx.f, fx.ver, fx.units, true);
	}
	fx_end(&fx);
}

/*
 * The first checkpoint of a fresh format takes a free band of row 0 or 1,
 * where a superblock block is a hole: it must not take that block (its
 * program failed, the attempt gave it to the eraser, and the superblock
 * lived on the other die only).  Then die 0 or 1 fails: every flushed unit
 * on the other dies reads right, flushes go on, and the ioDimm opens again.
 */
static void sb_band_die(const char *preset, uint32_t die)
{
	struct nand_dev *d = dev_new(preset, false);
	format(d, 20);
	struct ftl *f = open_ok(d);
	uint64_t t = ftl_checkpoint_request(f);
	int r;
	while (!(r = ftl_checkpoint_poll(f, t)))
		ftl_poll(f);
	CHECK_EQ(r, 1);
	struct ftl_info info;
	ftl_get_info(f, &info);
	uint64_t units = info.units < 4096 ? info.units : 4096, seed = 5;
	uint32_t *ver = calloc(info.units, sizeof *ver);
	uint8_t *lost = calloc(units, 1);
	churn(f, ver, units, units, &seed);
	CHECK_RC(ftl_flush_sync(f));
	for (uint64_t u = 0; u < units; u++) {
		uint32_t dd, b, pg;
		CHECK_RC(ftl_unit_location(f, u, &dd, &b, &pg));
		lost[u] = dd == die;
	}
	CHECK_RC(nand_sim_fail_die(d, die));
	uint8_t b[4096], e[4096];
	for (int pass = 0; pass < 2; pass++) {
		uint64_t eio = 0;
		for (uint64_t u = 0; u < units; u++) {
			int rc = ftl_read_sync(f, b, u * 4096, 4096);
			if (lost[u] && rc == -EIO) {
				eio++;
				continue;
			}
			fill(e, u, ver[u]);
			if (rc || memcmp(b, e, 4096)) {
				fprintf(stderr, "sb_band_die %s die %u: unit %" PRIu64 " (%s): read %d%s\n",
					preset, die, u, lost[u] ? "on the dead die" : "on a live die",
					rc, rc ? "" : ", wrong data");
				exit(1);
			}
		}
		if (pass == 0) {
			CHECK_RC(ftl_flush_sync(f));
			CHECK_RC(ftl_close(f));
			char err[256];
			int rc = ftl_open(d, NULL, &f, err, sizeof err);
			if (rc) {
				fprintf(stderr, "sb_band_die %s die %u: reopen: %s\n", preset, die, err);
				exit(1);
			}
		}
		if (pass == 1)
			printf("sb_band_die: %s, checkpoint at once, die %u failed: %" PRIu64
			       " units on it EIO, the other %" PRIu64 " right, closed and opened again\n",
			       preset, die, eio, units - eio);
	}
	/* the die stays counted dead after later restarts, though it holds
	 * a superblock block (never read at open) and, in time, nothing but
	 * retired blocks */
	for (int i = 0; i < 3; i++) {
		struct ftl_stats st;
		ftl_get_stats(f, &st);
		CHECK_EQ(st.dies_failed, 1);
		CHECK_RC(ftl_close(f));
		f = open_ok(d);
	}
	close_free(f, d, ver);
	free(lost);
}

static void no_space(void)
{
	struct fx fx = fx_start("test-64m", false, 20, 0);
	uint64_t seed = 13;
	churn(fx.f, fx.ver, fx.units, fx.units, &seed);
	/* a quarter of the blocks go bad: spare capacity is gone */
	for (uint32_t b = 0; b < 256; b++)
		if (b % 4 == 3)
			nand_sim_fail_block(fx.d, b, true, true);
	uint8_t b[4096];
	int rc = 0;
	for (uint64_t i = 0; i < fx.units * 4 && rc == 0; i++) {
		uint64_t u = t_rand(&seed) % fx.units;
		fill(b, u, fx.ver[u] + 1);
		rc = ftl_write_sync(fx.f, b, u * 4096, 4096, 0);
		if (rc == 0)
			fx.ver[u]++;
	}
	/* the reserves ran out (read-only, EROFS) or GC's room did (ENOSPC),
	 * whichever the margins reach first */
	ftl_get_info(fx.f, &fx.info);
	CHECK(rc == -ENOSPC || rc == -EROFS);
	CHECK(fx.info.state == (rc == -ENOSPC ? FTL_STATE_NO_SPACE : FTL_STATE_READONLY));
	/* everything written is still readable */
	verify(fx.f, fx.ver, fx.units, false);
	fx_end(&fx);
}

static void t_flag(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

static void damaged_checkpoint(void)
{
	struct fx fx = fx_start("test-64m", false, 20, 0);
	uint64_t seed = 17;
	churn(fx.f, fx.ver, fx.units, fx.units / 4, &seed);
	CHECK_RC(ftl_close(fx.f));
	/* make every checkpoint page unreadable: pages whose spare says CKPT
	 * are found by scanning the device */
	uint8_t spare[128];
	for (uint32_t blk = 0; blk < nand_blocks(&fx.d->geo); blk++) {
		struct nand_op op = { .type = NAND_OP_READ, .block = blk, .page = 0, .spare = spare };
		bool done = false;
		op.done = t_flag;
		op.priv = &done;
		nand_submit(fx.d, &op);
		while (!done)
			nand_poll(fx.d, 0);
		if (op.status == NAND_OK && spare[4] == 3 /* FTL_PG_CKPT */)
			for (uint32_t p = 0; p < fx.d->geo.pages_per_block; p++)
				nand_sim_page_error(fx.d, (uint64_t)blk * fx.d->geo.pages_per_block + p,
						    NAND_UNCORRECTABLE);
	}
	fx.f = open_ok(fx.d); /* falls back to replaying the whole log */
	verify(fx.f, fx.ver, fx.units, false);
	fx_end(&fx);
}

static void unformatted_and_readonly(void)
{
	struct nand_dev *d = dev_new("test-16m", false);
	struct ftl *f;
	char err[256];
	CHECK_EQ(ftl_open(d, NULL, &f, err, sizeof err), -ENODATA);
	CHECK(strstr(err, "not formatted"));
	struct ftl_format_params bad = { .sector_size = 1024 };
	CHECK_EQ(ftl_format(d, &bad, err, sizeof err), -EINVAL);
	struct ftl_format_params big = { .sector_size = 512, .capacity_bytes = 16ull << 20 };
	CHECK_EQ(ftl_format(d, &big, err, sizeof err), -EINVAL);
	format(d, 20);
	struct ftl_open_params ro = { .readonly = true };
	CHECK_RC(ftl_open(d, &ro, &f, err, sizeof err));
	uint8_t b[4096] = { 1 };
	CHECK_EQ(ftl_write_sync(f, b, 0, 4096, 0), -EROFS);
	CHECK_EQ(ftl_trim_sync(f, 0, 4096, 0), -EROFS);
	CHECK_RC(ftl_read_sync(f, b, 0, 4096));
	CHECK(b[0] == 0);
	CHECK_RC(ftl_close(f));
	nand_close(d);
}

int main(void)
{
	ftl_set_logger(NULL, NULL);
	grown_bad_blocks();
	bit_errors();
	die_failure("test-64m", 25, 2, false);
	die_failure("test-1g", 20, 6, true);
	for (uint32_t die = 0; die < 2; die++) {
		sb_band_die("test-64m", die);
		sb_band_die("test-1g", die);
	}
	no_space();
	damaged_checkpoint();
	unformatted_and_readonly();
	printf("ok\n");
	return 0;
}
