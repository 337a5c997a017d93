/*
 * t_nand_sim - the simulated ioDimm behaves like NAND: erased pages read
 * 0xFF, pages program in order and once, erase counts grow, the image
 * persists and is locked, a creation cut short leaves no half-made image,
 * faults and timing do what they claim; the error
 * model's bit errors grow with wear, retention and read disturb and ECC
 * gives up past its threshold; the thermal model heats with activity and
 * cools when idle.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/xorshift.h"
#include "hw/nand_sim.h"
#include "tests/unit/t.h"

static void t_done(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

/* corrected_bits / corrected_max of the last run() */
static uint32_t t_bits, t_max;

/* Submit one operation and wait for it (on the device's clock). */
static enum nand_status run(struct nand_dev *d, enum nand_op_type t, uint32_t b, uint32_t p,
			    void *data, void *spare)
{
	bool done = false;
	struct nand_op op = { .type = t, .block = b, .page = p, .data = data, .spare = spare,
			      .done = t_done, .priv = &done };
	CHECK_EQ(nand_submit(d, &op), 0);
	while (!done) {
		uint64_t due = nand_next_due(d);
		CHECK(due != UINT64_MAX);
		nand_wait_until(d, due);
		nand_poll(d, nand_now(d));
	}
	t_bits = op.corrected_bits;
	t_max = op.corrected_max;
	return op.status;
}

/* a new test-64m image file named after PATH (a mkstemp template, filled
 * in), opened as CFG says otherwise; the caller unlinks PATH */
static struct nand_dev *image_new(char *path, struct nand_sim_config cfg)
{
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	cfg.preset = "test-64m";
	cfg.path = path;
	cfg.create = true;
	struct nand_dev *d;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	return d;
}

/* an open of an image this process holds open, as CFG says, is refused
 * with -EBUSY, and the error names this process as the lock's holder */
static void check_locked(const struct nand_sim_config *cfg)
{
	struct nand_dev *d2;
	char err[256], holder[64];
	CHECK_EQ(nand_sim_open(cfg, &d2, err, sizeof err), -EBUSY);
	CHECK(strstr(err, "in use"));
	snprintf(holder, sizeof holder, "locked by pid %d (", (int)getpid());
	if (!strstr(err, holder))
		fprintf(stderr, "the error does not name the holder: %s\n", err);
	CHECK(strstr(err, holder));
}

static void basics(struct nand_dev *d)
{
	const struct nand_geometry *g = &d->geo;
	uint8_t *data = malloc(g->page_size), *rd = malloc(g->page_size);
	uint8_t spare[256], rs[256];

	/* fresh device: erased pages read as 0xFF */
	CHECK_EQ(run(d, NAND_OP_READ, 3, 5, rd, rs), NAND_OK);
	for (uint32_t i = 0; i < g->page_size; i++)
		CHECK(rd[i] == 0xFF);
	for (uint32_t i = 0; i < g->spare_size; i++)
		CHECK(rs[i] == 0xFF);
	/* program page 0, read it back with its spare */
	memset(data, 0x5A, g->page_size);
	memset(spare, 0x11, g->spare_size);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 3, 0, data, spare), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, rs), NAND_OK);
	CHECK(memcmp(rd, data, g->page_size) == 0);
	CHECK(memcmp(rs, spare, g->spare_size) == 0);
	/* twice without erase, or out of order: refused, nothing written */
	memset(data, 0x77, g->page_size);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 3, 0, data, spare), NAND_PROGRAM_FAILED);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 3, 2, data, spare), NAND_PROGRAM_FAILED);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0x5A);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 2, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xFF);
	/* spare-only read */
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, NULL, rs), NAND_OK);
	CHECK(rs[0] == 0x11);
	/* erase: pages read 0xFF again, wear counted */
	uint32_t ec = nand_erase_count(d, 3);
	CHECK_EQ(run(d, NAND_OP_ERASE, 3, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(nand_erase_count(d, 3), ec + 1);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xFF);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 3, 0, data, spare), NAND_OK);
	/* bad address */
	CHECK_EQ(run(d, NAND_OP_READ, nand_blocks(g), 0, rd, NULL), NAND_INVALID);
	free(data);
	free(rd);
}

static void faults(struct nand_dev *d)
{
	const struct nand_geometry *g = &d->geo;
	uint8_t *data = calloc(1, g->page_size), *rd = malloc(g->page_size);

	/* power cut: the cut program leaves its page unreadable, later ops fail */
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 5, 0, data, NULL), NAND_OK);
	struct nand_sim_faults f = { .power_cut_after = 1 };
	nand_sim_set_faults(d, &f);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 5, 1, data, NULL), NAND_POWER_LOSS);
	CHECK(!nand_sim_powered(d));
	CHECK_EQ(run(d, NAND_OP_READ, 5, 0, rd, NULL), NAND_POWER_LOSS);
	nand_sim_power_on(d);
	CHECK_EQ(run(d, NAND_OP_READ, 5, 0, rd, NULL), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, 5, 1, rd, NULL), NAND_UNCORRECTABLE);
	/* the next page of that block can still be programmed */
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 5, 2, data, NULL), NAND_OK);
	/* an interrupted erase leaves the block unreadable until erased again */
	f.power_cut_after = 1;
	nand_sim_set_faults(d, &f);
	CHECK_EQ(run(d, NAND_OP_ERASE, 5, 0, NULL, NULL), NAND_POWER_LOSS);
	nand_sim_power_on(d);
	CHECK_EQ(run(d, NAND_OP_READ, 5, 0, rd, NULL), NAND_UNCORRECTABLE);
	CHECK_EQ(run(d, NAND_OP_ERASE, 5, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, 5, 0, rd, NULL), NAND_OK);

	/* grown bad block */
	nand_sim_fail_block(d, 6, true, true);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 6, 0, data, NULL), NAND_PROGRAM_FAILED);
	CHECK_EQ(run(d, NAND_OP_ERASE, 6, 0, NULL, NULL), NAND_ERASE_FAILED);

	/* one page with a bit error, correctable then uncorrectable */
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 7, 0, data, NULL), NAND_OK);
	nand_sim_page_error(d, 7ull * g->pages_per_block, NAND_CORRECTED);
	CHECK_EQ(run(d, NAND_OP_READ, 7, 0, rd, NULL), NAND_CORRECTED);
	CHECK(rd[0] == 0);
	nand_sim_page_error(d, 7ull * g->pages_per_block, NAND_UNCORRECTABLE);
	CHECK_EQ(run(d, NAND_OP_READ, 7, 0, rd, NULL), NAND_UNCORRECTABLE);
	CHECK_EQ(run(d, NAND_OP_ERASE, 7, 0, NULL, NULL), NAND_OK); /* erasing clears it */
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 7, 0, data, NULL), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, 7, 0, rd, NULL), NAND_OK);

	/* a failed die: everything on it fails, other dies work */
	uint32_t b_die1 = g->blocks_per_die + 9;
	nand_sim_fail_die(d, 1);
	CHECK_EQ(run(d, NAND_OP_ERASE, b_die1, 0, NULL, NULL), NAND_ERASE_FAILED);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, b_die1, 0, data, NULL), NAND_PROGRAM_FAILED);
	CHECK_EQ(run(d, NAND_OP_READ, b_die1, 0, rd, NULL), NAND_UNCORRECTABLE);
	CHECK_EQ(run(d, NAND_OP_READ, 7, 0, rd, NULL), NAND_OK);
	free(data);
	free(rd);
}

static int t_norder;
static void t_order(struct nand_op *op)
{
	((int *)op->priv)[t_norder++] = (int)op->priv2;
}

/* Timing: ops on one die complete in order and take the preset's time;
 * ops on different dies overlap. */
static void timing(void)
{
	struct nand_sim_config cfg = { .preset = "test-64m", .timing = true, .virtual_time = true };
	struct nand_dev *d;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	const struct nand_preset *p = nand_preset_find("test-64m");
	uint8_t *data = calloc(1, d->geo.page_size);
	struct nand_op ops[4];
	static int order[4];
	uint64_t t0 = nand_now(d);
	for (int i = 0; i < 4; i++) {
		memset(&ops[i], 0, sizeof ops[i]);
		ops[i].type = NAND_OP_PROGRAM;
		/* 0,1 on die 0 (block 2), 2,3 on die 1 */
		ops[i].block = i < 2 ? 2 : d->geo.blocks_per_die + 2;
		ops[i].page = (uint32_t)(i % 2);
		ops[i].data = data;
		ops[i].priv2 = (uint64_t)i;
		ops[i].done = t_order;
		ops[i].priv = order;
		CHECK_EQ(nand_submit(d, &ops[i]), 0);
	}
	t_norder = 0;
	while (t_norder < 4) {
		uint64_t due = nand_next_due(d);
		CHECK(due != UINT64_MAX);
		nand_wait_until(d, due);
		nand_poll(d, nand_now(d));
	}
	uint64_t elapsed = nand_now(d) - t0;
	/* two programs in a row on one die; the two dies overlap */
	CHECK(elapsed >= 2ull * p->timing.program_us * 1000);
	CHECK(elapsed < 3ull * p->timing.program_us * 1000 + 1000000);
	CHECK(order[0] == 0 || order[0] == 2);
	int pos0 = -1, pos1 = -1, pos2 = -1, pos3 = -1;
	for (int i = 0; i < 4; i++) {
		if (order[i] == 0) pos0 = i;
		if (order[i] == 1) pos1 = i;
		if (order[i] == 2) pos2 = i;
		if (order[i] == 3) pos3 = i;
	}
	CHECK(pos0 < pos1 && pos2 < pos3); /* per-die submission order */
	free(data);
	nand_close(d);
}

static int t_nlog;
static char t_lastlog[512];
static int t_lastlevel;
static void t_log(void *arg, int level, const char *msg)
{
	t_nlog++;
	t_lastlevel = level;
	snprintf(t_lastlog, sizeof t_lastlog, "%s", msg);
}

/*
 * Programs into an image file: a page the file does not hold yet is one
 * pwritev, one it holds (written since open, its block erased without a
 * hole punched) a store into the mapping.  Both must read back, also
 * after a reopen, with and without holes punched at erase; a page torn
 * by a power cut is never taken as held.
 */
static void file_programs(void)
{
	for (int punch = 0; punch < 2; punch++) {
		char path[] = "/tmp/t_nand_sim-prog-XXXXXX", err[256];
		struct nand_dev *d = image_new(path, (struct nand_sim_config){ .discard_on_erase = punch });
		const struct nand_geometry geo = d->geo, *g = &geo; /* d is reopened */
		uint8_t *data = malloc(g->page_size), *rd = malloc(g->page_size);
		uint8_t *sp = malloc(g->spare_size), *rs = malloc(g->spare_size);
		/* block 5: pages 0-3 (written), erased, then pages 0-5: 0-3 held
		 * by the file, 4-5 not; block 6: a cut tears page 1 */
		for (int round = 0; round < 2; round++) {
			CHECK_EQ(run(d, NAND_OP_ERASE, 5, 0, NULL, NULL), NAND_OK);
			for (uint32_t p = 0; p < (round ? 6u : 4u); p++) {
				memset(data, 0x10 * (round + 1) + (int)p, g->page_size);
				memset(sp, 0x50 + (int)p + round, g->spare_size);
				CHECK_EQ(run(d, NAND_OP_PROGRAM, 5, p, data, sp), NAND_OK);
			}
		}
		CHECK_EQ(run(d, NAND_OP_ERASE, 6, 0, NULL, NULL), NAND_OK);
		memset(data, 0x33, g->page_size);
		CHECK_EQ(run(d, NAND_OP_PROGRAM, 6, 0, data, NULL), NAND_OK);
		struct nand_sim_faults cut = { .power_cut_after = 1 };
		CHECK_RC(nand_sim_set_faults(d, &cut));
		CHECK_EQ(run(d, NAND_OP_PROGRAM, 6, 1, data, NULL), NAND_POWER_LOSS);
		nand_close(d);
		struct nand_sim_config again = { .path = path, .discard_on_erase = punch };
		for (int reopen = 0; reopen < 2; reopen++) {
			CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
			for (uint32_t p = 0; p < 6; p++) {
				CHECK_EQ(run(d, NAND_OP_READ, 5, p, rd, rs), NAND_OK);
				CHECK(rd[0] == 0x20 + p && rd[g->page_size - 1] == 0x20 + p);
				CHECK(rs[0] == 0x51 + p && rs[g->spare_size - 1] == 0x51 + p);
			}
			if (!reopen) /* torn by the cut (rewritten below) */
				CHECK_EQ(run(d, NAND_OP_READ, 6, 1, rd, NULL), NAND_UNCORRECTABLE);
			/* block 6 again, past its torn page; then once more over
			 * what the file now holds */
			for (int round = 0; round < 2; round++) {
				CHECK_EQ(run(d, NAND_OP_ERASE, 6, 0, NULL, NULL), NAND_OK);
				for (uint32_t p = 0; p < 3; p++) {
					memset(data, 0x60 + 0x10 * round + (int)p, g->page_size);
					CHECK_EQ(run(d, NAND_OP_PROGRAM, 6, p, data, NULL), NAND_OK);
				}
			}
			for (uint32_t p = 0; p < 3; p++) {
				CHECK_EQ(run(d, NAND_OP_READ, 6, p, rd, NULL), NAND_OK);
				CHECK(rd[0] == 0x70 + p && rd[g->page_size - 1] == 0x70 + p);
			}
			nand_close(d);
		}
		unlink(path);
		free(data);
		free(rd);
		free(sp);
		free(rs);
	}
}

/* Block table damage: an entry whose bytes were changed from outside fails
 * its CRC at open and is rebuilt from the pages, not trusted. */
static void table_damage(void)
{
	char path[] = "/tmp/t_nand_sim-tbl-XXXXXX", err[256];
	struct nand_dev *d = image_new(path, (struct nand_sim_config){ .log = t_log });
	const struct nand_geometry *g = &d->geo;
	uint8_t *data = malloc(g->page_size), *rd = malloc(g->page_size);
	memset(data, 0xA5, g->page_size);
	/* block 9: 3 pages programmed, erased twice before */
	CHECK_EQ(run(d, NAND_OP_ERASE, 9, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_ERASE, 9, 0, NULL, NULL), NAND_OK);
	for (uint32_t p = 0; p < 3; p++)
		CHECK_EQ(run(d, NAND_OP_PROGRAM, 9, p, data, NULL), NAND_OK);
	CHECK_EQ(nand_erase_count(d, 9), 2);
	for (int i = 0; i < 3; i++) /* the most worn block of die 0: 3 erases */
		CHECK_EQ(run(d, NAND_OP_ERASE, 10, 0, NULL, NULL), NAND_OK);
	nand_close(d);
	CHECK_EQ(t_nlog, 0);

	/* change the write pointer of block 9 (2 bytes at table offset 4096 + 9 * 16) */
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	uint16_t wp = 0;
	CHECK(pwrite(fd, &wp, 2, 4096 + 9 * 16) == 2);
	close(fd);

	struct nand_sim_config again = { .path = path, .log = t_log };
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(nand_sim_table_repairs(d), 1);
	CHECK_EQ(t_nlog, 1);
	CHECK(strstr(t_lastlog, "block 9"));
	CHECK_EQ(t_lastlevel, NAND_LOG_WARNING); /* a repair wants attention */
	/* rebuilt from the pages: pages 0-2 still readable, page 3 erased and
	 * programmable; the erase count is taken as the die's highest (3) */
	CHECK_EQ(run(d, NAND_OP_READ, 9, 2, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xA5);
	CHECK_EQ(run(d, NAND_OP_READ, 9, 3, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xFF);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 9, 2, data, NULL), NAND_PROGRAM_FAILED);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 9, 3, data, NULL), NAND_OK);
	CHECK_EQ(nand_erase_count(d, 9), 3);
	nand_close(d);
	/* repaired on the image: the next open is quiet */
	t_nlog = 0;
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(nand_sim_table_repairs(d), 0);
	CHECK_EQ(t_nlog, 0);
	nand_close(d);

	/* a read-only open repairs in memory only */
	fd = open(path, O_RDWR);
	wp = 77;
	CHECK(pwrite(fd, &wp, 2, 4096 + 9 * 16) == 2);
	close(fd);
	struct nand_sim_config ro = { .path = path, .readonly = true, .log = t_log };
	CHECK_RC(nand_sim_open(&ro, &d, err, sizeof err));
	CHECK_EQ(nand_sim_table_repairs(d), 1);
	CHECK_EQ(run(d, NAND_OP_READ, 9, 5, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xFF); /* not the stale bytes of a trusted wp of 77 */
	nand_close(d);
	CHECK_RC(nand_sim_open(&ro, &d, err, sizeof err));
	CHECK_EQ(nand_sim_table_repairs(d), 1);
	nand_close(d);
	unlink(path);
	free(data);
	free(rd);
}

/* A refused submit queues nothing and calls nothing; an image I/O error is
 * not a program failure and writes nothing. */
static void backend_errors(void)
{
	struct nand_sim_config cfg = { .preset = "test-64m" };
	struct nand_dev *d;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	uint8_t *data = calloc(1, d->geo.page_size), *rd = malloc(d->geo.page_size);
	struct nand_sim_faults f = { .refuse_submit_after = 2 };
	nand_sim_set_faults(d, &f);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_OK);
	bool done = false;
	struct nand_op op = { .type = NAND_OP_READ, .block = 3, .data = rd, .done = t_done,
			      .priv = &done };
	CHECK_EQ(nand_submit(d, &op), -ENODEV);
	CHECK_EQ(d->inflight, 0);
	CHECK_EQ(nand_next_due(d), UINT64_MAX);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_OK); /* once only */

	f = (struct nand_sim_faults){ .io_error_after = 2 };
	nand_sim_set_faults(d, &f);
	memset(data, 0x3C, d->geo.page_size);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 4, 0, data, NULL), NAND_OK);
	done = false;
	struct nand_op pg = { .type = NAND_OP_PROGRAM, .block = 4, .page = 1, .data = data,
			      .done = t_done, .priv = &done };
	CHECK_EQ(nand_submit(d, &pg), 0);
	while (!done)
		nand_poll(d, nand_now(d));
	CHECK_EQ(pg.status, NAND_IO_ERROR);
	CHECK_EQ(pg.err, -ENOSPC);
	CHECK_EQ(run(d, NAND_OP_READ, 4, 1, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0xFF); /* nothing written, the page not consumed */
	f = (struct nand_sim_faults){ 0 };
	nand_sim_set_faults(d, &f);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 4, 1, data, NULL), NAND_OK);
	free(data);
	free(rd);
	nand_close(d);
}

/*
 * flock is wrapped (Makefile: --wrap=flock): replace_on_lock set, the next
 * lock first creates a new image at replace_path (image_publish renames it
 * over the name), the race of a process that opened the old image just
 * before another re-created it: its lock lands on the old file.
 */
int __real_flock(int fd, int op);
static const char *replace_path;

int __wrap_flock(int fd, int op)
{
	const char *p = replace_path;
	if (p) {
		replace_path = NULL;
		struct nand_sim_config fc = { .preset = "test-64m", .path = p, .create = true };
		struct nand_dev *d;
		char err[256];
		CHECK_RC(nand_sim_open(&fc, &d, err, sizeof err));
		uint8_t *mark = malloc(d->geo.page_size);
		memset(mark, 0x3C, d->geo.page_size);
		CHECK_EQ(run(d, NAND_OP_PROGRAM, 9, 0, mark, NULL), NAND_OK);
		free(mark);
		nand_close(d);
	}
	return __real_flock(fd, op);
}

/* An image replaced between the open of its name and the lock: the open
 * takes the new one (block 9 programmed by the replacement), not the
 * unlinked old one, whose writes nobody would see again. */
static void replaced_while_opening(const char *dir)
{
	char path[128], err[256];
	snprintf(path, sizeof path, "%s/r.img", dir);
	struct nand_sim_config fc = { .preset = "test-64m", .path = path, .create = true };
	struct nand_sim_config again = { .path = path };
	struct nand_dev *d;
	CHECK_RC(nand_sim_open(&fc, &d, err, sizeof err));
	nand_close(d);
	replace_path = path;
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK(!replace_path);
	uint8_t *rd = malloc(d->geo.page_size);
	enum nand_status st = run(d, NAND_OP_READ, 9, 0, rd, NULL);
	if (st != NAND_OK || rd[0] != 0x3C) {
		fprintf(stderr, "replaced while opening: the open holds the old image (block 9 "
			"reads %s, %#x), not the one now at %s\n", nand_status_name(st), rd[0], path);
		exit(1);
	}
	free(rd);
	nand_close(d);
	unlink(path);
	printf("ok: an image replaced between open and lock: the new one is opened\n");
}

/*
 * Creating an image never leaves a half-made one at its path.  A creation
 * cut short (here the file size limit makes sizing the image fail, as a
 * full disk does; a signal or a crash stops it the same way between two
 * steps) leaves no file there, so the next creation is not refused as "not
 * a flashd NAND image"; a PATH.creating left by a killed creation is made
 * anew; an image in use is not replaced; a symbolic link is followed.
 */
static void creation(void)
{
	char dir[] = "/tmp/t_nand_sim-dir-XXXXXX";
	CHECK(mkdtemp(dir));
	char path[128], tmp[160], link[128], target[128], err[256];
	snprintf(path, sizeof path, "%s/a.img", dir);
	snprintf(tmp, sizeof tmp, "%s.creating", path);
	struct nand_sim_config fc = { .preset = "test-64m", .path = path, .create = true };
	struct nand_sim_config again = { .path = path };
	struct nand_dev *d;
	struct stat st;

	struct rlimit lim, small;
	CHECK_RC(getrlimit(RLIMIT_FSIZE, &lim));
	small = (struct rlimit){ 1 << 20, lim.rlim_max };
	signal(SIGXFSZ, SIG_IGN); /* the call fails with EFBIG instead */
	CHECK_RC(setrlimit(RLIMIT_FSIZE, &small));
	CHECK(nand_sim_open(&fc, &d, err, sizeof err) < 0);
	CHECK_RC(setrlimit(RLIMIT_FSIZE, &lim));
	printf("creation cut short: %s\n", err);
	CHECK(stat(path, &st) < 0 && errno == ENOENT);
	CHECK(stat(tmp, &st) < 0 && errno == ENOENT);

	FILE *fp = fopen(tmp, "w");
	CHECK(fp);
	fputs("what a killed creation left", fp);
	fclose(fp);
	CHECK_RC(nand_sim_open(&fc, &d, err, sizeof err));
	CHECK(stat(tmp, &st) < 0 && errno == ENOENT);
	uint8_t *data = malloc(d->geo.page_size), *rd = malloc(d->geo.page_size);
	memset(data, 0x5A, d->geo.page_size);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 7, 0, data, NULL), NAND_OK);
	/* in use: a creation over it is refused and changes nothing */
	check_locked(&fc);
	CHECK(stat(tmp, &st) < 0 && errno == ENOENT);
	nand_close(d);
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(run(d, NAND_OP_READ, 7, 0, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0x5A);
	nand_close(d);

	/* a dangling symbolic link: the image is made where it points */
	snprintf(link, sizeof link, "%s/link.img", dir);
	snprintf(target, sizeof target, "%s/b.img", dir);
	CHECK_RC(symlink("b.img", link));
	struct nand_sim_config via = { .preset = "test-64m", .path = link, .create = true };
	CHECK_RC(nand_sim_open(&via, &d, err, sizeof err));
	nand_close(d);
	CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(stat(target, &st) == 0 && S_ISREG(st.st_mode));
	struct nand_sim_config by_target = { .path = target };
	CHECK_RC(nand_sim_open(&by_target, &d, err, sizeof err));
	nand_close(d);
	free(data);
	free(rd);
	unlink(link);
	unlink(target);
	unlink(path);
	replaced_while_opening(dir);
	CHECK_RC(rmdir(dir));
}

/* ---- error model ------------------------------------------------------- */

#define YEAR_NS (uint64_t)(365.25 * 86400e9)

/* an error model test's device (test-64m, the model on, SEED), a page
 * buffer to program from and one to read into (zeros), and its rated P/E
 * cycles; em_close ends it */
struct em {
	struct nand_dev *d;
	uint8_t *data, *rd;
	uint32_t rated;
};

static struct em em_open(uint64_t seed)
{
	struct nand_sim_config cfg = { .preset = "test-64m", .error_model = true, .seed = seed };
	struct em x;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &x.d, err, sizeof err));
	x.data = calloc(1, x.d->geo.page_size);
	x.rd = calloc(1, x.d->geo.page_size);
	CHECK(x.data && x.rd);
	x.rated = x.d->rated_pe_cycles;
	return x;
}

static void em_close(struct em *x)
{
	free(x->data);
	free(x->rd);
	nand_close(x->d);
}

/* Erase block b, set its erase count, program all its pages with a pattern. */
static void em_fill(struct nand_dev *d, uint32_t b, uint32_t erases, uint8_t *data)
{
	CHECK_EQ(run(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	CHECK_RC(nand_sim_set_erase_count(d, b, erases));
	for (uint32_t p = 0; p < d->geo.pages_per_block; p++) {
		memset(data, (int)(b * 7 + p), d->geo.page_size);
		CHECK_EQ(run(d, NAND_OP_PROGRAM, b, p, data, NULL), NAND_OK);
	}
}

struct em_tally {
	uint32_t reads, ok, corrected, uncorrectable;
	uint64_t bits;
	double expect_bits;        /* sum of the model's RBER x page bits */
};

/* Read every page of block b `rounds` times; check data and counts. */
static void em_read_block(struct nand_dev *d, uint32_t b, uint32_t rounds, struct em_tally *t,
			  uint8_t *rd)
{
	const struct nand_geometry *g = &d->geo;
	double page_bits = 8.0 * (g->page_size + g->spare_size);
	memset(t, 0, sizeof *t);
	for (uint32_t r = 0; r < rounds; r++)
		for (uint32_t p = 0; p < g->pages_per_block; p++) {
			double rber = nand_sim_page_rber(d, (uint64_t)b * g->pages_per_block + p);
			CHECK(rber > 0);
			t->expect_bits += rber * page_bits;
			enum nand_status st = run(d, NAND_OP_READ, b, p, rd, NULL);
			t->reads++;
			if (st == NAND_OK) {
				t->ok++;
				CHECK(t_bits == 0 && t_max == 0);
			} else if (st == NAND_CORRECTED) {
				t->corrected++;
				t->bits += t_bits;
				CHECK(t_bits >= 1 && t_max >= 1 && t_max <= t_bits);
				CHECK(t_max <= d->ecc_bits);
				/* at least the average per codeword lands in the worst */
				CHECK(t_max * (g->page_size / d->ecc_codeword_bytes) >= t_bits);
			} else {
				CHECK_EQ(st, NAND_UNCORRECTABLE);
				t->uncorrectable++;
				continue;
			}
			/* corrected or clean: the data are what was written */
			CHECK(rd[0] == (uint8_t)(b * 7 + p) && rd[g->page_size - 1] == rd[0]);
		}
}

/* Observed bits match the model's expectation (Poisson: within 5 sigma + 3). */
static void em_check_mean(const struct em_tally *t)
{
	double m = t->expect_bits, tol = 5 * sqrt(m) + 3;
	if (fabs((double)t->bits - m) > tol) {
		fprintf(stderr, "bits corrected %llu, model expects %.1f (+-%.1f)\n",
			(unsigned long long)t->bits, m, tol);
		CHECK(0);
	}
}

/* Off by default: no model, no errors however worn; the API says so. */
static void em_off(void)
{
	struct nand_sim_config cfg = { .preset = "test-64m" };
	struct nand_dev *d;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	uint8_t *data = malloc(d->geo.page_size), *rd = malloc(d->geo.page_size);
	CHECK_EQ(d->ecc_bits, 40);
	CHECK_EQ(d->ecc_codeword_bytes, 1024);
	em_fill(d, 3, 20000, data);
	CHECK_EQ(nand_erase_count(d, 3), 20000);
	CHECK(nand_sim_page_rber(d, 3ull * d->geo.pages_per_block) < 0);
	CHECK_EQ(nand_sim_age(d, 10 * YEAR_NS), -EINVAL);
	for (int i = 0; i < 2000; i++)
		CHECK_EQ(run(d, NAND_OP_READ, 3, (uint32_t)i % d->geo.pages_per_block, rd, NULL), NAND_OK);
	for (int i = 0; i < 200; i++) /* 4x rated: no failures without the model */
		CHECK_EQ(run(d, NAND_OP_ERASE, 4, 0, NULL, NULL), NAND_OK);
	/* turned on at run time: the worn block is judged from now on */
	CHECK_RC(nand_sim_set_error_model(d, true));
	CHECK(nand_sim_page_rber(d, 3ull * d->geo.pages_per_block) > 1e-3);
	CHECK_RC(nand_sim_set_error_model(d, false));
	CHECK(nand_sim_page_rber(d, 3ull * d->geo.pages_per_block) < 0);
	/* the injected fixed-rate errors still work, with a nominal bit count */
	struct nand_sim_faults f = { .corrected_ppm = 1000000 };
	nand_sim_set_faults(d, &f);
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_CORRECTED);
	CHECK(t_bits == 1 && t_max == 1);
	CHECK(d->last_corrected_bits == 1);
	f.corrected_ppm = 0;
	nand_sim_set_faults(d, &f);
	free(data);
	free(rd);
	nand_close(d);
}

/* RBER rises with P/E cycles, as the model's formula and as observed. */
static void em_wear(void)
{
	struct em x = em_open(11);
	const struct nand_geometry *g = &x.d->geo;
	CHECK_EQ(x.rated, 5000);
	/* the formula: fresh 1e-8, rated 1e-4, twice rated 4e-4 (+ read disturb) */
	em_fill(x.d, 10, 0, x.data);
	em_fill(x.d, 11, x.rated, x.data);
	em_fill(x.d, 12, 2 * x.rated, x.data);
	double r0 = nand_sim_page_rber(x.d, 10ull * g->pages_per_block);
	double r1 = nand_sim_page_rber(x.d, 11ull * g->pages_per_block);
	double r2 = nand_sim_page_rber(x.d, 12ull * g->pages_per_block);
	CHECK(r0 > 0.9e-8 && r0 < 1.2e-8);
	CHECK(r1 > 0.99e-4 && r1 < 1.02e-4);
	CHECK(r2 > 3.99e-4 && r2 < 4.05e-4);
	/* observed: 30 reads of each of 64 pages per block */
	struct em_tally t0, t1, t2;
	em_read_block(x.d, 10, 30, &t0, x.rd);
	em_read_block(x.d, 11, 30, &t1, x.rd);
	em_read_block(x.d, 12, 30, &t2, x.rd);
	em_check_mean(&t0);
	em_check_mean(&t1);
	em_check_mean(&t2);
	/* fresh: ~0.7 bits from wear, ~19 from the 1,920 reads' own disturb */
	CHECK(t0.bits < 60 && t0.bits * 20 < t1.bits);
	CHECK(t1.corrected > 1000);          /* ~3.4 bits per read: most reads */
	CHECK(t2.bits > 3 * t1.bits);
	CHECK(t0.uncorrectable + t1.uncorrectable + t2.uncorrectable == 0);
	struct nand_sim_error_stats st;
	nand_sim_error_stats(x.d, &st);
	CHECK_EQ(st.reads, 3 * 30 * g->pages_per_block);
	CHECK_EQ(st.reads_corrected, t0.corrected + t1.corrected + t2.corrected);
	CHECK_EQ(st.bits_corrected, t0.bits + t1.bits + t2.bits);
	em_close(&x);
}

/* RBER rises with retention time; ECC corrects up to its threshold, then
 * the page is uncorrectable (its data garbage). */
static void em_retention_ecc(void)
{
	struct em x = em_open(12);
	const struct nand_geometry *g = &x.d->geo;
	em_fill(x.d, 20, x.rated, x.data);
	uint64_t ppa = 20ull * g->pages_per_block;
	double r_now = nand_sim_page_rber(x.d, ppa);
	CHECK_RC(nand_sim_age(x.d, 30 * 86400ull * 1000000000ull)); /* a month */
	double r_month = nand_sim_page_rber(x.d, ppa);
	CHECK_RC(nand_sim_age(x.d, YEAR_NS - 30 * 86400ull * 1000000000ull));
	double r_year = nand_sim_page_rber(x.d, ppa);
	CHECK(r_now < r_month && r_month < r_year);
	/* one year at rated P/E: 1.2e-3, the ECC's limit at UBER ~1e-16 */
	CHECK(r_year > 1.15e-3 && r_year < 1.25e-3);
	struct em_tally t;
	em_read_block(x.d, 20, 8, &t, x.rd);
	em_check_mean(&t);
	CHECK_EQ(t.uncorrectable, 0);
	CHECK(t.corrected > t.reads * 99 / 100); /* ~40 bits per read */
	CHECK(t.bits > 30ull * t.reads);
	/* a fresh block programmed as long ago keeps its data well */
	em_fill(x.d, 21, 0, x.data);
	CHECK_RC(nand_sim_age(x.d, YEAR_NS));
	CHECK(nand_sim_page_rber(x.d, 21ull * g->pages_per_block) < 1e-4);
	/* five years at rated: mean ~47 per codeword, over the 40 ECC corrects */
	CHECK_RC(nand_sim_age(x.d, 3 * YEAR_NS));
	em_read_block(x.d, 20, 4, &t, x.rd);
	CHECK(t.uncorrectable > t.reads * 8 / 10);
	/* ten years at twice rated: nothing is readable */
	em_fill(x.d, 22, 2 * x.rated, x.data);
	CHECK_RC(nand_sim_age(x.d, 10 * YEAR_NS));
	em_read_block(x.d, 22, 2, &t, x.rd);
	CHECK_EQ(t.uncorrectable, t.reads);
	memset(x.rd, 0, g->page_size);
	CHECK_EQ(run(x.d, NAND_OP_READ, 22, 1, x.rd, NULL), NAND_UNCORRECTABLE);
	CHECK(t_bits == 0 && t_max == 0);
	CHECK(x.rd[0] != (uint8_t)(22 * 7 + 1) || x.rd[1] != x.rd[0] || x.rd[2] != x.rd[0]); /* garbage */
	/* erasing forgets the age: reprogrammed pages read clean again */
	em_fill(x.d, 22, 2 * x.rated, x.data);
	CHECK(nand_sim_page_rber(x.d, 22ull * g->pages_per_block) < 4.1e-4);
	em_close(&x);
}

/* Read disturb: reads of a block raise the RBER of its pages until erased. */
static void em_read_disturb(void)
{
	struct em x = em_open(13);
	const struct nand_geometry *g = &x.d->geo;
	em_fill(x.d, 30, x.rated, x.data);
	uint64_t ppa = 30ull * g->pages_per_block + 5;
	double r0 = nand_sim_page_rber(x.d, ppa);
	struct em_tally first, last;
	em_read_block(x.d, 30, 4, &first, x.rd);
	/* 200,000 more reads of page 0 (spare only): the other pages suffer */
	uint8_t spare[256];
	for (int i = 0; i < 200000; i++) {
		enum nand_status st = run(x.d, NAND_OP_READ, 30, 0, NULL, spare);
		CHECK(st == NAND_OK || st == NAND_CORRECTED);
	}
	double r1 = nand_sim_page_rber(x.d, ppa);
	/* 3e-9 per read at rated P/E: +6e-4 */
	CHECK(r1 - r0 > 5.9e-4 && r1 - r0 < 6.2e-4);
	em_read_block(x.d, 30, 4, &last, x.rd);
	em_check_mean(&first);
	em_check_mean(&last);
	CHECK(last.bits > 4 * first.bits);
	/* a fresh block is disturbed ten times less */
	em_fill(x.d, 31, 0, x.data);
	for (int i = 0; i < 200000; i++)
		run(x.d, NAND_OP_READ, 31, 0, NULL, spare);
	double f1 = nand_sim_page_rber(x.d, 31ull * g->pages_per_block + 5);
	CHECK(f1 > 5.5e-5 && f1 < 6.5e-5);
	/* erase: the count starts over */
	em_fill(x.d, 30, x.rated, x.data);
	CHECK(nand_sim_page_rber(x.d, ppa) < r0 * 1.01);
	em_close(&x);
}

/* The same seed and operations give the same errors; another seed others. */
static uint64_t em_signature(uint64_t seed)
{
	struct em x = em_open(seed);
	em_fill(x.d, 40, 2 * x.d->rated_pe_cycles, x.data);
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < 3000; i++) {
		uint32_t p = (uint32_t)i % x.d->geo.pages_per_block;
		enum nand_status st = run(x.d, NAND_OP_READ, 40, p, x.rd, NULL);
		h = (h ^ (st * 1000u + t_bits)) * 1099511628211ull;
	}
	em_close(&x);
	return h;
}

static void em_deterministic(void)
{
	CHECK(em_signature(5) == em_signature(5));
	CHECK(em_signature(5) != em_signature(6));
}

/* Grown bad blocks: none before rated P/E, many far past it; a grown bad
 * block keeps failing; data programmed before stay readable. */
static void em_grown_bad(void)
{
	struct em x = em_open(14);
	const struct nand_geometry *g = &x.d->geo;
	/* young blocks: 1e-8 per cycle, 4 blocks x 500 cycles */
	for (uint32_t b = 50; b < 54; b++)
		for (int c = 0; c < 500; c++) {
			CHECK_EQ(run(x.d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
			for (uint32_t p = 0; p < 4; p++)
				CHECK_EQ(run(x.d, NAND_OP_PROGRAM, b, p, x.data, NULL), NAND_OK);
		}
	struct nand_sim_error_stats st;
	nand_sim_error_stats(x.d, &st);
	CHECK(st.program_fails == 0 && st.erase_fails == 0);
	/* three times rated: ~10 % per cycle; cycle 8 blocks until each fails */
	uint32_t pfail = 0, efail = 0;
	for (uint32_t b = 60; b < 68; b++) {
		CHECK_RC(nand_sim_set_erase_count(x.d, b, 3 * x.rated));
		bool failed = false;
		for (int c = 0; c < 400 && !failed; c++) {
			enum nand_status est = run(x.d, NAND_OP_ERASE, b, 0, NULL, NULL);
			if (est == NAND_ERASE_FAILED) {
				efail++;
				failed = true;
				/* the data programmed before stay; it keeps failing */
				CHECK_EQ(run(x.d, NAND_OP_READ, b, 0, x.rd, NULL) == NAND_UNCORRECTABLE, false);
				CHECK_EQ(run(x.d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_ERASE_FAILED);
				break;
			}
			CHECK_EQ(est, NAND_OK);
			for (uint32_t p = 0; p < g->pages_per_block; p++) {
				enum nand_status pst = run(x.d, NAND_OP_PROGRAM, b, p, x.data, NULL);
				if (pst == NAND_PROGRAM_FAILED) {
					pfail++;
					failed = true;
					if (p > 0) /* the pages before it still read */
						CHECK(run(x.d, NAND_OP_READ, b, p - 1, x.rd, NULL) != NAND_UNCORRECTABLE);
					CHECK_EQ(run(x.d, NAND_OP_READ, b, p, x.rd, NULL), NAND_UNCORRECTABLE);
					/* erased (if its erase does not fail too) and
					 * programmed again: still fails */
					enum nand_status e2 = run(x.d, NAND_OP_ERASE, b, 0, NULL, NULL);
					if (e2 == NAND_ERASE_FAILED)
						efail++;
					else
						CHECK_EQ(e2, NAND_OK);
					CHECK_EQ(run(x.d, NAND_OP_PROGRAM, b, 0, x.data, NULL), NAND_PROGRAM_FAILED);
					break;
				}
				CHECK_EQ(pst, NAND_OK);
			}
		}
		CHECK(failed);
	}
	nand_sim_error_stats(x.d, &st);
	CHECK_EQ(st.program_fails, pfail);
	CHECK_EQ(st.erase_fails, efail);
	CHECK(pfail > 0 && efail > 0); /* half each, on average */
	em_close(&x);
}

/* ---- thermal model ------------------------------------------------------- */

/*
 * Metadata-only media (flashctl bench) over 16 KiB pages kept in 4 KiB
 * chunks: each chunk reads back with its own CRC and the first kept bytes
 * of its share of the spare (the FTL's four units of a page), so the
 * FTL's check of each unit holds as on whole media.
 */
static void metadata_chunks(void)
{
	char err[256];
	struct nand_dev *d;
	struct nand_sim_config cfg = { .preset = "test-16k", .metadata_only = true,
				       .meta_spare_bytes = 40, .meta_chunk_bytes = 4096 };
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	const struct nand_geometry *g = &d->geo;
	uint32_t n = g->page_size / 4096, share = g->spare_size / n;
	uint8_t *data = malloc(g->page_size), *rd = malloc(g->page_size);
	uint8_t *spare = malloc(g->spare_size), *rs = malloc(g->spare_size);
	for (uint32_t i = 0; i < g->page_size; i++)
		data[i] = (uint8_t)(i * 7 + i / 4096);
	for (uint32_t i = 0; i < g->spare_size; i++)
		spare[i] = (uint8_t)(i + 1);
	CHECK_EQ(run(d, NAND_OP_PROGRAM, 5, 0, data, spare), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, 5, 0, rd, rs), NAND_OK);
	for (uint32_t c = 0; c < n; c++) {
		CHECK_EQ(crc32c(0, rd + c * 4096, 4096), crc32c(0, data + c * 4096, 4096));
		CHECK(memcmp(rs + c * share, spare + c * share, 40) == 0);
		CHECK(rs[c * share + 40] == 0xFF);
	}
	printf("metadata-only 16 KiB pages: %u chunks of 4 KiB, each its CRC and 40 spare bytes\n", n);
	free(data);
	free(rd);
	free(spare);
	free(rs);
	nand_close(d);
}

/* program page p of block b with NAND_OPF_META */
static enum nand_status program_meta(struct nand_dev *d, uint32_t b, uint32_t p, void *data,
				     void *spare)
{
	bool done = false;
	struct nand_op op = { .type = NAND_OP_PROGRAM, .flags = NAND_OPF_META, .block = b, .page = p,
			      .data = data, .spare = spare, .done = t_done, .priv = &done };
	CHECK_EQ(nand_submit(d, &op), 0);
	while (!done) {
		nand_wait_until(d, nand_next_due(d));
		nand_poll(d, nand_now(d));
	}
	return op.status;
}

/*
 * Metadata-only media keep NAND_OPF_META pages whole, without the run of
 * their last byte at the end: every such page reads back byte for byte
 * (one of records and padding, one all one byte, one whose last byte
 * differs, one of noise), several of a block, until the block's erase.
 */
static void metadata_kept(void)
{
	char err[256];
	struct nand_dev *d;
	struct nand_sim_config cfg = { .preset = "test-64m", .metadata_only = true,
				       .meta_spare_bytes = 40, .meta_chunk_bytes = 4096 };
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	uint32_t ps = d->geo.page_size;
	enum { NP = 4 };
	uint8_t *pages = malloc((size_t)NP * ps), *rd = malloc(ps);
	uint8_t *spare = malloc(d->geo.spare_size), *rs = malloc(d->geo.spare_size);
	memset(pages, 0, (size_t)NP * ps);
	uint64_t x = 7;
	for (uint32_t i = 0; i < 2072; i++)
		pages[i] = (uint8_t)xorshift64s(&x);          /* records, then zeros */
	memset(pages + ps, 0xFF, ps);                         /* one byte throughout */
	memset(pages + 2 * ps, 0xAB, ps);
	pages[3 * ps - 1] = 0xAC;                             /* the last byte differs */
	for (uint32_t i = 0; i < ps; i++)
		pages[3 * ps + i] = (uint8_t)xorshift64s(&x); /* noise */
	memset(spare, 0x11, d->geo.spare_size);
	uint32_t b = 3;
	for (uint32_t p = 0; p < 2 * NP; p++)
		CHECK_EQ(p % 2 ? program_meta(d, b, p, pages + (size_t)(p / 2) * ps, spare) :
				 run(d, NAND_OP_PROGRAM, b, p, pages + (size_t)(p / 2) * ps, spare),
			 NAND_OK);
	for (uint32_t p = 1; p < 2 * NP; p += 2) {
		memset(rd, 0x5A, ps);
		CHECK_EQ(run(d, NAND_OP_READ, b, p, rd, rs), NAND_OK);
		CHECK(memcmp(rd, pages + (size_t)(p / 2) * ps, ps) == 0);
		CHECK(memcmp(rs, spare, 40) == 0);
	}
	/* a page without the flag keeps its CRC only */
	CHECK_EQ(run(d, NAND_OP_READ, b, 6, rd, rs), NAND_OK);
	CHECK_EQ(crc32c(0, rd, ps), crc32c(0, pages + 3 * (size_t)ps, ps));
	CHECK(memcmp(rd, pages + 3 * (size_t)ps, ps) != 0);
	CHECK_EQ(run(d, NAND_OP_ERASE, b, 0, NULL, NULL), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, b, 1, rd, rs), NAND_OK);
	for (uint32_t i = 0; i < ps; i++)
		CHECK(rd[i] == 0xFF);
	CHECK_EQ(program_meta(d, b, 0, pages + 3 * (size_t)ps, spare), NAND_OK);
	CHECK_EQ(run(d, NAND_OP_READ, b, 0, rd, rs), NAND_OK);
	CHECK(memcmp(rd, pages + 3 * (size_t)ps, ps) == 0);
	printf("metadata-only: %d kept pages of a block read back whole, erased with it\n", NP);
	free(pages);
	free(rd);
	free(spare);
	free(rs);
	nand_close(d); /* frees the block's kept page (ASan: no leak) */
}

static void thermal(void)
{
	struct nand_sim_config cfg = { .preset = "test-64m", .timing = true, .virtual_time = true };
	struct nand_dev *d;
	char err[256];
	CHECK_RC(nand_sim_open(&cfg, &d, err, sizeof err));
	int32_t mc;
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK_EQ(mc, 35000); /* 25 C ambient + 10 C idle */
	/* all four dies erasing back to back for two minutes (two time constants) */
	uint32_t ndies = nand_dies(&d->geo);
	struct nand_op ops[16];
	bool done[16];
	for (uint32_t i = 0; i < ndies; i++) {
		ops[i] = (struct nand_op){ .type = NAND_OP_ERASE, .block = i * d->geo.blocks_per_die + 1,
					   .done = t_done, .priv = &done[i] };
		done[i] = false;
		CHECK_EQ(nand_submit(d, &ops[i]), 0);
	}
	uint64_t t0 = nand_now(d), until = t0 + 120ull * 1000000000ull;
	while (nand_now(d) < until) {
		nand_wait_until(d, nand_next_due(d));
		nand_poll(d, nand_now(d));
		for (uint32_t i = 0; i < ndies; i++)
			if (done[i]) {
				done[i] = false;
				CHECK_EQ(nand_submit(d, &ops[i]), 0);
			}
	}
	CHECK_RC(nand_temperature_mc(d, &mc));
	/* heading for 70 C: 35 + 35 * (1 - e^-2) = 65.3 C */
	CHECK(mc > 64500 && mc < 66000);
	while (d->inflight) {
		nand_wait_until(d, nand_next_due(d));
		nand_poll(d, nand_now(d));
	}
	/* ten idle minutes: back to ambient + idle */
	nand_wait_until(d, nand_now(d) + 600ull * 1000000000ull);
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK(mc > 34900 && mc < 35100);
	/* a hot room */
	nand_sim_set_ambient_mc(d, 45000);
	nand_wait_until(d, nand_now(d) + 600ull * 1000000000ull);
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK(mc > 54900 && mc < 55100);
	/* forced (fault injection), then it relaxes: one time constant */
	nand_sim_set_temperature_mc(d, 90000);
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK_EQ(mc, 90000);
	nand_wait_until(d, nand_now(d) + 60ull * 1000000000ull);
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK(mc > 67500 && mc < 68500); /* 55 + 35 / e = 67.9 */
	/* a backend without a sensor */
	struct nand_dev nodev = *d;
	nodev.caps &= ~(uint32_t)NAND_CAP_TEMPERATURE;
	CHECK_EQ(nand_temperature_mc(&nodev, &mc), -ENOTSUP);
	nand_close(d);

	/* untimed, real time: activity counts each op at its nominal die time */
	struct nand_sim_config rc = { .preset = "test-64m", .ambient_mc = 20000 };
	CHECK_RC(nand_sim_open(&rc, &d, err, sizeof err));
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK_EQ(mc, 30000);
	uint64_t end = nand_now_ns() + 300000000ull;
	while (nand_now_ns() < end)
		for (int i = 0; i < 100; i++)
			run(d, NAND_OP_ERASE, (uint32_t)i % nand_blocks(&d->geo), 0, NULL, NULL);
	CHECK_RC(nand_temperature_mc(d, &mc));
	CHECK(mc > 30100); /* +35 C x (1 - e^-(0.3 s / 60 s)) = +0.17 C */
	nand_close(d);
}

int main(void)
{
	char err[256];
	struct nand_dev *d;

	/* RAM */
	struct nand_sim_config ram = { .preset = "test-64m" };
	CHECK_RC(nand_sim_open(&ram, &d, err, sizeof err));
	CHECK_EQ(nand_raw_bytes(&d->geo), 64ull << 20);
	basics(d);
	faults(d);
	nand_close(d);

	/* file: persists across close/open, locked while open */
	char path[] = "/tmp/t_nand_sim-XXXXXX";
	d = image_new(path, (struct nand_sim_config){ 0 });
	basics(d);
	uint32_t ec = nand_erase_count(d, 3);
	struct nand_sim_config again = { .path = path };
	check_locked(&again);
	nand_close(d);
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(nand_erase_count(d, 3), ec);
	uint8_t rd[4096];
	CHECK_EQ(run(d, NAND_OP_READ, 3, 0, rd, NULL), NAND_OK);
	CHECK(rd[0] == 0x77); /* basics() programmed 0x77 last */
	faults(d);
	nand_close(d);
	/* the failed die is persistent */
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(run(d, NAND_OP_READ, d->geo.blocks_per_die + 9, 0, rd, NULL), NAND_UNCORRECTABLE);
	nand_close(d);
	/* another preset than the image's is refused; garbage is refused */
	struct nand_sim_config wrong = { .preset = "test-16m", .path = path };
	CHECK(nand_sim_open(&wrong, &d, err, sizeof err) == -EINVAL);
	FILE *fp = fopen(path, "r+");
	fputs("garbage", fp);
	fclose(fp);
	CHECK(nand_sim_open(&again, &d, err, sizeof err) == -EINVAL);
	unlink(path);

	timing();
	creation();
	table_damage();
	file_programs();
	backend_errors();

	unsetenv("FLASHD_SIM_ERROR_MODEL"); /* these test the model as configured */
	em_off();
	em_wear();
	em_retention_ecc();
	em_read_disturb();
	em_deterministic();
	em_grown_bad();
	thermal();
	metadata_chunks();
	metadata_kept();
	printf("ok\n");
	return 0;
}
