/*
 * t_ftl_image - crafted images: pages whose checksums are valid but whose
 * sizes, counts, block numbers or sequence numbers are not what the FTL
 * wrote (a hostile image, or a storage layer that returns old pages):
 *   sb_units    a superblock with units = 2^62 + 1 (units * 4096 wraps to
 *               4096, under the raw size): open, read-only too, probe and
 *               peek refuse it (-EINVAL), nothing is written out of bounds
 *   cp_block    a superblock whose checkpoint block is no block (its header
 *               copy intact): the checkpoint is taken for damaged, the
 *               log replayed (nothing marked out of bounds)
 *   cp_list_sb  a checkpoint whose lists name a superblock block as one of
 *               its own (the first l2p block, the header's copy, a
 *               parity block): taken for damaged, so no release after
 *               the next checkpoints erases a superblock copy; both
 *               superblock blocks still hold the newest superblock
 *   seq_wrap    a log page numbered 2^64 - 1 in its spare, or 2^62 + 1 in a
 *               footer entry, a checkpoint numbered 2^64 - 2 (an empty
 *               map, and the superblock naming it): not taken
 *               (FTL_SEQ_LIMIT: damaged, the log replayed), so the
 *               numbering does not wrap and the writes after the open are
 *               not older than the checkpoint
 *   sb_seq      a superblock update numbered 2^64 - 1 is ignored (the
 *               next, numbered 0, would lose to it at every open)
 *   seq_limit   numbers near FTL_SEQ_LIMIT (a data page or the superblock
 *               at 2^62 - 1): read-only; just below the headroom: a
 *               session, then read-only; a session reaching the headroom
 *               refuses writes and keeps what it wrote; a format over it
 *   cp_prev_room  free blocks gone bad while off leave no room for two
 *               checkpoints: the open drops the previous one, writes and
 *               checkpoints go on
 *   rollback    a data page replaced by an older copy of the same unit
 *               (CRC and unit right) in a block written since the open:
 *               EIO while serving and after a crash, not the old data
 *   sweep       every field of tests/fuzz/image_craft.h (superblock,
 *               checkpoint header and lists, footer header and entries,
 *               trim record, spare of each page kind, block table entry)
 *               set to each extreme value, checksums made valid again:
 *               open (read-only, and read-write) refuses cleanly or
 *               serves; a read returns one of the unit's versions or
 *               -EIO; after a read-write open, writes flushed before a
 *               crash read back at the next open (sequence numbers from
 *               the media must not wrap the log's).  A subset of the
 *               values by default (~1,000 opens); T_IMAGE_FULL=1 for all
 *               (~2,500)
 * The sanitizer build (t_ftl_image-san) turns any out-of-bounds access
 * into a failure.  Images live in /dev/shm (or /tmp) and are removed.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftl/ftl_int.h"
#include "hw/nand_sim.h"
#include "tests/fuzz/image_craft.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

/* test-1g scaled down to 16 blocks per die: 64 MiB, rows of 4 dies (3 data
 * columns and parity: partial-parity pages at flushes) */
#define PRESET "test-1g"
#define BLOCKS_PER_DIE 16

static char dir[64], path[96];
static uint8_t *golden;
static size_t image_size;
static uint64_t table_off, data_off, slot;
static struct nand_geometry geo;
static int wfd = -1;
static uint64_t units;
static uint16_t *hist;        /* [units]: bit v: the unit had version v (0: zeros) */
static struct craft_limits lim;
static unsigned ncases, nrefused, nserved;

static void cleanup(void)
{
	char p2[112];
	if (path[0])
		unlink(path);
	if (dir[0]) {
		snprintf(p2, sizeof p2, "%s/rollback", dir); /* t_rollback's, if it failed */
		unlink(p2);
		snprintf(p2, sizeof p2, "%s/room", dir); /* t_cp_prev_room's */
		unlink(p2);
		snprintf(p2, sizeof p2, "%s/unsparse", dir); /* t_cp_unsparse's */
		unlink(p2);
		rmdir(dir);
	}
}

static struct nand_dev *dev_open(bool create, bool readonly)
{
	struct nand_sim_config cfg = { .preset = create ? PRESET : NULL, .path = path,
				       .create = create, .readonly = readonly, .seed = 1,
				       .blocks_per_die = create ? BLOCKS_PER_DIE : 0 };
	return sim_open_ok(&cfg);
}

static void write_v(struct ftl *f, uint64_t u, uint32_t ver)
{
	uint8_t b[4096];
	fill(b, u, ver);
	CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
	hist[u] |= (uint16_t)(1u << ver);
}

static void trim_v(struct ftl *f, uint64_t u, uint64_t n)
{
	CHECK_RC(ftl_trim_sync(f, u * 4096, n * 4096, 0));
	for (uint64_t i = u; i < u + n; i++)
		hist[i] |= 1;
}

/*
 * The golden image (parity width 1: parity and partial-parity pages, the
 * checkpoint's parity and header copy): written and closed (a checkpoint),
 * rewritten in part with a short checkpoint interval (footers, trim
 * records, more checkpoints) and closed, then written a little after the
 * last checkpoint, flushed, and left without a close (a crash: the next
 * open replays the log).
 */
static void golden_make(void)
{
	struct nand_dev *d = dev_open(true, false);
	char err[256];
	struct ftl_format_params fp = { .sector_size = 4096, .parity_width = 1,
					.capacity_bytes = 24u << 20 };
	if (ftl_format(d, &fp, err, sizeof err)) {
		fprintf(stderr, "ftl_format: %s\n", err);
		exit(1);
	}
	struct ftl *f = open_ok(d);
	units = f->units;
	hist = calloc(units, sizeof *hist);
	CHECK(hist);
	for (uint64_t u = 0; u < units; u++)
		hist[u] = 1;
	for (uint64_t u = 0; u < units / 2; u++)
		write_v(f, u, 1);
	trim_v(f, 40, 30);
	CHECK_RC(ftl_close(f));
	struct ftl_open_params op = { .checkpoint_interval = 200 };
	f = open_with(d, &op);
	for (uint64_t i = 0; i < 1200; i++) {
		write_v(f, (i * 7919) % units, 2);
		if (i % 100 == 50) {
			trim_v(f, (i * 31) % (units - 8), 8);
			CHECK_RC(ftl_flush_sync(f));
		}
	}
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	for (uint64_t i = 0; i < 2500; i++) {
		write_v(f, (i * 104729) % units, 3);
		if (i % 200 == 7)
			CHECK_RC(ftl_flush_sync(f)); /* partial-parity pages */
	}
	trim_v(f, 100, 5);
	CHECK_RC(ftl_flush_sync(f));
	lim = (struct craft_limits){ .units = units, .nblocks = f->nblocks, .ppb = f->ppb,
				     .data_pages = f->data_pages, .page_size = f->page_size,
				     .nbands = f->nbands, .row_width = f->row_width };
	ftl_abandon(f);
	nand_close(d);

	int fd = open(path, O_RDONLY);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	image_size = (size_t)st.st_size;
	golden = malloc(image_size);
	CHECK(golden && pread(fd, golden, image_size, 0) == (ssize_t)image_size);
	close(fd);
	/* struct sim_header (hw/nand_sim_int.h): table_off at 96, data_off at 104,
	 * slot_size at 112 */
	memcpy(&table_off, golden + 96, 8);
	memcpy(&data_off, golden + 104, 8);
	memcpy(&slot, golden + 112, 8);
	memcpy(&geo, golden + 16, sizeof geo); /* the header's geometry */
	CHECK_EQ(geo.blocks_per_die, BLOCKS_PER_DIE);
	CHECK_EQ(table_off, 4096);
	CHECK_EQ(slot, geo.page_size + geo.spare_size);
	CHECK_EQ(data_off + nand_pages(&geo) * slot, image_size);
	wfd = open(path, O_RDWR);
	CHECK(wfd >= 0);
}

static const uint8_t *gslot(uint32_t ppa)
{
	return golden + data_off + (uint64_t)ppa * slot;
}

static void gspare(uint32_t ppa, struct ftl_spare *sp)
{
	memcpy(sp, gslot(ppa) + geo.page_size, sizeof *sp);
}

static void put(uint64_t off, size_t len)
{
	CHECK(pwrite(wfd, golden + off, len, (off_t)off) == (ssize_t)len);
}

/* Back to the golden image: the header and block table, and every block
 * whose table entry changed (a program moves its write pointer, an erase
 * its erase count), or that was patched. */
static void restore(const uint32_t *patched, int npatched)
{
	uint32_t nblocks = nand_blocks(&geo);
	uint8_t *t = malloc((size_t)nblocks * 16);
	CHECK(t && pread(wfd, t, (size_t)nblocks * 16, (off_t)table_off) == (ssize_t)nblocks * 16);
	for (uint32_t b = 0; b < nblocks; b++) {
		bool dirty = memcmp(t + (size_t)b * 16, golden + table_off + (size_t)b * 16, 16) != 0;
		for (int i = 0; i < npatched && !dirty; i++)
			dirty = patched[i] / geo.pages_per_block == b;
		if (dirty)
			put(data_off + (uint64_t)b * geo.pages_per_block * slot, geo.pages_per_block * slot);
	}
	free(t);
	put(0, table_off + (uint64_t)nblocks * 16);
}

/* a checkpoint of F, which must succeed */
static void checkpoint_now(struct ftl *f)
{
	uint64_t t = ftl_checkpoint_request(f);
	int r;
	while (!(r = ftl_checkpoint_poll(f, t)))
		ftl_poll(f);
	CHECK_EQ(r, 1);
}

/* ---- what is in the golden image ----------------------------------------- */

static uint64_t cp_seq_now;          /* the current checkpoint's */
static uint32_t sb_pages[8], nsb;    /* the newest superblock update's copies */
static uint32_t cp_pages[2], ncp;    /* the current checkpoint's header page 0, and its copy */
static uint32_t cp_bitmap, cp_nbitmap; /* where its bitmap of l2p pages is in the lists */
static uint32_t cp_words[16], ncpw; /* words of its lists swept: each list's ends */
static uint32_t foot_page = UINT32_MAX, trim_page = UINT32_MAX, trim_ranges;
static uint32_t data_new = UINT32_MAX, data_old = UINT32_MAX, par_page = UINT32_MAX,
		ppl_page = UINT32_MAX, l2p_page = UINT32_MAX;

static void golden_survey(void)
{
	uint64_t total = nand_pages(&geo);
	uint64_t best_sb = 0;
	struct ftl_sb sb = { 0 };
	for (uint32_t ppa = 0; ppa < total; ppa++) {
		struct ftl_spare sp;
		gspare(ppa, &sp);
		if (sp.magic == FTL_SPARE_MAGIC && sp.type == FTL_PG_SB && sp.seq >= best_sb) {
			if (sp.seq > best_sb)
				nsb = 0;
			best_sb = sp.seq;
			sb_pages[nsb++] = ppa;
			memcpy(&sb, gslot(ppa), sizeof sb);
		}
	}
	CHECK(nsb >= 1);
	cp_seq_now = sb.cp_seq;
	cp_pages[ncp++] = sb.cp_block * geo.pages_per_block;
	if (sb.flags & FTL_SB_CP_MIRROR)
		cp_pages[ncp++] = sb.cp_mirror_block * geo.pages_per_block;
	struct ftl_cp_hdr h;
	memcpy(&h, gslot(cp_pages[0]), sizeof h);
	CHECK_EQ(h.cp_seq, cp_seq_now);
	/* the lists: blocks, open, bad, the bitmap, the copy, pblock, gend */
	CHECK(h.nopen && (h.flags & FTL_CP_SPARSE) && (h.flags & FTL_CP_PARITY) && h.ngroups);
	uint32_t ends[] = { 0, h.nblocks - 1, h.nblocks, h.nblocks + h.nopen - 1 };
	uint32_t k = h.nblocks + h.nopen + h.nbad, nbm = (h.l2p_pages + 31) / 32;
	memcpy(cp_words, ends, sizeof ends);
	ncpw = 4;
	if (h.nbad)
		cp_words[ncpw++] = k - 1;
	cp_bitmap = k;
	cp_nbitmap = nbm;
	cp_words[ncpw++] = k;                      /* bitmap */
	cp_words[ncpw++] = k + nbm;                /* the header's copy */
	cp_words[ncpw++] = k + nbm + 1;            /* pblock[0] */
	cp_words[ncpw++] = k + nbm + 1 + h.ngroups; /* gend[0] */
	cp_words[ncpw++] = k + nbm + 2 * h.ngroups; /* gend[last] */
	/* the newest page of these types: where it is kept, and its number */
	uint32_t *newest[FTL_PG_PPL + 1] = { [FTL_PG_FOOTER] = &foot_page, [FTL_PG_TRIM] = &trim_page,
					     [FTL_PG_DATA] = &data_new, [FTL_PG_PARITY] = &par_page,
					     [FTL_PG_PPL] = &ppl_page };
	uint64_t best[FTL_PG_PPL + 1] = { 0 };
	for (uint32_t ppa = 0; ppa < total; ppa++) {
		struct ftl_spare sp;
		gspare(ppa, &sp);
		if (sp.magic != FTL_SPARE_MAGIC || sp.crc != crc32c(0, &sp, offsetof(struct ftl_spare, crc)) ||
		    sp.type > FTL_PG_PPL)
			continue;
		bool newer = sp.seq > cp_seq_now;
		if (sp.type == FTL_PG_FOOTER) {
			/* of a block of data pages (a parity block's lists none) */
			struct ftl_footer_entry e0;
			memcpy(&e0, gslot(ppa) + sizeof(struct ftl_footer_hdr), sizeof e0);
			if (sp.lba != 0 || !newer || e0.lba >= units)
				continue;
		}
		if (sp.type == FTL_PG_DATA && !newer && data_old == UINT32_MAX)
			data_old = ppa;
		if (sp.type == FTL_PG_CKPT && sp.seq == cp_seq_now && sp.lba != 0 &&
		    sp.lba != FTL_CP_PARITY_LBA && sp.lba != FTL_CP_WEAR_LBA && l2p_page == UINT32_MAX)
			l2p_page = ppa;
		if (newest[sp.type] && sp.seq > best[sp.type]) {
			*newest[sp.type] = ppa;
			best[sp.type] = sp.seq;
		}
	}
	CHECK(foot_page != UINT32_MAX && trim_page != UINT32_MAX && data_new != UINT32_MAX &&
	      data_old != UINT32_MAX && par_page != UINT32_MAX && ppl_page != UINT32_MAX &&
	      l2p_page != UINT32_MAX);
	CHECK(best[FTL_PG_TRIM] > cp_seq_now && best[FTL_PG_DATA] > cp_seq_now);
	struct ftl_trim_hdr th;
	memcpy(&th, gslot(trim_page), sizeof th);
	trim_ranges = th.nranges;
	CHECK(trim_ranges >= 1);
}

/* ---- one crafted image ----------------------------------------------------- */

/* a crafted spare that names another unit or type is a write of that page
 * to that unit as far as any check can tell: its reads are not compared */
static bool forged;

static void check_reads(struct ftl *f, const char *what, unsigned stride)
{
	uint8_t b[4096], e[4096];
	struct ftl_info info;
	ftl_get_info(f, &info);
	for (uint64_t u = ncases % stride; u < info.units; u += stride) {
		int rc = ftl_read_sync(f, b, u * 4096, 4096);
		if (rc == -EIO)
			continue;
		if (rc) {
			fprintf(stderr, "%s: unit %" PRIu64 ": read returned %d\n", what, u, rc);
			exit(1);
		}
		bool ok = forged;
		for (uint32_t v = 0; v < 16 && !ok && u < units; v++) {
			if (!(hist[u] & (1u << v)))
				continue;
			if (v)
				fill(e, u, v);
			else
				memset(e, 0, sizeof e);
			ok = memcmp(b, e, sizeof b) == 0;
		}
		if (!ok && u >= units) { /* a crafted larger capacity: never written */
			memset(e, 0, sizeof e);
			ok = memcmp(b, e, sizeof b) == 0;
		}
		if (!ok) {
			fprintf(stderr, "%s: unit %" PRIu64 ": data it never had\n", what, u);
			exit(1);
		}
	}
}

/*
 * Open the image as it is now.  Read-only: refused, or served (reads
 * checked).  Read-write: refused, or served, and then three units written
 * and flushed, a crash, and the next open must serve them.
 */
static void exercise(const char *what, bool rw, bool scan)
{
	char err[256];
	struct ftl *f;
	struct ftl_info info;
	struct nand_dev *d = dev_open(false, !rw);
	ncases++;
	if (scan) {
		struct ftl_scan_report rep;
		ftl_scan(d, &rep, err, sizeof err);
		ftl_probe(d, &info, err, sizeof err);
	}
	/* a small write buffer: ~2,500 opens, each allocating it */
	struct ftl_open_params op = { .readonly = !rw, .write_buffer_slots = 64 };
	int rc = ftl_open(d, &op, &f, err, sizeof err);
	if (getenv("T_VERBOSE"))
		fprintf(stderr, "%s (%s): open %d %s\n", what, rw ? "rw" : "ro", rc, rc ? err : "");
	if (rc) {
		CHECK(rc < 0 && err[0]);
		nrefused++;
		nand_close(d);
		return;
	}
	nserved++;
	check_reads(f, what, 61);
	if (!rw) {
		ftl_close(f);
		nand_close(d);
		return;
	}
	ftl_get_info(f, &info);
	uint64_t w[3] = { 0, info.units / 2, info.units - 1 };
	uint8_t b[4096], e[4096];
	bool wrote = true;
	for (int i = 0; i < 3 && wrote; i++) {
		fill(b, w[i], 9);
		wrote = ftl_write_sync(f, b, w[i] * 4096, 4096, 0) == 0;
	}
	wrote = wrote && ftl_flush_sync(f) == 0;
	ftl_abandon(f);
	if (!wrote) {
		/* the FTL failed (a crafted image may make it): nothing was
		 * acknowledged as durable */
		nand_close(d);
		return;
	}
	op.readonly = false;
	if (ftl_open(d, &op, &f, err, sizeof err)) {
		fprintf(stderr, "%s: flushed writes, a crash, and the next open fails: %s\n", what, err);
		exit(1);
	}
	for (int i = 0; i < 3; i++) {
		fill(e, w[i], 9);
		int r = ftl_read_sync(f, b, w[i] * 4096, 4096);
		if (r || memcmp(b, e, sizeof b)) {
			fprintf(stderr, "%s: unit %" PRIu64 " written and flushed before a crash: %s\n",
				what, w[i], r ? "read fails" : "reads older data");
			exit(1);
		}
	}
	ftl_close(f);
	nand_close(d);
}

/* Set field fd (element index) of the pages to v, make their checksums
 * valid, run the image read-only and read-write. */
/* Set field fd (element index) of the pages (or of their blocks' table
 * entries) in the image to v, and make their checksums valid. */
static void patch(const struct craft_field *fd, const uint32_t *ppas, int n, uint32_t index,
		  uint64_t v)
{
	uint8_t *s = malloc(slot);
	CHECK(s);
	for (int i = 0; i < n; i++) {
		if (fd->kind == CK_TABLE) {
			uint8_t e[16];
			uint32_t b = ppas[i] / geo.pages_per_block;
			memcpy(e, golden + table_off + (size_t)b * 16, 16);
			craft_put(e + fd->off, fd->width, v);
			craft_fix_table(e);
			CHECK(pwrite(wfd, e, 16, (off_t)(table_off + (uint64_t)b * 16)) == 16);
			continue;
		}
		off_t at = (off_t)(data_off + (uint64_t)ppas[i] * slot);
		CHECK(pread(wfd, s, slot, at) == (ssize_t)slot);
		craft_put(s + craft_offset(fd, index, geo.page_size), fd->width, v);
		craft_fix_slot(s, gslot(ppas[i]), geo.page_size);
		CHECK(pwrite(wfd, s, slot, at) == (ssize_t)slot);
	}
	free(s);
}

/* Patch as above, run the image read-only (and read-write), restore. */
static void craft_case(const struct craft_field *fd, const uint32_t *ppas, int n, uint32_t index,
		       uint64_t v, bool rw)
{
	char what[160];
	snprintf(what, sizeof what, "%s[%u] of page %u = %#" PRIx64, fd->name, index, ppas[0], v);
	forged = fd->kind == CK_SPARE && (fd->off == offsetof(struct ftl_spare, lba) ||
					  fd->off == offsetof(struct ftl_spare, type));
	patch(fd, ppas, n, index, v);
	/* scan and probe read superblocks, checkpoint headers, page 0s */
	bool scan = fd->kind == CK_SB || fd->kind == CK_CP_HDR || fd->kind == CK_CP_LIST ||
		    fd->kind == CK_TABLE;
	exercise(what, false, scan);
	if (rw)
		exercise(what, true, false);
	restore(ppas, n);
}

/*
 * The values of craft_value each field is set to: all of them with
 * T_IMAGE_FULL=1 in the environment (~2,500 opens, ~40 s), else those
 * that found something before: 0, 1, the type's max, 2^32, 2^62 + 1, one
 * more and one less than stored, units and one more, the block count and
 * one less, every column, 2^62 - 1 and 2^62 - 2^40 - 1 (~1,000 opens).  A
 * read-write run costs two opens and a restore: for 0, max, 2^62 + 1, one
 * more, 2^62 - 1 and 2^62 - 2^40 - 1 only.
 */
static bool full;

static bool ro_value(unsigned k)
{
	return full || k == 0 || k == 1 || k == 2 || k == 5 || k == 7 || k == 9 || k == 10 ||
	       k == 11 || k == 12 || k == 15 || k == 16 || k == 21 || k == 24 || k == 26;
}

static bool rw_value(unsigned k)
{
	return k == 0 || k == 2 || k == 7 || k == 9 || k == 24 || k == 26 ||
	       (full && (k == 5 || k == 13 || k == 15 || k == 17 || k == 25));
}

static void sweep_field(const struct craft_field *fd, const uint32_t *ppas, int n, uint32_t index)
{
	uint64_t seen[CRAFT_NVALUES];
	unsigned nseen = 0;
	uint64_t orig;
	if (fd->kind == CK_TABLE)
		orig = craft_get(golden + table_off + (size_t)(ppas[0] / geo.pages_per_block) * 16 + fd->off,
				 fd->width);
	else
		orig = craft_get(gslot(ppas[0]) + craft_offset(fd, index, geo.page_size), fd->width);
	for (unsigned k = 0; k < CRAFT_NVALUES; k++) {
		if (!ro_value(k))
			continue;
		uint64_t v = craft_value(k, orig, fd->width, &lim);
		bool dup = v == orig;
		for (unsigned i = 0; i < nseen && !dup; i++)
			dup = seen[i] == v;
		if (dup)
			continue;
		seen[nseen++] = v;
		craft_case(fd, ppas, n, index, v, rw_value(k));
	}
}

static void t_sweep(void)
{
	for (size_t i = 0; i < CRAFT_NFIELDS; i++) {
		const struct craft_field *fd = &craft_fields[i];
		switch (fd->kind) {
		case CK_SB:
			sweep_field(fd, sb_pages, (int)nsb, 0);
			break;
		case CK_CP_HDR:
			sweep_field(fd, cp_pages, (int)ncp, 0);
			break;
		case CK_CP_LIST:
			for (uint32_t w = 0; w < ncpw; w++)
				sweep_field(fd, cp_pages, (int)ncp, cp_words[w]);
			break;
		case CK_FOOT_HDR:
		case CK_FOOT_ENTRY: /* the first entry and the last */
			sweep_field(fd, &foot_page, 1, 0);
			if (fd->kind == CK_FOOT_ENTRY)
				sweep_field(fd, &foot_page, 1, lim.data_pages - 1);
			break;
		case CK_TRIM_HDR:
		case CK_TRIM_RANGE: /* the first range and the last */
			sweep_field(fd, &trim_page, 1, 0);
			if (fd->kind == CK_TRIM_RANGE && trim_ranges > 1)
				sweep_field(fd, &trim_page, 1, trim_ranges - 1);
			break;
		case CK_SPARE: {
			uint32_t pages[] = { data_new, data_old, par_page, ppl_page, l2p_page, trim_page };
			for (size_t k = 0; k < sizeof pages / sizeof pages[0]; k++)
				sweep_field(fd, &pages[k], 1, 0);
			break;
		}
		case CK_TABLE:
			sweep_field(fd, &data_new, 1, 0);
			sweep_field(fd, &sb_pages[0], 1, 0);
			break;
		}
	}
	printf("ok: sweep: %u crafted opens (%u refused, %u served: reads right or EIO, "
	       "flushed writes back after a crash)\n", ncases, nrefused, nserved);
}

/* ---- a checkpoint pointer that is no block -------------------------------- */

static const struct craft_field *field(const char *name)
{
	for (size_t i = 0; i < CRAFT_NFIELDS; i++)
		if (!strcmp(craft_fields[i].name, name))
			return &craft_fields[i];
	fprintf(stderr, "no field %s\n", name);
	exit(1);
}

static void t_cp_block(void)
{
	craft_case(field("ftl_sb.cp_block"), sb_pages, (int)nsb, 0, lim.nblocks, true);
	printf("ok: cp_block: a superblock naming block %u (of %u) for its checkpoint: the "
	       "checkpoint taken for damaged, the log replayed, data right\n", lim.nblocks,
	       lim.nblocks);
}

/* ---- a checkpoint that lists a superblock block as its own ---------------- */

/* blocks of the image holding the newest superblock page (the last update
 * programs a copy into each superblock block that works) */
static unsigned sb_blocks_newest(void)
{
	uint32_t nblocks = nand_blocks(&geo);
	uint8_t *s = malloc(slot);
	uint64_t *best = calloc(nblocks, sizeof *best), newest = 0;
	CHECK(s && best);
	for (uint32_t b = 0; b < nblocks; b++) {
		for (uint32_t p = 0; p < geo.pages_per_block; p++) {
			uint64_t at = data_off + ((uint64_t)b * geo.pages_per_block + p) * slot;
			CHECK(pread(wfd, s, slot, (off_t)at) == (ssize_t)slot);
			struct ftl_spare sp;
			memcpy(&sp, s + geo.page_size, sizeof sp);
			if (sp.magic == FTL_SPARE_MAGIC && sp.type == FTL_PG_SB && sp.seq > best[b])
				best[b] = sp.seq;
		}
		if (best[b] > newest)
			newest = best[b];
	}
	unsigned n = 0;
	for (uint32_t b = 0; b < nblocks; b++)
		n += newest && best[b] == newest;
	free(best);
	free(s);
	return n;
}

static void t_cp_list_sb(void)
{
	uint32_t sbb[2] = { sb_pages[0] / geo.pages_per_block,
			    (nsb > 1 ? sb_pages[1] : sb_pages[0]) / geo.pages_per_block };
	/* the first l2p block, the header's copy, the first parity block */
	uint32_t words[] = { 0, cp_words[5], cp_words[6] };
	for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
		for (int k = 0; k < 2; k++) {
			char err[256];
			patch(field("cp_list.word"), cp_pages, (int)ncp, words[w], sbb[k]);
			struct nand_dev *d = dev_open(false, false);
			struct ftl_open_params op = { .write_buffer_slots = 64 };
			struct ftl *f;
			CHECK_RC(ftl_open(d, &op, &f, err, sizeof err));
			/* two checkpoints: the crafted one (current or previous)
			 * is released by the second at the latest */
			for (int i = 0; i < 2; i++) {
				uint8_t b[4096];
				fill(b, (uint64_t)i, 11);
				CHECK_RC(ftl_write_sync(f, b, (uint64_t)i * 4096, 4096, 0));
				checkpoint_now(f);
			}
			CHECK_RC(ftl_close(f));
			nand_close(d);
			/* the superblock the last commit wrote lives in both blocks */
			d = dev_open(false, true);
			struct ftl_info info;
			CHECK_RC(ftl_probe(d, &info, err, sizeof err));
			nand_close(d);
			unsigned n = sb_blocks_newest();
			if (n != 2) {
				fprintf(stderr, "cp_list_sb: list word %u = superblock block %u: after two "
					"checkpoints the newest superblock is in %u block(s), not 2\n",
					words[w], sbb[k], n);
				exit(1);
			}
			restore(cp_pages, (int)ncp);
			uint32_t all[] = { sbb[0] * geo.pages_per_block, sbb[1] * geo.pages_per_block };
			restore(all, 2);
		}
	}
	printf("ok: cp_list_sb: a checkpoint listing a superblock block as its own is taken for "
	       "damaged; after two more checkpoints both superblock blocks hold the superblock\n");
}

/* ---- a sequence number that wraps the log's -------------------------------- */

static void t_seq_wrap(void)
{
	craft_case(field("ftl_spare.seq"), &data_new, 1, 0, UINT64_MAX, true);
	craft_case(field("ftl_footer_entry.seq"), &foot_page, 1, 0, (1ull << 62) + 1, true);
	/* a checkpoint numbered 2^64 - 2, as the superblock naming it says,
	 * with an empty map (no l2p page, whose spare would carry the number) */
	patch(field("ftl_sb.cp_seq"), sb_pages, (int)nsb, 0, UINT64_MAX - 1);
	patch(field("ftl_cp_hdr.l2p_written"), cp_pages, (int)ncp, 0, 0);
	for (uint32_t w = 0; w < cp_nbitmap; w++)
		patch(field("cp_list.word"), cp_pages, (int)ncp, cp_bitmap + w, 0);
	craft_case(field("ftl_cp_hdr.cp_seq"), cp_pages, (int)ncp, 0, UINT64_MAX - 1, true);
	restore(sb_pages, (int)nsb);
	printf("ok: seq_wrap: log pages numbered 2^64 - 1 (spare) and 2^62 + 1 (footer entry), "
	       "a checkpoint 2^64 - 2: not taken; writes flushed after the open read back after "
	       "a crash\n");
}

/*
 * The session the superblock tests run on a patched image: version 4 of
 * units 0-2 written through F (open on D), a clean close, and an open that
 * must find it clean with its checkpoint whole (WHAT names the test in the
 * message); returns that FTL.  clean_session_end closes both and restores
 * the image and hist[].
 */
static struct ftl *clean_session(struct nand_dev *d, struct ftl *f, const char *what)
{
	struct ftl_info info;
	for (uint64_t u = 0; u < 3; u++)
		write_v(f, u, 4);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	if (!info.was_clean || info.checkpoint_damaged) {
		fprintf(stderr, "%s: after a clean close the open finds it %s%s\n", what,
			info.was_clean ? "clean" : "not clean",
			info.checkpoint_damaged ? ", its checkpoint damaged" : "");
		exit(1);
	}
	return f;
}

static void clean_session_end(struct nand_dev *d, struct ftl *f)
{
	CHECK_RC(ftl_close(f));
	nand_close(d);
	restore(sb_pages, (int)nsb);
	for (uint64_t u = 0; u < 3; u++)
		hist[u] &= (uint16_t)~(1u << 4);
}

/*
 * The newest superblock update numbered 2^64 - 1: the next update (2^64
 * wraps to 0) would lose to it at every open after, and the open would
 * take the checkpoint it names and its clean flag.  Ignored: the update
 * before it counts, and after a clean close the next open finds it clean.
 */
static void t_sb_seq(void)
{
	patch(field("ftl_sb.sb_seq"), sb_pages, (int)nsb, 0, UINT64_MAX);
	struct nand_dev *d = dev_open(false, false);
	struct ftl *f = clean_session(d, open_ok(d), "sb_seq");
	check_reads(f, "sb_seq", 1);
	clean_session_end(d, f);
	printf("ok: sb_seq: a superblock update numbered 2^64 - 1 ignored; clean after a clean "
	       "close\n");
}

/* ---- sequence numbers near their limit ------------------------------------ */

static void expect_state(struct ftl *f, enum ftl_state want, const char *what)
{
	struct ftl_info info;
	ftl_get_info(f, &info);
	if (info.state != want) {
		fprintf(stderr, "seq_limit: %s: state %d, not %d\n", what, info.state, want);
		exit(1);
	}
}

/* A write to unit u must be refused with -EROFS. */
static void expect_erofs(struct ftl *f, uint64_t u, const char *what)
{
	uint8_t b[4096];
	fill(b, u, 5);
	int rc = ftl_write_sync(f, b, u * 4096, 4096, 0);
	if (rc != -EROFS) {
		fprintf(stderr, "seq_limit: %s: a write returned %d, not -EROFS (%d)\n", what, rc,
			-EROFS);
		exit(1);
	}
}

/*
 * Every number the FTL writes must be taken at the next open (media.h,
 * FTL_SEQ_HEADROOM): an image numbered near FTL_SEQ_LIMIT opens read-only
 * (a session writing on would number pages 2^62 and up, refused at the next
 * open: flushed writes lost, the superblock's updates ignored); one just
 * below the headroom writes, closes clean and reopens; a session reaching
 * the headroom refuses host writes, and what it wrote reads back; a format
 * over a superblock numbered 2^62 - 1 leaves a superblock the next open
 * takes.
 */
static void t_seq_limit(void)
{
	const uint64_t lim62 = FTL_SEQ_LIMIT, near = FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM;
	struct nand_dev *d;
	struct ftl *f;
	struct ftl_info info;
	char err[256];

	/* a data page numbered 2^62 - 1, and the superblock: read-only */
	const struct {
		const char *name;
		const uint32_t *pages;
		int n;
	} at[] = { { "ftl_spare.seq", &data_new, 1 }, { "ftl_sb.sb_seq", sb_pages, (int)nsb } };
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
		patch(field(at[i].name), at[i].pages, at[i].n, 0, lim62 - 1);
		d = dev_open(false, false);
		f = open_ok(d);
		expect_state(f, FTL_STATE_READONLY, at[i].name);
		expect_erofs(f, 1, at[i].name);
		check_reads(f, at[i].name, 1);
		CHECK_RC(ftl_close(f));
		nand_close(d);
		restore(at[i].pages, at[i].n);
	}

	/* the superblock just below the headroom: writes, a clean close, and
	 * the next open finds it clean (its updates were numbered near - 1
	 * and up, all taken) and read-only */
	patch(field("ftl_sb.sb_seq"), sb_pages, (int)nsb, 0, near - 2);
	d = dev_open(false, false);
	f = open_ok(d);
	expect_state(f, FTL_STATE_ONLINE, "superblock 2^62 - 2^40 - 2");
	f = clean_session(d, f, "seq_limit");
	expect_state(f, FTL_STATE_READONLY, "superblock past 2^62 - 2^40 after a session");
	check_reads(f, "seq_limit", 1);
	clean_session_end(d, f);

	/* a session that reaches the headroom: the write that took the number
	 * is kept, the next ones are refused; the next open reads it */
	d = dev_open(false, false);
	f = open_ok(d);
	f->next_seq = FTL_SEQ_LIMIT - FTL_SEQ_HEADROOM / 2;
	write_v(f, 7, 4);
	CHECK_RC(ftl_flush_sync(f));
	expect_erofs(f, 8, "session at the headroom");
	expect_state(f, FTL_STATE_READONLY, "session at the headroom");
	ftl_abandon(f);
	f = open_ok(d);
	expect_state(f, FTL_STATE_READONLY, "after a session at the headroom");
	check_reads(f, "seq_limit session", 1);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	restore(sb_pages, (int)nsb);
	hist[7] &= (uint16_t)~(1u << 4);

	/* a format over a superblock numbered 2^62 - 1, then an open */
	patch(field("ftl_sb.sb_seq"), sb_pages, (int)nsb, 0, lim62 - 1);
	d = dev_open(false, false);
	struct ftl_format_params fp = { .sector_size = 4096, .parity_width = 1,
					.capacity_bytes = 24u << 20 };
	CHECK_RC(ftl_format(d, &fp, err, sizeof err));
	f = open_ok(d);
	expect_state(f, FTL_STATE_ONLINE, "format over a superblock numbered 2^62 - 1");
	write_v(f, 0, 5);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(info.was_clean);
	ftl_close(f);
	nand_close(d);
	restore(sb_pages, (int)nsb);
	hist[0] &= (uint16_t)~(1u << 5);
	printf("ok: seq_limit: numbered 2^62 - 1 (a data page, the superblock): read-only; "
	       "2^62 - 2^40 - 2: a clean session, then read-only; a session at the headroom "
	       "refuses writes and keeps what it wrote; a format over 2^62 - 1 opens\n");
}

/* ---- a previous checkpoint the spare blocks no longer hold ---------------- */

/* units 0 to N - 1 written at version VER through F (open on D), two
 * checkpoints, a clean close and an open again, returned */
static struct ftl *write_two_checkpoints(struct nand_dev *d, struct ftl *f, uint64_t n,
					  uint32_t ver)
{
	for (uint64_t u = 0; u < n; u++)
		write_unit(f, u, ver);
	checkpoint_now(f);
	checkpoint_now(f);
	CHECK_RC(ftl_close(f));
	return open_ok(d);
}

/*
 * A device that keeps two checkpoints (test-64m).  Free blocks marked bad
 * before the next open (factory marks found, as a card whose blocks went
 * bad while it was off shows them) leave the spare blocks one short of a
 * second checkpoint: the open must not keep the previous one
 * (cp_open_room), or the session's first checkpoint holds a third
 * checkpoint's blocks below the floor the reserves count on.  The device
 * then writes, checkpoints and reopens with its data.
 */
static void t_cp_prev_room(void)
{
	char p2[112];
	snprintf(p2, sizeof p2, "%s/room", dir);
	struct nand_sim_config cfg = { .preset = "test-64m", .path = p2, .create = true, .seed = 1 };
	struct nand_dev *d = sim_open_ok(&cfg);
	format(d, 0);
	struct ftl *f = write_two_checkpoints(d, open_ok(d), 64, 1);
	if (f->cp.prev_hdr_block == FTL_NO_BLOCK) {
		fprintf(stderr, "cp_prev_room: test-64m keeps no previous checkpoint\n");
		exit(1);
	}
	uint32_t usable = f->nusable - f->ndoomed, room = f->min_usable + f->cp_reserve;
	CHECK(usable >= room && f->cp_reserve >= 2);
	uint32_t k = usable - room + 1, nmarked = 0;
	uint32_t *blocks = calloc(k, sizeof *blocks);
	CHECK(blocks);
	for (uint32_t blk = 0; blk < f->nblocks && nmarked < k; blk++)
		if (f->blk[blk].state == BLK_FREE && !blk_is_sb(f, blk))
			blocks[nmarked++] = blk;
	CHECK_EQ(nmarked, k);
	ftl_abandon(f);
	nand_close(d);
	int fd = open(p2, O_RDWR);
	CHECK(fd >= 0);
	uint64_t toff;
	CHECK(pread(fd, &toff, 8, 96) == 8);
	for (uint32_t i = 0; i < k; i++) {
		uint8_t t[16];
		CHECK(pread(fd, t, 16, (off_t)(toff + (uint64_t)blocks[i] * 16)) == 16);
		t[4] |= 1; /* SB_FACTORY_BAD (hw/nand_sim_int.h) */
		craft_fix_table(t);
		CHECK(pwrite(fd, t, 16, (off_t)(toff + (uint64_t)blocks[i] * 16)) == 16);
	}
	close(fd);
	free(blocks);
	cfg.create = false;
	cfg.preset = NULL;
	d = sim_open_ok(&cfg);
	f = open_ok(d);
	if (f->cp.prev_hdr_block != FTL_NO_BLOCK) {
		fprintf(stderr, "cp_prev_room: %u usable blocks, %u needed for a second checkpoint: "
			"the previous one (block %u) still kept\n", f->nusable - f->ndoomed,
			f->min_usable + f->cp_reserve, f->cp.prev_hdr_block);
		exit(1);
	}
	/* a crash at once: the superblock of that open names no previous one */
	ftl_abandon(f);
	f = open_ok(d);
	CHECK(f->cp.prev_hdr_block == FTL_NO_BLOCK);
	f = write_two_checkpoints(d, f, 32, 2);
	for (uint64_t u = 0; u < 64; u++)
		check_unit(f, u, u < 32 ? 2 : 1);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	unlink(p2);
	printf("ok: cp_prev_room: %u free blocks gone bad while off: the previous checkpoint "
	       "not kept; writes, two checkpoints, data back after a reopen\n", k);
}

/* ---- a page rolled back to an older copy ---------------------------------- */

static void copy_slot(int fd, uint64_t from, uint64_t to)
{
	uint8_t *s = malloc(slot);
	CHECK(s);
	CHECK(pread(fd, s, slot, (off_t)(data_off + from * slot)) == (ssize_t)slot);
	CHECK(pwrite(fd, s, slot, (off_t)(data_off + to * slot)) == (ssize_t)slot);
	free(s);
}

static uint64_t unit_ppa(struct ftl *f, uint64_t u)
{
	uint32_t die, b, p;
	CHECK_RC(ftl_unit_location(f, u, &die, &b, &p));
	return (uint64_t)b * f->ppb + p;
}

/*
 * The storage returns an older copy of a page: unit 5's first version
 * copied over the page of its second (a lost write of the page, an image
 * file put back in part), in a block written after the first version.
 * Its spare names unit 5 and its CRC holds: the block's oldest sequence
 * number tells it is not the page the FTL wrote there.  The read fails,
 * while serving and after a crash (recovery reads the block's footer).
 * Detected only in blocks written since the open, or since the checkpoint
 * before it and full (doc/on-media-layout.md, rolled-back pages).  Image
 * without parity: with parity the page is rebuilt from its stripe.
 */
static void t_rollback(uint32_t parity)
{
	char p2[112];
	snprintf(p2, sizeof p2, "%s/rollback", dir);
	struct nand_sim_config cfg = { .preset = "test-64m", .path = p2, .create = true, .seed = 1 };
	struct nand_dev *d = sim_open_ok(&cfg);
	format_with(d, 4096, 0, parity);
	/* no checkpoint: the blocks stay newer than the last one */
	struct ftl_open_params op = { .checkpoint_interval = 1u << 30 };
	struct ftl *f = open_with(d, &op);
	int fd = open(p2, O_RDWR);
	CHECK(fd >= 0);
	uint64_t doff, dslot;
	CHECK(pread(fd, &doff, 8, 104) == 8 && pread(fd, &dslot, 8, 112) == 8);
	CHECK_EQ(dslot, slot); /* the same page and spare sizes as the golden image */
	uint64_t save_off = data_off;
	data_off = doff;

	uint8_t b[4096], e[4096];
	fill(e, 5, 1);
	CHECK_RC(ftl_write_sync(f, e, 5 * 4096, 4096, 0));
	CHECK_RC(ftl_flush_sync(f));
	uint64_t old = unit_ppa(f, 5);
	/* other units through every band the first version's may share */
	for (uint64_t u = 100; u < 3100; u++) {
		fill(b, u, 1);
		CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
	}
	fill(e, 5, 2);
	CHECK_RC(ftl_write_sync(f, e, 5 * 4096, 4096, 0));
	/* and more, so that its block is full and has its footer */
	for (uint64_t u = 3100; u < 6100; u++) {
		fill(b, u, 1);
		CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
	}
	CHECK_RC(ftl_flush_sync(f));
	uint64_t cur = unit_ppa(f, 5);
	CHECK(f->blk_min_seq[cur / f->ppb] != UINT64_MAX && cur / f->ppb != old / f->ppb);
	CHECK(f->blk[cur / f->ppb].state == BLK_CLOSED);

	copy_slot(fd, old, cur);
	uint64_t errs = f->st.read_errors_uncorrectable;
	/* without parity EIO; with parity the page rebuilt from its stripe */
	for (int pass = 0; pass < 2; pass++) {
		int rc = ftl_read_sync(f, b, 5 * 4096, 4096);
		if (rc == 0 && memcmp(b, e, sizeof b)) {
			fprintf(stderr, "rollback%s: unit 5 reads its older version%s\n",
				parity ? " (parity)" : "", pass ? " after a crash" : "");
			exit(1);
		}
		CHECK_EQ(rc, parity ? 0 : -EIO);
		if (!pass)
			CHECK(f->st.read_errors_uncorrectable > errs);
		if (!pass && parity)
			CHECK(f->st.parity_rebuilds > 0);
		if (pass)
			break;
		/* after a crash: recovery reads the block's footer */
		ftl_abandon(f);
		f = open_with(d, &op);
	}
	fill(e, 100, 1);
	CHECK_RC(ftl_read_sync(f, b, 100 * 4096, 4096));
	CHECK(!memcmp(b, e, sizeof b));
	CHECK_RC(ftl_close(f));
	nand_close(d);
	close(fd);
	unlink(p2);
	data_off = save_off;
	printf("ok: rollback (%s): a page replaced by an older copy of its unit reads %s, while "
	       "serving and after a crash\n", parity ? "parity" : "no parity",
	       parity ? "right (rebuilt from its stripe)" : "EIO");
}

/* ---- a checkpoint without the bitmap, with a refresh list ---------------- */

/*
 * A checkpoint header without FTL_CP_SPARSE (every l2p page, no bitmap of
 * written ones: flashd writes sparse ones only) that marks a band for
 * refresh (FTL_CP_REFRESH): the refresh list follows the block lists, where
 * the header's check finds it, and the open refreshes that band and no
 * other (the band of the block open at the checkpoint: GC takes no open
 * band, so the mark is in the header).
 * Crafted from a sparse checkpoint whose every l2p page was written (so the
 * same pages on the media): the flag cleared, l2p_written 0, the bitmap's
 * words taken out, the checksums valid.  Rows of one die (test-16m): a
 * checkpoint with parity (rows of two or more) must be sparse.
 */
static void t_cp_unsparse(void)
{
	char p2[112];
	snprintf(p2, sizeof p2, "%s/unsparse", dir);
	struct nand_sim_config cfg = { .preset = "test-16m", .path = p2, .create = true, .seed = 1 };
	struct nand_dev *d = sim_open_ok(&cfg);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	CHECK_EQ(f->row_width, 1);
	/* every unit once: every l2p page written */
	uint64_t n = f->units;
	uint8_t b[4096], e[4096];
	for (uint64_t u = 0; u < n; u++) {
		fill(b, u, 1);
		CHECK_RC(ftl_write_sync(f, b, u * 4096, 4096, 0));
	}
	CHECK_RC(ftl_flush_sync(f));
	/* the band of the block being written: GC takes no open band, so the
	 * mark stays while the checkpoint is written */
	uint32_t mark = (uint32_t)(unit_ppa(f, n - 1) / f->ppb), bi = block_band(f, mark);
	CHECK_EQ(f->blk[mark].state, BLK_OPEN);
	band_flag_refresh(f, mark, NULL);
	CHECK(f->band[bi].flags & BANDF_REFRESH);
	/* a checkpoint with the band in its list, then power off: its header
	 * lists what it saw when it began */
	checkpoint_now(f);
	uint32_t hdr = f->cp.cur_hdr_block;
	int fd = open(p2, O_RDWR);
	uint64_t doff, dslot;
	CHECK(fd >= 0 && pread(fd, &doff, 8, 104) == 8 && pread(fd, &dslot, 8, 112) == 8);
	CHECK_EQ(dslot, slot); /* the same page and spare sizes as the golden image */
	uint64_t off = doff + (uint64_t)hdr * f->ppb * slot;
	uint8_t *s = malloc(slot), *orig = malloc(slot);
	CHECK(s && orig && pread(fd, s, slot, (off_t)off) == (ssize_t)slot);
	memcpy(orig, s, slot);
	struct ftl_cp_hdr h;
	memcpy(&h, s, sizeof h);
	CHECK((h.flags & FTL_CP_SPARSE) && (h.flags & FTL_CP_REFRESH) && !(h.flags & FTL_CP_PARITY));
	CHECK_EQ(h.l2p_written, h.l2p_pages);
	/* the lists as media.h lays them out: blocks, open blocks, bad blocks,
	 * the bitmap (sparse only), then the refresh list (count first) */
	uint32_t bitmap = h.nblocks + h.nopen + h.nbad, nbitmap = (h.l2p_pages + 31) / 32;
	uint32_t *lists = (uint32_t *)(s + sizeof h), nref = lists[bitmap + nbitmap];
	CHECK(nref == 1 && lists[bitmap + nbitmap + 1] == bi);
	CHECK((sizeof h + 4 * (bitmap + nbitmap + 1 + (size_t)nref)) <= f->page_size &&
	      h.hdr_pages == 1);
	ftl_abandon(f);

	memmove(lists + bitmap, lists + bitmap + nbitmap, (1 + (size_t)nref) * 4);
	memset(lists + bitmap + 1 + nref, 0, (size_t)nbitmap * 4);
	h.flags &= ~FTL_CP_SPARSE;
	h.l2p_written = 0;
	memcpy(s, &h, sizeof h);
	craft_fix_slot(s, orig, geo.page_size);
	CHECK(pwrite(fd, s, slot, (off_t)off) == (ssize_t)slot);
	close(fd);

	f = open_ok(d);
	CHECK_EQ(f->cp.cur_hdr_block, hdr);
	/* the open marks the band again and GC collects it (its data moved,
	 * the block erased or waiting to be) before the open returns */
	uint8_t st = f->blk[mark].state;
	if (f->st.refresh_collected != 1 || st == BLK_OPEN || st == BLK_CLOSED) {
		fprintf(stderr, "cp_unsparse: %llu bands refreshed at the open; band %u's block %u "
			"is %s\n", (unsigned long long)f->st.refresh_collected, bi, mark,
			st == BLK_OPEN || st == BLK_CLOSED ? "still in use (not refreshed)" : "moved");
		exit(1);
	}
	for (uint64_t u = 0; u < n; u++) {
		fill(e, u, 1);
		CHECK_RC(ftl_read_sync(f, b, u * 4096, 4096));
		CHECK(!memcmp(b, e, sizeof b));
	}
	CHECK_RC(ftl_close(f));
	nand_close(d);
	unlink(p2);
	free(s), free(orig);
	printf("ok: cp_unsparse: a checkpoint without the bitmap of l2p pages: band %u refreshed "
	       "at the open, as its list says; every unit reads back\n", bi);
}

/* ---- superblock units that wrap ----------------------------------------- */

static void t_sb_units(void)
{
	patch(field("ftl_sb.units"), sb_pages, (int)nsb, 0, (1ull << 62) + 1);
	char err[256];
	struct ftl *f = NULL;
	struct ftl_info info;
	for (int rw = 0; rw < 2; rw++) {
		struct nand_dev *d = dev_open(false, !rw);
		struct ftl_open_params op = { .readonly = !rw };
		CHECK_EQ(ftl_open(d, &op, &f, err, sizeof err), -EINVAL);
		CHECK(strstr(err, "impossible format"));
		CHECK_EQ(ftl_peek_format(d, &info), -EINVAL);
		CHECK_EQ(ftl_probe(d, &info, err, sizeof err), -EINVAL);
		nand_close(d);
	}
	restore(sb_pages, (int)nsb);
	printf("ok: sb_units: a superblock with 2^62 + 1 units (x 4096 wraps) refused: %s\n", err);
}

int main(void)
{
	watchdog(600);
	ftl_set_logger(quiet_log, NULL);
	snprintf(dir, sizeof dir, "%s/t_ftl_image.XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	CHECK(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/image", dir);
	atexit(cleanup);
	full = getenv("T_IMAGE_FULL") != NULL;
	golden_make();
	golden_survey();
	t_sb_units();
	t_cp_block();
	t_cp_list_sb();
	t_seq_wrap();
	t_sb_seq();
	t_seq_limit();
	t_cp_prev_room();
	t_rollback(0);
	t_rollback(1);
	t_cp_unsparse();
	t_sweep();
	printf("ok\n");
	return 0;
}
