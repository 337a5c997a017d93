/*
 * t_ftl_image - crafted images: pages whose checksums are valid but whose
 * sizes, counts, block numbers or sequence numbers are not what the FTL
 * wrote (a hostile image, or a storage layer that returns old pages):
 *   sb_units    a superblock with units = 2^62 + 1 (units * 4096 wraps to
 *               4096, under the raw size): open, read-only too, probe and
 *               peek refuse it (-EINVAL), nothing is written out of bounds
 * The sanitizer build (t_ftl_image-san) turns any out-of-bounds access
 * into a failure.  Images live in /dev/shm (or /tmp) and are removed.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftl/ftl_int.h"
#include "tests/fuzz/image_craft.h"
#include "tests/unit/t.h"

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

static void fill(uint8_t *b, uint64_t unit, uint32_t ver)
{
	for (int i = 0; i < 4096; i += 8) {
		uint64_t v = (unit << 32 | ver) * 0x9E3779B97F4A7C15ull + (uint64_t)i;
		memcpy(b + i, &v, 8);
	}
}

static void cleanup(void)
{
	if (path[0])
		unlink(path);
	if (dir[0])
		rmdir(dir);
}

static struct nand_dev *dev_open(bool create, bool readonly)
{
	struct nand_sim_config cfg = { .preset = create ? PRESET : NULL, .path = path,
				       .create = create, .readonly = readonly, .seed = 1,
				       .blocks_per_die = create ? BLOCKS_PER_DIE : 0 };
	struct nand_dev *d;
	char err[256];
	if (nand_sim_open(&cfg, &d, err, sizeof err)) {
		fprintf(stderr, "nand_sim_open: %s\n", err);
		exit(1);
	}
	return d;
}

static struct ftl *open_ok(struct nand_dev *d, const struct ftl_open_params *p)
{
	struct ftl *f;
	char err[256];
	if (ftl_open(d, p, &f, err, sizeof err)) {
		fprintf(stderr, "ftl_open: %s\n", err);
		exit(1);
	}
	return f;
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
	struct ftl *f = open_ok(d, NULL);
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
	f = open_ok(d, &op);
	for (uint64_t i = 0; i < 1200; i++) {
		write_v(f, (i * 7919) % units, 2);
		if (i % 100 == 50) {
			trim_v(f, (i * 31) % (units - 8), 8);
			CHECK_RC(ftl_flush_sync(f));
		}
	}
	CHECK_RC(ftl_close(f));
	f = open_ok(d, NULL);
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
	/* struct sim_header (hw/nand_sim.c): table_off at 96, data_off at 104,
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
	put(0, data_off);
}

/* ---- what is in the golden image ----------------------------------------- */

static uint64_t cp_seq_now;          /* the current checkpoint's */
static uint32_t sb_pages[8], nsb;    /* the newest superblock update's copies */
static uint32_t cp_pages[2], ncp;    /* the current checkpoint's header page 0, and its copy */
static uint32_t cp_words;            /* u32 words of its lists */
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
	cp_words = h.nblocks + h.nopen + h.nbad + (h.l2p_pages + 31) / 32 + 1 + 2 * h.ngroups;
	uint64_t best_foot = 0, best_trim = 0, best_data = 0, best_par = 0, best_ppl = 0;
	for (uint32_t ppa = 0; ppa < total; ppa++) {
		struct ftl_spare sp;
		gspare(ppa, &sp);
		if (sp.magic != FTL_SPARE_MAGIC || sp.crc != crc32c(0, &sp, offsetof(struct ftl_spare, crc)))
			continue;
		bool newer = sp.seq > cp_seq_now;
		switch (sp.type) {
		case FTL_PG_FOOTER:
			if (sp.lba == 0 && newer && (foot_page == UINT32_MAX || sp.seq > best_foot)) {
				foot_page = ppa;
				best_foot = sp.seq;
			}
			break;
		case FTL_PG_TRIM:
			if (sp.seq > best_trim) {
				trim_page = ppa;
				best_trim = sp.seq;
			}
			break;
		case FTL_PG_DATA:
			if (sp.seq > best_data) {
				data_new = ppa;
				best_data = sp.seq;
			}
			if (!newer && data_old == UINT32_MAX)
				data_old = ppa;
			break;
		case FTL_PG_PARITY:
			if (sp.seq > best_par) {
				par_page = ppa;
				best_par = sp.seq;
			}
			break;
		case FTL_PG_PPL:
			if (sp.seq > best_ppl) {
				ppl_page = ppa;
				best_ppl = sp.seq;
			}
			break;
		case FTL_PG_CKPT:
			if (sp.seq == cp_seq_now && sp.lba != 0 && sp.lba != FTL_CP_PARITY_LBA &&
			    l2p_page == UINT32_MAX)
				l2p_page = ppa;
			break;
		}
	}
	CHECK(foot_page != UINT32_MAX && trim_page != UINT32_MAX && data_new != UINT32_MAX &&
	      data_old != UINT32_MAX && par_page != UINT32_MAX && ppl_page != UINT32_MAX &&
	      l2p_page != UINT32_MAX);
	CHECK(best_trim > cp_seq_now && best_data > cp_seq_now);
	struct ftl_trim_hdr th;
	memcpy(&th, gslot(trim_page), sizeof th);
	trim_ranges = th.nranges;
	CHECK(trim_ranges >= 1);
}

/* ---- superblock units that wrap ----------------------------------------- */

static void t_sb_units(void)
{
	static const struct craft_field units_field = { "ftl_sb.units", CK_SB, 8,
							offsetof(struct ftl_sb, units) };
	uint8_t *s = malloc(slot);
	CHECK(s);
	for (uint32_t i = 0; i < nsb; i++) {
		memcpy(s, gslot(sb_pages[i]), slot);
		craft_put(s + units_field.off, 8, (1ull << 62) + 1);
		craft_fix_slot(s, gslot(sb_pages[i]), geo.page_size);
		CHECK(pwrite(wfd, s, slot, (off_t)(data_off + (uint64_t)sb_pages[i] * slot)) ==
		      (ssize_t)slot);
	}
	free(s);
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

static void on_alarm(int sig)
{
	static const char msg[] = "t_ftl_image: timed out (a hang)\n";
	ssize_t n = write(2, msg, sizeof msg - 1);
	(void)n;
	_exit(1);
}

static void quiet(void *arg, const char *msg)
{
	if (getenv("T_VERBOSE"))
		fprintf(stderr, "ftl: %s\n", msg);
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(600);
	ftl_set_logger(quiet, NULL);
	snprintf(dir, sizeof dir, "%s/t_ftl_image.XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	CHECK(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/image", dir);
	atexit(cleanup);
	golden_make();
	golden_survey();
	t_sb_units();
	printf("ok\n");
	return 0;
}
