/*
 * t_nand_conformance - the NAND rules of hw/nand.h, checked the same way on
 * every backend through nand_open() alone: erased pages read 0xFF (data and
 * spare), programs in order, each page once, a refused program writes
 * nothing, per-die completion order, the status codes of invalid addresses
 * and bad blocks, the in-flight count and the event fd, and the data CRC
 * a read returns with NAND_OPF_DATA_CRC.
 *
 * Always: the simulator (RAM, untimed and with its timing model), and
 * "async", a backend of this test that runs the simulator on a worker
 * thread and signals completions on an event fd, as the mtd backend does;
 * the FTL then formats, writes, closes (every operation delivered before
 * close returns) and reopens on it.  The mtd backend's spare CRC (it
 * corrects one bit flip in the free OOB bytes), its erased-page test
 * (bit flips judged per ECC step), its layout from MEMGETINFO and sysfs
 * (a fake sysfs directory: devices of 4 GiB and more) and its read errors'
 * statuses on their own.  With
 * FLASHD_TEST_NAND=/dev/mtdN also
 * that raw NAND through the mtd backend (tests/vm: nandsim); it ERASES the
 * blocks it uses.  FLASHD_TEST_NAND_BAD=1 says that device has a block
 * marked bad (nandsim badblocks=): the check of NAND_BLOCK_BAD is then
 * required.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <mtd/mtd-user.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/queue.h"
#include "ftl/ftl.h"
#include "hw/nand_backend.h"
#include "tests/unit/t.h"

struct done_log {
	struct nand_op *order[64];
	int n;
};

static void on_done(struct nand_op *op)
{
	struct done_log *l = op->priv;
	if (l->n < 64)
		l->order[l->n] = op;
	l->n++;
}

/* Submit ops[0..n) at once; deliver all (in the log, in completion order). */
static void run(struct nand_dev *d, struct nand_op *ops, int n, struct done_log *l)
{
	l->n = 0;
	uint64_t before = d->inflight;
	for (int i = 0; i < n; i++) {
		ops[i].done = on_done;
		ops[i].priv = l;
		CHECK_RC(nand_submit(d, &ops[i]));
	}
	CHECK_EQ(d->inflight, before + (uint64_t)n);
	while (l->n < n) {
		nand_wait_until(d, nand_next_due(d));
		nand_poll(d, nand_now(d));
	}
	CHECK_EQ(l->n, n);
	CHECK_EQ(d->inflight, before);
}

static enum nand_status op1(struct nand_dev *d, enum nand_op_type type, uint32_t block,
			    uint32_t page, void *data, void *spare)
{
	struct nand_op op = { .type = type, .block = block, .page = page, .data = data,
			      .spare = spare };
	struct done_log l;
	run(d, &op, 1, &l);
	return op.status;
}

static bool good_read(enum nand_status st)
{
	return st == NAND_OK || st == NAND_CORRECTED;
}

/* A read with NAND_OPF_DATA_CRC of a page expected to hold want (data):
 * the data come back and data_crc is their CRC32C; the same through
 * read_now where the backend has it. */
static void check_read_crc(struct nand_dev *d, uint32_t block, uint32_t page, const uint8_t *want,
			   uint8_t *rd, uint8_t *rs)
{
	uint32_t ps = d->geo.page_size;
	uint32_t crc = crc32c(0, want, ps);
	struct nand_op op = { .type = NAND_OP_READ, .block = block, .page = page, .data = rd,
			      .spare = rs, .flags = NAND_OPF_DATA_CRC, .data_crc = ~crc };
	struct done_log l;
	memset(rd, 0, ps);
	run(d, &op, 1, &l);
	CHECK(good_read(op.status) && !memcmp(rd, want, ps));
	CHECK_EQ(op.data_crc, crc);
	nand_read_now_t read_now = nand_read_now_fn(d);
	if (read_now) {
		uint32_t now_crc = ~crc;
		memset(rd, 0, ps);
		CHECK(good_read(read_now(d, block, page, rd, rs, &now_crc)));
		CHECK(!memcmp(rd, want, ps));
		CHECK_EQ(now_crc, crc);
	}
}

static bool all_ff(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0xFF)
			return false;
	return true;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)t_rand(&seed);
	if (!seed)
		p[0] = 0;
}

/* The first good block of die (at or after its block skip). */
static uint32_t good_block(struct nand_dev *d, uint32_t die, uint32_t skip)
{
	const struct nand_geometry *g = &d->geo;
	for (uint32_t i = skip; i < g->blocks_per_die; i++) {
		uint32_t b = die * g->blocks_per_die + i;
		if (!nand_factory_bad(d, b))
			return b;
	}
	fprintf(stderr, "no good block on die %u\n", die);
	exit(1);
}

/* Page buffers of check_device, a page and a spare each, and the sizes. */
struct pagebufs {
	uint32_t ps, ss;
	uint8_t *data, *spare, *rd, *rs, *d2, *s2;
};

/* Block b erased, then programmed in order and read back (whole, spare
 * alone, with the data's CRC); the program rules: once per page, in
 * order, data required. */
static void check_program_rules(struct nand_dev *d, uint32_t b, const struct pagebufs *pb)
{
	uint32_t ppb = d->geo.pages_per_block;
	uint32_t ps = pb->ps, ss = pb->ss;
	uint8_t *data = pb->data, *spare = pb->spare, *rd = pb->rd, *rs = pb->rs;
	uint8_t *d2 = pb->d2, *s2 = pb->s2;

	/* erased: all 0xFF, data and spare */
	CHECK_EQ(op1(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	for (uint32_t p = 0; p < ppb; p += ppb / 4) {
		memset(rd, 0, ps);
		memset(rs, 0, ss);
		CHECK(good_read(op1(d, NAND_OP_READ, b, p, rd, rs)));
		CHECK(all_ff(rd, ps) && all_ff(rs, ss));
	}

	/* programs in order; read back whole; spare alone */
	for (uint32_t p = 0; p < 3; p++) {
		fill(data, ps, 100 + p);
		fill(spare, ss, 200 + p);
		CHECK_EQ(op1(d, NAND_OP_PROGRAM, b, p, data, spare), NAND_OK);
	}
	for (uint32_t p = 0; p < 3; p++) {
		fill(data, ps, 100 + p);
		fill(spare, ss, 200 + p);
		CHECK(good_read(op1(d, NAND_OP_READ, b, p, rd, rs)));
		CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));
		memset(rs, 0, ss);
		CHECK(good_read(op1(d, NAND_OP_READ, b, p, NULL, rs)));
		CHECK(!memcmp(rs, spare, ss));
		/* the data's CRC32C, summed by the backend (NAND_OPF_DATA_CRC) */
		check_read_crc(d, b, p, data, rd, rs);
	}
	memset(d2, 0xFF, ps);
	check_read_crc(d, b, ppb - 1, d2, rd, rs); /* erased */

	/* program-once: page 1 again fails and leaves it as it was */
	fill(d2, ps, 7);
	fill(s2, ss, 8);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, b, 1, d2, s2), NAND_PROGRAM_FAILED);
	fill(data, ps, 101);
	fill(spare, ss, 201);
	CHECK(good_read(op1(d, NAND_OP_READ, b, 1, rd, rs)));
	CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));

	/* out of order: page 5 before 3 fails and writes nothing; 3 then goes */
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, b, 5, d2, s2), NAND_PROGRAM_FAILED);
	CHECK(good_read(op1(d, NAND_OP_READ, b, 5, rd, rs)));
	CHECK(all_ff(rd, ps) && all_ff(rs, ss));
	/* no spare: it reads erased */
	fill(data, ps, 103);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, b, 3, data, NULL), NAND_OK);
	CHECK(good_read(op1(d, NAND_OP_READ, b, 3, rd, rs)));
	CHECK(!memcmp(rd, data, ps) && all_ff(rs, ss));
	/* no data: refused, the page stays erased */
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, b, 4, NULL, s2), NAND_PROGRAM_FAILED);
	CHECK(good_read(op1(d, NAND_OP_READ, b, 4, rd, rs)));
	CHECK(all_ff(rd, ps) && all_ff(rs, ss));
}

/* Completions: on one die in submission order, each op seeing the ones
 * before it; on several dies, every one comes, each die in its order.
 * Leaves block b programmed at pages 0 and 1. */
static void check_completion_order(struct nand_dev *d, uint32_t b, const struct pagebufs *pb)
{
	const struct nand_geometry *g = &d->geo;
	uint32_t ps = pb->ps, ss = pb->ss;
	uint8_t *data = pb->data, *spare = pb->spare, *rd = pb->rd, *rs = pb->rs;
	uint8_t *d2 = pb->d2, *s2 = pb->s2;

	/* one die, submitted together: completions in submission order, each
	 * seeing the ones before (old data, erased, new data) */
	struct nand_op ops[6] = {
		{ .type = NAND_OP_READ, .block = b, .page = 0, .data = rd, .spare = rs },
		{ .type = NAND_OP_ERASE, .block = b },
		{ .type = NAND_OP_READ, .block = b, .page = 0, .data = d2, .spare = s2 },
		{ .type = NAND_OP_PROGRAM, .block = b, .page = 0, .data = data, .spare = spare },
		{ .type = NAND_OP_PROGRAM, .block = b, .page = 1, .data = data, .spare = spare },
	};
	uint8_t *d3 = malloc(ps), *s3 = malloc(ss);
	CHECK(d3 && s3);
	ops[5] = (struct nand_op){ .type = NAND_OP_READ, .block = b, .page = 1, .data = d3, .spare = s3 };
	uint8_t *old = malloc(ps);
	CHECK(old);
	fill(old, ps, 100);
	fill(data, ps, 300);
	fill(spare, ss, 301);
	struct done_log l;
	run(d, ops, 6, &l);
	for (int i = 0; i < 6; i++)
		CHECK(l.order[i] == &ops[i]);
	CHECK(good_read(ops[0].status) && !memcmp(rd, old, ps));
	CHECK_EQ(ops[1].status, NAND_OK);
	CHECK(good_read(ops[2].status) && all_ff(d2, ps) && all_ff(s2, ss));
	CHECK_EQ(ops[3].status, NAND_OK);
	CHECK_EQ(ops[4].status, NAND_OK);
	CHECK(good_read(ops[5].status) && !memcmp(d3, data, ps) && !memcmp(s3, spare, ss));

	/* several dies at once: every completion comes, each die in its order */
	if (nand_dies(g) > 1) {
		struct nand_op mops[8];
		uint32_t nd = nand_dies(g) < 4 ? nand_dies(g) : 4, n = 0;
		for (uint32_t die = 0; die < nd; die++) {
			uint32_t bb = good_block(d, die, g->blocks_per_die / 2);
			mops[n++] = (struct nand_op){ .type = NAND_OP_ERASE, .block = bb };
			mops[n++] = (struct nand_op){ .type = NAND_OP_PROGRAM, .block = bb, .page = 0,
						      .data = data, .spare = spare };
		}
		run(d, mops, (int)n, &l);
		for (uint32_t die = 0; die < nd; die++) {
			int at_erase = -1, at_program = -1;
			for (int i = 0; i < l.n; i++) {
				if (l.order[i] == &mops[2 * die])
					at_erase = i;
				if (l.order[i] == &mops[2 * die + 1])
					at_program = i;
			}
			CHECK(at_erase >= 0 && at_program > at_erase);
			CHECK_EQ(mops[2 * die].status, NAND_OK);
			CHECK_EQ(mops[2 * die + 1].status, NAND_OK);
		}
	}
	free(d3);
	free(s3);
	free(old);
}

/* Addresses out of range are NAND_INVALID; a block marked bad (one must
 * exist if must_have_bad) takes no program or erase. */
static void check_refusals(struct nand_dev *d, uint32_t b, const char *what, bool must_have_bad,
			   const struct pagebufs *pb)
{
	const struct nand_geometry *g = &d->geo;
	uint32_t ppb = g->pages_per_block;
	uint8_t *data = pb->data, *spare = pb->spare, *rd = pb->rd, *rs = pb->rs;

	/* status codes: addresses out of range are NAND_INVALID */
	CHECK_EQ(op1(d, NAND_OP_READ, nand_blocks(g), 0, rd, rs), NAND_INVALID);
	CHECK_EQ(op1(d, NAND_OP_READ, b, ppb, rd, rs), NAND_INVALID);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, nand_blocks(g), 0, data, spare), NAND_INVALID);
	CHECK_EQ(op1(d, NAND_OP_ERASE, nand_blocks(g), 0, NULL, NULL), NAND_INVALID);

	/* a block marked bad takes no program or erase */
	uint32_t bad = UINT32_MAX;
	for (uint32_t i = 0; i < nand_blocks(g) && bad == UINT32_MAX; i++)
		if (nand_factory_bad(d, i))
			bad = i;
	if (must_have_bad)
		CHECK(bad != UINT32_MAX);
	if (bad != UINT32_MAX) {
		CHECK_EQ(op1(d, NAND_OP_ERASE, bad, 0, NULL, NULL), NAND_BLOCK_BAD);
		CHECK_EQ(op1(d, NAND_OP_PROGRAM, bad, 0, data, spare), NAND_BLOCK_BAD);
		printf("%s: block %u is marked bad: program and erase refused\n", what, bad);
	}
}

/* The event fd of a backend that completes on its own threads: readable
 * while a completion waits, drained by nand_poll; without one, nothing
 * is ever due. */
static void check_event_fd(struct nand_dev *d, uint32_t b, const struct pagebufs *pb)
{
	uint8_t *rd = pb->rd, *rs = pb->rs;
	struct done_log l;

	/* the event fd (backends that complete on their own threads): readable
	 * while a completion waits, drained by nand_poll */
	int efd = nand_event_fd(d);
	if (efd >= 0) {
		struct nand_op op = { .type = NAND_OP_READ, .block = b, .page = 0, .data = rd,
				      .spare = rs, .done = on_done, .priv = &l };
		l.n = 0;
		CHECK_RC(nand_submit(d, &op));
		struct pollfd pfd = { .fd = efd, .events = POLLIN };
		CHECK_EQ(poll(&pfd, 1, 10000), 1);
		CHECK_EQ(nand_next_due(d), 0);
		CHECK_EQ(nand_poll(d, nand_now(d)), 1);
		CHECK_EQ(l.n, 1);
		CHECK_EQ(poll(&pfd, 1, 0), 0);
		CHECK_EQ(nand_next_due(d), UINT64_MAX);
		CHECK_EQ(d->inflight, 0);
	} else {
		CHECK(nand_next_due(d) == UINT64_MAX);
	}
}

static void check_device(struct nand_dev *d, const char *what, bool must_have_bad)
{
	const struct nand_geometry *g = &d->geo;
	uint32_t ps = g->page_size, ss = g->spare_size, ppb = g->pages_per_block;
	printf("%s: backend %s (%s): %u dies, %u blocks/die, %u pages/block, %u+%u bytes, caps %#x\n",
	       what, nand_backend_name(d), d->preset, nand_dies(g), g->blocks_per_die, ppb, ps, ss,
	       d->caps);
	CHECK(ps >= 512 && ps % 512 == 0 && ss > 0 && ppb >= 8 && nand_dies(g) >= 1);
	struct pagebufs pb = { .ps = ps, .ss = ss, .data = malloc(ps), .spare = malloc(ss),
			       .rd = malloc(ps), .rs = malloc(ss), .d2 = malloc(ps), .s2 = malloc(ss) };
	CHECK(pb.data && pb.spare && pb.rd && pb.rs && pb.d2 && pb.s2);
	uint32_t b = good_block(d, 0, 1);

	check_program_rules(d, b, &pb);
	check_completion_order(d, b, &pb);
	check_refusals(d, b, what, must_have_bad, &pb);
	check_event_fd(d, b, &pb);
	/* what the test wrote is erased again */
	CHECK_EQ(op1(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	free(pb.data);
	free(pb.spare);
	free(pb.rd);
	free(pb.rs);
	free(pb.d2);
	free(pb.s2);
	printf("%s: ok\n", what);
}

/* ---- "async": the simulator behind a worker thread and an event fd ---- */

struct async_dev {
	struct nand_dev dev;
	struct nand_dev *inner;      /* touched by the worker only, once open */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	struct nand_op *qhead, *qtail; /* submitted */
	struct nand_op *dhead, *dtail; /* done, not delivered */
};

static void inner_done(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

static void *async_main(void *arg)
{
	struct async_dev *a = arg;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		while (!a->qhead && !a->stop)
			pthread_cond_wait(&a->cv, &a->mu);
		if (a->stop)
			break;
		struct nand_op *op = a->qhead;
		a->qhead = op->next;
		if (!a->qhead)
			a->qtail = NULL;
		pthread_mutex_unlock(&a->mu);
		/* a while on the "chip": the owner gets to wait */
		struct timespec ts = { 0, 20000 };
		nanosleep(&ts, NULL);
		bool done = false;
		struct nand_op in = { .type = op->type, .block = op->block, .page = op->page,
				      .data = op->data, .spare = op->spare, .flags = op->flags,
				      .done = inner_done, .priv = &done };
		CHECK_RC(nand_submit(a->inner, &in));
		while (!done)
			nand_poll(a->inner, nand_now(a->inner));
		op->status = in.status;
		op->err = in.err;
		op->corrected_bits = in.corrected_bits;
		op->corrected_max = in.corrected_max;
		op->data_crc = in.data_crc;
		op->next = NULL;
		pthread_mutex_lock(&a->mu);
		if (a->dtail) {
			a->dtail->next = op;
		} else {
			a->dhead = op;
			uint64_t one = 1;
			CHECK(write(a->dev.event_fd, &one, sizeof one) == sizeof one);
		}
		a->dtail = op;
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static int async_submit(struct nand_dev *d, struct nand_op *op)
{
	struct async_dev *a = (struct async_dev *)d;
	pthread_mutex_lock(&a->mu);
	QUEUE_APPEND(a->qhead, a->qtail, op, next);
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static int async_poll(struct nand_dev *d, uint64_t now)
{
	struct async_dev *a = (struct async_dev *)d;
	pthread_mutex_lock(&a->mu);
	struct nand_op *op = a->dhead;
	a->dhead = a->dtail = NULL;
	uint64_t v;
	if (op)
		CHECK(read(d->event_fd, &v, sizeof v) == sizeof v);
	pthread_mutex_unlock(&a->mu);
	int n = 0;
	while (op) {
		struct nand_op *next = op->next;
		nand_deliver(d, op);
		n++;
		op = next;
	}
	return n;
}

static uint64_t async_next_due(struct nand_dev *d)
{
	struct async_dev *a = (struct async_dev *)d;
	pthread_mutex_lock(&a->mu);
	bool ready = a->dhead != NULL;
	pthread_mutex_unlock(&a->mu);
	return ready ? 0 : UINT64_MAX;
}

static int async_sync(struct nand_dev *d)
{
	return 0;
}

static uint32_t async_erase_count(struct nand_dev *d, uint32_t block)
{
	return 0;
}

static bool async_factory_bad(struct nand_dev *d, uint32_t block)
{
	return block >= nand_blocks(&d->geo);
}

static uint64_t async_now(struct nand_dev *d)
{
	return nand_now_ns();
}

static void async_wait_until(struct nand_dev *d, uint64_t t)
{
	if (async_next_due(d) == 0)
		return;
	uint64_t now = nand_now_ns();
	int ms = t == UINT64_MAX ? -1 : t <= now ? 0 : (int)((t - now + 999999) / 1000000);
	struct pollfd pfd = { .fd = d->event_fd, .events = POLLIN };
	poll(&pfd, 1, ms);
}

static void async_close(struct nand_dev *d)
{
	struct async_dev *a = (struct async_dev *)d;
	pthread_mutex_lock(&a->mu);
	a->stop = true;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL);
	nand_close(a->inner);
	close(d->event_fd);
	free(a);
}

static const struct nand_ops async_ops = {
	.name = "async",
	.submit = async_submit,
	.poll = async_poll,
	.next_due = async_next_due,
	.sync = async_sync,
	.erase_count = async_erase_count,
	.factory_bad = async_factory_bad,
	.now = async_now,
	.wait_until = async_wait_until,
	.close = async_close,
};

static struct nand_dev *async_open(const char *preset)
{
	struct async_dev *a = calloc(1, sizeof *a);
	CHECK(a);
	char err[256];
	struct nand_spec spec = { .preset = preset };
	CHECK_RC(nand_open(&spec, &a->inner, err, sizeof err));
	a->dev.ops = &async_ops;
	a->dev.geo = a->inner->geo;
	snprintf(a->dev.preset, sizeof a->dev.preset, "async:%s", preset);
	a->dev.event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	CHECK(a->dev.event_fd >= 0);
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	CHECK(pthread_create(&a->thread, NULL, async_main, a) == 0);
	return &a->dev;
}

/* The FTL on a backend whose completions come from another thread: format,
 * write, close (nothing may be left in flight: the backend still owns what
 * is), reopen, read back. */
static void ftl_on_async(void)
{
	struct nand_dev *d = async_open("test-16m");
	char err[512];
	struct ftl_format_params fp = { .sector_size = 4096, .op_percent = 25 };
	CHECK_RC(ftl_format(d, &fp, err, sizeof err));
	CHECK_EQ(d->inflight, 0);
	struct ftl *f;
	if (ftl_open(d, NULL, &f, err, sizeof err)) {
		fprintf(stderr, "ftl_open: %s\n", err);
		exit(1);
	}
	uint8_t *buf = malloc(1 << 20), *back = malloc(1 << 20);
	CHECK(buf && back);
	fill(buf, 1 << 20, 42);
	CHECK_RC(ftl_write_sync(f, buf, 0, 1 << 20, 0));
	CHECK_RC(ftl_write_sync(f, buf, 8 << 20, 256 << 10, 0));
	CHECK_RC(ftl_close(f));
	CHECK_EQ(d->inflight, 0);
	CHECK_RC(ftl_open(d, NULL, &f, err, sizeof err));
	CHECK_RC(ftl_read_sync(f, back, 0, 1 << 20));
	CHECK(!memcmp(buf, back, 1 << 20));
	CHECK_RC(ftl_read_sync(f, back, 8 << 20, 256 << 10));
	CHECK(!memcmp(buf, back, 256 << 10));
	CHECK_RC(ftl_close(f));
	CHECK_EQ(d->inflight, 0);
	nand_close(d);
	free(buf);
	free(back);
	printf("ftl on async: ok\n");
}

/* The mtd backend's spare in the free OOB bytes: every single bit flip is
 * corrected, two or three never taken for one; erased reads as erased. */
static void mtd_spare_crc(void)
{
	static const uint32_t lens[] = { 40, 74, 146 };
	uint64_t seed = 11;
	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
		uint32_t len = lens[li], n = len + 4;
		uint8_t spare[160], oob[160], good[160], back[160];
		for (uint32_t i = 0; i < len; i++)
			spare[i] = (uint8_t)t_rand(&seed);
		nand_mtd_spare_pack(good, spare, len);
		memcpy(oob, good, n);
		CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), 0);
		CHECK(!memcmp(back, spare, len));
		for (uint32_t bit = 0; bit < 8 * n; bit++) {
			memcpy(oob, good, n);
			oob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			memset(back, 0, len);
			CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), 1);
			CHECK(!memcmp(back, spare, len));
		}
		for (int t = 0; t < 2000; t++) {
			memcpy(oob, good, n);
			uint32_t flips = 2 + (uint32_t)(t & 1), done = 0, at[3];
			while (done < flips) {
				uint32_t bit = (uint32_t)(t_rand(&seed) % (8 * n));
				bool dup = false;
				for (uint32_t j = 0; j < done; j++)
					dup |= at[j] == bit;
				if (dup)
					continue;
				at[done++] = bit;
				oob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			}
			CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), -1);
		}
		/* erased, and erased but for a bit: 0xFF; two bits off: not erased */
		memset(oob, 0xFF, n);
		CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), 0);
		CHECK(all_ff(back, len));
		oob[n - 1] &= 0x7F;
		CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), 1);
		CHECK(all_ff(back, len));
		oob[0] &= 0xFE;
		CHECK_EQ(nand_mtd_spare_unpack(oob, back, len), -1);
	}
	printf("mtd spare CRC: ok\n");
}

/* Raw MEMREAD/MEMWRITE of one page (data + the whole OOB) on a second fd
 * of the device; the kernel's answer (0 or -errno). */
static int mtd_raw(int fd, bool write, uint64_t at, uint8_t *data, uint32_t len, uint8_t *oob,
		   uint32_t ooblen, uint8_t mode)
{
	if (write) {
		struct mtd_write_req rq = { .start = at, .len = len, .ooblen = ooblen,
					    .usr_data = (uintptr_t)data, .usr_oob = (uintptr_t)oob,
					    .mode = mode };
		return ioctl(fd, MEMWRITE, &rq) < 0 ? -errno : 0;
	}
	struct mtd_read_req rq = { .start = at, .len = len, .ooblen = ooblen,
				   .usr_data = (uintptr_t)data, .usr_oob = (uintptr_t)oob,
				   .mode = mode };
	return ioctl(fd, MEMREAD, &rq) < 0 ? -errno : 0;
}

/*
 * What raw NAND under MTD does not do for the FTL, and the mtd backend does
 * (on path, through d, open on it).  A page is programmed through the
 * backend, read raw (data, ECC and free OOB bytes as on the chip), and
 * written raw with bits changed into pages of a second block, as bit flips
 * would: one bit in one ECC step is NAND_CORRECTED with corrected_max 1;
 * one bit in each of two steps is corrected_bits 2 but corrected_max 1
 * (MEMREAD's ecc_stats.max_bitflips: what the FTL's scrubbing compares
 * with ecc_bits, whereas the kernel says EUCLEAN for any corrected bit,
 * even with bitflip_threshold above the flips);
 * ecc_bits + 1 bits in one step is NAND_UNCORRECTABLE (EBADMSG); a flipped
 * bit in the free OOB bytes comes back from the kernel unreported (no ECC
 * there) and the backend's spare CRC corrects it.  Then the kernel's lax
 * programs: it takes a second program of a page (and a program out of
 * order, and one into a block marked bad, on Linux 6.1); the backend
 * refuses them without reaching the chip (checked by check_device).
 */
static void mtd_ecc(struct nand_dev *d, const char *path)
{
	const struct nand_geometry *g = &d->geo;
	uint32_t ps = g->page_size, ss = g->spare_size;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	struct mtd_info_user mi;
	CHECK_EQ(ioctl(fd, MEMGETINFO, &mi), 0);
	uint32_t oobsize = mi.oobsize, step = d->ecc_codeword_bytes, bits = d->ecc_bits;
	CHECK(step >= 256 && ps % step == 0 && bits >= 1 && oobsize >= ss);
	uint8_t *data = malloc(ps), *spare = malloc(ss), *rd = malloc(ps), *rs = malloc(ss);
	uint8_t *raw = malloc(ps), *oob = malloc(oobsize), *w = malloc(ps), *woob = malloc(oobsize);
	CHECK(data && spare && rd && rs && raw && oob && w && woob);
	uint32_t a = good_block(d, nand_dies(g) - 1, 3);
	uint32_t b = good_block(d, nand_dies(g) - 1, a % g->blocks_per_die + 1);
	uint64_t pb = (uint64_t)mi.erasesize;
	CHECK_EQ(op1(d, NAND_OP_ERASE, a, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(op1(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	fill(data, ps, 71);
	fill(spare, ss, 72);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, a, 0, data, spare), NAND_OK);
	CHECK_EQ(mtd_raw(fd, false, a * pb, raw, ps, oob, oobsize, MTD_OPS_RAW), 0);
	CHECK(!memcmp(raw, data, ps)); /* software ECC: data first, then the OOB */

	/* page 0: one bit; page 1: one bit in each of two steps; page 2:
	 * ecc_bits + 1 bits in the first step */
	for (uint32_t p = 0; p < 3; p++) {
		memcpy(w, raw, ps);
		uint32_t nflip = p == 0 ? 1 : p == 1 ? 2 : bits + 1;
		for (uint32_t i = 0; i < nflip; i++) {
			uint32_t bit = p == 1 ? i * step * 8 + 77 : 13 + i * 29;
			w[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		}
		CHECK_EQ(mtd_raw(fd, true, b * pb + (uint64_t)p * ps, w, ps, oob, oobsize, MTD_OPS_RAW), 0);
		struct nand_op op = { .type = NAND_OP_READ, .block = b, .page = p, .data = rd,
				      .spare = rs };
		struct done_log l;
		run(d, &op, 1, &l);
		if (p < 2) {
			CHECK_EQ(op.status, NAND_CORRECTED);
			CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));
			CHECK_EQ(op.corrected_max, 1);
			CHECK(op.corrected_bits >= nflip);
		} else {
			CHECK_EQ(op.status, NAND_UNCORRECTABLE);
		}
	}
	/* bitflip_threshold above the worst step's flips (page 0: 1): MEMREAD
	 * still says EUCLEAN (mtdchar sets its code from the request's
	 * counts), and the backend, which goes by the counts, NAND_CORRECTED */
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	char thr_path[96], thr_old[32] = "";
	snprintf(thr_path, sizeof thr_path, "/sys/dev/char/%u:%u/bitflip_threshold",
		 major(st.st_rdev), minor(st.st_rdev));
	FILE *f = fopen(thr_path, "r");
	CHECK(f && fgets(thr_old, sizeof thr_old, f));
	fclose(f);
	f = fopen(thr_path, "w");
	CHECK(f);
	fprintf(f, "%u\n", bits + 1);
	CHECK(fclose(f) == 0);
	int kernel = mtd_raw(fd, false, b * pb, rd, ps, rs, ss, MTD_OPS_AUTO_OOB);
	enum nand_status st0 = op1(d, NAND_OP_READ, b, 0, rd, rs);
	f = fopen(thr_path, "w");
	CHECK(f);
	fputs(thr_old, f);
	CHECK(fclose(f) == 0);
	CHECK_EQ(kernel, -EUCLEAN);
	CHECK_EQ(st0, NAND_CORRECTED);
	CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));

	/* page 3: one bit in the free OOB bytes (where the spare's first
	 * bytes are in the raw OOB) */
	uint32_t at = 0;
	while (at + 8 <= oobsize && memcmp(oob + at, spare, 8))
		at++;
	CHECK(at + 8 <= oobsize);
	memcpy(woob, oob, oobsize);
	woob[at + 3] ^= 0x10;
	CHECK_EQ(mtd_raw(fd, true, b * pb + 3ull * ps, raw, ps, woob, oobsize, MTD_OPS_RAW), 0);
	/* the kernel: no error, the flip in what it returns */
	CHECK_EQ(mtd_raw(fd, false, b * pb + 3ull * ps, rd, ps, rs, ss, MTD_OPS_AUTO_OOB), 0);
	CHECK(memcmp(rs, spare, ss) != 0);
	CHECK_EQ(op1(d, NAND_OP_READ, b, 3, rd, rs), NAND_CORRECTED);
	CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));

	/* the kernel programs a page twice (AND of both), the backend not */
	memset(w, 0xFF, ps);
	w[0] = 0x0F;
	CHECK_EQ(mtd_raw(fd, true, b * pb + 5ull * ps, w, ps, NULL, 0, MTD_OPS_AUTO_OOB), 0);
	w[0] = 0xF3;
	int twice = mtd_raw(fd, true, b * pb + 5ull * ps, w, ps, NULL, 0, MTD_OPS_AUTO_OOB);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, a, 0, data, spare), NAND_PROGRAM_FAILED);
	printf("%s: ECC: one bit corrected (corrected_max 1; MEMREAD says EUCLEAN with "
	       "bitflip_threshold %u too), one in each of two steps (bits %s, max 1), "
	       "%u in a step uncorrectable; a flip in the free OOB bytes passes the kernel silently, the "
	       "spare CRC corrects it; a second program of a page: kernel %s, backend refuses\n",
	       path, bits + 1, ">= 2", bits + 1, twice ? strerror(-twice) : "succeeds");
	CHECK_EQ(op1(d, NAND_OP_ERASE, a, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(op1(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	close(fd);
	free(data), free(spare), free(rd), free(rs), free(raw), free(oob), free(w), free(woob);
}

/*
 * An erased page reads erased with bit flips spread over its ECC steps, each
 * step within the ECC strength however many there are in all (an erased
 * MLC page has its own flips; nandsim bitflips=); more in one step than the
 * ECC corrects, or a programmed page, is not erased.
 */
static void mtd_erased_steps(void)
{
	enum { PS = 4096, OOB = 128, STEP = 256 };
	static uint8_t raw[PS + OOB];
	memset(raw, 0xFF, sizeof raw);
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 1), 1);
	/* one bit in every step's data: 16 in all, Hamming corrects each */
	for (uint32_t i = 0; i < PS / STEP; i++)
		raw[i * STEP + 5] &= 0xEF;
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 1), 1);
	/* and one in the last step's share of the OOB: two in that step */
	raw[PS + OOB - 1] &= 0x7F;
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 1), 0);
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 2), 1);
	/* the whole page as one step (ECC step unknown) */
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, 0, 16), 0);
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, 0, 17), 1);
	/* two bits in one step's data */
	memset(raw, 0xFF, sizeof raw);
	raw[3 * STEP + 9] = 0xF6;
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 1), 0);
	/* programmed */
	fill(raw, sizeof raw, 5);
	CHECK_EQ(nand_mtd_raw_erased(raw, PS, OOB, STEP, 8), 0);
	printf("mtd erased page: flips judged per ECC step: ok\n");
}

/*
 * The mtd backend's read errors: -EIO is the page's (uncorrectable: the FTL
 * rebuilds it from parity or reports the unit lost), not the device's
 * (NAND_IO_ERROR stops the ioDimm); an error that means the device is gone
 * or the request failed is the device's.  (nandsim has no way to make a
 * page's read return -EIO: its gravepages= corrupt the data, which is
 * EBADMSG.)
 */
static void mtd_read_errors(void)
{
	CHECK_EQ(nand_mtd_read_status(0), NAND_OK);
	CHECK_EQ(nand_mtd_read_status(-EUCLEAN), NAND_OK);
	CHECK_EQ(nand_mtd_read_status(-EBADMSG), NAND_UNCORRECTABLE);
	CHECK_EQ(nand_mtd_read_status(-EIO), NAND_UNCORRECTABLE);
	static const int gone[] = { ENODEV, ENXIO, ESHUTDOWN, ENOMEM, EFAULT, EINVAL, EOPNOTSUPP };
	for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
		CHECK_EQ(nand_mtd_read_status(-gone[i]), NAND_IO_ERROR);
	printf("mtd read errors: EIO the page's, ENODEV... the device's: ok\n");
}

/* A block for nand_mtd_block_wp: page i reads as page[i]: 'P' programmed,
 * 'E' erased, 'X' its raw read fails with EIO, 'N' with ENODEV. */
struct fake_block {
	char page[65];
	uint32_t reads;
};

static int fake_erased(void *ctx, uint32_t page)
{
	struct fake_block *b = ctx;
	b->reads++;
	switch (b->page[page]) {
	case 'P':
		return 0;
	case 'E':
		return 1;
	case 'X':
		return -EIO;
	default:
		return -ENODEV;
	}
}

/*
 * A block's write pointer at open (the mtd backend): every length of the
 * programmed prefix of a 64-page block, with no unreadable page and with
 * one at every position.  An unreadable page (raw read EIO: a chip that
 * fails on that page) is taken as programmed: the open goes on, the write
 * pointer never stands before a programmed page (nothing programmed is
 * written over), at most just past the unreadable page; with none it is
 * exact.  ENODEV (the device gone) fails the scan.
 */
static void mtd_block_wp(void)
{
	enum { PPB = 64 };
	uint32_t cases = 0, moved = 0;
	for (uint32_t prefix = 0; prefix <= PPB; prefix++) {
		for (uint32_t x = 0; x <= PPB; x++) { /* x == PPB: no unreadable page */
			struct fake_block b = { .reads = 0 };
			for (uint32_t i = 0; i < PPB; i++)
				b.page[i] = i == x ? 'X' : i < prefix ? 'P' : 'E';
			uint32_t wp = 99, unreadable = 0;
			int rc = nand_mtd_block_wp(PPB, fake_erased, &b, &wp, &unreadable);
			if (rc || wp < prefix || (wp != prefix && wp != x + 1) ||
			    (x == PPB && (wp != prefix || unreadable)) || unreadable > 1 || b.reads > 8)
				fprintf(stderr,
					"block %s: rc %d, write pointer %u (programmed %u), %u unreadable, "
					"%u reads\n",
					b.page, rc, wp, prefix, unreadable, b.reads);
			CHECK_EQ(rc, 0);
			CHECK(wp >= prefix && wp <= PPB);
			CHECK(wp == prefix || wp == x + 1);
			CHECK(x < PPB || (wp == prefix && unreadable == 0));
			CHECK(unreadable <= 1 && b.reads <= 8);
			cases++;
			moved += wp != prefix;
		}
	}
	struct fake_block gone = { .reads = 0 };
	memset(gone.page, 'E', PPB);
	gone.page[PPB - 1] = 'N'; /* the first page read */
	uint32_t wp = 0, unreadable = 0;
	CHECK_EQ(nand_mtd_block_wp(PPB, fake_erased, &gone, &wp, &unreadable), -ENODEV);
	printf("mtd write pointers at open: %u blocks (an EIO page at each place), none before a "
	       "programmed page, %u past an unreadable one; ENODEV fails the scan\n",
	       cases, moved);
}

static void put_attr(const char *dir, const char *attr, const char *value)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, attr);
	FILE *f = fopen(path, "w");
	CHECK(f);
	fprintf(f, "%s\n", value);
	CHECK(fclose(f) == 0);
}

/*
 * The mtd backend's layout from MEMGETINFO and a sysfs directory (a fake
 * one: nandsim of 4 GiB and more is too big for the test VM): the size is
 * sysfs's, 64-bit; MEMGETINFO's is 32-bit and says 0 for 4 GiB, 1 GiB for
 * 5 GiB.
 */
static void mtd_layout_sysfs(void)
{
	char dir[] = "/tmp/flashd-t-mtdsysfs.XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	static const struct {
		uint64_t size;
		uint32_t dies, blocks_per_die;
	} cases[] = {
		{ 64ull << 20, 4, 64 },
		{ 4ull << 30, 4, 4096 },
		{ (5ull << 30) + (3ull << 18), 4, 5120 }, /* 3 blocks past whole dies */
		{ 24ull << 18, 1, 24 },
	};
	put_attr(dir, "oobavail", "78");
	put_attr(dir, "ecc_strength", "1");
	put_attr(dir, "ecc_step_size", "256");
	put_attr(dir, "name", "NAND simulator partition 0");
	struct mtd_info_user mi = { .type = MTD_NANDFLASH, .erasesize = 256 << 10,
				    .writesize = 4096, .oobsize = 128 };
	struct nand_mtd_layout lay;
	char err[256], v[32];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		snprintf(v, sizeof v, "%llu", (unsigned long long)cases[i].size);
		put_attr(dir, "size", v);
		mi.size = (uint32_t)cases[i].size; /* MEMGETINFO's */
		int rc = nand_mtd_layout(dir, &mi, &lay, err, sizeof err);
		if (rc)
			fprintf(stderr, "size %s: %s\n", v, err);
		CHECK_EQ(rc, 0);
		CHECK_EQ(lay.size, cases[i].size);
		CHECK_EQ(nand_dies(&lay.geo), cases[i].dies);
		CHECK_EQ(lay.geo.blocks_per_die, cases[i].blocks_per_die);
		CHECK_EQ(lay.geo.pages_per_block, 64);
		CHECK_EQ(lay.geo.page_size, 4096);
		CHECK_EQ(lay.geo.spare_size, 78 - 4);
		CHECK(lay.ecc_strength == 1 && lay.ecc_step == 256 && lay.oobsize == 128);
		CHECK(!strcmp(lay.name, "NAND simulator partition 0"));
	}
	/* NOR; no size in sysfs */
	mi.type = MTD_NORFLASH;
	CHECK_EQ(nand_mtd_layout(dir, &mi, &lay, err, sizeof err), -ENODEV);
	CHECK(strstr(err, "NOR") != NULL);
	mi.type = MTD_MLCNANDFLASH;
	char path[256];
	snprintf(path, sizeof path, "%s/size", dir);
	CHECK(unlink(path) == 0);
	CHECK_EQ(nand_mtd_layout(dir, &mi, &lay, err, sizeof err), -ENOENT);
	CHECK(strstr(err, "size") != NULL);
	static const char *const attrs[] = { "oobavail", "ecc_strength", "ecc_step_size", "name" };
	for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, attrs[i]);
		CHECK(unlink(path) == 0);
	}
	CHECK(rmdir(dir) == 0);
	printf("mtd layout: the size from sysfs (4 GiB and more): ok\n");
}

/*
 * On the device (closed; path): an erased page with bit flips written raw,
 * one in each of two ECC steps - more in all than ecc_bits, none past it in
 * a step - reads erased at open: its block's write pointer stays 0, the
 * first program there succeeds and reads back corrected.  (Taken as
 * programmed, the program was refused and the FTL retired the block, at
 * every open.)
 */
static void mtd_erased_flips(const char *path)
{
	char err[512];
	struct nand_dev *d;
	struct nand_spec spec = { .backend = "mtd", .path = path };
	CHECK_RC(nand_open(&spec, &d, err, sizeof err));
	const struct nand_geometry *g = &d->geo;
	uint32_t ps = g->page_size, ss = g->spare_size, step = d->ecc_codeword_bytes;
	CHECK(step >= 256 && ps % step == 0 && ps / step >= 2 && d->ecc_bits >= 1);
	uint32_t c = good_block(d, nand_dies(g) - 1, 6);
	CHECK_EQ(op1(d, NAND_OP_ERASE, c, 0, NULL, NULL), NAND_OK);
	nand_close(d);

	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	struct mtd_info_user mi;
	CHECK_EQ(ioctl(fd, MEMGETINFO, &mi), 0);
	uint8_t *data = malloc(ps), *spare = malloc(ss), *rd = malloc(ps), *rs = malloc(ss);
	uint8_t *w = malloc(ps), *oob = malloc(mi.oobsize);
	CHECK(data && spare && rd && rs && w && oob);
	/* ecc_bits + 1 flips, each in a step of its own (ecc_bits 1 on nandsim's
	 * Hamming ECC: 2), up to the page's steps */
	uint32_t nflip = d->ecc_bits + 1 < ps / step ? d->ecc_bits + 1 : ps / step;
	memset(w, 0xFF, ps);
	memset(oob, 0xFF, mi.oobsize);
	for (uint32_t i = 0; i < nflip; i++)
		w[i * step + 77] &= 0xFB;
	CHECK_EQ(mtd_raw(fd, true, (uint64_t)c * mi.erasesize, w, ps, oob, mi.oobsize, MTD_OPS_RAW), 0);
	close(fd);

	CHECK_RC(nand_open(&spec, &d, err, sizeof err));
	CHECK(!nand_factory_bad(d, c));
	fill(data, ps, 81);
	fill(spare, ss, 82);
	for (uint32_t i = 0; i < nflip; i++)
		data[i * step + 77] |= 0x04; /* programmed over the flipped bit: it stays 0 */
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, c, 0, data, spare), NAND_OK);
	struct nand_op op = { .type = NAND_OP_READ, .block = c, .page = 0, .data = rd, .spare = rs };
	struct done_log l;
	run(d, &op, 1, &l);
	CHECK_EQ(op.status, NAND_CORRECTED);
	CHECK(!memcmp(rd, data, ps) && !memcmp(rs, spare, ss));
	CHECK_EQ(op.corrected_max, 1);
	CHECK(op.corrected_bits >= nflip);
	CHECK_EQ(op1(d, NAND_OP_PROGRAM, c, 1, data, spare), NAND_OK);
	CHECK_EQ(op1(d, NAND_OP_ERASE, c, 0, NULL, NULL), NAND_OK);
	printf("%s: an erased page with %u bit flips, one per ECC step, reads erased at open: "
	       "programmed, read back corrected\n", path, nflip);
	nand_close(d);
	free(data), free(spare), free(rd), free(rs), free(w), free(oob);
}

int main(void)
{
	char err[512];
	struct nand_dev *d;
	struct nand_spec untimed = { .backend = "sim", .preset = "test-64m-bad", .seed = 7 };
	CHECK_RC(nand_open(&untimed, &d, err, sizeof err));
	check_device(d, "sim (untimed)", true);
	nand_close(d);
	struct nand_spec timed = { .preset = "test-64m-bad", .seed = 7, .timing = true };
	CHECK_RC(nand_open(&timed, &d, err, sizeof err));
	check_device(d, "sim (timing model)", true);
	nand_close(d);

	mtd_spare_crc();
	mtd_erased_steps();
	mtd_layout_sysfs();
	mtd_read_errors();
	mtd_block_wp();
	d = async_open("test-64m");
	check_device(d, "async", false);
	nand_close(d);
	ftl_on_async();

	/* the simulator's presets, through the generic layer */
	CHECK(nand_preset_description("test-64m-bad") != NULL);
	CHECK(!nand_preset_description("fpga") && !nand_preset_description(NULL));
	size_t npresets = 0;
	bool mlc = false;
	for (const char *name; (name = nand_preset_name(npresets)); npresets++)
		mlc |= !strcmp(name, "iodimm-mlc-320") && nand_preset_description(name)[0];
	CHECK(npresets >= 8 && mlc);

	struct nand_spec unknown = { .backend = "fpga" };
	CHECK_EQ(nand_open(&unknown, &d, err, sizeof err), -ENOENT);
	CHECK(strstr(err, "unknown NAND backend 'fpga'") != NULL);

	const char *dev = getenv("FLASHD_TEST_NAND");
	if (dev && *dev) {
		const char *bad = getenv("FLASHD_TEST_NAND_BAD");
		struct nand_spec mtd = { .backend = "mtd", .path = dev };
		int rc = nand_open(&mtd, &d, err, sizeof err);
		if (rc) {
			fprintf(stderr, "%s: %s\n", dev, err);
			return 1;
		}
		check_device(d, dev, bad && !strcmp(bad, "1"));
		mtd_ecc(d, dev);
		nand_close(d);
		mtd_erased_flips(dev);
	}

	printf("ok\n");
	return 0;
}
