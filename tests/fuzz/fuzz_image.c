/*
 * tests/fuzz/fuzz_image.c - libFuzzer target: opening a damaged image (the
 * on-media parsers of ftl/superblock.c, ftl/checkpoint.c, ftl/recovery.c,
 * ftl/repair.c, and the simulator's block table).
 *
 * At start-up a small image (preset test-16m, timing off) is made in a
 * private directory under /dev/shm: formatted, written, trimmed and closed
 * cleanly (a checkpoint), written again with a short checkpoint interval
 * (more checkpoints, block footers) and closed, then written a little and
 * left without a clean close (a crash: the next open replays the log).  Its bytes are the golden copy.
 *
 * Each input patches a working copy of that image and opens it:
 *   byte 0       what to do: bits 0-1: 0 ftl_open read-only, then read;
 *                1 ftl_scan; 2 ftl_probe; 3 ftl_open read-write, then
 *                write, trim, read and close (after a failed open,
 *                ftl_rebuild_superblock and open again, as flashctl repair
 *                does)
 *   then records  u16 page (an index into the FTL's pages found in the
 *                golden image: superblock, checkpoint, footer and trim pages
 *                first, then data pages; modulo their count), u8 flags, u16
 *                offset, u8 length, length bytes written there.  flags bits
 *                0-1: 0 page data, 1 spare area, 2 the simulator's block
 *                table entry of that page's block; bit 2: leave the
 *                checksums as they are (otherwise the page's structure
 *                CRCs, its spare's data CRC and spare CRC, or the table
 *                entry's CRC are made valid again, so the parsers behind
 *                the CRC checks are reached)
 * Findings: ASan/UBSan reports, leaks, and hangs (libFuzzer -timeout).
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
#include "ftl/ftl_int.h"
#include "ftl/media.h"
#include "hw/nand.h"

#define PRESET "test-16m"

static char dir[64], golden_path[96], work_path[96];
static uint8_t *golden;       /* the golden image's bytes */
static size_t image_size;
static uint64_t data_off, slot, table_off;
static struct nand_geometry geo;
static uint32_t *pages;       /* interesting page numbers (ppa) */
static uint32_t npages;
static int work_fd = -1;
/* what the previous input changed: restored before the next */
static uint32_t dirty[4096];
static int ndirty;
static int dirty_all;

static void quiet(void *arg, const char *msg)
{
	(void)arg;
	if (getenv("FUZZ_IMAGE_LOG"))
		fprintf(stderr, "ftl: %s\n", msg);
}

static void cleanup(void)
{
	if (work_path[0])
		unlink(work_path);
	if (golden_path[0])
		unlink(golden_path);
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

static void make_golden(void)
{
	struct nand_sim_config cfg = { .preset = PRESET, .path = golden_path, .create = true, .seed = 1 };
	struct nand_dev *d;
	struct ftl *f;
	char err[256];
	uint8_t buf[4096];

	if (nand_sim_open(&cfg, &d, err, sizeof err))
		die("nand_sim_open", err);
	struct ftl_format_params fp = { .sector_size = 4096 };
	if (ftl_format(d, &fp, err, sizeof err))
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
	/* second session: small checkpoint interval, then a crash */
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
	/* third session: a few writes and a trim after the last checkpoint,
	 * flushed, then a crash (recovery replays them) */
	if (ftl_open(d, NULL, &f, err, sizeof err))
		die("ftl_open", err);
	for (uint64_t i = 0; i < 40; i++) {
		uint64_t u = (i * 104729) % units;
		fill(buf, u, 3);
		if (ftl_write_sync(f, buf, u * 4096, 4096, 0))
			die("write", "third pass");
	}
	ftl_trim_sync(f, 100 * 4096, 5 * 4096, 0);
	ftl_flush_sync(f);
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

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	ftl_set_logger(quiet, NULL);
	fuzz_mkdtemp(dir, sizeof dir, "img");
	snprintf(golden_path, sizeof golden_path, "%s/golden.img", dir);
	snprintf(work_path, sizeof work_path, "%s/work.img", dir);
	atexit(cleanup);
	make_golden();

	const struct nand_preset *p = nand_preset_find(PRESET);
	geo = p->geo;
	int fd = open(golden_path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		die("golden image", strerror(errno));
	image_size = (size_t)st.st_size;
	golden = malloc(image_size);
	if (!golden || pread(fd, golden, image_size, 0) != (ssize_t)image_size)
		die("golden image", "cannot read");
	close(fd);
	/* struct sim_header (hw/nand_sim.c): table_off at 96, data_off at 104,
	 * slot_size at 112; checked against the geometry */
	memcpy(&table_off, golden + 96, 8);
	memcpy(&data_off, golden + 104, 8);
	memcpy(&slot, golden + 112, 8);
	if (table_off != 4096 || slot != geo.page_size + geo.spare_size ||
	    data_off + nand_pages(&geo) * slot != image_size)
		die("golden image", "unexpected simulator layout (hw/nand_sim.c changed?)");

	/* the FTL's pages, metadata first */
	uint64_t total = nand_pages(&geo);
	pages = malloc(total * sizeof *pages);
	for (int rank = 0; rank < 3; rank++)
		for (uint64_t ppa = 0; ppa < total; ppa++)
			if (page_rank(golden + data_off + ppa * slot + geo.page_size) == rank)
				pages[npages++] = (uint32_t)ppa;
	if (npages < 8)
		die("golden image", "too few FTL pages found");
	fprintf(stderr, "fuzz_image: golden image %s: %u FTL pages\n", golden_path, npages);

	work_fd = open(work_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (work_fd < 0 || pwrite(work_fd, golden, image_size, 0) != (ssize_t)image_size)
		die("work image", strerror(errno));
	return 0;
}

static void put(uint64_t off, size_t len)
{
	if (pwrite(work_fd, golden + off, len, (off_t)off) != (ssize_t)len)
		die("restore", strerror(errno));
}

static void restore(void)
{
	if (dirty_all) {
		put(0, image_size);
		dirty_all = 0;
		ndirty = 0;
		return;
	}
	for (int i = 0; i < ndirty; i++) {
		if (dirty[i] & 0x80000000u) {
			uint32_t b = dirty[i] & 0x7fffffffu;
			put(table_off + (uint64_t)b * 16, 16);
		} else {
			put(data_off + (uint64_t)dirty[i] * slot, slot);
		}
	}
	ndirty = 0;
}

static void mark(uint32_t what)
{
	for (int i = 0; i < ndirty; i++)
		if (dirty[i] == what)
			return;
	if (ndirty < (int)(sizeof dirty / sizeof dirty[0]))
		dirty[ndirty++] = what;
	else
		dirty_all = 1;
}

/* make the checksums of a patched page valid again */
static void fix_page(uint32_t ppa)
{
	uint8_t *g = golden + data_off + (uint64_t)ppa * slot;
	uint8_t *w = malloc(slot);
	if (pread(work_fd, w, slot, (off_t)(data_off + (uint64_t)ppa * slot)) != (ssize_t)slot)
		die("fix", strerror(errno));
	struct ftl_spare sp, gsp;
	memcpy(&sp, w + geo.page_size, sizeof sp);
	memcpy(&gsp, g + geo.page_size, sizeof gsp);
	if (sp.type == FTL_PG_SB) {
		struct ftl_sb sb;
		memcpy(&sb, w, sizeof sb);
		sb.crc = crc32c(0, &sb, offsetof(struct ftl_sb, crc));
		memcpy(w, &sb, sizeof sb);
	} else if (sp.type == FTL_PG_CKPT && sp.lba == 0) {
		struct ftl_cp_hdr h;
		memcpy(&h, w, sizeof h);
		uint64_t k = (uint64_t)h.nblocks + h.nopen + h.nbad;
		if (sizeof h + k * 4 <= geo.page_size)
			h.lists_crc = crc32c(0, w + sizeof h, (size_t)k * 4);
		h.crc = crc32c(0, &h, offsetof(struct ftl_cp_hdr, crc));
		memcpy(w, &h, sizeof h);
	} else if (sp.type == FTL_PG_FOOTER && sp.lba == 0) {
		struct ftl_footer_hdr h;
		memcpy(&h, w, sizeof h);
		uint64_t n = h.data_pages;
		if (sizeof h + n * sizeof(struct ftl_footer_entry) <= geo.page_size)
			h.entries_crc = crc32c(0, w + sizeof h, (size_t)n * sizeof(struct ftl_footer_entry));
		h.crc = crc32c(0, &h, offsetof(struct ftl_footer_hdr, crc));
		memcpy(w, &h, sizeof h);
	}
	/* the spare's data CRC, where the golden page had one */
	if (gsp.data_crc && gsp.data_crc == crc32c(0, g, geo.page_size))
		sp.data_crc = crc32c(0, w, geo.page_size);
	sp.crc = crc32c(0, &sp, offsetof(struct ftl_spare, crc));
	memcpy(w + geo.page_size, &sp, sizeof sp);
	if (pwrite(work_fd, w, slot, (off_t)(data_off + (uint64_t)ppa * slot)) != (ssize_t)slot)
		die("fix", strerror(errno));
	free(w);
}

static void fix_table(uint32_t block)
{
	uint8_t e[16];
	uint64_t off = table_off + (uint64_t)block * 16;
	if (pread(work_fd, e, 16, (off_t)off) != 16)
		die("fix", strerror(errno));
	uint32_t crc = crc32c(0, e, 12);
	memcpy(e + 12, &crc, 4);
	if (pwrite(work_fd, e, 16, (off_t)off) != 16)
		die("fix", strerror(errno));
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

static void exercise(int mode)
{
	struct nand_sim_config cfg = { .path = work_path, .readonly = mode != 3 };
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
			if (mode == 3 && units > 16) {
				memset(buf, 0x5a, sizeof buf);
				ftl_write_sync(f, buf, 8 * 4096, sizeof buf, 0);
				ftl_trim_sync(f, 0, 4 * 4096, 0);
				ftl_flush_sync(f);
				ftl_read_sync(f, buf, 6 * 4096, sizeof buf);
			}
			ftl_close(f);
		}
	}
	nand_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	restore();
	int mode = data[0] & 3;
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
		uint32_t ppa = pages[sel % npages];
		int area = flags & 3;
		bool fix = !(flags & 4);
		if (getenv("FUZZ_IMAGE_LOG")) {
			struct ftl_spare sp;
			memcpy(&sp, golden + data_off + (uint64_t)ppa * slot + geo.page_size, sizeof sp);
			fprintf(stderr, "fuzz_image: patch %s of page %u (block %u page %u: type %u, lba %u), "
				"offset %u, %zu byte(s)%s\n", area == 1 ? "spare" : area == 2 ? "block table entry" : "data",
				ppa, ppa / geo.pages_per_block, ppa % geo.pages_per_block, sp.type, sp.lba,
				area == 2 ? off % 16 : off % (area == 1 ? geo.spare_size : geo.page_size), len,
				fix ? ", checksums made valid" : "");
		}
		if (area == 2) {
			uint32_t block = ppa / geo.pages_per_block;
			off %= 16;
			if (len > 16 - off)
				len = 16 - off;
			if (pwrite(work_fd, data + i, len, (off_t)(table_off + (uint64_t)block * 16 + off)) !=
			    (ssize_t)len)
				die("patch", strerror(errno));
			mark(0x80000000u | block);
			if (fix && nfb < 64)
				fix_blocks[nfb++] = block;
		} else {
			uint32_t base = area == 1 ? geo.page_size : 0;
			uint32_t room = area == 1 ? geo.spare_size : geo.page_size;
			off %= room;
			if (len > room - off)
				len = room - off;
			if (pwrite(work_fd, data + i, len, (off_t)(data_off + (uint64_t)ppa * slot + base + off)) !=
			    (ssize_t)len)
				die("patch", strerror(errno));
			mark(ppa);
			if (fix && nfp < 64)
				fix_pages[nfp++] = ppa;
		}
		i += len;
	}
	for (int k = 0; k < nfp; k++)
		fix_page(fix_pages[k]);
	for (int k = 0; k < nfb; k++)
		fix_table(fix_blocks[k]);
	if (mode == 3)
		dirty_all = 1; /* a read-write open writes where it likes */
	exercise(mode);
	return 0;
}
