/*
 * t_ftl_align - FTL_IO_ANY_ALIGN: reads, writes, trims and write-zeroes at
 * any byte offset and length, checked against a byte-exact model of the
 * whole device, on a 512-byte and a 4096-byte format (RAM simulator, one
 * of them with the virtual-time timing model so read-modify-write
 * pre-reads are in flight while later requests queue behind them).
 *
 *   t_ftl_align [-n BATCHES] [-s SEED] [-c CONFIG]
 *
 * Each batch submits up to 8 requests at once: writes, trims and zeroes
 * may overlap each other arbitrarily, down to different bytes of the same
 * 4 KiB unit (the FTL serialises them in submission order, so the model
 * applies them in that order); reads are byte-disjoint from the batch's
 * writes but may share units with them, so a read-modify-write that
 * spoiled a neighbour's bytes, even for a moment, shows.  The device is
 * overwritten many times over, so GC relocates units written by partial
 * writes.  Every so often, and after a clean reopen and after a power cut
 * that follows a flush, the whole device is read back (in pieces with
 * unaligned boundaries) and compared.  Also: without the flag an unaligned
 * request still fails with -EINVAL; with it, bounds still hold.
 * Deterministic for a seed; a failure prints seed, config and batch.
 */
#include <getopt.h>
#include <stdarg.h>

#include "ftl/ftl.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"
#include "tests/unit/fixture.h"

#ifdef T_MODEL_DEFAULT_OPS /* set for the sanitizer build: fewer batches */
#define DEFAULT_BATCHES 3000
#else
#define DEFAULT_BATCHES 20000
#endif
#define MAXOPS 8
#define MAXLEN (1u << 20)

struct config {
	const char *preset;
	uint32_t sector;
	bool timing;
};

static const struct config configs[] = {
	{ "test-16m", 512, false },
	{ "test-16m", 4096, false },
	{ "test-16m", 4096, true },
	{ "test-16m", 512, true },
};
#define NCONFIGS (sizeof configs / sizeof configs[0])

struct op {
	struct ftl_io io;
	bool done;
};

static struct {
	const struct config *cfg;
	uint64_t seed0, rng, batch;
	struct nand_dev *dev;
	struct ftl *f;
	uint64_t cap;
	uint8_t *model;          /* what every byte of the device must read */
	uint8_t *buf[MAXOPS];    /* write data / read results */
	uint8_t *scratch;
	/* counters */
	uint64_t reads, writes, trims, zeroes, partial, bytes;
} M;

static uint64_t rnd(void)
{
	return t_rand(&M.rng);
}

static uint64_t rnd_below(uint64_t n)
{
	return t_rand_below(&M.rng, n);
}

static void __attribute__((format(printf, 1, 2), noreturn)) fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	t_vfail(M.seed0, M.cfg->preset, M.cfg->sector, M.cfg->timing, "batch", M.batch, fmt, ap);
	va_end(ap);
	exit(1);
}

static void op_done(struct ftl_io *io)
{
	((struct op *)io)->done = true;
}

/* Submit ops[0..n) at once, then drive the FTL until all are done. */
static void run_ops(struct op *ops, int n)
{
	for (int i = 0; i < n; i++) {
		ops[i].done = false;
		ops[i].io.done = op_done;
		ftl_submit(M.f, &ops[i].io);
	}
	for (int i = 0; i < n; i++)
		if (!poll_until_done(M.f, M.dev, &ops[i].done)) {
			ftl_debug_dump_public(M.f);
			fail("io %d (type %d at %" PRIu64 "+%" PRIu64 ") never completes", i,
			     ops[i].io.type, ops[i].io.offset, ops[i].io.length);
		}
}

static int one(enum ftl_io_type type, uint32_t flags, uint64_t off, uint64_t len, void *buf)
{
	struct op o = { .io = { .type = type, .flags = flags, .offset = off, .length = len, .buf = buf } };
	run_ops(&o, 1);
	return o.io.status;
}

static void fill_random(uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = rnd();
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(rnd() | 1);
}

/* A random byte range inside the device: mostly small and unaligned
 * (inside one unit, across a unit boundary), sometimes sector-aligned,
 * sometimes up to 1 MiB, sometimes empty, sometimes at the very end. */
static void random_range(uint64_t *off, uint64_t *len)
{
	uint64_t r = rnd_below(100), n;
	if (r < 35)
		n = 1 + rnd_below(64);
	else if (r < 65)
		n = 1 + rnd_below(3 * FTL_UNIT_SIZE);
	else if (r < 88)
		n = 1 + rnd_below(64 << 10);
	else if (r < 98)
		n = 1 + rnd_below(MAXLEN);
	else
		n = 0;
	uint64_t o = rnd_below(M.cap - n + 1);
	if (rnd_below(8) == 0) { /* sector-aligned, as a negotiating client sends */
		o = o / M.cfg->sector * M.cfg->sector;
		n = n / M.cfg->sector * M.cfg->sector;
	}
	if (rnd_below(32) == 0)
		o = M.cap - n;
	*off = o;
	*len = n;
}

static bool overlaps(uint64_t a, uint64_t al, uint64_t b, uint64_t bl)
{
	return al && bl && a < b + bl && b < a + al;
}

static void expect_bytes(const uint8_t *got, uint64_t off, uint64_t len, const char *what)
{
	if (!memcmp(got, M.model + off, len))
		return;
	uint64_t i = 0;
	while (got[i] == M.model[off + i])
		i++;
	fail("%s at %" PRIu64 "+%" PRIu64 ": byte %" PRIu64 " (device offset %" PRIu64
	     ", unit %" PRIu64 " byte %" PRIu64 ") reads %#x, want %#x",
	     what, off, len, i, off + i, (off + i) / FTL_UNIT_SIZE, (off + i) % FTL_UNIT_SIZE, got[i],
	     M.model[off + i]);
}

static void run_batch(void)
{
	struct op ops[MAXOPS];
	int n = 1 + (int)rnd_below(MAXOPS), k = 0;
	for (int tries = 0; k < n && tries < 4 * MAXOPS; tries++) {
		struct op *o = &ops[k];
		memset(o, 0, sizeof *o);
		uint64_t off, len;
		random_range(&off, &len);
		uint64_t r = rnd_below(100);
		enum ftl_io_type type = r < 35 ? FTL_IO_READ : r < 80 ? FTL_IO_WRITE
					       : r < 90 ? FTL_IO_TRIM : FTL_IO_WRITE_ZEROES;
		/* reads never share a byte with a write of the batch (either order) */
		bool clash = false;
		for (int j = 0; j < k; j++)
			if ((type == FTL_IO_READ) != (ops[j].io.type == FTL_IO_READ) &&
			    overlaps(off, len, ops[j].io.offset, ops[j].io.length))
				clash = true;
		if (clash)
			continue;
		o->io.type = type;
		o->io.offset = off;
		o->io.length = len;
		o->io.flags = FTL_IO_ANY_ALIGN;
		o->io.buf = M.buf[k];
		if (type == FTL_IO_WRITE)
			fill_random(M.buf[k], len);
		if (type != FTL_IO_READ && rnd_below(10) == 0)
			o->io.flags |= FTL_IO_FUA;
		if (type == FTL_IO_WRITE_ZEROES && rnd_below(3) == 0)
			o->io.flags |= FTL_IO_NO_HOLE;
		if (type != FTL_IO_WRITE)
			o->io.buf = type == FTL_IO_READ ? M.buf[k] : NULL;
		if (len && ((off | len) % FTL_UNIT_SIZE))
			M.partial++;
		k++;
	}
	run_ops(ops, k);
	/* writes in submission order; reads are disjoint from all of them */
	for (int i = 0; i < k; i++) {
		struct ftl_io *io = &ops[i].io;
		if (io->status)
			fail("%s at %" PRIu64 "+%" PRIu64 " (flags %#x) failed: %d",
			     io->type == FTL_IO_READ ? "read" : io->type == FTL_IO_WRITE ? "write"
							   : io->type == FTL_IO_TRIM ? "trim" : "zeroes",
			     io->offset, io->length, io->flags, io->status);
		M.bytes += io->length;
		switch (io->type) {
		case FTL_IO_READ:
			M.reads++;
			break;
		case FTL_IO_WRITE:
			M.writes++;
			memcpy(M.model + io->offset, io->buf, io->length);
			break;
		case FTL_IO_TRIM:
			/* partial units of a trim are zeroed (documented in ftl.h) */
			M.trims++;
			memset(M.model + io->offset, 0, io->length);
			break;
		default:
			M.zeroes++;
			memset(M.model + io->offset, 0, io->length);
			break;
		}
	}
	for (int i = 0; i < k; i++)
		if (ops[i].io.type == FTL_IO_READ)
			expect_bytes(ops[i].io.buf, ops[i].io.offset, ops[i].io.length, "read");
}

/* Read the whole device in pieces whose boundaries are unaligned. */
static void verify_all(const char *when)
{
	uint64_t off = 0;
	while (off < M.cap) {
		uint64_t n = 1 + rnd_below(MAXLEN);
		if (n > M.cap - off)
			n = M.cap - off;
		int rc = one(FTL_IO_READ, FTL_IO_ANY_ALIGN, off, n, M.scratch);
		if (rc)
			fail("%s: read at %" PRIu64 "+%" PRIu64 " failed: %d", when, off, n, rc);
		expect_bytes(M.scratch, off, n, when);
		off += n;
	}
}

static void open_ftl(void)
{
	char err[256];
	int rc = ftl_open(M.dev, NULL, &M.f, err, sizeof err);
	if (rc)
		fail("ftl_open: %s (%d)", err, rc);
}

/* Fixed cases: the flag's contract at the edges. */
static void edges(void)
{
	uint32_t ss = M.cfg->sector;
	uint8_t *b = M.buf[0];
	/* without the flag: unaligned is still refused, for every type */
	uint64_t bad_off = ss == 512 ? 100 : 512, bad_len = ss == 512 ? 700 : 1536;
	CHECK_EQ(one(FTL_IO_READ, 0, bad_off, ss, b), -EINVAL);
	CHECK_EQ(one(FTL_IO_READ, 0, 0, bad_len, b), -EINVAL);
	CHECK_EQ(one(FTL_IO_WRITE, 0, bad_off, ss, b), -EINVAL);
	CHECK_EQ(one(FTL_IO_TRIM, 0, 0, bad_len, NULL), -EINVAL);
	CHECK_EQ(one(FTL_IO_WRITE_ZEROES, 0, bad_off, ss, NULL), -EINVAL);
	/* with it: bounds hold byte-exactly */
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, M.cap - 3, 4, b), -EINVAL);
	CHECK_EQ(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN, M.cap - 3, 4, b), -ENOSPC);
	CHECK_EQ(one(FTL_IO_TRIM, FTL_IO_ANY_ALIGN, M.cap - 1, 2, NULL), -ENOSPC);
	CHECK_EQ(one(FTL_IO_WRITE_ZEROES, FTL_IO_ANY_ALIGN, M.cap + 1, 0, NULL), -ENOSPC);
	/* zero length at an odd offset: a no-op */
	CHECK_EQ(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN, 12345, 0, b), 0);
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, M.cap, 0, b), 0);
	/* the last byte, the first byte */
	b[0] = 0x5c;
	CHECK_EQ(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN, M.cap - 1, 1, b), 0);
	M.model[M.cap - 1] = 0x5c;
	b[0] = 0xc5;
	CHECK_EQ(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN, 0, 1, b), 0);
	M.model[0] = 0xc5;
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, M.cap - 2, 2, b), 0);
	CHECK(b[0] == 0 && b[1] == 0x5c);

	/* an unaligned trim: whole units inside it are unmapped, the partial
	 * ones at its ends keep their other bytes and read zeros inside it */
	uint64_t base = 64 * FTL_UNIT_SIZE;
	fill_random(b, 6 * FTL_UNIT_SIZE);
	CHECK_EQ(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN, base, 6 * FTL_UNIT_SIZE, b), 0);
	memcpy(M.model + base, b, 6 * FTL_UNIT_SIZE);
	uint64_t t0 = base + 1000, t1 = base + 4 * FTL_UNIT_SIZE + 77;
	CHECK_EQ(one(FTL_IO_TRIM, FTL_IO_ANY_ALIGN, t0, t1 - t0, NULL), 0);
	memset(M.model + t0, 0, t1 - t0);
	bool mapped;
	CHECK_EQ(ftl_map_extent(M.f, base, FTL_UNIT_SIZE, &mapped), FTL_UNIT_SIZE);
	CHECK(mapped);
	CHECK_EQ(ftl_map_extent(M.f, base + FTL_UNIT_SIZE, 3 * FTL_UNIT_SIZE, &mapped),
		 3 * FTL_UNIT_SIZE);
	CHECK(!mapped);
	CHECK_EQ(ftl_map_extent(M.f, base + 4 * FTL_UNIT_SIZE, FTL_UNIT_SIZE, &mapped), FTL_UNIT_SIZE);
	CHECK(mapped);
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, base, 6 * FTL_UNIT_SIZE, b), 0);
	expect_bytes(b, base, 6 * FTL_UNIT_SIZE, "unaligned trim");

	/* many one-byte writes to the same unit in one batch: none is lost */
	struct op ops[MAXOPS];
	uint64_t u = base + 5 * FTL_UNIT_SIZE;
	for (int i = 0; i < MAXOPS; i++) {
		memset(&ops[i], 0, sizeof ops[i]);
		M.buf[i][0] = (uint8_t)(0xa0 + i);
		ops[i].io = (struct ftl_io){ .type = FTL_IO_WRITE, .flags = FTL_IO_ANY_ALIGN,
					     .offset = u + 513 * (uint64_t)i, .length = 1,
					     .buf = M.buf[i] };
		M.model[u + 513 * (uint64_t)i] = (uint8_t)(0xa0 + i);
	}
	run_ops(ops, MAXOPS);
	for (int i = 0; i < MAXOPS; i++)
		CHECK_EQ(ops[i].io.status, 0);
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, u, FTL_UNIT_SIZE, b), 0);
	expect_bytes(b, u, FTL_UNIT_SIZE, "eight one-byte writes to one unit");
}

static void run_config(const struct config *cfg, uint64_t batches, uint64_t seed)
{
	memset(&M, 0, sizeof M);
	M.cfg = cfg;
	M.seed0 = seed;
	M.rng = seed * 0x9E3779B97F4A7C15ull + 1;
	for (int i = 0; i < MAXOPS; i++)
		M.buf[i] = aligned_alloc(4096, MAXLEN);
	M.scratch = aligned_alloc(4096, MAXLEN);

	struct nand_sim_config sc = { .preset = cfg->preset, .timing = cfg->timing,
				      .virtual_time = cfg->timing, .seed = seed };
	char err[256];
	if (nand_sim_open(&sc, &M.dev, err, sizeof err))
		fail("nand_sim_open: %s", err);
	struct ftl_format_params fp = { .sector_size = cfg->sector };
	if (ftl_format(M.dev, &fp, err, sizeof err))
		fail("ftl_format: %s", err);
	open_ftl();
	struct ftl_info info;
	ftl_get_info(M.f, &info);
	M.cap = info.capacity;
	M.model = calloc(1, M.cap);
	CHECK(M.model);

	edges();
	for (M.batch = 0; M.batch < batches; M.batch++) {
		run_batch();
		if (M.batch % 5000 == 4999)
			verify_all("periodic read-back");
	}
	verify_all("read-back after the batches");
	struct ftl_stats st;
	ftl_get_stats(M.f, &st);
	printf("%s/%u%s: capacity %" PRIu64 ", %" PRIu64 " batches: %" PRIu64 " reads, %" PRIu64
	       " writes, %" PRIu64 " trims, %" PRIu64 " zeroes (%" PRIu64 " with partial units), %.0f MiB;"
	       " WA %.2f, %" PRIu64 " pages relocated by GC\n",
	       cfg->preset, cfg->sector, cfg->timing ? "/timed" : "", M.cap, batches, M.reads, M.writes,
	       M.trims, M.zeroes, M.partial, M.bytes / 1048576.0, st.write_amplification,
	       st.gc_pages_relocated);
	CHECK(batches < 1000 || st.gc_pages_relocated > 0);

	/* clean reopen */
	CHECK_RC(ftl_close(M.f));
	open_ftl();
	verify_all("read-back after a clean reopen");

	/* more partial writes, a flush, then a power cut: all of it survives */
	for (int i = 0; i < 200; i++)
		run_batch();
	CHECK_EQ(one(FTL_IO_FLUSH, 0, 0, 0, NULL), 0);
	struct nand_sim_faults cut = { .power_cut_after = 1 };
	nand_sim_set_faults(M.dev, &cut);
	uint8_t x = 1;
	CHECK(one(FTL_IO_WRITE, FTL_IO_ANY_ALIGN | FTL_IO_FUA, 4097, 1, &x) == -EIO);
	ftl_abandon(M.f);
	nand_sim_power_on(M.dev);
	open_ftl();
	/* the byte written across the cut was never acknowledged: either value */
	uint8_t old = M.model[4097];
	CHECK_EQ(one(FTL_IO_READ, FTL_IO_ANY_ALIGN, 4097, 1, &x), 0);
	CHECK(x == old || x == 1);
	M.model[4097] = x;
	verify_all("read-back after a power cut that followed a flush");

	CHECK_RC(ftl_close(M.f));
	nand_close(M.dev);
	free(M.model);
	for (int i = 0; i < MAXOPS; i++)
		free(M.buf[i]);
	free(M.scratch);
}

int main(int argc, char **argv)
{
	uint64_t batches = DEFAULT_BATCHES, seed = 20261215;
	int only = -1, c;
	while ((c = getopt(argc, argv, "n:s:c:")) != -1) {
		switch (c) {
		case 'n': batches = strtoull(optarg, NULL, 10); break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		case 'c': only = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-n BATCHES] [-s SEED] [-c CONFIG]\n", argv[0]);
			return 2;
		}
	}
	const char *env = getenv("T_SEED");
	if (env)
		seed = strtoull(env, NULL, 10);
	ftl_set_logger(quiet_log, NULL);
	printf("seed %" PRIu64 "\n", seed);
	for (size_t i = 0; i < NCONFIGS; i++)
		if (only < 0 || (size_t)only == i)
			run_config(&configs[i], batches, seed + i);
	printf("ok\n");
	return 0;
}
