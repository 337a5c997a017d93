/*
 * t_nand_sim - the simulated ioDimm behaves like NAND: erased pages read
 * 0xFF, pages program in order and once, erase counts grow, the image
 * persists and is locked, faults and timing do what they claim.
 */
#include <fcntl.h>
#include <unistd.h>

#include "hw/nand.h"
#include "tests/unit/t.h"

static void t_done(struct nand_op *op)
{
	*(bool *)op->priv = true;
}

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
	return op.status;
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
static void t_log(void *arg, const char *msg)
{
	t_nlog++;
	snprintf(t_lastlog, sizeof t_lastlog, "%s", msg);
}

/* Block table damage: an entry whose bytes were changed from outside fails
 * its CRC at open and is rebuilt from the pages, not trusted. */
static void table_damage(void)
{
	char path[] = "/tmp/t_nand_sim-tbl-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	char err[256];
	struct nand_dev *d;
	struct nand_sim_config fc = { .preset = "test-64m", .path = path, .create = true,
				      .log = t_log };
	CHECK_RC(nand_sim_open(&fc, &d, err, sizeof err));
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
	fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	uint16_t wp = 0;
	CHECK(pwrite(fd, &wp, 2, 4096 + 9 * 16) == 2);
	close(fd);

	struct nand_sim_config again = { .path = path, .log = t_log };
	CHECK_RC(nand_sim_open(&again, &d, err, sizeof err));
	CHECK_EQ(nand_sim_table_repairs(d), 1);
	CHECK_EQ(t_nlog, 1);
	CHECK(strstr(t_lastlog, "block 9"));
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
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	struct nand_sim_config fc = { .preset = "test-64m", .path = path, .create = true };
	CHECK_RC(nand_sim_open(&fc, &d, err, sizeof err));
	basics(d);
	uint32_t ec = nand_erase_count(d, 3);
	struct nand_dev *d2;
	struct nand_sim_config again = { .path = path };
	CHECK_EQ(nand_sim_open(&again, &d2, err, sizeof err), -EBUSY);
	CHECK(strstr(err, "in use"));
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
	table_damage();
	backend_errors();
	printf("ok\n");
	return 0;
}
