/*
 * t_ftl_basic - format, write, read back, trim, reopen clean and after a
 * power cut, on both sector sizes; a re-format cut short leaves the old
 * format or the new; each check names what it proves.
 */
#include "ftl/ftl.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

/* LEN bytes (a multiple of 8) named by TAG */
static void fill_tag(uint8_t *buf, size_t len, uint64_t tag)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = tag * 0x9E3779B97F4A7C15ull + i;
		memcpy(buf + i, &v, 8);
	}
}

static void basic(const char *preset, uint32_t sector, bool timing)
{
	struct nand_dev *d = dev_new(preset, timing);
	format_with(d, sector, 0, 0);
	struct ftl *f = open_ok(d);
	struct ftl_info info;
	ftl_get_info(f, &info);
	CHECK_EQ(info.sector_size, sector);
	uint64_t cap = info.capacity;
	printf("%s sector %u timing %d: capacity %" PRIu64 " (%.1f%% OP)\n", preset, sector, timing,
	       cap, info.op_percent);

	uint8_t *buf = aligned_alloc(4096, 1 << 20), *rd = aligned_alloc(4096, 1 << 20);
	/* never-written reads as zeros */
	memset(rd, 0xAA, 65536);
	CHECK_RC(ftl_read_sync(f, rd, 0, 65536));
	for (int i = 0; i < 65536; i++)
		CHECK(rd[i] == 0);
	/* write and read back, aligned and (512e) unaligned */
	fill_tag(buf, 1 << 20, 1);
	CHECK_RC(ftl_write_sync(f, buf, 4096, 1 << 20, 0));
	CHECK_RC(ftl_read_sync(f, rd, 4096, 1 << 20));
	CHECK(memcmp(buf, rd, 1 << 20) == 0);
	if (sector == 512) {
		fill_tag(buf, 1536, 2);
		CHECK_RC(ftl_write_sync(f, buf, 4096 + 512 * 3, 1536, 0));
		CHECK_RC(ftl_read_sync(f, rd, 4096, 8192));
		uint8_t exp[8192];
		fill_tag(exp, 8192, 1);
		memcpy(exp + 512 * 3, buf, 1536);
		CHECK(memcmp(exp, rd, 8192) == 0);
	}
	/* last sector */
	fill_tag(buf, sector, 3);
	CHECK_RC(ftl_write_sync(f, buf, cap - sector, sector, FTL_IO_FUA));
	CHECK_RC(ftl_read_sync(f, rd, cap - sector, sector));
	CHECK(memcmp(buf, rd, sector) == 0);
	/* one past the end */
	CHECK_EQ(ftl_write_sync(f, buf, cap, sector, 0), -ENOSPC);
	CHECK_EQ(ftl_read_sync(f, rd, cap - sector, 2 * sector), -EINVAL);
	/* trim reads zeros and shows as a hole */
	CHECK_RC(ftl_trim_sync(f, 8192, 16384, 0));
	CHECK_RC(ftl_read_sync(f, rd, 8192, 16384));
	for (int i = 0; i < 16384; i++)
		CHECK(rd[i] == 0);
	bool mapped;
	CHECK_EQ(ftl_map_extent(f, 8192, 16384, &mapped), 16384);
	CHECK(!mapped);
	CHECK_EQ(ftl_map_extent(f, 4096, 1 << 20, &mapped), 4096);
	CHECK(mapped);
	CHECK_RC(ftl_flush_sync(f));

	/* clean reopen keeps everything */
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(info.was_clean);
	CHECK_RC(ftl_read_sync(f, rd, 4096, 4096));
	fill_tag(buf, 4096, 1);
	if (sector == 512) {
		fill_tag(buf + 512 * 3, 1536, 2);
	}
	CHECK(memcmp(buf, rd, 4096) == 0);
	CHECK_RC(ftl_read_sync(f, rd, 8192, 16384));
	for (int i = 0; i < 16384; i++)
		CHECK(rd[i] == 0);
	fill_tag(buf, sector, 3);
	CHECK_RC(ftl_read_sync(f, rd, cap - sector, sector));
	CHECK(memcmp(buf, rd, sector) == 0);

	/* flushed data survives a power cut; so does a flushed trim */
	fill_tag(buf, 65536, 4);
	CHECK_RC(ftl_write_sync(f, buf, 1 << 21, 65536, 0));
	CHECK_RC(ftl_trim_sync(f, 4096, 4096, 0));
	CHECK_RC(ftl_flush_sync(f));
	struct nand_sim_faults cut = { .power_cut_after = 1 };
	nand_sim_set_faults(d, &cut);
	fill_tag(rd, 4096, 5);
	int rc = ftl_write_sync(f, rd, 0, 4096, FTL_IO_FUA);
	CHECK(rc == -EIO);
	ftl_abandon(f);
	nand_sim_power_on(d);
	f = open_ok(d);
	ftl_get_info(f, &info);
	CHECK(!info.was_clean);
	CHECK_RC(ftl_read_sync(f, rd, 1 << 21, 65536));
	CHECK(memcmp(buf, rd, 65536) == 0);
	CHECK_RC(ftl_read_sync(f, rd, 4096, 4096));
	for (int i = 0; i < 4096; i++)
		CHECK(rd[i] == 0);

	/* overwrite the device several times: GC runs, data stays right */
	uint64_t units = cap / 4096, seed = 42;
	uint32_t *ver = calloc(units, sizeof *ver);
	for (uint64_t i = 0; i < units * 4; i++) {
		uint64_t u = t_rand(&seed) % units;
		ver[u] = (uint32_t)i + 1;
		fill_tag(buf, 4096, ((uint64_t)u << 32) | ver[u]);
		CHECK_RC(ftl_write_sync(f, buf, u * 4096, 4096, 0));
	}
	for (uint64_t u = 0; u < units; u++) {
		if (!ver[u])
			continue;
		CHECK_RC(ftl_read_sync(f, rd, u * 4096, 4096));
		fill_tag(buf, 4096, ((uint64_t)u << 32) | ver[u]);
		if (memcmp(buf, rd, 4096) != 0) {
			fprintf(stderr, "unit %" PRIu64 " wrong after GC\n", u);
			exit(1);
		}
	}
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	printf("  WA %.2f, erased %" PRIu64 ", relocated %" PRIu64 ", checkpoints %" PRIu64 "\n",
	       st.write_amplification, st.blocks_erased, st.gc_pages_relocated, st.checkpoints);
	CHECK(st.gc_pages_relocated > 0);
	/* no parity here: pads completing NAND pages of several units are
	 * counted as such, not as parity's */
	CHECK_EQ(st.parity_pad_pages, 0);
	if (d->geo.page_size > 4096)
		CHECK(st.page_pad_pages > 0);
	else
		CHECK_EQ(st.page_pad_pages, 0);
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	/* nothing in flight after a clean open: every mapped unit is a valid
	 * page on NAND (valid_pages is summed over bands) */
	uint64_t nmapped = 0;
	for (uint64_t off = 0; off < cap;) {
		bool m;
		uint64_t n = ftl_map_extent(f, off, cap - off, &m);
		CHECK(n > 0);
		if (m)
			nmapped += n / 4096;
		off += n;
	}
	ftl_get_stats(f, &st);
	CHECK_EQ(st.valid_pages, nmapped);
	CHECK(st.erase_max >= st.erase_min && st.erase_max > 0);
	for (uint64_t u = 0; u < units; u++) {
		if (!ver[u])
			continue;
		CHECK_RC(ftl_read_sync(f, rd, u * 4096, 4096));
		fill_tag(buf, 4096, ((uint64_t)u << 32) | ver[u]);
		CHECK(memcmp(buf, rd, 4096) == 0);
	}
	CHECK_RC(ftl_close(f));
	free(ver);
	free(buf);
	free(rd);
	nand_close(d);
}

/* Lifetime counters live in the checkpoint: they survive a clean reopen. */
static void lifetime(void)
{
	struct nand_dev *d = dev_new("test-16m", false);
	format_with(d, 4096, 0, 0);
	struct ftl *f = open_ok(d);
	static uint8_t buf[65536];
	fill_tag(buf, sizeof buf, 7);
	for (int i = 0; i < 10; i++)
		CHECK_RC(ftl_write_sync(f, buf, (uint64_t)i * sizeof buf, sizeof buf, 0));
	for (int i = 0; i < 3; i++)
		CHECK_RC(ftl_read_sync(f, buf, (uint64_t)i * sizeof buf, sizeof buf));
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	struct ftl_stats st;
	ftl_get_stats(f, &st);
	CHECK_EQ(st.host_write_bytes, 10 * sizeof buf);
	CHECK_EQ(st.host_write_ops, 10);
	CHECK_EQ(st.host_read_bytes, 3 * sizeof buf);
	CHECK_EQ(st.host_read_ops, 3);
	CHECK(st.nand_pages_programmed >= 160);
	CHECK_RC(ftl_write_sync(f, buf, 0, 4096, 0));
	CHECK_RC(ftl_close(f));
	f = open_ok(d);
	ftl_get_stats(f, &st);
	CHECK_EQ(st.host_write_bytes, 10 * sizeof buf + 4096);
	CHECK_RC(ftl_close(f));
	nand_close(d);
	printf("lifetime counters kept across reopens\n");
}

/*
 * A re-format cut short (a power cut, a signal, a crash: the media stop
 * between two operations, or in the middle of one) never leaves a device
 * without a superblock: cut at each operation of the format in turn, the
 * device opens with the old format and its data or with the new, empty
 * one, and the cuts find both.
 */
static void reformat_cut(void)
{
	static uint8_t buf[65536], rd[65536], zero[65536];
	fill_tag(buf, sizeof buf, 9);
	int olds = 0, news = 0;
	for (uint64_t cut = 1;; cut++) {
		struct nand_dev *d = dev_new("test-64m", false);
		char err[256];
		struct ftl_format_params fp = { .sector_size = 4096 };
		CHECK_RC(ftl_format(d, &fp, err, sizeof err));
		struct ftl *f = open_ok(d);
		CHECK_RC(ftl_write_sync(f, buf, 0, sizeof buf, 0));
		CHECK_RC(ftl_close(f));
		struct ftl_info before, after;
		CHECK_RC(ftl_peek_format(d, &before));
		struct nand_sim_faults ft = { .power_cut_after = cut };
		nand_sim_set_faults(d, &ft);
		int rc = ftl_format(d, &fp, err, sizeof err);
		bool was_cut = !nand_sim_powered(d);
		nand_sim_power_on(d);
		rc = was_cut ? 0 : rc;
		CHECK_RC(rc);
		int probe = ftl_probe(d, &after, err, sizeof err);
		if (probe)
			fprintf(stderr, "re-format cut at operation %" PRIu64 ": %s\n", cut, err);
		CHECK_EQ(probe, 0);
		f = open_ok(d);
		CHECK_RC(ftl_read_sync(f, rd, 0, sizeof rd));
		if (after.format_id == before.format_id) {
			olds++;
			CHECK(memcmp(rd, buf, sizeof rd) == 0);
		} else {
			news++;
			CHECK(memcmp(rd, zero, sizeof rd) == 0);
		}
		CHECK_RC(ftl_close(f));
		nand_close(d);
		if (!was_cut)
			break;
	}
	CHECK(olds > 0 && news > 0);
	printf("re-format cut at each operation: %d times the old format with its data, %d times the "
	       "new one\n", olds, news);
}

/* expect ftl_format to refuse with RC and a message containing WHAT */
static void format_refused(struct nand_dev *d, uint32_t parity, int rc, const char *what)
{
	char err[256] = "";
	struct ftl_format_params fp = { .sector_size = 4096, .parity_width = parity };
	int got = ftl_format(d, &fp, err, sizeof err);
	printf("refused (%d): %s\n", got, err);
	CHECK_EQ(got, rc);
	CHECK(strstr(err, what));
}

/*
 * A geometry the FTL cannot use is refused at format, before anything is
 * written, with a message that says what is missing: the spare area must
 * hold the FTL's metadata in every page (40 bytes; 80 with parity, whose
 * pages also carry the XOR of their members' metadata).  A backend
 * reports the spare bytes left for the FTL (on MTD the free OOB bytes:
 * 78 on nandsim's 4 KiB Hamming chip).
 */
static void geometry_refused(void)
{
	struct nand_dev *d = dev_new("test-64m", false);
	struct nand_geometry geo = d->geo;
	d->geo.spare_size = 32;
	format_refused(d, 0, -EINVAL, "32 spare bytes per page: the FTL needs 40");
	d->geo.spare_size = 78;
	format_refused(d, 1, -ENOTSUP, "parity needs 80 spare bytes per page; this geometry has 78");
	d->geo = geo;
	d->geo.page_size = 12288;
	format_refused(d, 0, -EINVAL, "page size 12288");
	d->geo = geo;
	nand_close(d);
	/* parity needs 4 KiB pages: refused on pages of several units */
	d = dev_new("test-16k", false);
	format_refused(d, 1, -ENOTSUP, "parity is not supported with 16384-byte NAND pages");
	nand_close(d);
}

int main(void)
{
	geometry_refused();
	reformat_cut();
	lifetime();
	basic("test-64m", 4096, false);
	basic("test-64m", 512, false);
	basic("test-64m", 4096, true);
	/* NAND pages of two and four units (ftl/upage.c) */
	basic("test-16k", 4096, false);
	basic("test-8k", 4096, false);
	basic("test-8k", 512, false);
	basic("test-16k", 4096, false);
	basic("test-16k", 512, true);
	printf("ok\n");
	return 0;
}
