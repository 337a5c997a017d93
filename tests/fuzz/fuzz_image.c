/*
 * tests/fuzz/fuzz_image.c - libFuzzer target: opening a damaged image (the
 * on-media parsers of ftl/superblock.c, ftl/checkpoint_load.c,
 * ftl/recovery.c, ftl/repair.c, ftl/parity_recover.c, and the simulator's
 * block table).
 *
 * At start-up two small images (timing off) are made in a private directory
 * under /dev/shm: test-16m (16 MiB, one die per row: no parity) and
 * test-1g at 16 blocks per die (64 MiB, rows of four dies, parity width 1:
 * parity and partial-parity pages, the checkpoint's parity groups and
 * header copy).  Each is formatted, written, trimmed and closed cleanly (a
 * checkpoint), written again with a short checkpoint interval (more
 * checkpoints, block footers) and closed, then written again, with flushes,
 * and left without a clean close (a crash: the next open replays the log).
 * Their bytes are the golden copies.
 *
 * Each input patches a working copy of one image and opens it:
 *   byte 0       what to do: bits 0-1: 0 ftl_open read-only, then read;
 *                1 ftl_scan; 2 ftl_probe; 3 ftl_open read-write (after a
 *                failed open, ftl_rebuild_superblock and open again, as
 *                flashctl repair does), then read, write, trim and flush,
 *                a crash, and the next open must serve what was flushed
 *                (else abort: a finding); bit 7: the parity image
 *   then records  u16 page (an index into the FTL's pages found in the
 *                golden image: superblock, checkpoint, footer and trim pages
 *                first, then data pages; modulo their count), u8 flags, u16
 *                offset, u8 length, length bytes.  flags bits 0-1: 0 page
 *                data, 1 spare area, 2 the simulator's block table entry of
 *                that page's block (the bytes written at offset); 3 a field
 *                (tests/fuzz/image_craft.h): craft_fields[offset % count]
 *                of the page-th newest page (by sequence number) it
 *                applies to, element bytes 1-2 (a
 *                list word, footer entry or trim range), set to
 *                craft_value number byte 0: 0, 1, max, 2^31, 2^32, 2^62 + 1, 2^62 - 1,
 *                stored +/- 1, units, the block count, ...  Bit 2: leave the
 *                checksums as they are (otherwise the page's structure
 *                CRCs, its spare's data CRC and spare CRC, or the table
 *                entry's CRC are made valid again, so the parsers behind
 *                the CRC checks are reached; always for fields)
 * Findings: ASan/UBSan reports, leaks, hangs (libFuzzer -timeout), and
 * flushed writes that a crash lost (abort).
 *
 * Known findings, reported and not fixed yet, can be stepped around so that
 * a run looks for new ones: FUZZ_IMAGE_KNOWN (run.sh sets it from
 * tests/fuzz/known/image.txt), a list of these words:
 *   l2p-slot   an L2P entry with bit 31 set (not unmapped or lost) right
 *              after open, which the FTL takes for a write-buffer slot
 *              (tests/fuzz/regress/image/l2p-entry-with-slot-bit): the
 *              input stops there (ftl_abandon)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fuzz/tmpdir.h"

#include "common/crc32c.h"
#include "ftl/ftl.h"
#include "hw/nand_sim.h"
#include "ftl/ftl_int.h"
#include "ftl/media.h"
#include "hw/nand.h"
#include "tests/fuzz/image_craft.h"

/* one golden image and its working copy */
struct img {
	const char *name, *preset;
	uint32_t blocks_per_die;   /* 0: the preset's */
	struct ftl_format_params fp;
	uint32_t rewrites;         /* writes of the last session (before the crash) */
	char golden_path[96], work_path[96];
	uint8_t *golden;           /* the golden image's bytes */
	size_t size;
	uint64_t table_off, data_off, slot;
	struct nand_geometry geo;
	struct craft_limits lim;
	uint32_t *pages;           /* interesting page numbers (ppa) */
	uint32_t npages;
	uint32_t *kind_pages[CK_NKINDS]; /* those each kind of field applies to */
	uint32_t nkind[CK_NKINDS];
	int work_fd;
	/* what the previous input changed: restored before the next */
	uint32_t dirty[4096];
	int ndirty;
	bool dirty_over;           /* more than dirty[] holds: restore it all */
	bool dirty_all;            /* a read-write open ran: blocks changed */
};

static struct img imgs[2] = {
	{ .name = "plain", .preset = "test-16m", .fp = { .sector_size = 4096 }, .rewrites = 40,
	  .work_fd = -1 },
	{ .name = "parity", .preset = "test-1g", .blocks_per_die = 16,
	  .fp = { .sector_size = 4096, .parity_width = 1, .capacity_bytes = 24u << 20 },
	  .rewrites = 2500, .work_fd = -1 },
};
static char dir[64];

static void quiet(void *arg, int level, const char *msg)
{
	(void)arg;
	if (getenv("FUZZ_IMAGE_LOG"))
		fprintf(stderr, "ftl: %s\n", msg);
}

static void cleanup(void)
{
	for (int i = 0; i < 2; i++) {
		if (imgs[i].work_path[0])
			unlink(imgs[i].work_path);
		if (imgs[i].golden_path[0])
			unlink(imgs[i].golden_path);
	}
	if (dir[0])
		rmdir(dir);
}

static void die(const char *what, const char *err)
{
	fprintf(stderr, "fuzz_image: %s: %s\n", what, err);
	exit(1);
}

static void fill(uint8_t *b, uint64_t unit, uint32_t ver)
{
	for (int i = 0; i < 4096; i += 8) {
		uint64_t v = (unit << 32 | ver) * 0x9E3779B97F4A7C15ull + (uint64_t)i;
		memcpy(b + i, &v, 8);
	}
}

static void make_golden(struct img *im)
{
	struct nand_sim_config cfg = { .preset = im->preset, .path = im->golden_path, .create = true,
				       .seed = 1, .blocks_per_die = im->blocks_per_die };
	struct nand_dev *d;
	struct ftl *f;
	char err[256];
	uint8_t buf[4096];

	if (nand_sim_open(&cfg, &d, err, sizeof err))
		die("nand_sim_open", err);
	if (ftl_format(d, &im->fp, err, sizeof err))
		die("ftl_format", err);
	if (ftl_open(d, NULL, &f, err, sizeof err))
		die("ftl_open", err);
	struct ftl_info info;
	ftl_get_info(f, &info);
	uint64_t units = info.units;
	for (uint64_t u = 0; u < units / 2; u++) {
		fill(buf, u, 1);
		if (ftl_write_sync(f, buf, u * 4096, 4096, 0))
			die("write", "first pass");
	}
	ftl_trim_sync(f, 40 * 4096, 30 * 4096, 0);
	if (ftl_close(f))
		die("ftl_close", "first pass");
	/* second session: small checkpoint interval, then a clean close */
	struct ftl_open_params op = { .checkpoint_interval = 96 };
	if (ftl_open(d, &op, &f, err, sizeof err))
		die("ftl_open", err);
	for (uint64_t i = 0; i < 300; i++) {
		uint64_t u = (i * 7919) % units;
		fill(buf, u, 2);
		if (ftl_write_sync(f, buf, u * 4096, 4096, 0))
			die("write", "second pass");
		if (i % 50 == 25)
			ftl_trim_sync(f, ((i * 31) % (units - 8)) * 4096, 8 * 4096, 0);
	}
	if (ftl_close(f))
		die("ftl_close", "second pass");
	/* third session: writes (flushed now and then: partial parity) and a
	 * trim after the last checkpoint, flushed, then a crash (recovery
	 * replays them) */
	if (ftl_open(d, NULL, &f, err, sizeof err))
		die("ftl_open", err);
	for (uint64_t i = 0; i < im->rewrites; i++) {
		uint64_t u = (i * 104729) % units;
		fill(buf, u, 3);
		if (ftl_write_sync(f, buf, u * 4096, 4096, 0))
			die("write", "third pass");
		if (i % 200 == 7)
			ftl_flush_sync(f);
	}
	ftl_trim_sync(f, 100 * 4096, 5 * 4096, 0);
	ftl_flush_sync(f);
	im->lim = (struct craft_limits){ .units = units, .nblocks = f->nblocks, .ppb = f->ppb,
					 .data_pages = f->data_pages, .page_size = f->page_size,
					 .nbands = f->nbands, .row_width = f->row_width };
	ftl_abandon(f);
	nand_close(d);
}

static int page_rank(const uint8_t *spare)
{
	struct ftl_spare sp;
	memcpy(&sp, spare, sizeof sp);
	if (sp.magic != FTL_SPARE_MAGIC)
		return -1;
	switch (sp.type) {
	case FTL_PG_SB: return 0;
	case FTL_PG_CKPT: return sp.lba == 0 ? 0 : 1;
	case FTL_PG_FOOTER: return 1;
	case FTL_PG_TRIM: return 1;
	default: return 2;
	}
}

static const uint8_t *gslot(const struct img *im, uint32_t ppa)
{
	return im->golden + im->data_off + (uint64_t)ppa * im->slot;
}

static uint64_t gseq(const struct img *im, uint32_t ppa)
{
	struct ftl_spare sp;
	memcpy(&sp, gslot(im, ppa) + im->geo.page_size, sizeof sp);
	return sp.seq;
}

static const struct img *sort_im;

/* newest first (ties: lower page first) */
static int newest_first(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint64_t sx = gseq(sort_im, x), sy = gseq(sort_im, y);
	if (sx != sy)
		return sx > sy ? -1 : 1;
	return x < y ? -1 : x > y;
}

static void img_init(struct img *im)
{
	snprintf(im->golden_path, sizeof im->golden_path, "%s/%s.img", dir, im->name);
	snprintf(im->work_path, sizeof im->work_path, "%s/%s-work.img", dir, im->name);
	make_golden(im);

	int fd = open(im->golden_path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		die("golden image", strerror(errno));
	im->size = (size_t)st.st_size;
	im->golden = malloc(im->size);
	if (!im->golden || pread(fd, im->golden, im->size, 0) != (ssize_t)im->size)
		die("golden image", "cannot read");
	close(fd);
	/* struct sim_header (hw/nand_sim_int.h): geometry at 16, table_off at 96,
	 * data_off at 104, slot_size at 112; checked against each other */
	memcpy(&im->geo, im->golden + 16, sizeof im->geo);
	memcpy(&im->table_off, im->golden + 96, 8);
	memcpy(&im->data_off, im->golden + 104, 8);
	memcpy(&im->slot, im->golden + 112, 8);
	if (im->table_off != 4096 || im->slot != im->geo.page_size + im->geo.spare_size ||
	    im->data_off + nand_pages(&im->geo) * im->slot != im->size)
		die("golden image", "unexpected simulator layout (hw/nand_sim_int.h changed?)");

	/* the FTL's pages, metadata first; and those each kind of field is in */
	uint64_t total = nand_pages(&im->geo);
	im->pages = malloc(total * sizeof *im->pages);
	for (int k = 0; k < CK_NKINDS; k++)
		im->kind_pages[k] = malloc(total * sizeof *im->pages);
	for (int rank = 0; rank < 3; rank++)
		for (uint64_t ppa = 0; ppa < total; ppa++)
			if (page_rank(gslot(im, (uint32_t)ppa) + im->geo.page_size) == rank)
				im->pages[im->npages++] = (uint32_t)ppa;
	if (im->npages < 8)
		die("golden image", "too few FTL pages found");
	for (uint32_t i = 0; i < im->npages; i++) {
		struct ftl_spare sp;
		memcpy(&sp, gslot(im, im->pages[i]) + im->geo.page_size, sizeof sp);
		for (int k = 0; k < CK_NKINDS; k++)
			if (craft_applies((unsigned)k, &sp))
				im->kind_pages[k][im->nkind[k]++] = im->pages[i];
	}
	/* a field record's page number counts from the newest: 0 is the
	 * superblock update, checkpoint, footer or page the open reads */
	sort_im = im;
	for (int k = 0; k < CK_NKINDS; k++)
		qsort(im->kind_pages[k], im->nkind[k], sizeof *im->kind_pages[k], newest_first);
	fprintf(stderr, "fuzz_image: golden image %s: %u FTL pages\n", im->golden_path, im->npages);

	im->work_fd = open(im->work_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (im->work_fd < 0 || pwrite(im->work_fd, im->golden, im->size, 0) != (ssize_t)im->size)
		die("work image", strerror(errno));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	ftl_set_logger(quiet, NULL);
	fuzz_mkdtemp(dir, sizeof dir, "img");
	atexit(cleanup);
	for (int i = 0; i < 2; i++)
		img_init(&imgs[i]);
	return 0;
}

static void put(struct img *im, uint64_t off, size_t len)
{
	if (pwrite(im->work_fd, im->golden + off, len, (off_t)off) != (ssize_t)len)
		die("restore", strerror(errno));
}

/* Back to the golden image: the patched pages and table entries, and after
 * a read-write open the header, the block table and every block whose
 * entry changed (a program moves its write pointer, an erase its erase
 * count). */
static void restore(struct img *im)
{
	uint32_t ppb = im->geo.pages_per_block;
	if (im->dirty_over) {
		put(im, 0, im->size);
		im->dirty_over = im->dirty_all = false;
		im->ndirty = 0;
		return;
	}
	if (im->dirty_all) {
		uint32_t nblocks = nand_blocks(&im->geo);
		size_t tlen = (size_t)nblocks * 16;
		uint8_t *t = malloc(tlen);
		if (!t || pread(im->work_fd, t, tlen, (off_t)im->table_off) != (ssize_t)tlen)
			die("restore", "cannot read the block table");
		for (uint32_t b = 0; b < nblocks; b++)
			if (memcmp(t + (size_t)b * 16, im->golden + im->table_off + (size_t)b * 16, 16))
				put(im, im->data_off + (uint64_t)b * ppb * im->slot, ppb * im->slot);
		free(t);
		put(im, 0, im->table_off + tlen);
		im->dirty_all = false;
	}
	for (int i = 0; i < im->ndirty; i++) {
		if (im->dirty[i] & 0x80000000u) {
			uint32_t b = im->dirty[i] & 0x7fffffffu;
			put(im, im->table_off + (uint64_t)b * 16, 16);
		} else {
			put(im, im->data_off + (uint64_t)im->dirty[i] * im->slot, im->slot);
		}
	}
	im->ndirty = 0;
}

static void mark(struct img *im, uint32_t what)
{
	for (int i = 0; i < im->ndirty; i++)
		if (im->dirty[i] == what)
			return;
	if (im->ndirty < (int)(sizeof im->dirty / sizeof im->dirty[0]))
		im->dirty[im->ndirty++] = what;
	else
		im->dirty_over = true;
}

/* make the checksums of a patched page valid again */
static void fix_page(struct img *im, uint32_t ppa)
{
	uint8_t *w = malloc(im->slot);
	off_t at = (off_t)(im->data_off + (uint64_t)ppa * im->slot);
	if (!w || pread(im->work_fd, w, im->slot, at) != (ssize_t)im->slot)
		die("fix", strerror(errno));
	craft_fix_slot(w, gslot(im, ppa), im->geo.page_size);
	if (pwrite(im->work_fd, w, im->slot, at) != (ssize_t)im->slot)
		die("fix", strerror(errno));
	free(w);
}

static void fix_table(struct img *im, uint32_t block)
{
	uint8_t e[16];
	uint64_t off = im->table_off + (uint64_t)block * 16;
	if (pread(im->work_fd, e, 16, (off_t)off) != 16)
		die("fix", strerror(errno));
	craft_fix_table(e);
	if (pwrite(im->work_fd, e, 16, (off_t)off) != 16)
		die("fix", strerror(errno));
}

/* A field record: craft_fields[off % count] of the sel-th page it applies
 * to set to craft_value number val[0], element val[1..2]. */
static void set_field(struct img *im, uint32_t sel, uint32_t off, const uint8_t *val, size_t len)
{
	const struct craft_field *fd = &craft_fields[off % CRAFT_NFIELDS];
	if (!im->nkind[fd->kind])
		return;
	uint32_t ppa = im->kind_pages[fd->kind][sel % im->nkind[fd->kind]];
	unsigned k = len >= 1 ? val[0] : 0;
	uint32_t index = len >= 3 ? (uint32_t)val[1] | (uint32_t)val[2] << 8 : 0;
	if (fd->kind == CK_TABLE) {
		uint32_t b = ppa / im->geo.pages_per_block;
		uint8_t e[16];
		off_t at = (off_t)(im->table_off + (uint64_t)b * 16);
		if (pread(im->work_fd, e, 16, at) != 16)
			die("field", strerror(errno));
		uint64_t v = craft_value(k, craft_get(e + fd->off, fd->width), fd->width, &im->lim);
		craft_put(e + fd->off, fd->width, v);
		craft_fix_table(e);
		if (pwrite(im->work_fd, e, 16, at) != 16)
			die("field", strerror(errno));
		mark(im, 0x80000000u | b);
		return;
	}
	uint8_t *w = malloc(im->slot);
	off_t at = (off_t)(im->data_off + (uint64_t)ppa * im->slot);
	if (!w || pread(im->work_fd, w, im->slot, at) != (ssize_t)im->slot)
		die("field", strerror(errno));
	uint8_t *p = w + craft_offset(fd, index, im->geo.page_size);
	uint64_t v = craft_value(k, craft_get(p, fd->width), fd->width, &im->lim);
	if (getenv("FUZZ_IMAGE_LOG"))
		fprintf(stderr, "fuzz_image: field %s[%u] of page %u (block %u page %u) = %#llx\n",
			fd->name, index, ppa, ppa / im->geo.pages_per_block,
			ppa % im->geo.pages_per_block, (unsigned long long)v);
	craft_put(p, fd->width, v);
	craft_fix_slot(w, gslot(im, ppa), im->geo.page_size);
	if (pwrite(im->work_fd, w, im->slot, at) != (ssize_t)im->slot)
		die("field", strerror(errno));
	free(w);
	mark(im, ppa);
}

/* the FTL's write buffer is empty after open: a slot entry came from the
 * media (known finding "l2p-slot") */
static bool known_l2p_slot(struct ftl *f)
{
	const char *k = getenv("FUZZ_IMAGE_KNOWN");
	if (!k || !strstr(k, "l2p-slot"))
		return false;
	for (uint64_t u = 0; u < f->units; u++)
		if (l2p_is_slot(f->l2p[u]))
			return true;
	return false;
}

/* After a flush a crash, and the next open must serve what was flushed:
 * units 0-3 trimmed, 8-11 written with 0x5a.  A failure is a finding. */
static void check_flushed(struct nand_dev *d, const struct ftl_open_params *op)
{
	struct ftl *f;
	char err[256];
	uint8_t buf[4096 * 4], want[4096 * 4];
	if (ftl_open(d, op, &f, err, sizeof err)) {
		fprintf(stderr, "fuzz_image: writes flushed, a crash, and the next open fails: %s\n",
			err);
		abort();
	}
	memset(want, 0, sizeof want);
	int rc = ftl_read_sync(f, buf, 0, sizeof buf);
	if (rc || memcmp(buf, want, sizeof buf)) {
		fprintf(stderr, "fuzz_image: units trimmed and flushed before a crash: %s\n",
			rc ? "read fails" : "read old data");
		abort();
	}
	memset(want, 0x5a, sizeof want);
	rc = ftl_read_sync(f, buf, 8 * 4096, sizeof buf);
	if (rc || memcmp(buf, want, sizeof buf)) {
		fprintf(stderr, "fuzz_image: units written and flushed before a crash: %s\n",
			rc ? "read fails" : "read other data");
		abort();
	}
	ftl_close(f);
}

static void exercise(struct img *im, int mode)
{
	struct nand_sim_config cfg = { .path = im->work_path, .readonly = mode != 3 };
	struct nand_dev *d;
	struct ftl *f;
	struct ftl_info info;
	char err[256];
	uint8_t buf[4096 * 4];

	if (nand_sim_open(&cfg, &d, err, sizeof err)) {
		if (getenv("FUZZ_IMAGE_LOG"))
			fprintf(stderr, "fuzz_image: nand_sim_open: %s\n", err);
		return;
	}
	if (mode == 1) {
		struct ftl_scan_report rep;
		ftl_scan(d, &rep, err, sizeof err);
	} else if (mode == 2) {
		ftl_probe(d, &info, err, sizeof err);
		ftl_peek_format(d, &info);
	} else {
		struct ftl_open_params op = { .readonly = mode != 3 };
		int rc = ftl_open(d, &op, &f, err, sizeof err);
		if (rc && mode == 3) {
			struct ftl_rebuild_params rp = { .sector_size = 4096, .capacity_bytes = 0 };
			if (ftl_rebuild_superblock(d, &rp, err, sizeof err) == 0)
				rc = ftl_open(d, &op, &f, err, sizeof err);
		}
		if (getenv("FUZZ_IMAGE_LOG"))
			fprintf(stderr, "fuzz_image: mode %d: ftl_open: %d %s\n", mode, rc, rc ? err : "");
		if (rc == 0 && known_l2p_slot(f)) {
			ftl_abandon(f);
			rc = -1;
		}
		if (rc == 0) {
			ftl_get_info(f, &info);
			if (getenv("FUZZ_IMAGE_LOG"))
				fprintf(stderr, "fuzz_image: %llu units, %llu pages replayed, clean %d, notes: %s\n",
					(unsigned long long)info.units, (unsigned long long)info.recovered_pages,
					info.was_clean, info.notes);
			uint64_t units = info.units;
			for (uint64_t u = 0; units && u < units; u += 1 + units / 64)
				ftl_read_sync(f, buf, u * 4096, u + 4 <= units ? sizeof buf : 4096);
			bool flushed = false;
			if (mode == 3 && units > 16) {
				memset(buf, 0x5a, sizeof buf);
				flushed = ftl_write_sync(f, buf, 8 * 4096, sizeof buf, 0) == 0 &&
					  ftl_trim_sync(f, 0, 4 * 4096, 0) == 0 && ftl_flush_sync(f) == 0;
				ftl_read_sync(f, buf, 6 * 4096, sizeof buf);
			}
			if (flushed) {
				ftl_abandon(f); /* a crash */
				check_flushed(d, &op);
			} else {
				ftl_close(f);
			}
		}
	}
	nand_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	for (int k = 0; k < 2; k++)
		restore(&imgs[k]);
	int mode = data[0] & 3;
	struct img *im = &imgs[data[0] >> 7];
	size_t i = 1;
	uint32_t fix_pages[64], fix_blocks[64];
	int nfp = 0, nfb = 0;
	while (i + 6 <= size) {
		uint32_t sel = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8;
		uint8_t flags = data[i + 2];
		uint32_t off = (uint32_t)data[i + 3] | (uint32_t)data[i + 4] << 8;
		size_t len = data[i + 5];
		i += 6;
		if (len > size - i)
			len = size - i;
		uint32_t ppa = im->pages[sel % im->npages];
		int area = flags & 3;
		bool fix = !(flags & 4);
		if (area == 3) {
			set_field(im, sel, off, data + i, len);
			i += len;
			continue;
		}
		if (getenv("FUZZ_IMAGE_LOG")) {
			struct ftl_spare sp;
			memcpy(&sp, gslot(im, ppa) + im->geo.page_size, sizeof sp);
			fprintf(stderr, "fuzz_image: patch %s of page %u (block %u page %u: type %u, lba %u), "
				"offset %u, %zu byte(s)%s\n", area == 1 ? "spare" : area == 2 ? "block table entry" : "data",
				ppa, ppa / im->geo.pages_per_block, ppa % im->geo.pages_per_block, sp.type, sp.lba,
				area == 2 ? off % 16 : off % (area == 1 ? im->geo.spare_size : im->geo.page_size), len,
				fix ? ", checksums made valid" : "");
		}
		if (area == 2) {
			uint32_t block = ppa / im->geo.pages_per_block;
			off %= 16;
			if (len > 16 - off)
				len = 16 - off;
			if (pwrite(im->work_fd, data + i, len,
				   (off_t)(im->table_off + (uint64_t)block * 16 + off)) != (ssize_t)len)
				die("patch", strerror(errno));
			mark(im, 0x80000000u | block);
			if (fix && nfb < 64)
				fix_blocks[nfb++] = block;
		} else {
			uint32_t base = area == 1 ? im->geo.page_size : 0;
			uint32_t room = area == 1 ? im->geo.spare_size : im->geo.page_size;
			off %= room;
			if (len > room - off)
				len = room - off;
			if (pwrite(im->work_fd, data + i, len,
				   (off_t)(im->data_off + (uint64_t)ppa * im->slot + base + off)) != (ssize_t)len)
				die("patch", strerror(errno));
			mark(im, ppa);
			if (fix && nfp < 64)
				fix_pages[nfp++] = ppa;
		}
		i += len;
	}
	for (int k = 0; k < nfp; k++)
		fix_page(im, fix_pages[k]);
	for (int k = 0; k < nfb; k++)
		fix_table(im, fix_blocks[k]);
	if (mode == 3)
		im->dirty_all = true; /* a read-write open writes where it likes */
	exercise(im, mode);
	return 0;
}
