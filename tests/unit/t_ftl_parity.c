/*
 * t_ftl_parity - Flashback parity (parity width 1) on simulated media.
 *
 *   t_ftl_parity [PART | --list]     (t.h: t_parts; no PART: all of them)
 *
 *   format       parity takes one die per row: capacity and WA figures
 *   pages        uncorrectable pages, in closed bands and in the stripe
 *                still in memory, read back right (rebuilt), and GC moves
 *                their bands
 *   crc_pages    bytes flipped in stored pages (rot ECC did not see: the
 *                read is NAND_OK): every read path's data CRC check - the
 *                in-place read of memory media and the queued read, each
 *                summed by the medium in its copy - catches them and the
 *                pages are rebuilt; untimed and timed
 *   narrow_rows  rows two dies wide (test-64m, and with bad blocks): no
 *                data in a band left with one member (a superblock or bad
 *                block beside it), so no unit without parity; a bad page
 *                beside a hole is rebuilt
 *   die          a die fails under load: every unit reads right throughout,
 *                the FTL declares the die dead, GC rebuilds its data onto
 *                the others, the reserves drop and the capacity does not;
 *                the same after a reopen
 *   two_dies     two dies of one row fail at once: exactly the units on
 *                them are lost (EIO), every other unit reads right, and the
 *                lost range is reported
 *   timed        the die test's load on the virtual clock (asynchronous
 *                completions, rebuild reads queued behind other work)
 *   sb_die       the die holding the active superblock block fails: the
 *                superblock moves, the FTL serves on and opens again
 *   trim_dead    trim records on a die found dead at open are rebuilt from
 *                their stripes: trimmed units do not get their data back
 *   sb_dead_at_open  die 0 or die 1 (each holds a superblock block) found
 *                dead at open, after a crash or a clean close: the FTL
 *                opens from the other copy, all data right
 *   cp_dead_at_open  each die in turn found dead at open, after a clean
 *                close or a crash: the checkpoint on it (header, l2p pages)
 *                is rebuilt from its parity and copy, not replaced by a
 *                replay of the whole log, so units trimmed before it stay
 *                trimmed; all data right
 *   cp_dead_at_open_noparity  the same on a format without parity: the
 *                checkpoint loads all the same (its own parity and copy),
 *                exactly the units on the dead die fail with EIO
 *   write_hole   a die lost with a power cut right after a flush: units
 *                flushed into stripes still open are rebuilt from the
 *                flush's partial-parity pages (real and virtual clock)
 *   refresh_kept a block of an open band fails its programs after its
 *                stripes' parity was computed: the band is known to be
 *                unprotected (marked for refresh) and stays so across a
 *                clean reopen and a power cut, until GC moves its data
 *                (a restart forgot it, and a die lost later lost data)
 *   gc_hole      a die lost with a power cut while GC's open stripes hold
 *                data relocated out of victims already erased: it is
 *                rebuilt from the partial-parity pages GC programs before
 *                each erase (real and virtual clock)
 *   ppl_fails    a flush's partial-parity page fails its program: the
 *                stripe gets another before the flush completes; a die
 *                lost with a power cut after it loses nothing flushed
 *   parity_block_fails  the parity block of an open band fails: the band
 *                is marked for refresh, its parity context released when
 *                it is full, GC moves it; all data right, also reopened
 *   idle_pad     stripes left open when writes pause are completed with
 *                pads, so their parity is on the media: a die found dead
 *                after a power cut loses nothing written before the pause
 *                (real clock and virtual clock)
 * Errors must be errors (EIO), never wrong data.
 */
#include "ftl/ftl_int.h"
#include "hw/nand_sim.h" /* gc_hole: GC's open stripes */
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

static void format_figures(void)
{
	struct nand_dev *d = dev_new("test-1g", false);
	struct ftl_info i0, i1;
	format_with(d, 4096, 20, 0);
	struct ftl *f = open_ok(d);
	ftl_get_info(f, &i0);
	CHECK_RC(ftl_close(f));
	format_with(d, 4096, 20, 1);
	f = open_ok(d);
	ftl_get_info(f, &i1);
	CHECK_EQ(i1.parity_width, 1);
	/* 4 dies per row: a quarter for parity */
	printf("format: capacity %" PRIu64 " MiB without parity, %" PRIu64 " MiB with (rows of %u)\n",
	       i0.capacity >> 20, i1.capacity >> 20, i1.band_width);
	CHECK(i1.capacity < i0.capacity);
	CHECK(i1.capacity >= i0.capacity / i1.band_width * (i1.band_width - 1) - (1 << 20));
	uint64_t units = i1.units, seed = 7;
	uint32_t *ver = calloc(units, sizeof *ver);
	churn(f, ver, units, 3 * units, &seed);
	CHECK_RC(ftl_flush_sync(f));
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	printf("format: %" PRIu64 " parity pages for %" PRIu64 " host pages, WA %.2f\n",
	       st.parity_pages_programmed, st.host_pages_written, st.write_amplification);
	CHECK(st.parity_pages_programmed > 0);
	/* one parity page per (row width - 1) data pages, give or take the
	 * stripes still open */
	double share = (double)st.parity_pages_programmed / (double)st.nand_pages_programmed;
	CHECK(share > 0.15 && share < 0.30);
	verify_lost(f, ver, units, NULL);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	verify_lost(f, ver, units, NULL);
	CHECK_RC(ftl_close(f));
	/* widths other than 0 and 1 are refused */
	char err[256];
	struct ftl_format_params fp = { .sector_size = 4096, .parity_width = 2 };
	CHECK_EQ(ftl_format(d, &fp, err, sizeof err), -ENOTSUP);
	free(ver);
	nand_close(d);
}

static void pages(void)
{
	struct fx fx = fx_start("test-1g", false, 20, 1);
	uint64_t seed = 11;
	churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 2, &seed);
	/* a closed band's page and the newest unit's (its stripe may still be
	 * in memory): both uncorrectable from now on */
	uint32_t die, block, page;
	uint64_t bad[64];
	int nbad = 0;
	for (uint64_t u = 0; u < fx.units && nbad < 63; u += fx.units / 61) {
		if (ftl_unit_location(fx.f, u, &die, &block, &page) == 0) {
			CHECK_RC(nand_sim_page_error(fx.d, (uint64_t)block * fx.d->geo.pages_per_block + page,
						     NAND_UNCORRECTABLE));
			bad[nbad++] = u;
		}
	}
	uint8_t b[4096];
	uint64_t last = t_rand(&seed) % fx.units;
	write_unit(fx.f, last, ++fx.ver[last]);
	CHECK_RC(ftl_flush_sync(fx.f));
	if (ftl_unit_location(fx.f, last, &die, &block, &page) == 0) {
		CHECK_RC(nand_sim_page_error(fx.d, (uint64_t)block * fx.d->geo.pages_per_block + page,
					     NAND_UNCORRECTABLE));
		bad[nbad++] = last;
	}
	for (int i = 0; i < nbad; i++) {
		uint8_t e[4096];
		CHECK_RC(ftl_read_sync(fx.f, b, bad[i] * 4096, 4096));
		fill(e, bad[i], fx.ver[bad[i]]);
		CHECK(memcmp(b, e, 4096) == 0);
	}
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	printf("pages: %d uncorrectable pages read back right: %" PRIu64 " rebuilds, %" PRIu64
	       " failed, %" PRIu64 " bands marked for refresh\n",
	       nbad, st.parity_rebuilds, st.parity_rebuild_failures, st.refresh_marked);
	CHECK(st.parity_rebuilds >= (uint64_t)nbad);
	CHECK_EQ(st.parity_rebuild_failures, 0);
	CHECK(st.refresh_marked > 0);
	/* GC moves the marked bands (their bad pages rebuilt on the way) */
	churn(fx.f, fx.ver, fx.units, fx.units, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	ftl_get_stats(fx.f, &st);
	printf("pages: after more writes: %" PRIu64 " refreshes collected, %" PRIu64 " lost\n",
	       st.refresh_collected, st.lost_units);
	CHECK_EQ(st.lost_units, 0);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	fx_reopen(&fx);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	fx_end(&fx);
}

static void crc_pages_run(bool timed)
{
	struct fx fx = fx_start("test-1g", timed, 20, 1);
	uint64_t seed = 13;
	churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	struct ftl_stats st0, st;
	ftl_get_stats(fx.f, &st0);
	static uint8_t run[16 * 4096];
	uint8_t e[4096];
	int nbad = 0;
	for (uint64_t u = 1; u < fx.units && nbad < 16; u += fx.units / 16) {
		/* one damaged page at a time (its stripe's others good), then
		 * rewritten */
		uint32_t ppa = fx.f->l2p[u];
		if (!l2p_is_ppa(ppa))
			continue;
		CHECK_RC(nand_sim_flip_bytes(fx.d, ppa, (uint32_t)(u * 37 % 4096), 1));
		nbad++;
		/* the unit alone, then inside a run of 16 (the in-place read
		 * goes on past it) */
		CHECK_RC(ftl_read_sync(fx.f, run, u * 4096, 4096));
		fill(e, u, fx.ver[u]);
		CHECK(memcmp(run, e, 4096) == 0);
		uint64_t first = u >= 8 ? u - 8 : 0;
		CHECK_RC(ftl_read_sync(fx.f, run, first * 4096, sizeof run));
		for (uint64_t x = first; x < first + 16 && x < fx.units; x++) {
			if (fx.ver[x])
				fill(e, x, fx.ver[x]);
			else
				memset(e, 0, sizeof e); /* never written */
			CHECK(memcmp(run + (x - first) * 4096, e, 4096) == 0);
		}
		write_unit(fx.f, u, ++fx.ver[u]);
		CHECK_RC(ftl_flush_sync(fx.f));
	}
	CHECK(nbad >= 8);
	ftl_get_stats(fx.f, &st);
	printf("crc_pages (%s): %d pages with a flipped byte read back right: %" PRIu64
	       " CRC errors, %" PRIu64 " rebuilds\n", timed ? "timed" : "untimed", nbad,
	       st.crc_errors - st0.crc_errors, st.parity_rebuilds - st0.parity_rebuilds);
	CHECK(st.crc_errors - st0.crc_errors >= (uint64_t)nbad);
	CHECK(st.parity_rebuilds - st0.parity_rebuilds >= (uint64_t)nbad);
	CHECK_EQ(st.parity_rebuild_failures, 0);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	fx_end(&fx);
}

static void crc_pages(void)
{
	crc_pages_run(false);
	crc_pages_run(true);
}

/* Rows two dies wide (test-64m): a band with a hole (a superblock block,
 * band 0 of each row, or a bad block) has one member left, which can have
 * no parity.  No data goes there: every unit stays rebuildable from its
 * stripe, and one uncorrectable page next to a hole reads back right
 * (data written first went to block 192, die 3's block 0 beside die 1's
 * superblock block, and the page was lost: EIO). */
static void narrow_rows_run(const char *preset)
{
	struct fx fx = fx_start(preset, false, 20, 1);
	CHECK_EQ(fx.info.band_width, 2);
	uint64_t seed = 19;
	uint64_t unprot = 0, nbad = 0, mapped = 0;
	uint8_t b[4096], e[4096];
	for (int round = 0; round < 4; round++) {
		churn(fx.f, fx.ver, fx.units, round ? fx.units : fx.units / 2, &seed);
		CHECK_RC(ftl_flush_sync(fx.f));
		if (round == 3) {
			fx_reopen(&fx);
		}
		/* (a rebuild below marks its band for refresh: unprotected
		 * until GC moves it, so count first) */
		for (uint64_t u = 0; u < fx.units; u++) {
			uint32_t die, block, page;
			if (ftl_unit_location(fx.f, u, &die, &block, &page))
				continue;
			mapped++;
			if (!ftl_unit_protected(fx.f, u) &&
			    !(fx.f->band[block_band(fx.f, block)].flags & BANDF_REFRESH))
				unprot++;
		}
		uint64_t hole = 0;
		for (uint64_t u = 0; u < fx.units; u++) {
			uint32_t die, block, page;
			if (ftl_unit_location(fx.f, u, &die, &block, &page))
				continue;
			/* beside a hole (none now), and a few others: uncorrectable
			 * from now on */
			uint32_t bi = block_band(fx.f, block);
			if (fx.f->band[bi].members < fx.f->row_width && hole < 4)
				hole++;
			else if (u % (fx.units / 4) != 7)
				continue;
			CHECK_RC(nand_sim_page_error(fx.d, (uint64_t)block * fx.d->geo.pages_per_block + page,
						     NAND_UNCORRECTABLE));
			nbad++;
			int rc = ftl_read_sync(fx.f, b, u * 4096, 4096);
			fill(e, u, fx.ver[u]);
			if (rc || memcmp(b, e, 4096)) {
				printf("narrow_rows (%s): unit %" PRIu64 " (block %u page %u, band of %u "
				       "members) read %d after one page went bad\n", preset, u, block,
				       page, fx.f->band[bi].members, rc);
				CHECK(!"a single bad page lost a flushed unit");
			}
			write_unit(fx.f, u, ++fx.ver[u]);
		}
		CHECK_RC(ftl_flush_sync(fx.f));
	}
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	printf("narrow_rows (%s): %" PRIu64 " units checked over 4 rounds, %" PRIu64
	       " unprotected; %" PRIu64 " pages made bad read back right\n",
	       preset, mapped, unprot, nbad);
	CHECK_EQ(unprot, 0);
	CHECK(nbad > 0);
	CHECK_EQ(st.lost_units, 0);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	fx_end(&fx);
}

static void narrow_rows(void)
{
	narrow_rows_run("test-64m");
	narrow_rows_run("test-64m-bad");
}

static void die_run(bool timed)
{
	struct fx fx = fx_start("test-1g", timed, 36, 1); /* a die is an eighth of this device */
	struct ftl_stats st0, st;
	uint64_t cap = fx.info.capacity, seed = 13;
	churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 4, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	ftl_get_stats(fx.f, &st0);
	uint32_t dead = 5;
	CHECK_RC(nand_sim_fail_die(fx.d, dead));
	/* everything reads right at once (rebuilt on the fly) */
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	/* writes go on; the die is declared dead; GC moves its bands */
	for (int round = 0; round < 40; round++) {
		churn(fx.f, fx.ver, fx.units, fx.units / 8, &seed);
		CHECK_RC(ftl_flush_sync(fx.f));
		ftl_get_stats(fx.f, &st);
		if (st.dies_failed && !st.rebuild_bands_left)
			break;
	}
	ftl_get_info(fx.f, &fx.info);
	printf("die%s: die %u failed: %u dead, %u of %u bands left to rebuild, %" PRIu64
	       " rebuilds (%" PRIu64 " failed), reserves %.1f%% -> %.1f%%, %" PRIu64 " lost\n",
	       timed ? " (timed)" : "", dead, st.dies_failed, st.rebuild_bands_left,
	       st.rebuild_bands_total, st.parity_rebuilds, st.parity_rebuild_failures,
	       st0.reserve_percent, st.reserve_percent, st.lost_units);
	CHECK_EQ(st.dies_failed, 1);
	CHECK_EQ(st.rebuild_bands_left, 0);
	CHECK(st.rebuild_bands_total > 0);
	CHECK_EQ(st.lost_units, 0);
	CHECK(st.reserve_percent < st0.reserve_percent);
	CHECK_EQ(fx.info.capacity, cap);
	CHECK(fx.info.state == FTL_STATE_ONLINE || fx.info.state == FTL_STATE_WRITE_REDUCED);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	/* nothing lives on the dead die any more */
	for (uint64_t u = 0; u < fx.units; u++) {
		uint32_t die, block, page;
		if (ftl_unit_location(fx.f, u, &die, &block, &page) == 0)
			CHECK(die != dead);
	}
	fx_reopen(&fx);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	fx_end(&fx);
}

static void read_done_flag(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

static bool page_erased(struct nand_dev *d, uint32_t block, uint32_t page)
{
	uint8_t spare[512];
	bool done = false;
	struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = page, .spare = spare,
			      .done = read_done_flag, .priv = &done };
	CHECK(d->geo.spare_size <= sizeof spare);
	CHECK_RC(nand_submit(d, &op));
	while (!done)
		nand_poll(d, nand_now(d));
	for (uint32_t i = 0; i < d->geo.spare_size; i++)
		if (spare[i] != 0xFF)
			return false;
	return true;
}

static void two_dies(void)
{
	struct fx fx = fx_start("test-1g", false, 50, 1); /* two dies are a quarter of this device */
	uint64_t seed = 17;
	churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 4, &seed);
	CHECK_RC(ftl_close(fx.f)); /* every stripe sealed */
	fx.f = open_ok(fx.d);
	/* dies 1 and 3: channels 0 and 1 of row 1 (2 dies per channel) */
	uint32_t a = 1, b = 3, dpc = fx.d->geo.dies_per_channel;
	CHECK_EQ(a % dpc, b % dpc);
	/* a unit on one of them is lost unless the other's block of the same
	 * band is not a member of its stripe: a hole (factory bad, or a
	 * superblock block: block 0 of dies 0 and 1), or a page never written
	 * (the last stripe of a band that was open at the close holds only
	 * the pages written before it, and its parity covers just those) */
	uint8_t *lost = calloc(fx.units, 1);
	uint64_t nlost = 0, saved = 0;
	uint32_t bpd = fx.d->geo.blocks_per_die;
	for (uint64_t u = 0; u < fx.units; u++) {
		uint32_t die, block, page;
		if (ftl_unit_location(fx.f, u, &die, &block, &page) != 0 || (die != a && die != b))
			continue;
		uint32_t other = (die == a ? b : a) * bpd + block % bpd;
		if (nand_factory_bad(fx.d, other) || other == 0 || other == bpd ||
		    page_erased(fx.d, other, page)) {
			saved++;
			continue;
		}
		lost[u] = 1;
		nlost++;
	}
	CHECK_RC(nand_sim_fail_die(fx.d, a));
	CHECK_RC(nand_sim_fail_die(fx.d, b));
	uint64_t eio = verify_lost(fx.f, fx.ver, fx.units, lost);
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	printf("two dies: %" PRIu64 " of %" PRIu64 " units were on dies %u and %u in stripes with "
	       "both: all read EIO, every other unit right (%" PRIu64 " on them rebuilt)\n",
	       nlost, fx.units, a, b, saved);
	CHECK(nlost > 0);
	CHECK_EQ(eio, nlost);
	/* GC gives the units up for good (lost, recorded) and moves the rest */
	churn(fx.f, fx.ver, fx.units, 0, &seed);
	for (int round = 0; round < 40; round++) {
		for (uint64_t i = 0; i < fx.units / 8; i++) {
			uint64_t u = t_rand(&seed) % fx.units;
			if (lost[u])
				continue;
			write_unit(fx.f, u, ++fx.ver[u]);
		}
		CHECK_RC(ftl_flush_sync(fx.f));
		ftl_get_stats(fx.f, &st);
		if (st.dies_failed == 2 && !st.rebuild_bands_left)
			break;
	}
	printf("two dies: %u dead, %u bands left, %" PRIu64 " units lost, range %" PRIu64
	       "-%" PRIu64 "\n",
	       st.dies_failed, st.rebuild_bands_left, st.lost_units, st.lost_first, st.lost_last);
	CHECK_EQ(st.dies_failed, 2);
	CHECK_EQ(st.rebuild_bands_left, 0);
	CHECK_EQ(st.lost_units, nlost);
	uint64_t lo = UINT64_MAX, hi = 0;
	for (uint64_t u = 0; u < fx.units; u++)
		if (lost[u]) {
			lo = u < lo ? u : lo;
			hi = u;
		}
	CHECK_EQ(st.lost_first, lo);
	CHECK_EQ(st.lost_last, hi);
	CHECK_EQ(verify_lost(fx.f, fx.ver, fx.units, lost), nlost);
	fx_reopen(&fx);
	CHECK_EQ(verify_lost(fx.f, fx.ver, fx.units, lost), nlost);
	free(lost);
	fx_end(&fx);
}

/* Die 0 holds the active superblock block: its failure moves the
 * superblock to die 1's block; the FTL keeps serving and opens again. */
static void sb_die(void)
{
	struct fx fx = fx_start("test-1g", false, 36, 1);
	uint64_t seed = 23;
	churn(fx.f, fx.ver, fx.units, fx.units, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	CHECK_RC(nand_sim_fail_die(fx.d, 0));
	churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	CHECK_EQ(st.dies_failed, 1);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	CHECK_RC(ftl_close(fx.f)); /* the closing superblock update goes to die 1 */
	fx.f = open_ok(fx.d);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	CHECK_RC(ftl_close(fx.f));
	printf("sb_die: die 0 (the superblock's) failed: served on, closed and opened again, all "
	       "data right\n");
	fx_free(&fx);
}

/* Trim records on a die found dead at open are rebuilt from their stripes:
 * trimmed units stay trimmed (not their old data). */
static void trim_dead(void)
{
	struct fx fx = fx_start("test-1g", false, 36, 1);
	uint64_t seed = 99, K = 200, tail0 = K * 16;
	uint8_t b[4096], z[4096] = { 0 };
	churn(fx.f, fx.ver, fx.units, fx.units, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	fx_reopen(&fx);
	for (uint64_t k = 0; k < K; k++) {
		CHECK_RC(ftl_trim_sync(fx.f, k * 16 * 4096, 16 * 4096, 0));
		for (int j = 0; j < 40; j++) {
			uint64_t u = tail0 + t_rand(&seed) % (fx.units - tail0);
			write_unit(fx.f, u, ++fx.ver[u]);
		}
	}
	CHECK_RC(ftl_flush_sync(fx.f));
	for (int j = 0; j < 20000; j++) {
		uint64_t u = tail0 + t_rand(&seed) % (fx.units - tail0);
		write_unit(fx.f, u, ++fx.ver[u]);
	}
	CHECK_RC(ftl_flush_sync(fx.f));
	ftl_abandon(fx.f); /* a power cut with nothing in flight */
	CHECK_RC(nand_sim_fail_die(fx.d, 2)); /* holds trim records (this seed) */
	fx.f = open_ok(fx.d);
	uint64_t old = 0;
	for (uint64_t u = 0; u < tail0; u++)
		if (ftl_read_sync(fx.f, b, u * 4096, 4096) == 0 && memcmp(b, z, 4096))
			old++;
	struct ftl_stats st;
	ftl_get_stats(fx.f, &st);
	printf("trim_dead: die 2 dead at open: %" PRIu64 " of %" PRIu64 " trimmed units read old "
	       "data; %" PRIu64 " pages rebuilt from parity at open\n",
	       old, tail0, st.parity_rebuilds);
	CHECK_EQ(old, 0);
	fx_end(&fx);
}

static void let_time_pass(struct ftl *f, struct nand_dev *d, uint64_t ns);

/* Die 0 or 1 dead at open (it failed while flashd was down, or with a
 * crash): each holds one of the two superblock blocks, and every update
 * is on both, so the FTL opens from the other copy; all data reads right,
 * also after the next close and open. */
/* f opened with a die dead: every unit right, then a quarter of a device
 * written, a close and an open, every unit right again; f is closed. */
static void verify_write_reopen(struct ftl *f, struct nand_dev *d, uint32_t *ver, uint64_t units,
				uint64_t *seed)
{
	verify_lost(f, ver, units, NULL);
	churn(f, ver, units, units / 4, seed);
	CHECK_RC(ftl_flush_sync(f));
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	verify_lost(f, ver, units, NULL);
	CHECK_RC(ftl_close(f));
}

static void sb_dead_at_open(void)
{
	for (uint32_t dead = 0; dead < 2; dead++)
		for (int crash = 0; crash < 2; crash++) {
			struct fx fx = fx_start("test-1g", false, 36, 1);
			uint64_t seed = 77 + dead;
			churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 2, &seed);
			CHECK_RC(ftl_flush_sync(fx.f));
			if (crash) {
				/* after the pause that pads open stripes (a crash
				 * during writes is the double fault of doc/ftl.md) */
				let_time_pass(fx.f, fx.d, 300000000ull);
				ftl_abandon(fx.f);
			}
			else
				CHECK_RC(ftl_close(fx.f));
			CHECK_RC(nand_sim_fail_die(fx.d, dead));
			fx.f = open_ok(fx.d);
			verify_write_reopen(fx.f, fx.d, fx.ver, fx.units, &seed);
			printf("sb_dead_at_open: die %u dead at open after a %s: opened from the other "
			       "superblock copy, all data right, also after another close and open\n",
			       dead, crash ? "crash" : "clean close");
			fx_free(&fx);
		}
}

/* Each die in turn dead at open, after a clean close or a crash, with a
 * range trimmed before the last checkpoint.  With parity (width 1) every
 * unit reads right; without (width 0) exactly the units stored on the dead
 * die fail with EIO.  Either way the checkpoint loads (its pages on the
 * dead die rebuilt from its own parity and copy, media.h), so the trimmed
 * units read zeros: a replay of the whole log would bring their old data
 * back. */
static void cp_dead_at_open(uint32_t parity)
{
	for (uint32_t dead = 0; dead < 8; dead++) {
		int crash = dead & 1;
		struct fx fx = fx_start("test-1g", false, 36, parity);
		uint64_t seed = 300 + dead;
		uint32_t *ver0 = calloc(fx.units, sizeof *ver0);
		uint8_t *lost = calloc(fx.units, 1);
		churn(fx.f, fx.ver, fx.units, fx.units + fx.units / 2, &seed);
		/* a trimmed range, then enough writes that GC goes on */
		uint64_t t0 = fx.units / 4, tn = fx.units / 8;
		CHECK_RC(ftl_trim_sync(fx.f, t0 * 4096, tn * 4096, 0));
		for (uint64_t u = t0; u < t0 + tn; u++)
			fx.ver[u] = 0;
		churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
		CHECK_RC(ftl_flush_sync(fx.f));
		if (crash) {
			/* a checkpoint after the trim, so it is not in the log replayed */
			uint64_t t = ftl_checkpoint_request(fx.f);
			int r;
			while (!(r = ftl_checkpoint_poll(fx.f, t)))
				ftl_poll(fx.f);
			CHECK(r == 1);
			let_time_pass(fx.f, fx.d, 300000000ull);
			ftl_abandon(fx.f);
		} else {
			CHECK_RC(ftl_close(fx.f));
		}
		CHECK_RC(nand_sim_fail_die(fx.d, dead));
		fx.f = open_ok(fx.d);
		ftl_get_info(fx.f, &fx.info);
		if (fx.info.checkpoint_damaged) {
			fprintf(stderr, "cp_dead_at_open: parity %u, die %u dead: checkpoint reported "
				"damaged (%s)\n", parity, dead, fx.info.notes);
			exit(1);
		}
		/* without parity, after a crash, the notes warn that writes since
		 * the checkpoint may read older data (nothing names their units);
		 * with parity only if stripes the crash cut had pages on it */
		if (!parity)
			CHECK_EQ(strstr(fx.info.notes, "dead after a crash") != NULL, crash);
		/* without parity: units on the dead die, and those GC found there
		 * already (lost: not mapped, yet written) */
		uint64_t nlost = 0;
		for (uint64_t u = 0; u < fx.units && !parity; u++) {
			uint32_t die, b, pg;
			int rc = ftl_unit_location(fx.f, u, &die, &b, &pg);
			if ((rc == 0 && die == dead) || (rc == -ENOENT && fx.ver[u]))
				nlost += lost[u] = 1;
		}
		CHECK_EQ(verify_lost(fx.f, fx.ver, fx.units, lost), nlost);
		memcpy(ver0, fx.ver, fx.units * sizeof *fx.ver);
		churn(fx.f, fx.ver, fx.units, fx.units / 4, &seed);
		for (uint64_t u = 0; u < fx.units; u++)
			lost[u] &= fx.ver[u] == ver0[u]; /* written again since */
		CHECK_RC(ftl_flush_sync(fx.f));
		fx_reopen(&fx);
		verify_lost(fx.f, fx.ver, fx.units, lost);
		CHECK_RC(ftl_close(fx.f));
		printf("cp_dead_at_open: parity %u, die %u dead at open after a %s: checkpoint loaded, "
		       "%" PRIu64 " units on the dead die EIO, every other unit right (trimmed ones "
		       "zeros), also after another close and open\n",
		       parity, dead, crash ? "crash" : "clean close", nlost);
		free(ver0);
		free(lost);
		fx_free(&fx);
	}
}

/* Let the device clock run for ns with nothing written (real time on an
 * untimed device, the virtual clock otherwise), the FTL polled meanwhile,
 * then until it is idle. */
static void let_time_pass(struct ftl *f, struct nand_dev *d, uint64_t ns)
{
	uint64_t until = nand_now(d) + ns;
	for (;;) {
		ftl_poll(f);
		uint64_t now = nand_now(d);
		if (now >= until && ftl_idle(f))
			return;
		uint64_t due = ftl_next_deadline(f);
		if (now >= until || due > until)
			due = now >= until ? due : until;
		if (due == UINT64_MAX)
			due = now + 1000000;
		nand_wait_until(d, due);
	}
}

/* Units first .. first + n - 1 get their next version, then a flush. */
static void write_units(struct ftl *f, uint32_t *ver, uint64_t first, uint64_t n)
{
	for (uint64_t u = first; u < first + n; u++) {
		write_unit(f, u, ++ver[u]);
	}
	CHECK_RC(ftl_flush_sync(f));
}

/* A few units written and flushed, then a pause: the stripes they started
 * are padded and get their parity page.  A power cut and a die lost with
 * it: each unit on that die is rebuilt from its stripe.  (Without the
 * pads those stripes have no parity page and the units on the die are
 * lost.) */
static void idle_pad(bool timed)
{
	struct fx fx = fx_start("test-1g", timed, 36, 1);
	uint64_t seed = 41;
	churn(fx.f, fx.ver, fx.units, fx.units / 2, &seed);
	CHECK_RC(ftl_flush_sync(fx.f));
	let_time_pass(fx.f, fx.d, 300000000ull);
	struct ftl_stats st0, st;
	ftl_get_stats(fx.f, &st0);
	/* fewer units than a row has data members: every stripe they start
	 * is left partly written */
	uint64_t first = fx.units / 2 + 17, n = fx.info.band_width - 2;
	write_units(fx.f, fx.ver, first, n);
	let_time_pass(fx.f, fx.d, 300000000ull);
	ftl_get_stats(fx.f, &st);
	uint64_t pads = st.parity_pad_pages - st0.parity_pad_pages;
	uint32_t die = 0, blk, page;
	uint64_t lu = first;
	for (uint64_t u = first; u < first + n && !die; u++) {
		CHECK_RC(ftl_unit_location(fx.f, u, &die, &blk, &page));
		lu = u;
	}
	CHECK(die != 0); /* not the superblock's die (see sb_die) */
	ftl_abandon(fx.f); /* a power cut with nothing in flight */
	CHECK_RC(nand_sim_fail_die(fx.d, die));
	fx.f = open_ok(fx.d);
	verify_lost(fx.f, fx.ver, fx.units, NULL);
	ftl_get_stats(fx.f, &st);
	printf("idle_pad (%s clock): %" PRIu64 " units written, then a pause: %" PRIu64
	       " pad pages; die %u (unit %" PRIu64 ") lost in a power cut: every unit reads right "
	       "(%" PRIu64 " pages rebuilt)\n",
	       timed ? "virtual" : "real", n, pads, die, lu, st.parity_rebuilds);
	CHECK(pads > 0);
	fx_end(&fx);
}

/* The power goes: what the timed medium has queued is interrupted or never
 * happens; f is freed. */
static void power_cut(struct ftl *f, struct nand_dev *d)
{
	struct nand_sim_faults cut = { .power_cut_after = 1 }, none = { 0 };
	CHECK_RC(nand_sim_set_faults(d, &cut));
	for (int i = 0; i < 1000000 && nand_sim_powered(d) && !ftl_idle(f); i++) {
		ftl_poll(f);
		uint64_t due = ftl_next_deadline(f);
		if (due == UINT64_MAX)
			break;
		nand_wait_until(d, due);
	}
	ftl_abandon(f);
	nand_sim_power_on(d);
	CHECK_RC(nand_sim_set_faults(d, &none));
}

/* test-1g formatted with parity at op % OP and opened, n units written
 * (the first `units` in order, then at random): the set-up of most tests
 * below.  *ver: each unit's version (calloc'd), *units, *seed. */
static struct ftl *churned(struct nand_dev **d, bool timed, double op, uint64_t n_per_4,
			   uint32_t **ver, uint64_t *units, uint64_t *seed)
{
	*d = dev_new("test-1g", timed);
	format_with(*d, 4096, op, 1);
	struct ftl *f = open_ok(*d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	*units = info.units;
	*ver = calloc(*units, sizeof **ver);
	churn(f, *ver, *units, *units * n_per_4 / 4, seed);
	return f;
}

/*
 * The double fault idle_pad leaves: a die lost with a power cut right
 * after a flush, the stripes still open.  The flush wrote a partial-parity
 * page into each open stripe (media.h), so recovery rebuilds the flushed
 * pages on the lost die: every unit reads its newest version (without the
 * partial-parity page such a unit reads its previous version).  Each
 * trial writes a
 * different number of units and loses the die of one of them; on the real
 * clock (the cut with nothing in flight) and the virtual one (parity
 * programs of stripes sealed by the flush may still be in flight).
 */
static void write_hole(bool timed)
{
	uint64_t trials = 0;
	for (uint32_t trial = 0; trial < 6; trial++) {
		struct nand_dev *d;
		uint32_t *ver;
		uint64_t units, seed = 43 + trial;
		struct ftl *f = churned(&d, timed, 36, 0, &ver, &units, &seed);
		struct ftl_info info;
		ftl_get_info(f, &info);
		/* trial 0 on a new device: the first stripe of the first band
		 * (a stripe 0 takes pads, not a PPL page) */
		if (trial) {
			churn(f, ver, units, units / 2, &seed);
			CHECK_RC(ftl_flush_sync(f));
			let_time_pass(f, d, 300000000ull);
		}
		uint64_t first = units / 2 + 17 * trial, n = 1 + trial * (info.band_width - 1) / 2;
		write_units(f, ver, first, n);
		uint32_t die = 0, blk, page;
		for (uint64_t u = first + n; u-- > first && !die;)
			CHECK_RC(ftl_unit_location(f, u, &die, &blk, &page));
		if (!die) {
			power_cut(f, d);
			nand_close(d);
			free(ver);
			continue; /* all on die 0 (the superblock's): another trial */
		}
		power_cut(f, d); /* at once: the stripes are open */
		CHECK_RC(nand_sim_fail_die(d, die));
		f = open_ok(d);
		verify_lost(f, ver, units, NULL);
		trials++;
		close_free(f, d, ver);
	}
	printf("write_hole (%s clock): %" PRIu64 " trials, a few units written and flushed, a power "
	       "cut at once and a die of theirs lost: every unit reads its newest version\n",
	       timed ? "virtual" : "real", trials);
	CHECK(trials >= 4);
}

/*
 * GC's own open stripes: relocations land in them, and their victims are
 * erased once relocated.  A power cut, and a die of such a stripe lost
 * with it: recovery finds no parity page for the stripe, and the victim's
 * copy is gone.  GC programs a partial-parity page into each of its open
 * stripes before it erases a victim (par_gc_protect), so the unit is
 * rebuilt from it.  Each trial churns until GC runs, flushes, picks a unit
 * in a GC stripe still open (not on die 0: the superblock's), cuts the
 * power at once and fails that unit's die; every unit must read its
 * newest version (without par_gc_protect such units read EIO).
 */
/* trials wanted (and needed) per clock: the sanitizer build (it sets
 * T_MODEL_DEFAULT_OPS) runs the same code in one, the plain build in three */
#ifdef T_MODEL_DEFAULT_OPS
#define GC_HOLE_TRIALS 1
#define GC_HOLE_MIN 1
#else
#define GC_HOLE_TRIALS 3
#define GC_HOLE_MIN 2
#endif
static void gc_hole(bool timed)
{
	uint64_t trials = 0, ppl = 0;
	for (uint32_t trial = 0; trial < 10 && trials < GC_HOLE_TRIALS; trial++) {
		struct nand_dev *d;
		uint32_t *ver;
		uint64_t units, seed = 53 + trial;
		struct ftl *f = churned(&d, timed, 20, 5, &ver, &units, &seed);
		churn(f, ver, units, trial * 997, &seed);
		/* writes until GC has just finished a burst: the last of its
		 * relocations are in stripes nothing completes until the next
		 * burst (host writes go on, so no idle pad either) */
		struct ftl_stats st;
		ftl_get_stats(f, &st);
		CHECK(st.gc_blocks_collected > 0);
		for (uint64_t collected = st.gc_blocks_collected, i = 0;
		     (st.gc_blocks_collected == collected || gc_busy(f)) && i < units; i++) {
			write_units(f, ver, t_rand(&seed) % units, 1);
			ftl_get_stats(f, &st);
		}
		CHECK_RC(ftl_flush_sync(f));
		ppl += st.parity_ppl_pages;
		/* a unit in a GC stripe partly handed out */
		uint32_t die = 0, blk, page;
		uint64_t unit = 0;
		const struct stream *g = &f->stream[STREAM_GC];
		for (uint32_t k = 0; k < g->nsets && !die; k++)
			for (uint32_t row = 0; row < f->nrows && !die; row++) {
				const struct open_row *orow = &g->set[k].row[row];
				if (orow->band == FTL_NO_BLOCK || orow->col == 0 ||
				    orow->col == f->row_width)
					continue;
				for (uint64_t u = 0; u < units && !die; u++) {
					uint32_t ud;
					if (ftl_unit_location(f, u, &ud, &blk, &page) == 0 &&
					    block_band(f, blk) == orow->band && page == orow->page) {
						die = ud;
						unit = u;
					}
				}
			}
		if (!die) {
			power_cut(f, d);
			nand_close(d);
			free(ver);
			continue; /* none open now, or only on die 0 */
		}
		power_cut(f, d);
		CHECK_RC(nand_sim_fail_die(d, die));
		f = open_ok(d);
		verify_lost(f, ver, units, NULL);
		printf("gc_hole (%s clock) trial %u: unit %" PRIu64 " in an open GC stripe on die %u, "
		       "lost with a power cut: every unit reads its newest version\n",
		       timed ? "virtual" : "real", trial, unit, die);
		trials++;
		close_free(f, d, ver);
	}
	printf("gc_hole (%s clock): %" PRIu64 " trials, %" PRIu64 " partial-parity pages\n",
	       timed ? "virtual" : "real", trials, ppl);
	CHECK(trials >= GC_HOLE_MIN);
	CHECK(ppl > 0);
}

/*
 * The parity block of an open band fails its programs: the band's stripes
 * from there on go without parity, so the band is marked for refresh at
 * once (a failed parity block never marked its band: band_refresh_set
 * looked only at the failed block, RETIRING by then), its parity context
 * is let go once the band is full (it stayed attached, and the band
 * reopened with it after GC: flushes waited for parity that never came,
 * t_ftl_model -c 5 hung), and GC moves the band: every unit reads right.
 */
static void parity_block_fails(void)
{
	struct nand_dev *d;
	uint32_t *ver;
	uint64_t units, seed = 59;
	struct ftl *f = churned(&d, false, 36, 2, &ver, &units, &seed);
	CHECK_RC(ftl_flush_sync(f));
	const struct open_row *orow = &f->stream[STREAM_USER].set[SET_FIRST].row[0];
	uint32_t bi = orow->band, pb = FTL_NO_BLOCK;
	CHECK(bi != FTL_NO_BLOCK);
	for (uint32_t c = 0; c < f->row_width; c++)
		if (par_is_pcol(f, bi, c))
			pb = band_block(f, bi, c);
	CHECK(pb != FTL_NO_BLOCK);
	CHECK_RC(nand_sim_fail_block(d, pb, true, false));
	struct ftl_stats st0, st;
	ftl_get_stats(f, &st0);
	bool marked = false;
	uint64_t n = 0;
	/* written 8 units at a time, each batch flushed (programmed) */
	for (; orow->band == bi && n < units; n += 8) {
		for (int i = 0; i < 8; i++) {
			uint64_t u = t_rand(&seed) % units;
			uint8_t b[4096];
			fill(b, u, ++ver[u]);
			CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
		}
		CHECK_RC(ftl_flush_sync(f));
		ftl_get_stats(f, &st);
		if (st.program_failures > st0.program_failures && !marked) {
			marked = true;
			CHECK(f->band[bi].flags & BANDF_REFRESH);
		}
	}
	CHECK(marked);
	/* full: its context went back to the pool */
	CHECK_EQ(f->band[bi].par, 0);
	CHECK_RC(ftl_flush_sync(f));
	verify_lost(f, ver, units, NULL);
	/* GC moved it (a refresh), and the FTL goes on with new bands */
	churn(f, ver, units, units / 2, &seed);
	CHECK_RC(ftl_flush_sync(f));
	ftl_get_stats(f, &st);
	printf("parity_block_fails: block %u (parity of band %u) failed its programs: band marked "
	       "for refresh, context released after %" PRIu64 " writes, %" PRIu64
	       " bands refreshed; every unit reads right\n",
	       pb, bi, n, st.refresh_collected - st0.refresh_collected);
	CHECK(st.refresh_collected > st0.refresh_collected);
	verify_lost(f, ver, units, NULL);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	verify_lost(f, ver, units, NULL);
	close_free(f, d, ver);
}

/*
 * A flush's partial-parity page fails its program: the stripe gets another
 * before the flush completes (par_ppl_failed), so a die lost with a power
 * cut right after still loses nothing flushed (without par_ppl_failed the
 * flush completes with the stripe unprotected).  Each trial writes units
 * one by one until one lands in a stripe past its first page with a
 * member left for the PPL, fails that member's block, flushes, cuts the
 * power and loses the unit's die.
 */
static void ppl_fails(void)
{
	uint64_t trials = 0;
	for (uint32_t trial = 0; trial < 8 && trials < 3; trial++) {
		struct nand_dev *d;
		uint32_t *ver;
		uint64_t units, seed = 61 + trial;
		struct ftl *f = churned(&d, false, 36, 2, &ver, &units, &seed);
		CHECK_RC(ftl_flush_sync(f));
		let_time_pass(f, d, 300000000ull);
		struct ftl_stats st0, st;
		ftl_get_stats(f, &st0);
		uint32_t target = FTL_NO_BLOCK, die = 0;
		uint64_t u = 0;
		for (uint32_t i = 0; i < 64 && target == FTL_NO_BLOCK; i++) {
			u = t_rand(&seed) % units;
			uint8_t b[4096];
			fill(b, u, ++ver[u]);
			CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
			uint32_t e = f->l2p[u];
			if (!l2p_is_slot(e) || (e & L2P_SLOT_GC))
				continue;
			uint32_t ppa = f->stream[STREAM_USER].ring.slots[e & L2P_SLOT_MASK].ppa;
			uint32_t bi = block_band(f, ppa_block(f, ppa)), page = ppa_page(f, ppa);
			die = block_die(f, ppa_block(f, ppa));
			const struct stream *us = &f->stream[STREAM_USER];
			for (uint32_t k = 0; k < us->nsets; k++)
				for (uint32_t row = 0; row < f->nrows; row++) {
					const struct open_row *orow = &us->set[k].row[row];
					if (orow->band != bi || orow->page != page || page == 0 || die == 0)
						continue;
					for (uint32_t c = orow->col; c < f->row_width; c++) {
						uint32_t b = band_block(f, bi, c);
						if (f->blk[b].state == BLK_OPEN && f->blk[b].wp == page &&
						    !par_is_pcol(f, bi, c)) {
							target = b;
							break;
						}
					}
				}
		}
		if (target == FTL_NO_BLOCK) {
			power_cut(f, d);
			nand_close(d);
			free(ver);
			continue;
		}
		CHECK_RC(nand_sim_fail_block(d, target, true, false));
		CHECK_RC(ftl_flush_sync(f));
		ftl_get_stats(f, &st);
		CHECK(st.program_failures > st0.program_failures);
		power_cut(f, d);
		CHECK_RC(nand_sim_fail_die(d, die));
		f = open_ok(d);
		verify_lost(f, ver, units, NULL);
		printf("ppl_fails trial %u: unit %" PRIu64 " flushed, the PPL page's block %u failed, "
		       "%" PRIu64 " PPL pages; die %u lost with a power cut: every unit reads its "
		       "newest version\n", trial, u, target,
		       st.parity_ppl_pages - st0.parity_ppl_pages, die);
		trials++;
		close_free(f, d, ver);
	}
	CHECK(trials >= 2);
}

/* ftl_open_params.no_flush_parity (flush_parity = off): flushes write no
 * partial-parity page; by default they do. */
static void flush_parity_option(void)
{
	for (int off = 0; off < 2; off++) {
		struct nand_dev *d = dev_new("test-1g", false);
		format_with(d, 4096, 36, 1);
		struct ftl_open_params op = { .no_flush_parity = off };
		struct ftl *f;
		char err[256];
		CHECK_RC(ftl_open(d, &op, &f, err, sizeof err));
		uint32_t *ver = calloc(1024, sizeof *ver);
		for (uint64_t u = 100; u < 1000; u += 97)
			write_units(f, ver, u, 1); /* each flushed at once */
		struct ftl_stats st;
		ftl_get_stats(f, &st);
		printf("flush_parity %s: %" PRIu64 " partial-parity pages for 10 flushed writes\n",
		       off ? "off" : "on", st.parity_ppl_pages);
		if (off)
			CHECK_EQ(st.parity_ppl_pages, 0);
		else
			CHECK(st.parity_ppl_pages > 0);
		close_free(f, d, ver);
	}
}

/* Of the n units u[], those still in the band of block band_block0 go in
 * *still; returns how many of them the FTL reports protected. */
static uint64_t count_protected(struct ftl *f, const uint64_t *u, uint64_t n, uint32_t bpd,
				uint32_t dpc, uint32_t band_block0, uint64_t *still)
{
	uint64_t prot = 0;
	*still = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t die, blk, page;
		if (ftl_unit_location(f, u[i], &die, &blk, &page))
			continue;
		/* same band: same block index in the same row (FTL layout) */
		if (blk % bpd != band_block0 % bpd || (blk / bpd) % dpc != (band_block0 / bpd) % dpc)
			continue;
		(*still)++;
		prot += ftl_unit_protected(f, u[i]);
	}
	return prot;
}

enum { KEPT_CLOSE, KEPT_CUT_AT_ONCE, KEPT_CUT_LATER };

static void refresh_kept(int how)
{
	static const char *const hows[] = { "clean reopen", "power cut at once",
					    "power cut after a checkpoint" };
	bool crash = how != KEPT_CLOSE;
	struct nand_dev *d = dev_new("test-1g", true);
	format_with(d, 4096, 36, 1);
	struct ftl *f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	uint64_t units = info.units, seed = 47;
	uint32_t bpd = d->geo.blocks_per_die, dpc = d->geo.dies_per_channel;
	uint32_t *ver = calloc(units, sizeof *ver);
	churn(f, ver, units, units / 2, &seed);
	/* a block the user stream is filling (not die 0: superblock) */
	uint32_t die = 0, blk = 0, page;
	uint64_t first = units / 2;
	for (uint64_t u = first; die == 0; u++) {
		write_units(f, ver, u, 1);
		CHECK_RC(ftl_unit_location(f, u, &die, &blk, &page));
	}
	struct ftl_stats st0, st;
	ftl_get_stats(f, &st0);
	CHECK_RC(nand_sim_fail_block(d, blk, true, false));
	/* programs complete later than their stripes' parity is computed */
	write_units(f, ver, first + 64, 64);
	ftl_get_stats(f, &st);
	CHECK(st.program_failures > st0.program_failures);
	/* units left in the band: their stripes' parity counts a page
	 * that was never written */
	uint64_t *u = calloc(units, sizeof *u), n = 0, still;
	for (uint64_t x = 0; x < units; x++) {
		uint32_t xd, xb, xp;
		if (ftl_unit_location(f, x, &xd, &xb, &xp) == 0 && xb % bpd == blk % bpd &&
		    (xb / bpd) % dpc == (blk / bpd) % dpc && xb != blk)
			u[n++] = x;
	}
	CHECK(n > 0);
	CHECK_EQ(count_protected(f, u, n, bpd, dpc, blk, &still), 0);
	if (crash) {
		/* later: the checkpoint it asked for lists the band; at once:
		 * recovery finds the pages the parity counts and the media
		 * lacks */
		if (how == KEPT_CUT_LATER)
			let_time_pass(f, d, 300000000ull);
		power_cut(f, d);
	} else {
		CHECK_RC(ftl_close(f));
	}
	f = open_ok(d);
	uint64_t prot = count_protected(f, u, n, bpd, dpc, blk, &still);
	printf("refresh_kept (%s): block %u failed its programs after its stripes' parity: "
	       "%" PRIu64 " units in the band, %" PRIu64 " still there after it, %" PRIu64
	       " of them reported protected\n", hows[how], blk, n, still, prot);
	CHECK(still > 0);
	CHECK_EQ(prot, 0);
	/* GC moves the band's data: everything reads right */
	let_time_pass(f, d, 2000000000ull);
	verify_lost(f, ver, units, NULL);
	CHECK_RC(ftl_close(f));
	free(u);
	free(ver);
	nand_close(d);
}

static void die(void)
{
	die_run(false);
}
static void timed(void)
{
	die_run(true);
}
static void cp_dead_at_open_parity(void)
{
	cp_dead_at_open(1);
}
static void cp_dead_at_open_noparity(void)
{
	cp_dead_at_open(0);
}
static void idle_pad_both(void)
{
	idle_pad(false);
	idle_pad(true);
}
static void write_hole_both(void)
{
	write_hole(false);
	write_hole(true);
	flush_parity_option();
}
static void gc_hole_both(void)
{
	gc_hole(false);
	gc_hole(true);
}
static void refresh_kept_all(void)
{
	refresh_kept(KEPT_CLOSE);
	refresh_kept(KEPT_CUT_AT_ONCE);
	refresh_kept(KEPT_CUT_LATER);
}

static const struct t_part parts[] = {
	{ "format", format_figures },
	{ "pages", pages },
	{ "crc_pages", crc_pages },
	{ "narrow_rows", narrow_rows },
	{ "die", die },
	{ "two_dies", two_dies },
	{ "timed", timed },
	{ "sb_die", sb_die },
	{ "trim_dead", trim_dead },
	{ "sb_dead_at_open", sb_dead_at_open },
	{ "cp_dead_at_open", cp_dead_at_open_parity },
	{ "cp_dead_at_open_noparity", cp_dead_at_open_noparity },
	{ "idle_pad", idle_pad_both },
	{ "write_hole", write_hole_both },
	{ "gc_hole", gc_hole_both },
	{ "ppl_fails", ppl_fails },
	{ "parity_block_fails", parity_block_fails },
	{ "refresh_kept", refresh_kept_all },
};

int main(int argc, char **argv)
{
	ftl_set_logger(NULL, NULL);
	return t_parts(argc, argv, parts, sizeof parts / sizeof parts[0]);
}
