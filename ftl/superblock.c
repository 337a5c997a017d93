/*
 * ftl/superblock.c - the two superblock blocks: format parameters and the
 * pointer to the current checkpoint.
 *
 * Updates append a page to the active block; when it is full the other
 * block is erased and becomes active (so the newest valid page always
 * survives a power cut during an update or an erase).  Loading reads every
 * programmed page of both blocks and keeps the one with the highest sb_seq.
 */
#include <errno.h>

#include "ftl/ftl_int.h"

/* Block 0 of dies 0 and 1 (NAND vendors guarantee block 0 good). */
void sb_locate(struct ftl *f)
{
	f->sb_block[0] = 0;
	if (f->ndies > 1) {
		f->sb_block[1] = f->blocks_per_die;
	} else {
		uint32_t b = 1;
		while (b + 1 < f->nblocks && nand_factory_bad(f->dev, b))
			b++;
		f->sb_block[1] = b;
	}
}

static bool sb_page_valid(const struct ftl_sb *sb)
{
	return memcmp(sb->magic, FTL_SB_MAGIC, 8) == 0 && sb->version == FTL_MEDIA_VERSION &&
	       sb->size == sizeof *sb && sb->crc == crc32c(0, sb, offsetof(struct ftl_sb, crc));
}

void sb_fill(struct ftl *f, struct ftl_sb *sb, bool clean)
{
	memset(sb, 0, sizeof *sb);
	memcpy(sb->magic, FTL_SB_MAGIC, 8);
	sb->version = FTL_MEDIA_VERSION;
	sb->size = sizeof *sb;
	sb->format_id = f->format_id;
	sb->sb_seq = f->sb_seq;
	memcpy(sb->geo, &f->geo, sizeof sb->geo);
	snprintf(sb->preset, sizeof sb->preset, "%s", f->dev->preset);
	sb->sector_size = f->sector_size;
	sb->parity_width = f->parity;
	sb->unit_size = FTL_UNIT_SIZE;
	sb->units = f->units;
	sb->format_time = f->format_time;
	if (f->cp.phase == CP_COMMIT) {
		/* committing: point at the checkpoint just written */
		sb->cp_block = f->cp.hdr_block;
		sb->cp_nblocks = f->cp.nblocks;
		sb->cp_seq = f->cp.cp_seq;
	} else {
		sb->cp_block = f->cp.cur_hdr_block;
		sb->cp_nblocks = f->cp.cur_nblocks;
		sb->cp_seq = f->cp.cur_seq;
	}
	sb->clean = clean;
	sb->open_count = f->open_count;
	sb->crc = crc32c(0, sb, offsetof(struct ftl_sb, crc));
}

int sb_load(struct ftl *f, struct ftl_sb *out, char *err, size_t errlen)
{
	uint8_t *page = malloc(f->page_size);
	uint8_t *spare = malloc(f->spare_size);
	bool found = false;
	int first_erased[2] = { (int)f->ppb, (int)f->ppb };
	int best_blk = 0;

	if (!page || !spare) {
		free(page);
		free(spare);
		return -ENOMEM;
	}
	for (int i = 0; i < 2; i++) {
		for (uint32_t p = 0; p < f->ppb; p++) {
			struct nand_op op = { .type = NAND_OP_READ, .block = f->sb_block[i],
					      .page = p, .data = page, .spare = spare };
			enum nand_status st = nand_op_sync(f->dev, &op);
			if (st == NAND_POWER_LOSS) {
				free(page);
				free(spare);
				snprintf(err, errlen, "the medium has no power");
				return -EIO;
			}
			if (st != NAND_OK && st != NAND_CORRECTED)
				continue; /* a torn update: older pages still count */
			struct ftl_spare sp;
			memcpy(&sp, spare, sizeof sp);
			if (sp.magic == 0xFFFFFFFFu && sp.crc == 0xFFFFFFFFu) {
				first_erased[i] = (int)p;
				break;
			}
			struct ftl_sb sb;
			memcpy(&sb, page, sizeof sb);
			if (!sb_page_valid(&sb))
				continue;
			if (!found || sb.sb_seq > out->sb_seq) {
				*out = sb;
				found = true;
				best_blk = i;
			}
		}
	}
	free(page);
	free(spare);
	if (!found) {
		snprintf(err, errlen, "no FTL superblock: the device is not formatted");
		return -ENODATA;
	}
	f->sb_seq = out->sb_seq;
	f->sb_active = (uint32_t)best_blk;
	f->sb_next_page = (uint32_t)first_erased[best_blk];
	return 0;
}

static void sb_program_done(struct nand_op *op);

static void sb_submit_program(struct ftl *f)
{
	struct nand_op *op = &f->sb_op;
	memset(op, 0, sizeof *op);
	op->type = NAND_OP_PROGRAM;
	op->flags = NAND_OPF_META;
	op->block = f->sb_block[f->sb_active];
	op->page = f->sb_next_page;
	op->data = f->sb_buf;
	op->spare = f->sb_spare;
	op->done = sb_program_done;
	op->priv = f;
	ftl_nand_submit(f, op);
}

static void sb_erase_done(struct nand_op *op);

/* Erase the active block; the update's program follows (sb_erase_done). */
static void sb_submit_erase(struct ftl *f)
{
	struct nand_op *op = &f->sb_op;
	memset(op, 0, sizeof *op);
	op->type = NAND_OP_ERASE;
	op->block = f->sb_block[f->sb_active];
	op->done = sb_erase_done;
	op->priv = f;
	ftl_nand_submit(f, op);
}

static void sb_erase_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	if (ftl_op_stops(f, op) || op->status != NAND_OK) {
		f->sb_busy = false;
		ftl_fail(f, -EIO, "erasing a superblock block failed");
		if (f->sb_done)
			f->sb_done(op);
		return;
	}
	f->st.blocks_erased++;
	f->sb_next_page = 0;
	sb_submit_program(f);
}

static void sb_program_done(struct nand_op *op)
{
	struct ftl *f = op->priv;
	f->sb_next_page++;
	if (op->status == NAND_OK) {
		f->st.nand_pages_programmed++;
		f->st.meta_pages_programmed++;
		f->sb_busy = false;
		if (f->sb_done)
			f->sb_done(op);
		return;
	}
	if (!ftl_op_stops(f, op)) {
		/* a failed page is skipped: try the next one; a second failure
		 * in a row (a worn block, a dead die: superblock blocks are on
		 * dies 0 and 1) moves the update to the other block, once */
		if (++f->sb_fail_run < 2 && f->sb_next_page < f->ppb) {
			sb_submit_program(f);
			return;
		}
		if (!f->sb_switched) {
			f->sb_switched = true;
			f->sb_fail_run = 0;
			ftl_log("superblock block %u: programs fail; the superblock moves to block %u",
				f->sb_block[f->sb_active], f->sb_block[f->sb_active ^ 1]);
			f->sb_active ^= 1;
			sb_submit_erase(f);
			return;
		}
	}
	f->sb_busy = false;
	ftl_fail(f, -EIO, "writing the superblock failed");
	if (f->sb_done)
		f->sb_done(op);
}

/* Start writing a new superblock page; done(op) runs when it is on media
 * (op->status tells) or when the write failed for good. */
int sb_start_write(struct ftl *f, bool clean, void (*done)(struct nand_op *))
{
	struct ftl_sb sb;
	if (f->sb_busy)
		return -EBUSY;
	f->sb_seq++;
	sb_fill(f, &sb, clean);
	memset(f->sb_buf, 0xFF, f->page_size);
	memcpy(f->sb_buf, &sb, sizeof sb);
	spare_build(f, f->sb_spare, FTL_PG_SB, 0, f->sb_seq, f->sb_buf, true);
	f->sb_busy = true;
	f->sb_done = done;
	f->sb_fail_run = 0;
	f->sb_switched = false;
	if (f->sb_next_page >= f->ppb) {
		f->sb_active ^= 1;
		sb_submit_erase(f);
	} else {
		sb_submit_program(f);
	}
	return 0;
}

static bool sb_idle(struct ftl *f, void *arg)
{
	(void)arg;
	return !f->sb_busy;
}

int sb_write_sync(struct ftl *f, bool clean)
{
	int rc = sb_start_write(f, clean, NULL);
	if (rc)
		return rc;
	rc = ftl_run_until(f, sb_idle, NULL);
	if (rc)
		return rc;
	return f->error;
}

int sb_write_initial(struct ftl *f, bool clean, char *err, size_t errlen)
{
	for (int i = 0; i < 2; i++) {
		struct nand_op op = { .type = NAND_OP_ERASE, .block = f->sb_block[i] };
		enum nand_status st = nand_op_sync(f->dev, &op);
		if (st != NAND_OK) {
			snprintf(err, errlen, "erasing superblock block %u failed: %s", f->sb_block[i],
				 nand_status_name(st));
			return -EIO;
		}
	}
	uint8_t *page = aligned_alloc(4096, f->page_size), *spare = malloc(f->spare_size);
	if (!page || !spare) {
		free(page);
		free(spare);
		return -ENOMEM;
	}
	struct ftl_sb sb;
	sb_fill(f, &sb, clean);
	memset(page, 0xFF, f->page_size);
	memcpy(page, &sb, sizeof sb);
	spare_build(f, spare, FTL_PG_SB, 0, f->sb_seq, page, true);
	struct nand_op op = { .type = NAND_OP_PROGRAM, .block = f->sb_block[0], .page = 0,
			      .flags = NAND_OPF_META, .data = page, .spare = spare };
	enum nand_status st = nand_op_sync(f->dev, &op);
	free(page);
	free(spare);
	if (st != NAND_OK) {
		snprintf(err, errlen, "writing the superblock failed: %s", nand_status_name(st));
		return -EIO;
	}
	return 0;
}
