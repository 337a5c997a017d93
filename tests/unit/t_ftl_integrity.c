/*
 * t_ftl_integrity - the FTL never returns wrong data and never reformats
 * silently, whatever the media or the disk under it does:
 *   crc         bytes flipped in stored pages (bit rot ECC did not see):
 *               host reads, read-modify-write and GC answer EIO, count it,
 *               never return the flipped bytes; other units are intact
 *   io_error    the image's filesystem is full: the FTL stops with ENOSPC,
 *               retires nothing, answers at once, closes; a reopen serves
 *               everything flushed
 *   superblock  a damaged superblock with data behind it is -EUCLEAN (a
 *               blank device -ENODATA), and scan + rebuild restore access
 *               to every flushed write, with and without a checkpoint
 *   checkpoint  a damaged checkpoint is reported (info) and the map is
 *               rebuilt from the log; a fresh checkpoint follows
 *   previous checkpoint  the current checkpoint damaged: the previous one
 *               is loaded and the log after it replayed, so units trimmed
 *               between the two read zeros though GC collected the trim
 *               record's block
 *   trim_unreadable  a trim record newer than the checkpoint that GC
 *               cannot read: its block waits for a checkpoint before its
 *               erase, so after a power cut the trimmed units read zeros
 *   pending trim  a trim not in a record when a checkpoint copied the
 *               map: that checkpoint commits only once a record holds it,
 *               so with it damaged at the next power cut the unit still
 *               reads zeros
 *   trim read and keep_seq  GC's read of a trim record in flight when a
 *               commit moves keep_seq past it: the victim's later record
 *               is still re-logged, so its units read zeros after a
 *               fallback to the previous checkpoint
 *   parity      a parity width this version cannot build is refused before
 *               anything is written; the band layout is reported
 *   async sync  on an image file, flushes and checkpoint commits wait for
 *               the simulator's fdatasync thread and all complete
 *   commit order  on an image file, a checkpoint's old blocks are erased
 *               only after a sync that followed the superblock page
 *               naming the new one (the simulator's ops wrapped)
 *   sparse      a checkpoint writes only the l2p pages with a mapped unit;
 *               it loads back after a clean close, a power cut half-way
 *               through one, and a trim that emptied a page
 * Each runs on memory media, untimed and with the timing model (completions
 * later), where it matters.
 */
#include <signal.h>
#include <unistd.h>

#include "ftl/ftl_int.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

/* ---- crc ------------------------------------------------------------------ */

static void t_crc(bool timed)
{
	struct nand_dev *d = dev_new("test-64m", timed);
	format_with(d, 512, 0, 0);
	struct ftl *f = open_ok(d);
	uint64_t units = f->units, seed = 9;
	uint32_t *ver = calloc(units, sizeof *ver);
	for (uint64_t u = 0; u < 200; u++)
		write_unit(f, u, ver[u] = 1);
	CHECK_RC(ftl_flush_sync(f));
	uint32_t ppa7 = f->l2p[7], ppa9 = f->l2p[9];
	CHECK(l2p_is_ppa(ppa7) && l2p_is_ppa(ppa9));
	CHECK_RC(nand_sim_flip_bytes(d, ppa7, 1000, 2));
	CHECK_RC(nand_sim_flip_bytes(d, ppa9, 4095, 1));

	uint8_t b[4096];
	memset(b, 0xEE, sizeof b);
	CHECK_EQ(ftl_read_sync(f, b, 7 * 4096, 4096), -EIO);
	CHECK_EQ(f->st.crc_errors, 1);
	/* a read that covers the bad unit and good ones fails as a whole */
	static uint8_t big[8 * 4096];
	CHECK_EQ(ftl_read_sync(f, big, 4 * 4096, sizeof big), -EIO);
	/* partial reads of the unit (bounce path) fail too */
	CHECK_EQ(ftl_read_sync(f, b, 9 * 4096 + 512, 1024), -EIO);
	check_unit(f, 6, 1);
	check_unit(f, 8, 1);
	/* read-modify-write of a unit whose old content fails its CRC: EIO,
	 * and nothing is written over it */
	uint64_t written = f->st.host_pages_written;
	memset(b, 0x11, 512);
	CHECK_EQ(ftl_write_sync(f, b, 7 * 4096 + 512, 512, 0), -EIO);
	CHECK_EQ(f->st.host_pages_written, written);
	CHECK_EQ(ftl_read_sync(f, b, 7 * 4096, 4096), -EIO);
	/* a whole-unit write replaces it: the unit is good again */
	write_unit(f, 7, ver[7] = 2);
	check_unit(f, 7, 2);

	/* GC meets unit 9's page (its neighbours are rewritten, so its block
	 * empties and becomes a victim): the unit is recorded lost, never
	 * relocated as if it were good */
	for (uint64_t u = 0; u < units; u++)
		if (u != 9)
			write_unit(f, u, ++ver[u]);
	for (uint64_t i = 0; f->st.lost_units == 0; i++) {
		CHECK(i < 20 * units);
		uint64_t u = t_rand(&seed) % units;
		if (u != 9)
			write_unit(f, u, ++ver[u]);
	}
	CHECK_EQ(ftl_read_sync(f, b, 9 * 4096, 4096), -EIO);
	CHECK(f->st.crc_errors >= 3);
	/* lost survives a reopen (it was recorded), the rest is intact */
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	CHECK_EQ(ftl_read_sync(f, b, 9 * 4096, 4096), -EIO);
	for (uint64_t u = 0; u < units; u++)
		if (u != 9)
			check_unit(f, u, ver[u]);
	close_free(f, d, ver);
	printf("ok: crc (%s): flipped bytes read as EIO, counted, lost by GC, never returned\n",
	       timed ? "timed" : "untimed");
}

/* ---- io_error --------------------------------------------------------------- */

static void t_io_error(bool timed)
{
	struct nand_dev *d = dev_new("test-64m", timed);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	uint64_t units = f->units, seed = 3;
	uint32_t *ver = calloc(units, sizeof *ver), *durable = calloc(units, sizeof *durable);
	for (uint64_t u = 0; u < units; u++)
		write_unit(f, u, ver[u] = 1);
	CHECK_RC(ftl_flush_sync(f));
	memcpy(durable, ver, units * sizeof *ver);
	struct nand_sim_faults ft = { .io_error_after = 300 };
	nand_sim_set_faults(d, &ft);
	int rc = 0;
	uint64_t i;
	for (i = 0; i < 100000 && !rc; i++) {
		uint64_t u = t_rand(&seed) % units;
		uint8_t b[4096];
		fill(b, u, ver[u] + 1);
		rc = ftl_write_sync(f, b, u * 4096, 4096, 0);
		if (!rc)
			ver[u]++;
	}
	CHECK_EQ(rc, -ENOSPC);
	struct ftl_info info;
	struct ftl_stats st;
	ftl_get_info(f, &info);
	ftl_get_stats(f, &st);
	CHECK_EQ(info.state, FTL_STATE_FAILED);
	CHECK_EQ(info.error, -ENOSPC);
	CHECK_EQ(st.blocks_bad_grown, 0);
	CHECK_EQ(st.program_failures, 0);
	CHECK_EQ(ftl_flush_sync(f), -ENOSPC);
	uint8_t b[4096];
	CHECK_EQ(ftl_read_sync(f, b, 0, 4096), -ENOSPC);
	CHECK_EQ(ftl_close(f), -ENOSPC);
	/* space freed: a restart serves everything flushed */
	struct nand_sim_faults off = { 0 };
	nand_sim_set_faults(d, &off);
	f = open_ok(d);
	for (uint64_t u = 0; u < units; u++) {
		uint8_t e[4096];
		CHECK_RC(ftl_read_sync(f, b, u * 4096, 4096));
		bool ok = false;
		for (uint32_t v = durable[u]; v <= ver[u] && !ok; v++) {
			fill(e, u, v);
			ok = memcmp(b, e, sizeof b) == 0;
		}
		CHECK(ok);
	}
	ftl_get_stats(f, &st);
	CHECK_EQ(st.blocks_bad_grown, 0);
	write_unit(f, 0, ver[0] + 1);
	CHECK_RC(ftl_flush_sync(f));
	close_free(f, d, ver);
	free(durable);
	printf("ok: io_error (%s): ENOSPC of the image stops the FTL, nothing retired, flushed data "
	       "intact\n", timed ? "timed" : "untimed");
}

/* ---- superblock --------------------------------------------------------------- */

/* Make every programmed page of both superblock blocks invalid. */
static void damage_superblocks(struct nand_dev *d)
{
	uint32_t blocks[2] = { 0, d->geo.blocks_per_die };
	uint32_t ppb = d->geo.pages_per_block;
	int damaged = 0;
	for (int i = 0; i < 2; i++)
		for (uint32_t p = 0; p < ppb; p++)
			if (nand_sim_flip_bytes(d, (uint64_t)blocks[i] * ppb + p, 0, 8) == 0)
				damaged++;
	CHECK(damaged > 0);
}

static void t_superblock(bool with_checkpoint)
{
	char err[512];
	struct nand_dev *d = dev_new("test-64m", false);
	struct ftl_info info;
	/* a blank device is blank */
	CHECK_EQ(ftl_probe(d, &info, err, sizeof err), -ENODATA);
	struct ftl *f = NULL;
	CHECK_EQ(ftl_open(d, NULL, &f, err, sizeof err), -ENODATA);

	format_with(d, 512, 0, 0);
	f = open_ok(d);
	uint64_t units = f->units, format_id = f->format_id;
	for (uint64_t u = 0; u < 300; u++)
		write_unit(f, u, 1);
	if (with_checkpoint) {
		CHECK_RC(ftl_close(f)); /* clean: a checkpoint */
		f = open_ok(d);
	}
	for (uint64_t u = 100; u < 200; u++)
		write_unit(f, u, 2);
	CHECK_RC(ftl_trim_sync(f, 250 * 4096, 10 * 4096, 0));
	CHECK_RC(ftl_flush_sync(f));
	ftl_abandon(f); /* crash */

	damage_superblocks(d);
	CHECK_EQ(ftl_probe(d, &info, err, sizeof err), -EUCLEAN);
	CHECK(strstr(err, "not blank"));
	CHECK_EQ(ftl_open(d, NULL, &f, err, sizeof err), -EUCLEAN);

	struct ftl_scan_report r;
	CHECK_RC(ftl_scan(d, &r, err, sizeof err));
	CHECK(!r.sb_valid);
	CHECK(r.sb_pages_damaged > 0);
	CHECK_EQ(r.format_id, format_id);
	CHECK_EQ(r.cp_found, with_checkpoint);
	if (with_checkpoint) {
		CHECK_EQ(r.cp_units, units);
		CHECK_EQ(r.cp_sector_size, 512);
		CHECK_RC(ftl_rebuild_superblock(d, NULL, err, sizeof err));
	} else {
		/* nothing records the format: the caller must say it */
		CHECK_EQ(ftl_rebuild_superblock(d, NULL, err, sizeof err), -EINVAL);
		CHECK(strstr(err, "capacity") && strstr(err, "sector size"));
		struct ftl_rebuild_params wrong = { .sector_size = 512, .capacity_bytes = 0 };
		CHECK_EQ(ftl_rebuild_superblock(d, &wrong, err, sizeof err), -EINVAL);
		struct ftl_rebuild_params p = { .sector_size = 512, .capacity_bytes = units * 4096 };
		CHECK_RC(ftl_rebuild_superblock(d, &p, err, sizeof err));
	}
	/* a valid superblock is never rebuilt */
	CHECK_EQ(ftl_rebuild_superblock(d, NULL, err, sizeof err), -EEXIST);
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK_EQ(info.format_id, format_id);
	CHECK_EQ(info.sector_size, 512);
	CHECK_EQ(info.units, units);
	for (uint64_t u = 0; u < 300; u++)
		check_unit(f, u, u >= 250 && u < 260 ? 0 : (u >= 100 && u < 200) ? 2 : 1);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	printf("ok: superblock (%s checkpoint): damaged is -EUCLEAN, never blank; rebuilt, all "
	       "flushed data back\n", with_checkpoint ? "with" : "without");
}

/* ---- parity width ------------------------------------------------------------- */

static void t_parity_width(void)
{
	char err[256];
	struct nand_dev *d = dev_new("test-4g", false);
	struct ftl_info info;
	struct ftl_format_params fp = { .sector_size = 4096, .parity_width = 2 };
	CHECK_EQ(ftl_format(d, &fp, err, sizeof err), -ENOTSUP);
	CHECK(strstr(err, "parity width 2"));
	CHECK_EQ(ftl_probe(d, &info, err, sizeof err), -ENODATA); /* nothing written */
	fp.parity_width = 1; /* 7 + 1: the width is kept in the superblock */
	CHECK_RC(ftl_format(d, &fp, err, sizeof err));
	CHECK_RC(ftl_probe(d, &info, err, sizeof err));
	CHECK_EQ(info.parity_width, 1);
	fp.parity_width = 0;
	CHECK_RC(ftl_format(d, &fp, err, sizeof err));
	struct ftl *f = open_ok(d);
	ftl_get_info(f, &info);
	/* test-4g: 8 channels x 2 dies: 2 rows of 8-die bands */
	CHECK_EQ(info.band_rows, 2);
	CHECK_EQ(info.band_width, 8);
	CHECK_EQ(info.parity_width, 0);
	CHECK_RC(ftl_close(f));
	CHECK_RC(ftl_probe(d, &info, err, sizeof err));
	CHECK_EQ(info.band_width, 8);
	nand_close(d);
	printf("ok: parity width: 2 refused before anything is written, 1 and 0 format; bands 2 x 8\n");
}

/* ---- checkpoint ----------------------------------------------------------------- */

static bool cp_idle(struct ftl *f, void *arg)
{
	return !f->cp.requested && f->cp.phase == CP_IDLE;
}

/* no checkpoint but the ones a test asks for */
static const struct ftl_open_params cp_on_request = { .checkpoint_interval = 1ull << 40 };

/* every unit of F written at version 1 (VER[u] = 1), flushed, and a
 * checkpoint of them */
static void write_all_checkpoint(struct ftl *f, uint32_t *ver)
{
	write_all(f, ver, f->units);
	cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
}

static void t_checkpoint(void)
{
	struct nand_dev *d = dev_new("test-64m", false);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	for (uint64_t u = 0; u < 500; u++)
		write_unit(f, u, 1);
	CHECK_RC(ftl_close(f)); /* checkpoint */
	f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	/* one l2p page broken: rebuilt from the checkpoint's own parity */
	uint32_t l2p_block = f->cp.cur_blocks[0];
	for (uint64_t u = 0; u < 50; u++)
		write_unit(f, u, 2);
	CHECK_RC(ftl_flush_sync(f));
	ftl_abandon(f);
	CHECK_RC(nand_sim_flip_bytes(d, (uint64_t)l2p_block * d->geo.pages_per_block, 8, 4));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	for (uint64_t u = 0; u < 500; u++)
		check_unit(f, u, u < 50 ? 2 : 1);
	/* page 0 of every l2p and parity block broken: beyond the parity,
	 * the checkpoint is damaged and the map rebuilt from the log */
	for (uint64_t u = 0; u < 50; u++)
		write_unit(f, u, 3);
	CHECK_RC(ftl_flush_sync(f));
	CHECK_RC(ftl_run_until(f, cp_idle, NULL)); /* cur_blocks: the checkpoint on the media */
	uint32_t ncp = f->cp.cur_nblocks, cpb[64];
	CHECK(ncp >= 2 && ncp <= 64);
	memcpy(cpb, f->cp.cur_blocks, ncp * sizeof *cpb);
	ftl_abandon(f);
	/* (it may be the same checkpoint: other bytes than before, which a
	 * second flip would restore, and different ones per block, which the
	 * XOR would cancel) */
	for (uint32_t i = 0; i < ncp; i++)
		CHECK_RC(nand_sim_flip_bytes(d, (uint64_t)cpb[i] * d->geo.pages_per_block, 64 + 4 * i, 4));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(info.checkpoint_damaged);
	CHECK(strstr(info.notes, "damaged"));
	for (uint64_t u = 0; u < 500; u++)
		check_unit(f, u, u < 50 ? 3 : 1);
	/* a new checkpoint was taken: the next open is clean of it */
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	CHECK_EQ(info.notes[0], 0);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	printf("ok: checkpoint: a broken l2p page rebuilt from its parity; damage beyond it "
	       "reported, map rebuilt from the log, a new one written\n");
}

/* ---- the previous checkpoint -------------------------------------------------- */

/* what the FTL logged that names the previous checkpoint (t_cp_previous) */
static char prev_logged[512];

static void log_previous(void *arg, int level, const char *msg)
{
	if (strstr(msg, "previous"))
		snprintf(prev_logged, sizeof prev_logged, "%s", msg);
	if (getenv("T_VERBOSE"))
		fprintf(stderr, "ftl: %s\n", msg);
}

/* the checkpoint header's checksum made to fail, in both copies (blocks
 * HDR and MIRROR); the pages read fine */
static void damage_cp_header(struct nand_dev *d, uint32_t hdr, uint32_t mirror)
{
	CHECK_RC(nand_sim_flip_bytes(d, (uint64_t)hdr * d->geo.pages_per_block, 40, 4));
	CHECK_RC(nand_sim_flip_bytes(d, (uint64_t)mirror * d->geo.pages_per_block, 40, 4));
}

static bool cp_idle(struct ftl *f, void *arg);
static bool cp_half_written(struct ftl *f, void *arg);

/*
 * A checkpoint P, units trimmed, a checkpoint C; then the band of the
 * trim record is marked for refresh, so GC collects it first, the record
 * older than C (the blocks of the trimmed units' old data, all but one
 * unit in eight still valid, are left).  A power cut, and C's
 * header (and its copy) damaged with a valid CRC elsewhere: the open loads
 * P, says so, and replays the log after it, trim record included (GC keeps
 * those newer than P), so the trimmed units read zeros.  A replay of the
 * whole log with P not kept loses the record and brings their old data
 * back.
 */
static void t_cp_previous(void)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", false, &cp_on_request);
	uint64_t units = f->units, n = 2400, hot = 1000, seed = 41;
	uint32_t *ver = calloc(units, sizeof *ver);
	/* units [n, n + hot) are rewritten below: written last, so the band
	 * the record goes to holds them only, and GC's choice is theirs, not
	 * the old data's */
	for (uint64_t i = 0; i < units; i++) {
		uint64_t u = (n + hot + i) % units;
		write_unit(f, u, ver[u] = 1);
	}
	CHECK_RC(ftl_flush_sync(f));
	cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	uint64_t p_seq = f->cp.cur_seq;
	/* every eighth unit of the first n trimmed: one record */
	for (uint64_t u = 1; u < n; u += 8) {
		CHECK_RC(ftl_trim_sync(f, u * 4096, 4096, 0));
		ver[u] = 0;
	}
	CHECK_RC(ftl_flush_sync(f));
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint32_t rec = UINT32_MAX;
	for (uint64_t pos = r->fill; pos > r->done - (r->done > r->nslots ? r->nslots : r->done); ) {
		struct slot *sl = ring_slot(r, --pos);
		if (sl->type == FTL_PG_TRIM && sl->seq > p_seq)
			rec = sl->ppa;
	}
	CHECK(rec != UINT32_MAX);
	cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	uint64_t c_seq = f->cp.cur_seq;
	CHECK(c_seq > p_seq);
	/* the record's band is marked for refresh: GC collects it first once
	 * it is closed (the mark goes when the band is free again) */
	uint32_t bi = block_band(f, ppa_block(f, rec));
	CHECK_EQ(f->blk[ppa_block(f, rec)].state, BLK_OPEN);
	band_flag_refresh(f, ppa_block(f, rec), NULL);
	CHECK(f->band[bi].flags & BANDF_REFRESH);
	uint64_t w = 0;
	for (; w < 8 * units && (f->band[bi].flags & BANDF_REFRESH); w++) {
		uint64_t u = n + t_rand(&seed) % hot;
		write_unit(f, u, ++ver[u]);
	}
	CHECK(!(f->band[bi].flags & BANDF_REFRESH));
	CHECK_RC(ftl_flush_sync(f));
	CHECK_EQ(f->cp.cur_seq, c_seq); /* no checkpoint since */
	uint32_t hdr = f->cp.cur_hdr_block, mirror = f->cp.cur_mirror;
	CHECK(mirror != FTL_NO_BLOCK);
	ftl_abandon(f);
	damage_cp_header(d, hdr, mirror);
	prev_logged[0] = 0;
	ftl_set_logger(log_previous, NULL);
	f = open_ok(d);
	uint8_t b[4096], z[4096] = { 0 };
	uint64_t back = 0;
	for (uint64_t u = 1; u < n; u += 8)
		back += ftl_read_sync(f, b, u * 4096, 4096) != 0 || memcmp(b, z, sizeof b) != 0;
	if (back) {
		fprintf(stderr, "cp_previous: %" PRIu64 " of %" PRIu64 " trimmed units read old data "
			"or fail after the current checkpoint was damaged\n", back, n / 8);
		exit(1);
	}
	for (uint64_t u = 0; u < units; u++)
		check_unit(f, u, ver[u]);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK(info.checkpoint_damaged);
	CHECK(strstr(info.notes, "previous"));
	CHECK(strstr(prev_logged, "loaded the previous one"));
	ftl_set_logger(quiet_log, NULL);
	/* a new checkpoint follows: the next open is clean of it */
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	for (uint64_t u = 0; u < units; u++)
		check_unit(f, u, ver[u]);
	close_free(f, d, ver);
	printf("ok: previous checkpoint: the current one damaged after GC collected the block of a "
	       "trim record older than it (%" PRIu64 " writes): loaded the previous one, replayed "
	       "the log after it, %" PRIu64 " trimmed units read zeros\n", w, n / 8);
}

/* ---- trim record unreadable during GC ----------------------------------------- */

/*
 * A trim record newer than the checkpoint whose page GC cannot read (every
 * time) cannot be re-logged; erasing its block anyway let a crash replay
 * the older writes of the trimmed units (their old data back).  GC keeps
 * the block until a checkpoint (requested then) holds the trim.  With
 * crash_first the block was open at a power cut: it has no footer, and
 * the unreadable page's spare says nothing (not even that it is a trim).
 */
/* The power goes: what the timed medium has queued is interrupted or
 * never happens; f is freed. */
static void power_cut(struct ftl *f, struct nand_dev *d)
{
	struct nand_sim_faults cut = { .power_cut_after = 1 };
	CHECK_RC(nand_sim_set_faults(d, &cut));
	for (int i = 0; i < 1000000 && nand_sim_powered(d) && f->dev->inflight; i++) {
		ftl_poll(f);
		nand_wait_until(d, ftl_next_deadline(f));
	}
	ftl_abandon(f);
	nand_sim_power_on(d);
}

/* a power cut of F (open on D), its current checkpoint's header damaged in
 * both copies; returns the next open, which must find it damaged */
static struct ftl *cut_cp_damaged(struct ftl *f, struct nand_dev *d)
{
	uint32_t hdr = f->cp.cur_hdr_block, mirror = f->cp.cur_mirror;
	CHECK(mirror != FTL_NO_BLOCK);
	power_cut(f, d);
	damage_cp_header(d, hdr, mirror);
	f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK(info.checkpoint_damaged);
	return f;
}

static void t_trim_unreadable(bool crash_first, bool timed)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", timed, &cp_on_request);
	uint64_t units = f->units, seed = 5, t0 = 1000, tn = 64;
	uint32_t *ver = calloc(units, sizeof *ver);
	write_all_checkpoint(f, ver);
	uint64_t cp0 = f->cp.cur_seq;
	CHECK_RC(ftl_trim_sync(f, t0 * 4096, tn * 4096, 0));
	CHECK_RC(ftl_flush_sync(f));
	for (uint64_t u = t0; u < t0 + tn; u++)
		ver[u] = 0;
	/* the record: the newest trim slot of the user ring */
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint32_t ppa = UINT32_MAX;
	uint64_t seq = 0;
	for (uint64_t pos = r->fill; pos > r->done - (r->done > r->nslots ? r->nslots : r->done); ) {
		struct slot *sl = ring_slot(r, --pos);
		if (sl->type == FTL_PG_TRIM && sl->seq > seq) {
			seq = sl->seq;
			ppa = sl->ppa;
		}
	}
	CHECK(ppa != UINT32_MAX && seq > cp0);
	if (crash_first) {
		power_cut(f, d);
		f = open_with(d, &cp_on_request);
		CHECK_EQ(f->cp.cur_seq, cp0);
	}
	uint64_t ncp0 = f->st.checkpoints; /* of this open */
	CHECK_RC(nand_sim_page_error(d, ppa, NAND_UNCORRECTABLE));
	/* rewrite other units until GC has collected the record's block */
	uint32_t blk = ppa_block(f, ppa);
	bool victim = false;
	uint64_t n = 0;
	for (; n < 20 * units; n++) {
		if (f->blk[blk].state == BLK_VICTIM)
			victim = true;
		else if (victim)
			break;
		uint64_t u = t_rand(&seed) % units;
		if (u >= t0 && u < t0 + tn)
			continue;
		write_unit(f, u, ++ver[u]);
	}
	CHECK(victim && f->blk[blk].state != BLK_VICTIM);
	uint64_t ncp = f->st.checkpoints - ncp0;
	CHECK_RC(ftl_flush_sync(f));
	power_cut(f, d);
	f = open_ok(d);
	for (uint64_t u = 0; u < units; u++)
		check_unit(f, u, ver[u]);
	close_free(f, d, ver);
	printf("ok: trim record unreadable during GC%s (%s): its block collected after %" PRIu64
	       " writes and %" PRIu64 " checkpoint(s); after a power cut the trimmed units read "
	       "zeros\n", crash_first ? " (a block without footer, cut by a crash)" : "",
	       timed ? "timed" : "untimed", n, ncp);
	CHECK(ncp >= 1);
}

/* ---- a trim pending while a checkpoint copies the map --------------------------- */

/*
 * A checkpoint P with a unit mapped; the unit trimmed (not flushed: the
 * trim is pending, in no record) before a checkpoint C copies its l2p
 * page (with during, after C started: timed only); C commits.  A power cut: the open
 * loads C and the unit reads zeros.  Another power cut with C's header
 * (and its copy) damaged: the open loads P and replays the log after it,
 * and the unit must still read zeros, the state the first open served.
 * The bug this guards: C's commit leaves the trim in C only, with no
 * record in the log after P, and the old data come back.
 */
static void t_cp_pending_trim(bool during, bool timed)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", timed, &cp_on_request);
	uint64_t units = f->units, t = units - 5; /* in the last l2p page */
	uint32_t *ver = calloc(units, sizeof *ver);
	write_all_checkpoint(f, ver);
	uint32_t p_hdr = f->cp.cur_hdr_block;
	if (during) {
		cp_request(f, false);
		CHECK_RC(ftl_run_until(f, cp_half_written, NULL));
	}
	CHECK_RC(ftl_trim_sync(f, t * 4096, 4096, 0));
	ver[t] = 0;
	if (!during)
		cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	CHECK(f->cp.cur_hdr_block != p_hdr && f->cp.prev_hdr_block == p_hdr);
	power_cut(f, d);
	f = open_ok(d);
	check_unit(f, t, 0);
	CHECK(f->cp.prev_hdr_block == p_hdr);
	f = cut_cp_damaged(f, d);
	uint8_t b[4096], z[4096] = { 0 };
	CHECK_RC(ftl_read_sync(f, b, t * 4096, 4096));
	if (memcmp(b, z, sizeof b) != 0) {
		fprintf(stderr, "cp_pending_trim%s: unit %" PRIu64 ", trimmed and read as zeros after "
			"a power cut, reads its old data after the next one loaded the previous "
			"checkpoint\n", during ? " (during)" : "", t);
		exit(1);
	}
	for (uint64_t u = 0; u < units; u++)
		check_unit(f, u, ver[u]);
	close_free(f, d, ver);
	printf("ok: trim pending %s a checkpoint copied the map (%s): after a power cut and one "
	       "with that checkpoint damaged, the unit reads zeros\n",
	       during ? "while" : "before", timed ? "timed" : "untimed");
}

/* ---- a trim record's read in flight when a commit moves keep_seq past it ---- */

/*
 * The simulator's ops wrapped to hold back one read (block h_block, page
 * h_page) until the test submits it: a read slower than a checkpoint's
 * commit, at a chosen moment.
 */
static const struct nand_ops *h_real;
static struct nand_ops h_ops;
static uint32_t h_block, h_page;
static struct nand_op *h_held;

static int h_submit(struct nand_dev *d, struct nand_op *op)
{
	if (!h_held && op->type == NAND_OP_READ && op->block == h_block && op->page == h_page) {
		h_held = op;
		return 0;
	}
	return h_real->submit(d, op);
}

/* the newest trim record still in the user ring: its ppa, and its seq */
static uint32_t newest_trim(struct ftl *f, uint64_t *seq)
{
	struct ring *r = &f->stream[STREAM_USER].ring;
	uint32_t ppa = UINT32_MAX;
	*seq = 0;
	for (uint64_t pos = r->fill; pos > r->done - (r->done > r->nslots ? r->nslots : r->done); ) {
		struct slot *sl = ring_slot(r, --pos);
		if (sl->type == FTL_PG_TRIM && sl->seq > *seq) {
			*seq = sl->seq;
			ppa = sl->ppa;
		}
	}
	CHECK(ppa != UINT32_MAX);
	return ppa;
}

static bool block_not_victim(struct ftl *f, void *arg)
{
	return f->blk[*(uint32_t *)arg].state != BLK_VICTIM;
}

/*
 * Block B holds trim record R1 (before checkpoint P1) and, further on, R2
 * (after P1).  Checkpoint C is requested and B's band marked for refresh:
 * GC reads R1 (newer than keep_seq, P0's), and C commits while that read
 * is in flight, moving keep_seq to P1's, past R1 but not R2.  GC must
 * re-log R2's ranges before B is erased.  A power cut with C's header (and
 * its copy) damaged: the open loads P1 and replays the log after it, and
 * the units R2 trimmed (flushed) must read zeros.  The bug this guards:
 * GC skips R1 on its next visit with the read's buffer left, re-logs that
 * buffer (R1's ranges) at R2 and drops R2's, and their old data come back.
 */
static void t_trim_read_keep_seq(void)
{
	struct nand_dev *d;
	struct ftl *f = dev_ftl(&d, "test-64m", false, &cp_on_request);
	uint64_t units = f->units, seed = 17, a0 = 100, b0 = 2000, hot0 = 4000, hot = 1000;
	uint32_t *ver = calloc(units, sizeof *ver);
	write_all_checkpoint(f, ver); /* P0 */
	/* R1: units a0.. trimmed */
	CHECK_RC(ftl_trim_sync(f, a0 * 4096, 16 * 4096, 0));
	CHECK_RC(ftl_flush_sync(f));
	for (uint64_t u = a0; u < a0 + 16; u++)
		ver[u] = 0;
	uint64_t s1, s2;
	uint32_t r1 = newest_trim(f, &s1), b = ppa_block(f, r1);
	cp_request(f, false); /* P1 */
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	uint64_t p1 = f->cp.cur_seq;
	CHECK(f->cp.keep_seq < s1 && s1 <= p1); /* P1 holds R1 */
	/* R2: records of one unit each until one lands in B */
	uint32_t r2 = UINT32_MAX;
	for (uint64_t u = b0; u < b0 + 256 && r2 == UINT32_MAX; u++) {
		CHECK_RC(ftl_trim_sync(f, u * 4096, 4096, 0));
		CHECK_RC(ftl_flush_sync(f));
		ver[u] = 0;
		uint32_t ppa = newest_trim(f, &s2);
		if (ppa_block(f, ppa) == b)
			r2 = ppa;
	}
	CHECK(r2 != UINT32_MAX && s2 > p1);
	/* the read of R1 by GC is held back */
	h_real = d->ops;
	h_ops = *d->ops;
	h_ops.submit = h_submit;
	h_block = b;
	h_page = (uint32_t)(r1 - ppa_make(f, b, 0));
	h_held = NULL;
	d->ops = &h_ops;
	band_flag_refresh(f, b, NULL);
	/* writes until B's band is closed and GC reads R1 */
	for (uint64_t w = 0; !h_held; w++) {
		CHECK(w < 8 * units);
		uint64_t u = hot0 + t_rand(&seed) % hot;
		write_unit(f, u, ++ver[u]);
	}
	CHECK(f->cp.cur_seq == p1 && f->cp.keep_seq < s1);
	cp_request(f, false); /* C */
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	CHECK(f->cp.cur_seq > p1 && f->cp.keep_seq == p1); /* C committed */
	CHECK(f->blk[b].state == BLK_VICTIM);
	CHECK_RC(h_real->submit(d, h_held));
	d->ops = h_real;
	CHECK_RC(ftl_run_until(f, block_not_victim, &b));
	CHECK_RC(ftl_flush_sync(f));
	f = cut_cp_damaged(f, d);
	CHECK_EQ(f->cp.cur_seq, p1);
	uint8_t buf[4096], z[4096] = { 0 };
	uint64_t back = 0, t2 = 0;
	for (uint64_t u = b0; u < b0 + 256; u++) {
		if (ver[u])
			continue;
		t2++;
		back += ftl_read_sync(f, buf, u * 4096, 4096) != 0 || memcmp(buf, z, sizeof buf) != 0;
	}
	if (back) {
		fprintf(stderr, "trim_read_keep_seq: %" PRIu64 " of %" PRIu64 " units trimmed by a "
			"record GC collected read old data or fail after the current checkpoint "
			"was damaged\n", back, t2);
		exit(1);
	}
	for (uint64_t u = 0; u < units; u++)
		check_unit(f, u, ver[u]);
	close_free(f, d, ver);
	printf("ok: trim record read in flight while a commit moved keep_seq past it: the later "
	       "record of its block re-logged, %" PRIu64 " units read zeros after a fallback to "
	       "the previous checkpoint\n", t2);
}

/* ---- sparse checkpoint ------------------------------------------------------- */


static bool cp_half_written(struct ftl *f, void *arg)
{
	return f->cp.phase == CP_WRITE && f->cp.written >= 2 && !f->cp.sealed;
}

static void check_all(struct ftl *f, const uint64_t *us, const uint32_t *ver, int n)
{
	for (int i = 0; i < n; i++)
		check_unit(f, us[i], ver[i]);
	check_unit(f, us[0] + 1000, 0);
}

/*
 * A checkpoint writes only the l2p pages with a mapped unit (a fresh or
 * mostly empty ioDimm writes and loads little): the few units written,
 * trimmed and rewritten here come back after a clean close, after a power
 * cut while such a checkpoint is half written, and after one that follows
 * a trim that emptied an l2p page.
 */
static void t_sparse(bool timed)
{
	struct nand_dev *d = dev_new("test-1g", timed);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	uint64_t per = f->page_size / sizeof(uint32_t);
	uint32_t total = cp_l2p_pages(f);
	CHECK(total > 64);
	/* units in 4 l2p pages: 0, 3 * per, 7 * per + 3 (and + 1), the last */
	uint64_t us[] = { 0, 3 * per, 7 * per + 3, 7 * per + 4, f->units - 1 };
	uint32_t ver[] = { 1, 1, 1, 1, 1 };
	int n = 5;
	for (int i = 0; i < n; i++)
		write_unit(f, us[i], 1);
	uint64_t m0 = f->st.meta_pages_programmed;
	cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	uint64_t meta = f->st.meta_pages_programmed - m0;
	/* 4 l2p pages and their parity (a page per stripe of a group: at
	 * most 4), the header and its copy, the superblock page (two copies) */
	CHECK_EQ(f->cp.written, 4);
	CHECK(meta <= 4 + 4 + 2 * f->cp.hdr_pages + 2);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	check_all(f, us, ver, n);

	/* trim the units of one page (it is left out next time), rewrite one */
	CHECK_RC(ftl_trim_sync(f, us[2] * 4096, 2 * 4096, 0));
	ver[2] = ver[3] = 0;
	write_unit(f, us[1], 2);
	ver[1] = 2;
	CHECK_RC(ftl_flush_sync(f));
	/* a power cut while the next checkpoint is half written */
	cp_request(f, false);
	if (timed) {
		CHECK_RC(ftl_run_until(f, cp_half_written, NULL));
		CHECK(f->dev->inflight > 0);
		/* the next operation is interrupted, every one after fails */
		struct nand_sim_faults cut = { .power_cut_after = 1 };
		nand_sim_set_faults(d, &cut);
		write_unit(f, us[4] - 1, 9); /* not flushed: may be lost */
		ftl_poll(f);
	}
	ftl_abandon(f);
	nand_sim_power_on(d);
	f = open_ok(d);
	write_unit(f, us[4] - 1, 1); /* whatever the cut left, now known */
	check_all(f, us, ver, n);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(!info.checkpoint_damaged);
	CHECK_EQ(f->cp.cur_nblocks > 0, 1);
	check_all(f, us, ver, n);
	/* and the page emptied by the trim was left out of the last one */
	m0 = f->st.meta_pages_programmed;
	cp_request(f, false);
	CHECK_RC(ftl_run_until(f, cp_idle, NULL));
	CHECK_EQ(f->cp.written, 3);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	check_all(f, us, ver, n);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	printf("ok: sparse checkpoint (%s): 4 of %u l2p pages written, %" PRIu64
	       " metadata pages; survives a power cut mid-way and a trim that empties a page\n",
	       timed ? "timed" : "untimed", total, meta);
}

/* ---- asynchronous sync ----------------------------------------------------- */

/* ---- checkpoint on request -------------------------------------------------- */

static bool cp_ticket_done(struct ftl *f, void *arg)
{
	return ftl_checkpoint_poll(f, *(uint64_t *)arg) != 0;
}

/*
 * ftl_checkpoint_request (flashctl checkpoint): answered only once a
 * checkpoint whose snapshot was taken after the request is current, so a
 * request while another is being written waits for the next one, and a
 * power cut right after the answer replays (almost) nothing.
 */
static bool cp_writing(struct ftl *f, void *arg)
{
	return f->cp.phase == CP_WRITE && !f->cp.sealed;
}

static void t_cp_request(bool timed)
{
	struct nand_dev *d = dev_new("test-64m", timed);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	for (uint64_t u = 0; u < 2000; u++)
		write_unit(f, u * 5, 1); /* ~10 l2p pages */
	CHECK_RC(ftl_flush_sync(f));
	uint64_t t = ftl_checkpoint_request(f);
	CHECK(t > 0);
	CHECK_RC(ftl_run_until(f, cp_ticket_done, &t));
	CHECK_EQ(ftl_checkpoint_poll(f, t), 1);
	uint64_t cps = f->st.checkpoints;
	for (uint64_t u = 0; u < 2000; u++)
		write_unit(f, u * 5, 2);
	CHECK_RC(ftl_flush_sync(f));
	if (timed) {
		/* one being written (untimed media write it within one call):
		 * its snapshot predates the request, the next one's does not */
		cp_request(f, false);
		CHECK_RC(ftl_run_until(f, cp_writing, NULL));
		uint64_t writing = f->cp.gen_writing;
		t = ftl_checkpoint_request(f);
		CHECK_EQ(t, writing + 1);
		CHECK_RC(ftl_run_until(f, cp_ticket_done, &t));
		CHECK(f->cp.gen_durable >= writing + 1);
		CHECK(f->st.checkpoints >= cps + 2);
	} else {
		t = ftl_checkpoint_request(f);
		CHECK_RC(ftl_run_until(f, cp_ticket_done, &t));
		CHECK(f->st.checkpoints >= cps + 1);
	}
	CHECK(!f->cp.urgent);
	ftl_abandon(f); /* power cut right after the answer */
	nand_sim_power_on(d);
	f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK(!info.was_clean);
	CHECK(info.recovered_pages < 64);
	for (uint64_t u = 0; u < 2000; u++)
		check_unit(f, u * 5, 2);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	printf("ok: checkpoint on request (%s): waits for one begun after it; %" PRIu64
	       " pages replayed after a power cut\n", timed ? "timed" : "untimed", info.recovered_pages);
}

/* test-64m in a new image file named after PATH (a mkstemp template,
 * filled in), sync on flush (fdatasync), TIMED: the timing model on the
 * real clock; the caller unlinks PATH */
static struct nand_sim_config synced_image(char *path, bool timed)
{
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	return (struct nand_sim_config){ .preset = "test-64m", .path = path, .create = true,
					 .sync_on_flush = true, .timing = timed };
}

/*
 * On an image file with sync on, FLUSH/FUA and a checkpoint's commit wait for
 * an fdatasync that runs on the simulator's thread (nand_sync_start): every
 * flush completes (none hangs or fails "stuck" when the sync ends between a
 * poll and the owner's sleep), a checkpoint commits, and what was flushed
 * reads back after a reopen.  Real clock, timing model on and off.
 */
static void t_async_sync(bool timed)
{
	char path[] = "/tmp/t_ftl_integrity-XXXXXX";
	struct nand_sim_config cfg = synced_image(path, timed);
	struct nand_dev *d = sim_open_ok(&cfg);
	format(d, 0);
	struct ftl *f = open_ok(d);
	for (uint64_t u = 0; u < 300; u++) {
		write_unit(f, u, 1);
		CHECK_RC(ftl_flush_sync(f));
		if (u % 100 == 50) {
			cp_request(f, false);
			CHECK_RC(ftl_run_until(f, cp_idle, NULL));
		}
	}
	CHECK(f->st.checkpoints >= 3);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	cfg.create = false;
	d = sim_open_ok(&cfg);
	f = open_ok(d);
	for (uint64_t u = 0; u < 300; u++)
		check_unit(f, u, 1);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	unlink(path);
	printf("ok: async sync (%s): 300 flushes and 3 checkpoints on an image file, data back "
	       "after a reopen\n", timed ? "timed" : "untimed");
}

/* ---- commit order ------------------------------------------------------ */

/*
 * The simulator's ops, wrapped to watch the order the FTL asks for: the
 * blocks holding checkpoint pages, superblock programs, syncs and erases.
 * A host crash loses image writes not synced, so an erase of the previous
 * checkpoint's block while the superblock that stopped naming it may be
 * lost would leave the surviving superblock naming erased blocks.  (A sync
 * counts once started after the superblock program was submitted: weaker
 * than after its completion, and enough to see a missing one.)
 */
static const struct nand_ops *w_real;
static struct nand_ops w_ops;
static uint8_t *w_cp_block;     /* [blocks]: holds checkpoint pages */
static bool w_sb_unsynced;      /* a superblock page with no sync since */
static bool w_sync_pending;     /* a sync started after it: w_sync_ticket */
static uint64_t w_sync_ticket;
static unsigned w_cp_erases, w_bad_erases, w_sb_programs;

static int w_submit(struct nand_dev *d, struct nand_op *op)
{
	const struct ftl_spare *sp = op->spare;
	if (op->type == NAND_OP_PROGRAM && sp && sp->type == FTL_PG_CKPT)
		w_cp_block[op->block] = 1;
	if (op->type == NAND_OP_PROGRAM && sp && sp->type == FTL_PG_SB) {
		w_sb_unsynced = true;
		w_sync_pending = false;
		w_sb_programs++;
	}
	if (op->type == NAND_OP_ERASE && w_cp_block[op->block]) {
		w_cp_erases++;
		if (w_sb_unsynced)
			w_bad_erases++;
		w_cp_block[op->block] = 0;
	}
	return w_real->submit(d, op);
}

static int w_sync(struct nand_dev *d)
{
	int r = w_real->sync(d);
	if (!r)
		w_sb_unsynced = false;
	return r;
}

static int w_sync_start(struct nand_dev *d, uint64_t *ticket)
{
	int r = w_real->sync_start(d, ticket);
	if (!r && w_sb_unsynced && !w_sync_pending) {
		if (!*ticket)
			w_sb_unsynced = false;
		w_sync_pending = true;
		w_sync_ticket = *ticket;
	}
	return r;
}

static int w_sync_poll(struct nand_dev *d, uint64_t ticket)
{
	int r = w_real->sync_poll(d, ticket);
	if (r == 1 && w_sync_pending && ticket >= w_sync_ticket)
		w_sb_unsynced = w_sync_pending = false;
	return r;
}

static bool eraser_idle(struct ftl *f, void *arg)
{
	(void)arg;
	return !f->dirty.count && f->nerase_free == f->ndies && f->cp.phase == CP_IDLE;
}

static void t_commit_order(bool timed)
{
	char path[] = "/tmp/t_ftl_integrity-XXXXXX";
	struct nand_sim_config cfg = synced_image(path, timed);
	struct nand_dev *d = sim_open_ok(&cfg);
	CHECK(d->ops->sync_start && d->ops->sync_poll);
	format(d, 0);
	w_real = d->ops;
	w_ops = *d->ops;
	w_ops.submit = w_submit;
	w_ops.sync = w_sync;
	w_ops.sync_start = w_sync_start;
	w_ops.sync_poll = w_sync_poll;
	w_cp_block = calloc((size_t)nand_dies(&d->geo) * d->geo.blocks_per_die, 1);
	CHECK(w_cp_block);
	w_cp_erases = w_bad_erases = w_sb_programs = 0;
	w_sb_unsynced = w_sync_pending = false;
	d->ops = &w_ops;
	struct ftl *f = open_ok(d);
	for (uint32_t round = 0; round < 6; round++) {
		for (uint64_t u = 0; u < 2000; u++)
			write_unit(f, (u * 7 + round) % 4000, round + 1);
		cp_request(f, false);
		CHECK_RC(ftl_run_until(f, cp_idle, NULL));
		/* let the eraser take the released blocks */
		CHECK_RC(ftl_run_until(f, eraser_idle, NULL));
	}
	CHECK(f->st.checkpoints >= 6);
	CHECK_RC(ftl_close(f));
	d->ops = w_real;
	nand_close(d);
	if (w_bad_erases)
		fprintf(stderr, "commit order: %u of %u erases of checkpoint blocks came before the "
			"superblock that released them was synced\n", w_bad_erases, w_cp_erases);
	CHECK(w_cp_erases >= 5 && w_sb_programs >= 6);
	CHECK(w_bad_erases == 0);
	free(w_cp_block);
	unlink(path);
	printf("ok: commit order (%s): %u erases of old checkpoint blocks, each after the "
	       "superblock releasing it was synced\n", timed ? "timed" : "untimed", w_cp_erases);
}

int main(void)
{
	watchdog(300);
	ftl_set_logger(quiet_log, NULL);
	t_crc(false);
	t_crc(true);
	t_io_error(false);
	t_io_error(true);
	t_superblock(true);
	t_superblock(false);
	t_checkpoint();
	t_cp_previous();
	t_trim_unreadable(false, false);
	t_trim_unreadable(true, false);
	t_trim_unreadable(false, true);
	t_trim_unreadable(true, true);
	t_cp_pending_trim(false, false);
	t_cp_pending_trim(false, true);
	t_cp_pending_trim(true, true); /* untimed, a checkpoint is written at once */
	t_trim_read_keep_seq();
	t_cp_request(false);
	t_cp_request(true);
	t_parity_width();
	t_sparse(false);
	t_sparse(true);
	t_async_sync(false);
	t_async_sync(true);
	t_commit_order(false);
	t_commit_order(true);
	printf("ok\n");
	return 0;
}
